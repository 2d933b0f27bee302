//===- Op.cpp - paged_attention, paged_kv_append: binding, checks, ops, API -===//
//
// Binding checks every spec before anything runs (errors name the op, the argument and
// what it expected); the tensors' own checks (contiguous, with data, on one device) are
// the framework's (Views.h). The _host entry points also check the values the device
// cannot (seq_lengths within the pages, page_table entries in use within num_pages).
// Both ops register tile, then reference (auto's order).
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/PagedAttention.h>

#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/paged_attention/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace tokamax {

using ops_detail::spec_of;
using ops_detail::view_of;

namespace pad = paged_attention_detail;

namespace {

constexpr const char *kAttentionOp = "paged_attention";
constexpr const char *kAppendOp = "paged_kv_append";
const std::vector<std::string> kAttentionArgs{"q", "k_pages", "v_pages", "page_table", "seq_lengths", "out", "lse"};
const std::vector<std::string> kAppendArgs{"k", "v", "page_table", "seq_lengths", "k_pages", "v_pages"};
/// Grid dims y and z (kv heads x row blocks, sequences) are at most 65535.
constexpr int64_t kMaxGridDim = 65535;

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }
bool isFloat(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }
bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
DType computeOf(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

void checkRank4(const char *op, const char *name, const ArgSpec &a, const char *form) {
  ops_detail::check_spec(op, name, a);
  if (a.shape.size() != 4)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, form, describe(a)));
}

void checkExact(const char *op, const char *name, const ArgSpec &got, const ArgSpec &want) {
  ops_detail::check_spec(op, name, got);
  if (got != want)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, describe(want), describe(got)));
}

/// What both ops share: the pages, the page table and the lengths, against the new
/// tokens' tensor `x` ([B, Tq, heads, H]: q or k) and its dtype.
struct Geometry {
  int64_t B, Tq, num_pages, page_size, K, H, Hv, max_pages;
};

Geometry checkPages(const char *op, const char *xName, const ArgSpec &x, const ArgSpec &kPages, const ArgSpec &vPages,
                    const ArgSpec &pageTable, const ArgSpec &seqLengths) {
  checkRank4(op, xName, x, "[B, Tq, heads, head_dim]");
  checkRank4(op, "k_pages", kPages, "[num_pages, page_size, K, H]");
  checkRank4(op, "v_pages", vPages, "[num_pages, page_size, K, Hv]");
  if (!isFloat(x.dtype))
    throw Error(fmt::format("{}: {} must be bf16, f16, f32 or f64, got {}", op, xName, dtype_name(x.dtype)));
  for (auto [name, a] : {std::pair{"k_pages", &kPages}, std::pair{"v_pages", &vPages}})
    if (a->dtype != x.dtype)
      throw Error(fmt::format("{}: {} must have {}'s dtype {}, got {}", op, name, xName, dtype_name(x.dtype),
                              dtype_name(a->dtype)));
  Geometry g{x.shape[0], x.shape[1], kPages.shape[0], kPages.shape[1], kPages.shape[2], kPages.shape[3],
             vPages.shape[3], 0};
  if (vPages.shape[0] != g.num_pages || vPages.shape[1] != g.page_size || vPages.shape[2] != g.K)
    throw Error(fmt::format("{}: v_pages must be [{}, {}, {}, Hv] like k_pages' pages and heads, got {}", op,
                            g.num_pages, g.page_size, g.K, describe(vPages)));
  if (g.num_pages < 1)
    throw Error(fmt::format("{}: k_pages must hold at least one page, got {}", op, describe(kPages)));
  if (!isPowerOfTwo(g.page_size) || g.page_size < 8 || g.page_size > 256)
    throw Error(fmt::format("{}: page_size (k_pages' dim 1) must be a power of two in [8, 256], got {}", op,
                            g.page_size));
  for (auto [name, d] : {std::pair{"H (k_pages' head dim)", g.H}, std::pair{"Hv (v_pages' head dim)", g.Hv}})
    if (!isPowerOfTwo(d) || d < 16 || d > 256)
      throw Error(fmt::format("{}: {} must be a power of two in [16, 256], got {}", op, name, d));
  if (g.K < 1 || g.K > kMaxGridDim)
    throw Error(fmt::format("{}: K (k_pages' heads) must be in [1, {}], got {}", op, kMaxGridDim, g.K));
  if (g.B > kMaxGridDim)
    throw Error(fmt::format("{}: at most {} sequences (B) are served, got {}", op, kMaxGridDim, g.B));
  ops_detail::check_spec(op, "page_table", pageTable);
  if (pageTable.dtype != DType::I32 || pageTable.shape.size() != 2 || pageTable.shape[0] != g.B ||
      pageTable.shape[1] < 1)
    throw Error(fmt::format("{}: page_table must be i32 [{}, max_pages] with max_pages >= 1, got {}", op, g.B,
                            describe(pageTable)));
  g.max_pages = pageTable.shape[1];
  checkExact(op, "seq_lengths", seqLengths, ArgSpec{{g.B}, DType::I32});
  return g;
}

