//===- Fp8.cpp - attention_fp8: fp8 q, k, v, descales; binding, op, API ------===//
//
// The op binds and checks its own arguments; its problem (Problem::fp8) runs on the
// hopper forward (fp8 wgmma, V transposed first) and on the reference (materialised f32
// logits of the fp8 values). Both read the call's tensors in attention's order with the
// descales after sinks (fp8_attention_order).
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/AttentionFp8.h>

#include "ops/lib/attention/Common.h"
#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>

#include <array>

namespace tokamax {

using attention_detail::check_exact;
using attention_detail::Problem;
using attention_detail::shape_text;
using ops_detail::spec_of;
using ops_detail::view_of;

namespace {

const std::vector<std::string> kArgs{"q",         "k",           "v",             "q_descale", "k_descale",
                                     "v_descale", "q_seq_lengths", "kv_seq_lengths", "out",       "lse"};
constexpr size_t kInputs = 8;

/// What an fp8 call's options must not hold.
void checkOptions(const char *op, const AttentionOptions &o) {
  for (auto [name, t] : {std::pair{"bias", o.bias}, std::pair{"mask", o.mask}, std::pair{"sinks", o.sinks},
                         std::pair{"cu_seqlens_q", o.cu_seqlens_q}, std::pair{"cu_seqlens_kv", o.cu_seqlens_kv}})
    if (t)
      throw Error(fmt::format("{}: fp8 calls take no {} (see AttentionFp8.h for what they take)", op, name));
  if (o.layout != AttentionLayout::BTNH)
    throw Error(fmt::format("{}: fp8 calls take the BTNH layout ([batch..., seq, heads, head_dim]) only", op));
}

class AttentionFp8Op : public Op {
public:
  AttentionFp8Op()
      : Op("attention_fp8", kArgs, kInputs,
           ops_detail::typed_implementations<attention_detail::HopperForward, attention_detail::Reference>(
               "attention_fp8", kArgs, kInputs, attention_detail::fp8_problem_of)) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_of(name(), b, arg_names(),
                                {"scale", "is_causal", "window_left", "window_right", "logits_soft_cap"});
    auto need = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    auto at = [&](size_t i) { return ops_detail::optional_arg(b, i); };
    BoundArgs again = bind_attention_fp8(
        {need(0), need(1), need(2), at(3), at(4), at(5), at(6), at(7), need(8), at(9)},
        attention_detail::attention_options_of(b));
    ops_detail::require_canonical(name(), b, again);
  }
};

/// A call's inputs in the op's order (absent ones empty views).
std::array<TensorView, kInputs> inputsOf(const TensorView &q, const TensorView &k, const TensorView &v,
                                         const AttentionOptions &o, const AttentionFp8Descales &d) {
  return {q, k, v, view_of(d.q), view_of(d.k), view_of(d.v), view_of(o.q_seq_lengths),
          view_of(o.kv_seq_lengths)};
}

AttentionFp8Specs specsOf(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                          const AttentionOptions &o, const AttentionFp8Descales &d, const TensorView *lse) {
  checkOptions("attention_fp8", o);
  return {ArgSpec::of(q),  ArgSpec::of(k),          ArgSpec::of(v),           spec_of(d.q),      spec_of(d.k),
          spec_of(d.v),    spec_of(o.q_seq_lengths), spec_of(o.kv_seq_lengths), ArgSpec::of(out), spec_of(lse)};
}

} // namespace

BoundArgs bind_attention_fp8(const AttentionFp8Specs &a, const AttentionOptions &o) {
  const char *op = "attention_fp8";
  checkOptions(op, o);
  const attention_detail::AttentionGeometry g = attention_detail::attention_geometry(op, a.q, a.k, a.v, false, true);
  const std::vector<int64_t> perKvHead = g.withBatch({g.K});
  for (auto [name, d] : {std::pair{"q_descale", &a.q_descale}, std::pair{"k_descale", &a.k_descale},
                         std::pair{"v_descale", &a.v_descale}})
    if (*d && ((*d)->dtype != DType::F32 || (*d)->shape != perKvHead))
      throw Error(fmt::format("{}: {} must be f32 {} (one per batch row and kv head), got {} {}", op, name,
                              shape_text(perKvHead), dtype_name((*d)->dtype), shape_text((*d)->shape)));
  attention_detail::check_seq_lengths(op, "q_seq_lengths", a.q_seq_lengths, g);
  attention_detail::check_seq_lengths(op, "kv_seq_lengths", a.kv_seq_lengths, g);
  check_exact(op, "out", a.out, g.shape(g.T, g.N, g.Hv), DType::BF16);
  if (a.lse)
    check_exact(op, "lse", *a.lse, g.withBatch({g.N, g.T}), DType::F32);
  return BoundArgs{op,
                   {a.q, a.k, a.v, a.q_descale, a.k_descale, a.v_descale, a.q_seq_lengths, a.kv_seq_lengths, a.out,
                    a.lse},
                   attention_detail::attention_attributes(op, g.H, o)};
}

const Op &attention_fp8_op() {
  static const AttentionFp8Op op;
  return op;
}

namespace {
[[maybe_unused]] const bool kRegistered = [] {
  register_op(attention_fp8_op());
  return true;
}();
} // namespace

Problem attention_detail::fp8_problem_of(const BoundArgs &b) {
  Problem p;
  const ArgSpec &q = b.arg(0);
  read_dims(q, b.arg(1), b.arg(2), /*heads_major=*/false, p);
  read_attributes(b, q.dtype, p);
  p.fp8 = true;
  p.q_descale = b.has(3), p.k_descale = b.has(4), p.v_descale = b.has(5);
  p.q_lengths = b.has(6), p.kv_lengths = b.has(7);
  p.lse_out = b.has(9);
  return p;
}

void dot_product_attention_fp8(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                               Stream &stream, const AttentionOptions &o, const AttentionFp8Descales &d,
                               const TensorView *lse) {
  const std::array<TensorView, kInputs> in = inputsOf(q, k, v, o, d);
  TensorView outs[] = {out, view_of(lse)};
  ops_detail::CallKey key(attention_fp8_op());
  key.add({&q, &k, &v, d.q, d.k, d.v, o.q_seq_lengths, o.kv_seq_lengths, &out, lse});
  attention_detail::add_options(key, o);
  ops_detail::run_eager(key, {key.op(), in, outs, stream, o.implementation, o.config},
                        [&] { return bind_attention_fp8(specsOf(q, k, v, out, o, d, lse), o); });
}

void dot_product_attention_fp8_host(const TensorView &q, const TensorView &k, const TensorView &v,
                                    const TensorView &out, const AttentionOptions &o, const AttentionFp8Descales &d,
                                    const TensorView *lse) {
  BoundArgs b = bind_attention_fp8(specsOf(q, k, v, out, o, d, lse), o);
  const std::array<TensorView, kInputs> in = inputsOf(q, k, v, o, d);
  TensorView outs[] = {out, view_of(lse)};
  attention_fp8_op().interpret(b, in, outs, o.implementation, o.config);
}

} // namespace tokamax
