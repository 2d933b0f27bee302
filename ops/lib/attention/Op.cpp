//===- Op.cpp - dot_product_attention: binding, checks, ops, API -----===//
#include <tokamax/ops/Attention.h>

#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/attention/Common.h"
#include "ops/lib/framework/ArgsAdded.h"
#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string_view>

namespace tokamax {

using attention_detail::Problem;
using attention_detail::check_exact;
using attention_detail::compute_of;
using attention_detail::is_float;
using attention_detail::shape_text;
using ops_detail::spec_of;
using ops_detail::view_of;

namespace {

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//



using Geometry = attention_detail::AttentionGeometry;

bool headsMajor(AttentionLayout layout) { return layout == AttentionLayout::BNTH; }

/// Where seq and heads sit in q, k, v and out with `nb` batch dims: [batch..., seq, heads,
/// dim], or [batch..., heads, seq, dim] where heads-major.
struct SeqHeadsDims {
  size_t seq, heads;
};
SeqHeadsDims seqHeadsDims(size_t nb, bool headsMajor) {
  return headsMajor ? SeqHeadsDims{nb + 1, nb} : SeqHeadsDims{nb, nb + 1};
}
const char *layoutText(bool headsMajor) {
  return headsMajor ? "[batch..., heads, seq, head_dim] (layout BNTH)" : "[batch..., seq, heads, head_dim]";
}

} // namespace

attention_detail::AttentionGeometry attention_detail::attention_geometry(const char *op, const ArgSpec &q,
                                                                         const ArgSpec &k, const ArgSpec &v, bool bnth,
                                                                         bool fp8) {
  auto rank = [&](const char *name, const ArgSpec &a) {
    if (a.shape.size() < 3)
      throw Error(fmt::format("{}: {} must be {} (rank >= 3), got {}", op, name, layoutText(bnth),
                              shape_text(a.shape)));
  };
  rank("q", q), rank("k", k), rank("v", v);
  // Negative dims (a hand-built spec) and element counts past int64 are refused up front.
  ops_detail::check_spec(op, "q", q), ops_detail::check_spec(op, "k", k), ops_detail::check_spec(op, "v", v);
  if (fp8 && !is_fp8(q.dtype))
    throw Error(fmt::format("{}: q must be f8e4m3 or f8e5m2, got {}", op, dtype_name(q.dtype)));
  if (!fp8 && !is_float(q.dtype))
    throw Error(fmt::format("{}: q must be bf16, f16, f32 or f64, got {}{}", op, dtype_name(q.dtype),
                            is_fp8(q.dtype) ? " (fp8 q, k and v: dot_product_attention_fp8)" : ""));
  for (auto [name, a] : {std::pair{"k", &k}, std::pair{"v", &v}})
    if (a->dtype != q.dtype)
      throw Error(fmt::format("{}: {} must have q's dtype {}, got {}", op, name, dtype_name(q.dtype),
                              dtype_name(a->dtype)));
  Geometry g;
  g.headsMajor = bnth;
  size_t nb = q.shape.size() - 3;
  g.batch.assign(q.shape.begin(), q.shape.begin() + nb);
  for (int64_t d : g.batch)
    g.B *= d;
  for (auto [name, a] : {std::pair{"k", &k}, std::pair{"v", &v}})
    if (a->shape.size() != q.shape.size() || !std::equal(g.batch.begin(), g.batch.end(), a->shape.begin()))
      throw Error(fmt::format("{}: {} must have q's batch dims {} (shape {}), got {}", op, name, shape_text(g.batch),
                              layoutText(bnth), shape_text(a->shape)));
  const auto [seq, heads] = seqHeadsDims(nb, bnth);
  g.T = q.shape[seq], g.N = q.shape[heads], g.H = q.shape[nb + 2];
  g.S = k.shape[seq], g.K = k.shape[heads];
  g.Hv = v.shape[nb + 2];
  g.dtype = q.dtype;
  if (k.shape[nb + 2] != g.H)
    throw Error(fmt::format("{}: k's head_dim {} must equal q's {} (k {}, q {})", op, k.shape[nb + 2], g.H,
                            shape_text(k.shape), shape_text(q.shape)));
  if (v.shape[seq] != g.S || v.shape[heads] != g.K)
    throw Error(fmt::format("{}: v must be {} like k's seq and heads, got {}", op,
                            shape_text(g.shape(g.S, g.K, v.shape[nb + 2])), shape_text(v.shape)));
  // No queries (T = 0 or an empty batch dim) is a no-op (the VJP's dk, dv, dbias are zero);
  // no keys has no softmax to take.
  for (auto [name, d] : {std::pair{"k's seq", g.S}, std::pair{"q's heads", g.N}, std::pair{"k's heads", g.K},
                         std::pair{"head_dim", g.H}, std::pair{"v's head_dim", g.Hv}})
    if (d < 1)
      throw Error(fmt::format("{}: {} must be at least 1, got {}", op, name, d));
  if (g.N % g.K != 0)
    throw Error(fmt::format("{}: q's heads ({}) must be a multiple of k's heads ({}) for grouped-query attention", op,
                            g.N, g.K));
  if (g.H > kAttentionMaxHeadDim || g.Hv > kAttentionMaxHeadDim)
    throw Error(fmt::format("{}: head dims up to {} are served, got H {} and Hv {}", op, kAttentionMaxHeadDim, g.H,
                            g.Hv));
  return g;
}

namespace {

/// bias / mask broadcastable to [B..., N, T, S] (batch dims all 1 or all full).
void checkBroadcast(const char *op, const char *name, const std::optional<ArgSpec> &a, const Geometry &g, bool isMask) {
  if (!a)
    return;
  if (isMask && a->dtype != DType::Bool)
    throw Error(fmt::format("{}: mask must be bool (true = attend), got {}", op, dtype_name(a->dtype)));
  if (!isMask && a->dtype != g.dtype && a->dtype != DType::F32)
    throw Error(fmt::format("{}: bias must be f32 or q's dtype {}, got {}", op, dtype_name(g.dtype),
                            dtype_name(a->dtype)));
  std::vector<int64_t> full = g.withBatch({g.N, g.T, g.S});
  auto bad = [&] {
    return Error(fmt::format("{}: {} {} does not broadcast to [batch..., N, T, S] = {} (each dim 1 or full; the "
                             "batch dims all 1 or all full)",
                             op, name, shape_text(a->shape), shape_text(full)));
  };
  if (a->shape.size() > full.size())
    throw bad();
  std::vector<int64_t> s(full.size() - a->shape.size(), 1);
  s.insert(s.end(), a->shape.begin(), a->shape.end());
  for (size_t d = 0; d < full.size(); ++d)
    if (s[d] != 1 && s[d] != full[d])
      throw bad();
  size_t nb = g.batch.size();
  bool allOne = true, allFull = true;
  for (size_t d = 0; d < nb; ++d) {
    allOne = allOne && s[d] == 1;
    allFull = allFull && s[d] == full[d];
  }
  if (!allOne && !allFull)
    throw bad();
}

} // namespace

void attention_detail::check_seq_lengths(const char *op, const char *name, const std::optional<ArgSpec> &a,
                                         const Geometry &g) {
  if (!a)
    return;
  bool shapeOk = a->shape == g.batch || (a->shape.size() == 1 && a->shape[0] == g.B);
  if (a->dtype != DType::I32 || !shapeOk)
    throw Error(fmt::format("{}: {} must be int32 {} (one length per batch row), got {} {}", op, name,
                            shape_text(g.batch.empty() ? std::vector<int64_t>{1} : g.batch), dtype_name(a->dtype),
                            shape_text(a->shape)));
}

namespace {

/// sinks / dsinks: f32, one per query head.
void checkSinks(const char *op, const char *name, const std::optional<ArgSpec> &a, const Geometry &g) {
  if (a && (a->dtype != DType::F32 || a->shape != std::vector<int64_t>{g.N}))
    throw Error(fmt::format("{}: {} must be f32 [{}] (one logit per query head), got {} {}", op, name, g.N,
                            dtype_name(a->dtype), shape_text(a->shape)));
}

/// q, k, v and the optional operands forward and VJP share.
Geometry checkOperands(const char *op, const ArgSpec &q, const ArgSpec &k, const ArgSpec &v,
                       const std::optional<ArgSpec> &bias, const std::optional<ArgSpec> &mask,
                       const std::optional<ArgSpec> &qLengths, const std::optional<ArgSpec> &kvLengths,
                       const std::optional<ArgSpec> &sinks, AttentionLayout layout) {
  Geometry g = attention_detail::attention_geometry(op, q, k, v, headsMajor(layout));
  checkBroadcast(op, "bias", bias, g, false);
  checkBroadcast(op, "mask", mask, g, true);
  attention_detail::check_seq_lengths(op, "q_seq_lengths", qLengths, g);
  attention_detail::check_seq_lengths(op, "kv_seq_lengths", kvLengths, g);
  checkSinks(op, "sinks", sinks, g);
  return g;
}

} // namespace

namespace attention_detail {

std::map<std::string, std::string> attention_attributes(const char *op, int64_t H, const AttentionOptions &o) {
  double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(H));
  if (!std::isfinite(scale))
    throw Error(fmt::format("{}: scale must be finite, got {}", op, scale));
  std::map<std::string, std::string> a{{"scale", fmt::format("{}", scale)}, {"is_causal", o.is_causal ? "1" : "0"}};
  if (o.local_window) {
    for (auto [side, v] : {std::pair{"left", o.local_window->left}, std::pair{"right", o.local_window->right}}) {
      if (v && *v < 0)
        throw Error(fmt::format("{}: local_window.{} must be >= 0 (or absent: unbounded), got {}", op, side, *v));
      if (v)
        a[fmt::format("window_{}", side)] = std::to_string(*v);
    }
  }
  if (o.logits_soft_cap) {
    if (!(*o.logits_soft_cap > 0) || !std::isfinite(*o.logits_soft_cap))
      throw Error(fmt::format("{}: logits_soft_cap must be positive and finite, got {}", op, *o.logits_soft_cap));
    a["logits_soft_cap"] = fmt::format("{}", *o.logits_soft_cap);
  }
  // The VJP's alone (the forward is deterministic either way), and printed only when
  // false: every deterministic call's attributes (cache, autotuning and export keys) are
  // what they were before the option.
  if (!o.deterministic && std::string_view(op).ends_with("_vjp"))
    a.emplace("deterministic", "0");
  if (headsMajor(o.layout))  // likewise printed only where it is not the default
    a.emplace("layout", "bnth");
  return a;
}

} // namespace attention_detail