std::map<std::string, std::string> attentionAttributes(const char *op, int64_t H, const PagedAttentionOptions &o) {
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(H));
  if (!std::isfinite(scale))
    throw Error(fmt::format("{}: scale must be finite, got {}", op, scale));
  std::map<std::string, std::string> a{{"scale", fmt::format("{}", scale)}};
  if (o.logits_soft_cap) {
    if (!(*o.logits_soft_cap > 0) || !std::isfinite(*o.logits_soft_cap))
      throw Error(fmt::format("{}: logits_soft_cap must be positive and finite, got {}", op, *o.logits_soft_cap));
    a["logits_soft_cap"] = fmt::format("{}", *o.logits_soft_cap);
  }
  return a;
}

PagedAttentionOptions optionsOf(const BoundArgs &b) {
  PagedAttentionOptions o;
  o.scale = b.float_attribute("scale");
  if (b.attributes.count("logits_soft_cap"))
    o.logits_soft_cap = b.float_attribute("logits_soft_cap");
  return o;
}

} // namespace

ArgSpec paged_attention_lse_spec(const ArgSpec &q) {
  checkRank4(kAttentionOp, "q", q, "[B, Tq, N, H]");
  return {{q.shape[0], q.shape[2], q.shape[1]}, computeOf(q.dtype)};
}

ArgSpec paged_attention_out_spec(const ArgSpec &q, const ArgSpec &v_pages) {
  checkRank4(kAttentionOp, "q", q, "[B, Tq, N, H]");
  checkRank4(kAttentionOp, "v_pages", v_pages, "[num_pages, page_size, K, Hv]");
  return {{q.shape[0], q.shape[1], q.shape[2], v_pages.shape[3]}, q.dtype};
}

BoundArgs bind_paged_attention(const PagedAttentionSpecs &s, const PagedAttentionOptions &o) {
  const char *op = kAttentionOp;
  const Geometry g = checkPages(op, "q", s.q, s.k_pages, s.v_pages, s.page_table, s.seq_lengths);
  const int64_t N = s.q.shape[2];
  if (g.Tq < 1 || g.Tq > kPagedAttentionMaxNewTokens)
    throw Error(fmt::format("{}: q must hold 1 to {} new tokens per sequence (Tq, q's dim 1), got {}", op,
                            kPagedAttentionMaxNewTokens, g.Tq));
  if (s.q.shape[3] != g.H)
    throw Error(fmt::format("{}: q's head dim {} must equal k_pages' {}", op, s.q.shape[3], g.H));
  if (N < 1 || N > kMaxGridDim || N % g.K != 0)
    throw Error(fmt::format("{}: q's heads ({}) must be a multiple of k_pages' heads ({}) for grouped-query "
                            "attention, at most {}",
                            op, N, g.K, kMaxGridDim));
  checkExact(op, "out", s.out, paged_attention_out_spec(s.q, s.v_pages));
  if (s.lse)
    checkExact(op, "lse", *s.lse, paged_attention_lse_spec(s.q));
  return BoundArgs{op, {s.q, s.k_pages, s.v_pages, s.page_table, s.seq_lengths, s.out, s.lse},
                   attentionAttributes(op, g.H, o)};
}

