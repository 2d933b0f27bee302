//===- Tile.cpp - linear_softmax_cross_entropy_loss on tensor cores (sm_80+) -===//
//
// Config: block_b, block_v, block_k, num_warps, for the VJP block_d and, optional,
// chunk_v; for the forward, optional, split_v. The heuristic takes [64, 128] logit
// tiles with 32-wide D slices on 4 warps (one f32 accumulator of 64 registers per
// thread) and, for the VJP, 64-wide D blocks of dx and dw. Opt-in: "tma" (with
// "stages"): the rows and dlogits kernels' x and w blocks by TMA through rings a
// producer warpgroup refills, the logit tiles on wgmma (hopper's kernels).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/cross_entropy/Common.h"

#include <algorithm>

namespace tokamax::xent_detail {

std::optional<std::string> Tile::why_not(const Problem &p) { return why_not_tensor_cores(kind, p.dtype); }

Tile::Config Tile::heuristic(const Problem &p) {
  Config c;
  c.block_b = std::clamp<int64_t>(dsl::next_power_of_two(p.B), 16, 64);
  c.block_v = 128;
  c.block_k = 32;
  c.num_warps = 4;
  if (!p.vjp) {
    // Few row blocks (B / 64 against 132 SMs at B 8192) walk V in several splits.
    if (int64_t splits = four_programs_per_sm(p, (p.B + c.block_b - 1) / c.block_b); splits > 1)
      c.split_v = splits;
  } else {  // the dx / dw accumulator beside the logit tile: 8 warps keep both in registers
    c.block_d = 64;
    c.num_warps = 8;
  }
  return c;
}

std::optional<std::string> Tile::check(const Problem &p, const Config &c) {
  if (auto problem = check_blocks(p, kind, c, c.block_d))
    return problem;
  return check_tensor_cores(p, c, p.vjp ? *c.block_d : 0, c.tma, c.stages);
}

std::vector<Tile::Config> Tile::search_space(const Problem &p) {
  std::vector<Config> space{heuristic(p)};
  for (int64_t bb : {32, 64, 128})
    for (int64_t bv : {64, 128, 256})
      for (int64_t bk : {32, 64})
        for (int64_t warps : {4, 8})
          for (int64_t bd : {0, 64, 128}) {
            if ((bd != 0) != p.vjp)
              continue;
            Config c;
            c.block_b = bb;
            c.block_v = bv;
            c.block_k = bk;
            c.num_warps = warps;
            if (bd)
              c.block_d = bd;
            c.split_v = space.front().split_v;  // the heuristic's splits of V
            products_detail::add_new(space, std::move(c),
                                     [&](const Config &candidate) { return !check(p, candidate); });
          }
  return space;
}

void Tile::execute(const Problem &p, const Config &c, std::span<const TensorView> in, std::span<const TensorView> out,
                   ops_detail::KernelExecutor &ex) {
  run(p,
      Blocks{.block_b = c.block_b, .block_v = c.block_v, .block_k = c.block_k, .num_warps = c.num_warps,
             .block_d = own_block_d(p, c.block_d), .split_v = c.split_v, .chunk_v = c.chunk_v, .tma = c.tma,
             .stages = c.stages.value_or(3)},
      in, out, ex);
}

} // namespace tokamax::xent_detail