namespace {

std::map<std::string, std::string> attributes(const char *op, const Geometry &g, const AttentionOptions &o) {
  return attention_detail::attention_attributes(op, g.H, o);
}

/// The "layout" attribute (absent: BTNH).
AttentionLayout layoutOf(const BoundArgs &b) {
  auto it = b.attributes.find("layout");
  if (it == b.attributes.end())
    return AttentionLayout::BTNH;
  if (it->second != "bnth")
    throw Error(fmt::format("{}: attribute layout must be \"bnth\" (or absent: BTNH), got \"{}\"", b.op, it->second));
  return AttentionLayout::BNTH;
}

} // namespace

void attention_detail::add_options(ops_detail::CallKey &key, const AttentionOptions &o) {
  // Every option joins the key (the tensors are in it already); a new field must join it too.
  static_assert(sizeof(AttentionOptions) == 272, "AttentionOptions changed: add the new option to the call key");
  key.add(o.scale).add(o.is_causal).add(o.logits_soft_cap).add(o.deterministic).add(o.local_window.has_value());
  key.add(o.max_seqlen_q).add(o.max_seqlen_kv);  // (the cu_seqlens tensors are in the key already)
  key.add(static_cast<int64_t>(o.layout));
  if (o.local_window)
    key.add(o.local_window->left).add(o.local_window->right);
}