BoundArgs bind_paged_kv_append(const ArgSpec &k, const ArgSpec &v, const ArgSpec &page_table,
                               const ArgSpec &seq_lengths, const ArgSpec &k_pages, const ArgSpec &v_pages) {
  const char *op = kAppendOp;
  const Geometry g = checkPages(op, "k", k, k_pages, v_pages, page_table, seq_lengths);
  if (g.Tq < 1)
    throw Error(fmt::format("{}: k must hold at least one new token per sequence (Tq, k's dim 1), got {}", op, g.Tq));
  checkExact(op, "k", k, ArgSpec{{g.B, g.Tq, g.K, g.H}, k.dtype});
  checkExact(op, "v", v, ArgSpec{{g.B, g.Tq, g.K, g.Hv}, k.dtype});
  return BoundArgs{op, {k, v, page_table, seq_lengths, k_pages, v_pages}, {}};
}

namespace paged_attention_detail {

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.append = b.op == kAppendOp;
  const ArgSpec &x = b.arg(0), &kPages = b.arg(p.append ? 4 : 1), &vPages = b.arg(p.append ? 5 : 2);
  p.B = x.shape[0], p.Tq = x.shape[1];
  p.num_pages = kPages.shape[0], p.page_size = kPages.shape[1], p.K = kPages.shape[2], p.H = kPages.shape[3];
  p.Hv = vPages.shape[3];
  p.N = p.append ? p.K : x.shape[2];
  p.max_pages = b.arg(p.append ? 2 : 3).shape[1];
  p.dtype = x.dtype;
  p.compute = computeOf(x.dtype);
  if (!p.append) {
    p.scale = b.float_attribute("scale");
    if (b.attributes.count("logits_soft_cap"))
      p.softcap = b.float_attribute("logits_soft_cap");
    p.lse_out = b.has(6);
  }
  return p;
}

} // namespace paged_attention_detail

namespace {

class PagedAttentionOp : public Op {
public:
  PagedAttentionOp()
      : Op(kAttentionOp, kAttentionArgs, 5,
           ops_detail::typed_implementations<pad::TileDecode, pad::ReferenceDecode>(kAttentionOp, kAttentionArgs, 5,
                                                                                    pad::problem_of)) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_of(name(), b, arg_names(), {"scale", "logits_soft_cap"});
    auto need = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    ops_detail::require_canonical(
        name(), b,
        bind_paged_attention({need(0), need(1), need(2), need(3), need(4), need(5), ops_detail::optional_arg(b, 6)},
                             optionsOf(b)));
  }
  void check_host_values(const BoundArgs &b, std::span<const TensorView> inputs) const override {
    pad::check_host_values(pad::problem_of(b), inputs);
  }
};

class PagedKvAppendOp : public Op {
public:
  PagedKvAppendOp()
      : Op(kAppendOp, kAppendArgs, 4,
           ops_detail::typed_implementations<pad::TileAppend, pad::ReferenceAppend>(kAppendOp, kAppendArgs, 4,
                                                                                    pad::problem_of)) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_shape(name(), b, arg_names(), {});
    const auto &a = b.args;
    ops_detail::require_canonical(name(), b, bind_paged_kv_append(*a[0], *a[1], *a[2], *a[3], *a[4], *a[5]));
  }
  void check_host_values(const BoundArgs &b, std::span<const TensorView> inputs) const override {
    pad::check_host_values(pad::problem_of(b), inputs);
  }
};

} // namespace

const Op &paged_attention_op() {
  static const PagedAttentionOp op;
  return op;
}
const Op &paged_kv_append_op() {
  static const PagedKvAppendOp op;
  return op;
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  register_op(paged_attention_op());
  register_op(paged_kv_append_op());
  return true;
}();

