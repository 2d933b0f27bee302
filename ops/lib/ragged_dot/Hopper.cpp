//===- Hopper.cpp - ragged_dot on TMA rings and wgmma (sm_90a) ---------===//
//
// tile's kernels with the rows kernels always on TMA rings (tile's "tma" configs), so
// the config holds the blocks and the rings' depth only: block_m, block_n, block_k,
// num_warps, stages, and programs (the rows kernels on a persistent grid). First in
// auto's order (sm_90a): on an H200 at 8 groups, M 32768, K = N = 4096 bf16 its forward
// took 1.957 ms against tile's 4.038. Experimental (TOKAMAX_EXPERIMENTAL=1) until a
// device run: programs, and the VJP's drhs on wgmma (else on mma.sync).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/ragged_dot/Common.h"

#include "ops/lib/framework/OpEntry.h"

#include <fmt/format.h>

namespace tokamax::ragged_detail {

std::optional<std::string> Hopper::why_not(const Problem &p) {
  if (auto problem = why_not_tensor_cores(kind, p.dtype))
    return problem;
  if (auto problem = why_not_tma_rows("lhs and rhs", "K", p.K, "N", p.N))
    return problem;
  if (!p.vjp && p.K % 16 != 0)
    return fmt::format("hopper's forward steps through each group's rhs in blocks of 16, 32 or 64 rows that must "
                       "divide K {}; use tile",
                       p.K);
  return why_not_offsets(p);
}

Hopper::Config Hopper::heuristic(const Problem &p) {
  // [128, 128] tiles on two consumer warpgroups (ptxas: 168 registers at launch, no
  // spills), K steps of 64 (or the largest of 32 and 16 dividing K: the forward's rhs
  // blocks may not reach into the next group) through a four-slot ring.
  Config c;
  c.block_m = 128;
  c.block_n = 128;
  c.block_k = p.vjp || p.K % 64 == 0 ? 64 : p.K % 32 == 0 ? 32 : 16;
  c.num_warps = 8;
  c.stages = 4;
  return c;
}

namespace {

/// The kernels' blocks at a config: the rows kernels persistent where it asks (one
/// program an SM at -1), the drhs on wgmma where the experimental gate is open.
Blocks hopperBlocks(const Problem &p, const Hopper::Config &c, int64_t sm_count) {
  Blocks blocks = tensor_core_blocks(p, c, c.ring());
  const int64_t programs = c.programs.value_or(0);
  blocks.programs = programs < 0 ? sm_count : programs;
  blocks.drhs_wgmma = !experimental_hopper_kernels();
  return blocks;
}

} // namespace

std::optional<std::string> experimental_hopper_kernels() {
  return ops_detail::experimental_gate(
      "ragged_dot hopper's persistent rows kernels (programs) and its drhs on wgmma are experimental until a device "
      "run verifies them (their numerics and timings wait in scripts/gpu-check.sh's ragged part); leave programs "
      "out");
}

std::optional<std::string> Hopper::check(const Problem &p, const Config &c) {
  const int64_t programs = c.programs.value_or(0);
  if (programs != 0)
    if (auto gate = experimental_hopper_kernels())
      return gate;
  if (programs < -1)
    return fmt::format("programs (a persistent grid of the rows kernels: -1 one per SM, 0 one per tile, or a count) "
                       "must be >= -1, got {}",
                       programs);
  if (programs != 0 && p.G > kPersistentMaxGroups)
    return fmt::format("programs: a persistent rows kernel serves at most {} groups, got {}", kPersistentMaxGroups,
                       p.G);
  // The shared memory of the kernels execute launches (persistent rows kernels, the
  // drhs's wgmma staging); one program stands for the SM count, which only sizes grids.
  return check_tensor_core_blocks(p, c, c.ring(), hopperBlocks(p, c, 1));
}

std::vector<Hopper::Config> Hopper::search_space(const Problem &p) {
  auto valid = [&](const Config &c) { return !check(p, c); };
  std::vector<Config> space = hopper_search_space(heuristic(p), valid);
  // The rows kernels on a persistent grid, one program an SM, at the heuristic's blocks.
  Config persistent = space.front();
  persistent.programs = -1;
  products_detail::add_new(space, persistent, valid);
  return space;
}

void Hopper::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                     std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  run(p, hopperBlocks(p, c, ex.sm_count()), in, out, ex);
}

} // namespace tokamax::ragged_detail