/// Options as a bound call records them (for Op::validate's round trip).
AttentionOptions attention_detail::attention_options_of(const BoundArgs &b) {
  AttentionOptions o;
  o.scale = b.float_attribute("scale");
  o.is_causal = b.int_attribute("is_causal") != 0;
  if (b.attributes.count("window_left") || b.attributes.count("window_right")) {
    o.local_window = LocalWindow{};
    if (b.attributes.count("window_left"))
      o.local_window->left = b.int_attribute("window_left");
    if (b.attributes.count("window_right"))
      o.local_window->right = b.int_attribute("window_right");
  }
  if (b.attributes.count("logits_soft_cap"))
    o.logits_soft_cap = b.float_attribute("logits_soft_cap");
  if (b.attributes.count("deterministic"))
    o.deterministic = b.int_attribute("deterministic") != 0;
  o.layout = layoutOf(b);
  for (auto [key, into] : {std::pair{"max_seqlen_q", &o.max_seqlen_q}, std::pair{"max_seqlen_kv", &o.max_seqlen_kv}})
    if (b.attributes.count(key))  // (packed calls')
      *into = b.int_attribute(key);
  return o;
}

namespace {

AttentionOptions optionsOf(const BoundArgs &b) { return attention_detail::attention_options_of(b); }

const std::vector<std::string> kForwardArgs{"q", "k", "v", "bias", "mask", "q_seq_lengths", "kv_seq_lengths",
                                            "sinks", "out", "lse"};
const std::vector<std::string> kVjpArgs{"dout", "q", "k", "v", "out", "lse", "bias", "mask", "q_seq_lengths",
                                        "kv_seq_lengths", "sinks", "dq", "dk", "dv", "dbias", "dsinks"};
constexpr size_t kForwardInputs = 8, kVjpInputs = 11;
// Calls bound before sinks / dsinks existed (autotuning results, Functions as JSON) read
// back with them absent.
const std::vector<size_t> kForwardAdded{7}, kVjpAdded{10, 15};

} // namespace