PagedAttentionSpecs specsOf(const TensorView &q, const TensorView &kp, const TensorView &vp, const TensorView &table,
                            const TensorView &lengths, const TensorView &out, const TensorView *lse) {
  return {ArgSpec::of(q),   ArgSpec::of(kp),  ArgSpec::of(vp), ArgSpec::of(table), ArgSpec::of(lengths),
          ArgSpec::of(out), spec_of(lse)};
}

} // namespace

void paged_attention(const TensorView &q, const TensorView &k_pages, const TensorView &v_pages,
                     const TensorView &page_table, const TensorView &seq_lengths, const TensorView &out,
                     Stream &stream, const PagedAttentionOptions &o, const TensorView *lse) {
  TensorView in[] = {q, k_pages, v_pages, page_table, seq_lengths}, outs[] = {out, view_of(lse)};
  ops_detail::CallKey key(paged_attention_op());
  key.add({&q, &k_pages, &v_pages, &page_table, &seq_lengths, &out, lse});
  // Every option joins the key (the tensors are in it already); a new field must join it too.
  static_assert(sizeof(PagedAttentionOptions) == 128, "PagedAttentionOptions changed: add the new option to the key");
  key.add(o.scale).add(o.logits_soft_cap);
  ops_detail::run_eager(key, {key.op(), in, outs, stream, o.implementation, o.config}, [&] {
    return bind_paged_attention(specsOf(q, k_pages, v_pages, page_table, seq_lengths, out, lse), o);
  });
}

void paged_attention_host(const TensorView &q, const TensorView &k_pages, const TensorView &v_pages,
                          const TensorView &page_table, const TensorView &seq_lengths, const TensorView &out,
                          const PagedAttentionOptions &o, const TensorView *lse) {
  const BoundArgs b = bind_paged_attention(specsOf(q, k_pages, v_pages, page_table, seq_lengths, out, lse), o);
  TensorView in[] = {q, k_pages, v_pages, page_table, seq_lengths}, outs[] = {out, view_of(lse)};
  // The views here; the values (lengths, page-table entries) in interpret()
  // (PagedAttentionOp::check_host_values).
  ops_detail::check_views(b, paged_attention_op().arg_names(), in, outs, /*host=*/true);
  paged_attention_op().interpret(b, in, outs, o.implementation, o.config);
}

void paged_kv_append(const TensorView &k, const TensorView &v, const TensorView &page_table,
                     const TensorView &seq_lengths, const TensorView &k_pages, const TensorView &v_pages,
                     Stream &stream, const PagedKvAppendOptions &o) {
  TensorView in[] = {k, v, page_table, seq_lengths}, outs[] = {k_pages, v_pages};
  ops_detail::CallKey key(paged_kv_append_op());
  key.add({&k, &v, &page_table, &seq_lengths, &k_pages, &v_pages});
  ops_detail::run_eager(key, {key.op(), in, outs, stream, o.implementation, o.config}, [&] {
    return bind_paged_kv_append(ArgSpec::of(k), ArgSpec::of(v), ArgSpec::of(page_table), ArgSpec::of(seq_lengths),
                                ArgSpec::of(k_pages), ArgSpec::of(v_pages));
  });
}

void paged_kv_append_host(const TensorView &k, const TensorView &v, const TensorView &page_table,
                          const TensorView &seq_lengths, const TensorView &k_pages, const TensorView &v_pages,
                          const PagedKvAppendOptions &o) {
  const BoundArgs b = bind_paged_kv_append(ArgSpec::of(k), ArgSpec::of(v), ArgSpec::of(page_table),
                                           ArgSpec::of(seq_lengths), ArgSpec::of(k_pages), ArgSpec::of(v_pages));
  TensorView in[] = {k, v, page_table, seq_lengths}, outs[] = {k_pages, v_pages};
  ops_detail::check_views(b, paged_kv_append_op().arg_names(), in, outs, /*host=*/true);
  paged_kv_append_op().interpret(b, in, outs, o.implementation, o.config);
}

} // namespace tokamax
