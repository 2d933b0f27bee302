// The headline gradient as users write it (examples/attention.cpp, whose definition in
// examples/common/Headline.h this reuses): x bf16 and scale f32 through layer_norm tile ->
// attention chunked -> layer_norm -> attention `second` (hopper, as the headline has it;
// tile where hopper cannot run) -> sum, and grad(loss, {x, scale}). By default at a small
// shape; the example's is kHeadlineShape.
#pragma once

#include "../../examples/common/Headline.h"

#include <cstdint>
#include <string>
#include <vector>

namespace test {

inline const std::vector<int64_t> kHeadlineShape{32, 2048, 16, 64};

inline tokamax::Function headline_grad(const std::string &second = "hopper",
                                       const std::vector<int64_t> &shape = {2, 64, 4, 64}) {
  example::HeadlineImplementations impl = example::headline_implementations("sm_90a");
  impl.second_attention = second;
  return tokamax::grad(example::headline(shape, impl), {0, 1});
}

} // namespace test