ArgSpec attention_lse_spec(const ArgSpec &q, AttentionLayout layout) {
  const bool bnth = headsMajor(layout);
  if (q.shape.size() < 3)
    throw Error(fmt::format("attention: q must be {}, got {}", layoutText(bnth), shape_text(q.shape)));
  size_t nb = q.shape.size() - 3;
  std::vector<int64_t> s(q.shape.begin(), q.shape.begin() + nb);
  const auto [seq, heads] = seqHeadsDims(nb, bnth);
  s.push_back(q.shape[heads]);
  s.push_back(q.shape[seq]);
  return {s, compute_of(q.dtype)};
}

BoundArgs bind_attention(const AttentionSpecs &a, const AttentionOptions &o) {
  const char *op = "attention";
  Geometry g =
      checkOperands(op, a.q, a.k, a.v, a.bias, a.mask, a.q_seq_lengths, a.kv_seq_lengths, a.sinks, o.layout);
  check_exact(op, "out", a.out, g.shape(g.T, g.N, g.Hv), g.dtype);
  if (a.lse)
    check_exact(op, "lse", *a.lse, attention_lse_spec(a.q, o.layout).shape, compute_of(g.dtype));
  return BoundArgs{op,
                   {a.q, a.k, a.v, a.bias, a.mask, a.q_seq_lengths, a.kv_seq_lengths, a.sinks, a.out, a.lse},
                   attributes(op, g, o)};
}

BoundArgs bind_attention_vjp(const AttentionVjpSpecs &a, const AttentionOptions &o) {
  const char *op = "attention_vjp";
  Geometry g =
      checkOperands(op, a.q, a.k, a.v, a.bias, a.mask, a.q_seq_lengths, a.kv_seq_lengths, a.sinks, o.layout);
  std::vector<int64_t> outShape = g.shape(g.T, g.N, g.Hv);
  check_exact(op, "dout", a.dout, outShape, g.dtype);
  check_exact(op, "out", a.out, outShape, g.dtype);
  check_exact(op, "lse", a.lse, attention_lse_spec(a.q, o.layout).shape, compute_of(g.dtype));
  check_exact(op, "dq", a.dq, a.q.shape, g.dtype);
  check_exact(op, "dk", a.dk, a.k.shape, g.dtype);
  check_exact(op, "dv", a.dv, a.v.shape, g.dtype);
  if (a.dbias && !a.bias)
    throw Error(fmt::format("{}: dbias needs the forward's bias", op));
  if (a.dbias)
    check_exact(op, "dbias", *a.dbias, a.bias->shape, a.bias->dtype);
  if (a.dsinks && !a.sinks)
    throw Error(fmt::format("{}: dsinks needs the forward's sinks", op));
  checkSinks(op, "dsinks", a.dsinks, g);
  return BoundArgs{op,
                   {a.dout, a.q, a.k, a.v, a.out, a.lse, a.bias, a.mask, a.q_seq_lengths, a.kv_seq_lengths, a.sinks,
                    a.dq, a.dk, a.dv, a.dbias, a.dsinks},
                   attributes(op, g, o)};
}

