// The headline function of examples/attention.cpp, also traced by tokamax-headline-grad
// (one definition, so the accuracy the tool measures is the example's):
//   loss(x, scale) = sum(f32(attention(l2, l2, l2))),  l2 = layer_norm(a1, scale),
//   a1 = attention(l1, l1, l1),                          l1 = layer_norm(x, scale, epsilon 1e-5)
// x [B, T, N, H] bf16, scale [H] f32; the second layer_norm has the default epsilon
// (NormOptions', the Tracer's: 1e-6); attention its default scale 1 / sqrt(H), not causal.
#pragma once

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>

#include <optional>
#include <string>
#include <vector>

namespace example {

/// The implementation each of the four calls is pinned to (and its VJP); std::nullopt: auto.
struct HeadlineImplementations {
  std::optional<std::string> first_norm, first_attention, second_norm, second_attention;
};

/// The headline's own choice on `arch`: the first layer_norm on "tile", the first
/// attention "chunked", the second layer_norm auto, the second attention "hopper" on
/// sm_90a (which the interpreter also takes), else "tile".
inline HeadlineImplementations headline_implementations(const std::string &arch) {
  return {"tile", "chunked", std::nullopt, arch == "sm_90a" ? "hopper" : "tile"};
}

/// Every call on "reference" (the materialised-logits attention, the looping norms).
inline HeadlineImplementations reference_implementations() {
  return {"reference", "reference", "reference", "reference"};
}

/// The forward loss, a Function of (x, scale) with one f32 [1] output.
inline tokamax::Function headline(const std::vector<int64_t> &shape, const HeadlineImplementations &impl) {
  using namespace tokamax;
  ArgSpec x{shape, DType::BF16}, scale{{shape.back()}, DType::F32};
  return Function::trace({x, scale}, [&](Tracer &t, std::span<const Sym> in) {
    AttentionOptions first, second;
    first.implementation = impl.first_attention;
    second.implementation = impl.second_attention;
    Sym l1 = t.layer_norm(in[0], in[1], std::nullopt, -1, 1e-5, impl.first_norm);
    Sym a1 = t.dot_product_attention(l1, l1, l1, first);
    Sym l2 = t.layer_norm(a1, in[1], std::nullopt, -1, NormOptions{}.epsilon, impl.second_norm);
    return std::vector<Sym>{t.sum(t.cast(t.dot_product_attention(l2, l2, l2, second), DType::F32))};
  });
}

} // namespace example
