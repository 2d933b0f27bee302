//===- Varlen.cpp - Packed variable-length attention: binding, checks, ops ---===//
//
// attention_varlen / attention_varlen_vjp: B sequences packed without padding, q [total_q,
// N, H], k / v [total_kv, K, *], each sequence's rows given by int32 cu_seqlens arrays
// [B + 1]. The ops bind and check their own arguments; their problem (Problem::varlen)
// runs on the flash kernels (hopper, tile, chunked), which index the packed tensors from
// each sequence's first row (KernelParts.h: RowBlock); reference refuses.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/Common.h"
#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace tokamax {

using attention_detail::Problem;
using attention_detail::check_exact;
using attention_detail::compute_of;
using attention_detail::is_float;
using attention_detail::shape_text;
using ops_detail::spec_of;
using ops_detail::view_of;

namespace {


/// What q, k, v and the cu_seqlens arrays of a packed call agree on.
struct Packed {
  int64_t B, totalQ, totalKv, N, K, H, Hv;
  DType dtype;
};


Packed packedGeometry(const char *op, const ArgSpec &q, const ArgSpec &k, const ArgSpec &v, const ArgSpec &cuQ,
                      const ArgSpec &cuKv, const std::optional<ArgSpec> &sinks, const AttentionOptions &o) {
  for (auto [name, a, rows] : {std::tuple{"q", &q, "total_q"}, std::tuple{"k", &k, "total_kv"},
                               std::tuple{"v", &v, "total_kv"}}) {
    if (a->shape.size() != 3)
      throw Error(fmt::format("{}: {} must be [{}, heads, head_dim] (packed sequences), got {}", op, name, rows,
                              shape_text(a->shape)));
    ops_detail::check_spec(op, name, *a);
  }
  if (!is_float(q.dtype))
    throw Error(fmt::format("{}: q must be bf16, f16, f32 or f64, got {}", op, dtype_name(q.dtype)));
  for (auto [name, a] : {std::pair{"k", &k}, std::pair{"v", &v}})
    if (a->dtype != q.dtype)
      throw Error(fmt::format("{}: {} must have q's dtype {}, got {}", op, name, dtype_name(q.dtype),
                              dtype_name(a->dtype)));
  for (auto [name, a] : {std::pair{"cu_seqlens_q", &cuQ}, std::pair{"cu_seqlens_kv", &cuKv}})
    if (a->dtype != DType::I32)
      throw Error(fmt::format("{}: {} must be int32, got {}", op, name, dtype_name(a->dtype)));
  if (cuQ.shape.size() != 1 || cuQ.shape[0] < 1)
    throw Error(fmt::format("{}: cu_seqlens_q must be [B + 1] (sequence b's query rows from cu[b] to cu[b + 1]), "
                            "got {}",
                            op, shape_text(cuQ.shape)));
  if (cuKv.shape != cuQ.shape)
    throw Error(fmt::format("{}: cu_seqlens_kv must have cu_seqlens_q's shape {} (one entry per sequence, and one), "
                            "got {}",
                            op, shape_text(cuQ.shape), shape_text(cuKv.shape)));
  Packed g{cuQ.shape[0] - 1, q.shape[0], k.shape[0], q.shape[1], k.shape[1], q.shape[2], v.shape[2], q.dtype};
  if (k.shape[2] != g.H)
    throw Error(fmt::format("{}: k's head_dim {} must equal q's {} (k {}, q {})", op, k.shape[2], g.H,
                            shape_text(k.shape), shape_text(q.shape)));
  if (v.shape[0] != g.totalKv || v.shape[1] != g.K)
    throw Error(fmt::format("{}: v must be [{}, {}, head_dim] like k's rows and heads, got {}", op, g.totalKv, g.K,
                            shape_text(v.shape)));
  for (auto [name, d] : {std::pair{"k's rows (total_kv)", g.totalKv}, std::pair{"q's heads", g.N},
                         std::pair{"k's heads", g.K}, std::pair{"head_dim", g.H}, std::pair{"v's head_dim", g.Hv}})
    if (d < 1)
      throw Error(fmt::format("{}: {} must be at least 1, got {}", op, name, d));
  for (auto [name, d] : {std::pair{"q", g.totalQ}, std::pair{"k", g.totalKv}})
    if (d > std::numeric_limits<int32_t>::max())
      throw Error(fmt::format("{}: {} has {} rows; the int32 cu_seqlens reach {}", op, name, d,
                              std::numeric_limits<int32_t>::max()));
  if (g.N % g.K != 0)
    throw Error(fmt::format("{}: q's heads ({}) must be a multiple of k's heads ({}) for grouped-query attention", op,
                            g.N, g.K));
  // The kernels index lse and delta [N, total_q] with 32-bit offsets.
  if (g.N * g.totalQ > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("{}: lse [N, total_q] = [{}, {}] has more than 2^31 - 1 elements (the kernels' row "
                            "offsets are 32-bit): split the batch",
                            op, g.N, g.totalQ));
  if (g.H > kAttentionMaxHeadDim || g.Hv > kAttentionMaxHeadDim)
    throw Error(fmt::format("{}: head dims up to {} are served, got H {} and Hv {}", op, kAttentionMaxHeadDim, g.H,
                            g.Hv));
  for (auto [name, v] : {std::pair{"max_seqlen_q", o.max_seqlen_q}, std::pair{"max_seqlen_kv", o.max_seqlen_kv}})
    if (!v || *v < 1 || *v > std::numeric_limits<int32_t>::max())
      throw Error(fmt::format("{}: {} (at least every sequence's length; it sizes the grid) must be given, 1 to "
                              "2^31 - 1, got {}",
                              op, name, v ? std::to_string(*v) : std::string("none")));
  if (o.layout != AttentionLayout::BTNH)
    throw Error(fmt::format("{}: packed sequences are [total, heads, head_dim]; the BNTH layout does not apply", op));
  if (sinks && (sinks->dtype != DType::F32 || sinks->shape != std::vector<int64_t>{g.N}))
    throw Error(fmt::format("{}: sinks must be f32 [{}] (one logit per query head), got {} {}", op, g.N,
                            dtype_name(sinks->dtype), shape_text(sinks->shape)));
  return g;
}

std::map<std::string, std::string> packedAttributes(const char *op, const Packed &g, const AttentionOptions &o) {
  std::map<std::string, std::string> a = attention_detail::attention_attributes(op, g.H, o);
  a["max_seqlen_q"] = std::to_string(*o.max_seqlen_q);
  a["max_seqlen_kv"] = std::to_string(*o.max_seqlen_kv);
  return a;
}

const std::vector<std::string> kForwardArgs{"q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "sinks", "out", "lse"};
const std::vector<std::string> kVjpArgs{"dout", "q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_kv", "sinks",
                                        "dq", "dk", "dv", "dsinks"};
constexpr size_t kForwardInputs = 6, kVjpInputs = 9;

std::vector<std::shared_ptr<const Implementation>> implementationsOf(bool vjp) {
  using namespace attention_detail;
  if (vjp)
    return ops_detail::typed_implementations<HopperVjp, Tile, Chunked, Reference>(
        "attention_varlen_vjp", kVjpArgs, kVjpInputs, varlen_problem_of);
  return ops_detail::typed_implementations<HopperForward, Tile, Chunked, Reference>(
      "attention_varlen", kForwardArgs, kForwardInputs, varlen_problem_of);
}

class AttentionVarlenOp : public Op {
public:
  explicit AttentionVarlenOp(bool vjp)
      : Op(vjp ? "attention_varlen_vjp" : "attention_varlen", vjp ? kVjpArgs : kForwardArgs,
           vjp ? kVjpInputs : kForwardInputs, implementationsOf(vjp)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    if (vjp_)
      ops_detail::require_call_of(name(), b, arg_names(),
                                  {"scale", "is_causal", "window_left", "window_right", "logits_soft_cap",
                                   "max_seqlen_q", "max_seqlen_kv", "deterministic"});
    else
      ops_detail::require_call_of(name(), b, arg_names(),
                                  {"scale", "is_causal", "window_left", "window_right", "logits_soft_cap",
                                   "max_seqlen_q", "max_seqlen_kv"});
    auto need = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    auto at = [&](size_t i) { return ops_detail::optional_arg(b, i); };
    BoundArgs again = vjp_ ? bind_attention_varlen_vjp({need(0), need(1), need(2), need(3), need(4), need(5), need(6),
                                                        need(7), at(8), need(9), need(10), need(11), at(12)},
                                                       attention_detail::attention_options_of(b))
                           : bind_attention_varlen({need(0), need(1), need(2), need(3), need(4), at(5), need(6), at(7)},
                                                   attention_detail::attention_options_of(b));
    ops_detail::require_canonical(name(), b, again);
  }
  void check_host_values(const BoundArgs &b, std::span<const TensorView> inputs) const override {
    attention_detail::check_host_cu_seqlens(attention_detail::varlen_problem_of(b), inputs[vjp_ ? 6 : 3],
                                            inputs[vjp_ ? 7 : 4]);
  }

private:
  bool vjp_;
};


/// What a packed call's options must not hold, and both arrays present.
void checkPackedOptions(const char *op, const AttentionOptions &o) {
  if (!o.cu_seqlens_q || !o.cu_seqlens_kv)
    throw Error(fmt::format("{}: packed sequences need both cu_seqlens_q and cu_seqlens_kv, got only {}", op,
                            o.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_kv"));
  for (auto [name, t] : {std::pair{"bias", o.bias}, std::pair{"mask", o.mask},
                         std::pair{"q_seq_lengths", o.q_seq_lengths}, std::pair{"kv_seq_lengths", o.kv_seq_lengths}})
    if (t)
      throw Error(fmt::format("{}: {} does not apply to packed sequences (cu_seqlens_q / cu_seqlens_kv)", op, name));
}

} // namespace

ArgSpec attention_varlen_lse_spec(const ArgSpec &q) {
  if (q.shape.size() != 3)
    throw Error(fmt::format("attention_varlen: q must be [total_q, heads, head_dim], got {}", shape_text(q.shape)));
  return {{q.shape[1], q.shape[0]}, compute_of(q.dtype)};
}

BoundArgs bind_attention_varlen(const AttentionVarlenSpecs &a, const AttentionOptions &o) {
  const char *op = "attention_varlen";
  Packed g = packedGeometry(op, a.q, a.k, a.v, a.cu_seqlens_q, a.cu_seqlens_kv, a.sinks, o);
  check_exact(op, "out", a.out, {g.totalQ, g.N, g.Hv}, g.dtype);
  if (a.lse)
    check_exact(op, "lse", *a.lse, attention_varlen_lse_spec(a.q).shape, compute_of(g.dtype));
  return BoundArgs{op, {a.q, a.k, a.v, a.cu_seqlens_q, a.cu_seqlens_kv, a.sinks, a.out, a.lse},
                   packedAttributes(op, g, o)};
}

BoundArgs bind_attention_varlen_vjp(const AttentionVarlenVjpSpecs &a, const AttentionOptions &o) {
  const char *op = "attention_varlen_vjp";
  Packed g = packedGeometry(op, a.q, a.k, a.v, a.cu_seqlens_q, a.cu_seqlens_kv, a.sinks, o);
  check_exact(op, "dout", a.dout, {g.totalQ, g.N, g.Hv}, g.dtype);
  check_exact(op, "out", a.out, {g.totalQ, g.N, g.Hv}, g.dtype);
  check_exact(op, "lse", a.lse, attention_varlen_lse_spec(a.q).shape, compute_of(g.dtype));
  check_exact(op, "dq", a.dq, a.q.shape, g.dtype);
  check_exact(op, "dk", a.dk, a.k.shape, g.dtype);
  check_exact(op, "dv", a.dv, a.v.shape, g.dtype);
  if (a.dsinks && !a.sinks)
    throw Error(fmt::format("{}: dsinks needs the forward's sinks", op));
  if (a.dsinks)
    check_exact(op, "dsinks", *a.dsinks, {g.N}, DType::F32);
  return BoundArgs{op,
                   {a.dout, a.q, a.k, a.v, a.out, a.lse, a.cu_seqlens_q, a.cu_seqlens_kv, a.sinks, a.dq, a.dk, a.dv,
                    a.dsinks},
                   packedAttributes(op, g, o)};
}

const Op &attention_varlen_op() {
  static const AttentionVarlenOp op(false);
  return op;
}
const Op &attention_varlen_vjp_op() {
  static const AttentionVarlenOp op(true);
  return op;
}

namespace {
[[maybe_unused]] const bool kRegistered = [] {
  register_op(attention_varlen_op());
  register_op(attention_varlen_vjp_op());
  return true;
}();
} // namespace

namespace attention_detail {

Problem varlen_problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == "attention_varlen_vjp";
  const size_t base = p.vjp ? 1 : 0;
  const ArgSpec &q = b.arg(base), &k = b.arg(base + 1), &v = b.arg(base + 2), &cu = b.arg(p.vjp ? 6 : 3);
  p.varlen = true;
  p.B = cu.shape[0] - 1;
  p.batch = {p.B};
  p.T = b.int_attribute("max_seqlen_q");
  p.S = b.int_attribute("max_seqlen_kv");
  p.total_q = q.shape[0], p.total_kv = k.shape[0];
  p.N = q.shape[1], p.H = q.shape[2], p.K = k.shape[1], p.Hv = v.shape[2];
  read_attributes(b, q.dtype, p);
  p.q_lengths = p.kv_lengths = true;  // each sequence's lengths, from the cu_seqlens arrays
  p.lse_out = !p.vjp && b.has(7);
  p.sinks = !p.vjp && b.has(5);
  p.dsinks = p.vjp && b.has(12);
  return p;
}

AttentionVarlenSpecs varlen_specs(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                                  const AttentionOptions &o, const TensorView *lse) {
  checkPackedOptions("attention_varlen", o);
  return {ArgSpec::of(q),   ArgSpec::of(k),   ArgSpec::of(v), ArgSpec::of(*o.cu_seqlens_q), ArgSpec::of(*o.cu_seqlens_kv),
          spec_of(o.sinks), ArgSpec::of(out), spec_of(lse)};
}

AttentionVarlenVjpSpecs varlen_vjp_specs(const TensorView &dout, const TensorView &q, const TensorView &k,
                                         const TensorView &v, const TensorView &out, const TensorView &lse,
                                         const TensorView &dq, const TensorView &dk, const TensorView &dv,
                                         const AttentionOptions &o, const TensorView *dsinks) {
  checkPackedOptions("attention_varlen_vjp", o);
  return {ArgSpec::of(dout), ArgSpec::of(q),  ArgSpec::of(k),  ArgSpec::of(v),  ArgSpec::of(out),
          ArgSpec::of(lse),  ArgSpec::of(*o.cu_seqlens_q),      ArgSpec::of(*o.cu_seqlens_kv),
          spec_of(o.sinks),   ArgSpec::of(dq), ArgSpec::of(dk), ArgSpec::of(dv), spec_of(dsinks)};
}

void check_varlen_dbias(const TensorView *dbias) {
  if (dbias)
    throw Error("attention_varlen_vjp: dbias does not apply to packed sequences (they take no bias)");
}

void check_host_cu_seqlens(const Problem &p, const TensorView &cuQ, const TensorView &cuKv) {
  const char *op = p.vjp ? "attention_varlen_vjp" : "attention_varlen";
  auto check = [&](const char *name, const TensorView &cu, int64_t total, const char *maxName, int64_t max) {
    const auto *values = reinterpret_cast<const int32_t *>(cu.data());
    const int64_t count = p.B + 1;
    if (values[0] != 0 || values[count - 1] != total)
      throw Error(fmt::format("{}: {} must start at 0 and end at the packed rows ({}), got {} ... {}", op, name,
                              total, values[0], values[count - 1]));
    for (int64_t i = 0; i + 1 < count; ++i) {
      const int64_t length = int64_t(values[i + 1]) - values[i];
      if (length < 0)
        throw Error(fmt::format("{}: {} decreases at sequence {} ({} then {})", op, name, i, values[i],
                                values[i + 1]));
      if (length > max)
        throw Error(fmt::format("{}: sequence {} has {} rows in {}, past {} = {}", op, i, length, name, maxName,
                                max));
    }
  };
  check("cu_seqlens_q", cuQ, p.total_q, "max_seqlen_q", p.T);
  check("cu_seqlens_kv", cuKv, p.total_kv, "max_seqlen_kv", p.S);
}

} // namespace attention_detail

} // namespace tokamax