namespace attention_detail {

void read_attributes(const BoundArgs &b, DType dtype, Problem &p) {
  p.dtype = dtype;
  p.compute = compute_of(dtype);
  p.scale = b.float_attribute("scale");
  p.causal = b.int_attribute("is_causal") != 0;
  if (b.attributes.count("window_left"))
    p.left = b.int_attribute("window_left");
  if (b.attributes.count("window_right"))
    p.right = b.int_attribute("window_right");
  if (b.attributes.count("logits_soft_cap"))
    p.softcap = b.float_attribute("logits_soft_cap");
  if (b.attributes.count("deterministic"))
    p.deterministic = b.int_attribute("deterministic") != 0;
}

void read_dims(const ArgSpec &q, const ArgSpec &k, const ArgSpec &v, bool heads_major, Problem &p) {
  const size_t nb = q.shape.size() - 3;
  p.batch.assign(q.shape.begin(), q.shape.begin() + nb);
  for (int64_t d : p.batch)
    p.B *= d;
  p.heads_major = heads_major;
  const auto [seq, heads] = seqHeadsDims(nb, heads_major);
  p.T = q.shape[seq], p.N = q.shape[heads], p.H = q.shape[nb + 2];
  p.S = k.shape[seq], p.K = k.shape[heads], p.Hv = v.shape[nb + 2];
}

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == "attention_vjp";
  size_t base = p.vjp ? 1 : 0, opt = p.vjp ? 6 : 3;
  const ArgSpec &q = b.arg(base), &k = b.arg(base + 1), &v = b.arg(base + 2);
  const size_t nb = q.shape.size() - 3;
  read_dims(q, k, v, headsMajor(layoutOf(b)), p);
  read_attributes(b, q.dtype, p);
  auto broadcast = [&](size_t i) -> std::optional<Broadcast> {
    if (!b.has(i))
      return std::nullopt;
    const ArgSpec &a = b.arg(i);
    std::vector<int64_t> s(nb + 3 - a.shape.size(), 1);
    s.insert(s.end(), a.shape.begin(), a.shape.end());
    Broadcast bc;
    for (size_t d = 0; d < nb; ++d)
      bc.shape[0] = s[d] != 1 ? p.B : bc.shape[0];
    bc.shape[1] = s[nb], bc.shape[2] = s[nb + 1], bc.shape[3] = s[nb + 2];
    bc.dtype = a.dtype;
    return bc;
  };
  p.bias = broadcast(opt);
  p.mask = broadcast(opt + 1);
  p.q_lengths = b.has(opt + 2);
  p.kv_lengths = b.has(opt + 3);
  p.lse_out = !p.vjp && b.has(9);
  p.dbias = p.vjp && b.has(14);
  p.sinks = !p.vjp && b.has(7);
  p.dsinks = p.vjp && b.has(15);
  return p;
}

} // namespace attention_detail

namespace {

//===----------------------------------------------------------------------===//
// Ops and implementations
//===----------------------------------------------------------------------===//

/// Each op's implementations in auto's order: hopper first on sm_90a (on the H200 its
/// forward ran 1.14-1.57x tile's and its VJP at least as fast, docs/performance.md),
/// tile where hopper refuses.
std::vector<std::shared_ptr<const Implementation>> implementationsOf(bool vjp) {
  using namespace attention_detail;
  if (vjp)
    return ops_detail::typed_implementations<HopperVjp, Tile, Chunked, Reference>("attention_vjp", kVjpArgs,
                                                                                  kVjpInputs, problem_of);
  return ops_detail::typed_implementations<HopperForward, Tile, Chunked, Reference>("attention", kForwardArgs,
                                                                                    kForwardInputs, problem_of);
}

class AttentionOp : public Op {
public:
  explicit AttentionOp(bool vjp)
      : Op(vjp ? "attention_vjp" : "attention", vjp ? kVjpArgs : kForwardArgs, vjp ? kVjpInputs : kForwardInputs,
           implementationsOf(vjp)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    if (vjp_)
      ops_detail::require_call_of(
          name(), b, arg_names(),
          {"scale", "is_causal", "window_left", "window_right", "logits_soft_cap", "deterministic", "layout"});
    else
      ops_detail::require_call_of(name(), b, arg_names(),
                                  {"scale", "is_causal", "window_left", "window_right", "logits_soft_cap", "layout"});
    auto need = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    auto at = [&](size_t i) { return ops_detail::optional_arg(b, i); };
    BoundArgs again;
    if (!vjp_)
      again = bind_attention({need(0), need(1), need(2), at(3), at(4), at(5), at(6), need(8), at(9), at(7)},
                             optionsOf(b));
    else
      again = bind_attention_vjp({need(0), need(1), need(2), need(3), need(4), need(5), at(6), at(7), at(8), at(9),
                                  need(11), need(12), need(13), at(14), at(10), at(15)},
                                 optionsOf(b));
    ops_detail::require_canonical(name(), b, again);
  }

private:
  bool vjp_;
};

AttentionSpecs forwardSpecs(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                            const AttentionOptions &o, const TensorView *lse) {
  return {ArgSpec::of(q),   ArgSpec::of(k),          ArgSpec::of(v),           spec_of(o.bias),
          spec_of(o.mask),   spec_of(o.q_seq_lengths), spec_of(o.kv_seq_lengths), ArgSpec::of(out),
          spec_of(lse),      spec_of(o.sinks)};
}

AttentionVjpSpecs vjpSpecs(const TensorView &dout, const TensorView &q, const TensorView &k, const TensorView &v,
                           const TensorView &out, const TensorView &lse, const TensorView &dq, const TensorView &dk,
                           const TensorView &dv, const AttentionOptions &o, const TensorView *dbias,
                           const TensorView *dsinks) {
  return {ArgSpec::of(dout), ArgSpec::of(q),  ArgSpec::of(k),  ArgSpec::of(v),  ArgSpec::of(out),
          ArgSpec::of(lse),  spec_of(o.bias),  spec_of(o.mask),  spec_of(o.q_seq_lengths), spec_of(o.kv_seq_lengths),
          ArgSpec::of(dq),   ArgSpec::of(dk), ArgSpec::of(dv), spec_of(dbias), spec_of(o.sinks), spec_of(dsinks)};
}

} // namespace

