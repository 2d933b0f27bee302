// The headline gradient as users write it (examples/attention.cpp): x bf16 and scale f32
// through layer_norm tile -> attention chunked -> layer_norm -> attention `second`
// (hopper, as the headline has it; tile where hopper cannot run) -> sum, and
// grad(loss, {x, scale}). By default at a small shape; the example's is
// kHeadlineShape.
#pragma once

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace test {

inline const std::vector<int64_t> kHeadlineShape{32, 2048, 16, 64};

inline tokamax::Function headline_grad(const std::string &second = "hopper",
                                       const std::vector<int64_t> &shape = {2, 64, 4, 64}) {
  using namespace tokamax;
  ArgSpec x{shape, DType::BF16}, scale{{shape.back()}, DType::F32};
  Function loss = Function::trace({x, scale}, [&](Tracer &t, std::span<const Sym> in) {
    AttentionOptions chunked, pinned;
    chunked.implementation = "chunked";
    pinned.implementation = second;
    Sym y = t.layer_norm(in[0], in[1], std::nullopt, -1, 1e-5, "tile");
    y = t.dot_product_attention(y, y, y, chunked);
    y = t.layer_norm(y, in[1]);
    y = t.dot_product_attention(y, y, y, pinned);
    return std::vector<Sym>{t.sum(t.cast(y, DType::F32))};
  });
  return grad(loss, {0, 1});
}

} // namespace test
