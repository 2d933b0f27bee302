//===- Tile.cpp - gated_linear_unit on tensor cores (sm_80+) -----------===//
//
// Config (the gate kernel's): block_m, block_n, block_k, num_warps, group_m, async_copy,
// stages, wgmma and tma (both opt-in, out of the heuristic and the search space until
// measured on the device, as for attention; tma: TMA rings refilled by a producer
// warpgroup, wgmma from shared memory, sm_90a only), with tma programs, and (opt-in)
// unfused: both products on the tile matmul, then an elementwise gate. The
// heuristic takes 128 x 128 output tiles (two f32 accumulators: 128 registers per thread
// on 8 warps) with 64-byte K slices through a three-slot cp.async ring where the rows
// allow it, 128 x 64 otherwise and for the VJP (whose epilogue holds dout, da and db
// too). The VJP's dx and dweights run on the tile matmul.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/gated_linear_unit/Common.h"

#include <algorithm>

namespace tokamax::glu_detail {

std::optional<std::string> Tile::why_not(const Problem &p) { return why_not_tensor_cores(kind, p.dtype); }

Tile::Config Tile::heuristic(const Problem &p) {
  // Two [128, 128] f32 accumulators take 128 registers per thread on 8 warps: the ring's
  // forward fits; the register loads' blocks and the VJP's epilogue need half-width tiles.
  const bool ring = async_copy_serves(p);
  Config c;
  c.block_m = std::clamp<int64_t>(dsl::next_power_of_two(p.M), 16, 128);
  c.block_n = std::clamp<int64_t>(dsl::next_power_of_two(p.N), 16, ring && !p.vjp ? 128 : 64);
  c.block_k = 32;
  c.group_m = 8;
  c.num_warps = std::clamp<int64_t>(c.block_m * c.block_n / 1024, 1, 8);
  if (ring) {
    c.async_copy = true;
    c.stages = 3;
  }
  return c;
}

std::optional<std::string> Tile::check(const Problem &p, const Config &c) { return check_tensor_core_config(p, c); }

std::vector<Tile::Config> Tile::search_space(const Problem &p) {
  return block_search_space(heuristic(p), async_copy_serves(p), [&](const Config &c) { return !check(p, c); });
}

void Tile::execute(const Problem &p, const Config &c, std::span<const TensorView> in, std::span<const TensorView> out,
                   ops_detail::KernelExecutor &ex) {
  run(p, tensor_core_spec(p, c, ex.sm_count()), MatmulKernelKind::Tile, in, out, ex);
}

} // namespace tokamax::glu_detail