const Op &attention_op() {
  static const AttentionOp op(false);
  return op;
}
const Op &attention_vjp_op() {
  static const AttentionOp op(true);
  return op;
}

namespace {
[[maybe_unused]] const bool kRegistered = [] {
  register_op(attention_op());
  register_op(attention_vjp_op());
  ops_detail::register_args_added("attention", kForwardArgs.size() - kForwardAdded.size(), kForwardAdded);
  ops_detail::register_args_added("attention_vjp", kVjpArgs.size() - kVjpAdded.size(), kVjpAdded);
  return true;
}();

void dispatchHost(const Op &op, const BoundArgs &b, std::span<const TensorView> in, std::span<const TensorView> out,
                  const AttentionOptions &o) {
  op.interpret(b, in, out, o.implementation, o.config);
}

/// A device call through the eager call cache: `key` holds the op and its tensors; the
/// options join it here.
template <class Bind>
void dispatchCached(ops_detail::CallKey &key, std::span<const TensorView> in, std::span<const TensorView> out,
                    Stream &stream, const AttentionOptions &o, Bind &&bind) {
  attention_detail::add_options(key, o);
  ops_detail::run_eager(key, {key.op(), in, out, stream, o.implementation, o.config}, std::forward<Bind>(bind));
}
} // namespace

void dot_product_attention(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                           Stream &stream, const AttentionOptions &o, const TensorView *lse) {
  if (o.cu_seqlens_q || o.cu_seqlens_kv) {
    TensorView in[] = {q, k, v, view_of(o.cu_seqlens_q), view_of(o.cu_seqlens_kv), view_of(o.sinks)};
    TensorView outs[] = {out, view_of(lse)};
    ops_detail::CallKey key(attention_varlen_op());
    key.add({&q, &k, &v, o.cu_seqlens_q, o.cu_seqlens_kv, o.sinks, &out, lse});
    dispatchCached(key, in, outs, stream, o, [&] {
      return bind_attention_varlen(attention_detail::varlen_specs(q, k, v, out, o, lse), o);
    });
    return;
  }
  TensorView in[] = {q, k, v, view_of(o.bias), view_of(o.mask), view_of(o.q_seq_lengths), view_of(o.kv_seq_lengths),
                     view_of(o.sinks)};
  TensorView outs[] = {out, view_of(lse)};
  ops_detail::CallKey key(attention_op());
  key.add({&q, &k, &v, o.bias, o.mask, o.q_seq_lengths, o.kv_seq_lengths, o.sinks, &out, lse});
  dispatchCached(key, in, outs, stream, o, [&] { return bind_attention(forwardSpecs(q, k, v, out, o, lse), o); });
}

