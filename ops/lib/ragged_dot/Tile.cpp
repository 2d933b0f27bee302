//===- Tile.cpp - ragged_dot on tensor cores (sm_80+) ------------------===//
//
// Config: block_m, block_n (the output tile), block_k (the reduction step), num_warps,
// and async_copy and stages (the operand blocks through a cp.async ring where K and N
// are multiples of 8, else masked register loads one step ahead) and tma (opt-in until
// measured on the device, sm_90a only: the rows kernels' blocks by TMA through rings a
// producer warpgroup refills, products on wgmma from shared memory; the forward needs K
// a multiple of block_k). The heuristic takes 128 x 128 output tiles on 8 warps with
// 32-element steps through a three-slot ring where the rows allow it, smaller where the
// problem is.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/ragged_dot/Common.h"

#include <algorithm>

namespace tokamax::ragged_detail {

std::optional<std::string> Tile::why_not(const Problem &p) {
  if (auto problem = why_not_tensor_cores(kind, p.dtype))
    return problem;
  return why_not_offsets(p);
}

Tile::Config Tile::heuristic(const Problem &p) {
  // Per-group row counts are unknown on the host: the tile follows M / G, the mean group.
  const int64_t rows = p.vjp ? std::max(p.M / std::max<int64_t>(p.G, 1), p.K) : p.M / std::max<int64_t>(p.G, 1);
  Config c;
  c.block_m = std::clamp<int64_t>(dsl::next_power_of_two(std::max<int64_t>(rows, 1)), 16, 128);
  c.block_n = std::clamp<int64_t>(dsl::next_power_of_two(std::max(p.N, p.vjp ? p.K : 1)), 16, 128);
  c.block_k = 32;
  c.num_warps = std::clamp<int64_t>(c.block_m * c.block_n / 1024, 1, 8);
  if (async_copy_serves(p)) {
    c.async_copy = true;
    c.stages = 3;
  }
  return c;
}

std::optional<std::string> Tile::check(const Problem &p, const Config &c) {
  return check_tensor_core_blocks(p, c, c, tensor_core_blocks(p, c, c));
}

std::vector<Tile::Config> Tile::search_space(const Problem &p) {
  return block_search_space(heuristic(p), async_copy_serves(p), [&](const Config &c) { return !check(p, c); });
}

void Tile::execute(const Problem &p, const Config &c, std::span<const TensorView> in, std::span<const TensorView> out,
                   ops_detail::KernelExecutor &ex) {
  run(p, tensor_core_blocks(p, c, c), in, out, ex);
}

} // namespace tokamax::ragged_detail