void dot_product_attention_vjp(const TensorView &dout, const TensorView &q, const TensorView &k, const TensorView &v,
                               const TensorView &out, const TensorView &lse, const TensorView &dq, const TensorView &dk,
                               const TensorView &dv, Stream &stream, const AttentionOptions &o,
                               const TensorView *dbias, const TensorView *dsinks) {
  if (o.cu_seqlens_q || o.cu_seqlens_kv) {
    attention_detail::check_varlen_dbias(dbias);
    TensorView in[] = {dout, q, k, v, out, lse, view_of(o.cu_seqlens_q), view_of(o.cu_seqlens_kv), view_of(o.sinks)};
    TensorView outs[] = {dq, dk, dv, view_of(dsinks)};
    ops_detail::CallKey key(attention_varlen_vjp_op());
    key.add({&dout, &q, &k, &v, &out, &lse, o.cu_seqlens_q, o.cu_seqlens_kv, o.sinks, &dq, &dk, &dv, dsinks});
    dispatchCached(key, in, outs, stream, o, [&] {
      return bind_attention_varlen_vjp(attention_detail::varlen_vjp_specs(dout, q, k, v, out, lse, dq, dk, dv, o, dsinks),
                                       o);
    });
    return;
  }
  TensorView in[] = {dout, q, k, v, out, lse, view_of(o.bias), view_of(o.mask), view_of(o.q_seq_lengths),
                     view_of(o.kv_seq_lengths), view_of(o.sinks)};
  TensorView outs[] = {dq, dk, dv, view_of(dbias), view_of(dsinks)};
  ops_detail::CallKey key(attention_vjp_op());
  key.add({&dout, &q, &k, &v, &out, &lse, o.bias, o.mask, o.q_seq_lengths, o.kv_seq_lengths, o.sinks, &dq, &dk, &dv,
           dbias, dsinks});
  dispatchCached(key, in, outs, stream, o, [&] {
    return bind_attention_vjp(vjpSpecs(dout, q, k, v, out, lse, dq, dk, dv, o, dbias, dsinks), o);
  });
}

void dot_product_attention_host(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                                const AttentionOptions &o, const TensorView *lse) {
  if (o.cu_seqlens_q || o.cu_seqlens_kv) {
    BoundArgs b = bind_attention_varlen(attention_detail::varlen_specs(q, k, v, out, o, lse), o);
    TensorView in[] = {q, k, v, *o.cu_seqlens_q, *o.cu_seqlens_kv, view_of(o.sinks)};
    TensorView outs[] = {out, view_of(lse)};
    dispatchHost(attention_varlen_op(), b, in, outs, o);
    return;
  }
  BoundArgs b = bind_attention(forwardSpecs(q, k, v, out, o, lse), o);
  TensorView in[] = {q, k, v, view_of(o.bias), view_of(o.mask), view_of(o.q_seq_lengths), view_of(o.kv_seq_lengths),
                     view_of(o.sinks)};
  TensorView outs[] = {out, view_of(lse)};
  dispatchHost(attention_op(), b, in, outs, o);
}

void dot_product_attention_vjp_host(const TensorView &dout, const TensorView &q, const TensorView &k,
                                    const TensorView &v, const TensorView &out, const TensorView &lse,
                                    const TensorView &dq, const TensorView &dk, const TensorView &dv,
                                    const AttentionOptions &o, const TensorView *dbias, const TensorView *dsinks) {
  if (o.cu_seqlens_q || o.cu_seqlens_kv) {
    attention_detail::check_varlen_dbias(dbias);
    BoundArgs b = bind_attention_varlen_vjp(
        attention_detail::varlen_vjp_specs(dout, q, k, v, out, lse, dq, dk, dv, o, dsinks), o);
    TensorView in[] = {dout, q, k, v, out, lse, *o.cu_seqlens_q, *o.cu_seqlens_kv, view_of(o.sinks)};
    TensorView outs[] = {dq, dk, dv, view_of(dsinks)};
    dispatchHost(attention_varlen_vjp_op(), b, in, outs, o);
    return;
  }
  BoundArgs b = bind_attention_vjp(vjpSpecs(dout, q, k, v, out, lse, dq, dk, dv, o, dbias, dsinks), o);
  TensorView in[] = {dout, q, k, v, out, lse, view_of(o.bias), view_of(o.mask), view_of(o.q_seq_lengths),
                     view_of(o.kv_seq_lengths), view_of(o.sinks)};
  TensorView outs[] = {dq, dk, dv, view_of(dbias), view_of(dsinks)};
  dispatchHost(attention_vjp_op(), b, in, outs, o);
}

} // namespace tokamax
