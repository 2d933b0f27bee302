//===- Hopper.cpp - ragged_dot on TMA rings and wgmma (sm_90a) ---------===//
//
// tile's kernels with the rows kernels always on TMA rings (tile's "tma" configs) and the
// VJP's drhs on wgmma (both operands from its cp.async ring), so the config holds the
// blocks and the rings' depth only: block_m, block_n, block_k, num_warps, stages,
// programs (the rows kernels on a persistent grid) and tma_store (their whole tiles
// stored by TMA). First in auto's order (sm_90a). At
// 8 groups, M 32768, K = N = 4096 bf16 on an H100 the persistent [128, 256] tiles took
// 1.749 ms forward / 6.010 ms forward + backward, against 2.125 / 6.706 at [128, 128]
// one program a tile and 7.735 with the drhs on mma.sync; on an H200 their whole tiles
// stored by TMA took 5.550 / 5.153 ms forward + backward against 6.253 / 6.175 through
// registers (two alternating runs), so the heuristic stores by TMA.
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
  // [128, 256] tiles (N of at least 256; else [128, 128]) on two consumer warpgroups,
  // K steps of 64 (or the largest of 32 and 16 dividing K: the forward's rhs blocks may
  // not reach into the next group) through a ring of three slots (four at [128, 128]),
  // the rows kernels on a persistent grid of one program an SM where the groups are few
  // enough for its producer to hold their starts (else one program a tile), their whole
  // tiles stored by TMA where the shared memory holds the staging tile.
  Config c;
  c.block_m = 128;
  c.block_n = p.N >= 256 ? 256 : 128;
  c.block_k = p.vjp || p.K % 64 == 0 ? 64 : p.K % 32 == 0 ? 32 : 16;
  c.num_warps = 8;
  c.stages = c.block_n == 256 ? 3 : 4;
  if (p.G <= kPersistentMaxGroups)
    c.programs = -1;
  c.tma_store = 1;
  if (check(p, c)) {
    Config throughRegisters = c;
    throughRegisters.tma_store.reset();
    if (!check(p, throughRegisters))
      return throughRegisters;
  }
  return c;
}

namespace {

/// The kernels' blocks at a config: the rows kernels persistent where it asks (one
/// program an SM at -1), the drhs on wgmma.
Blocks hopperBlocks(const Problem &p, const Hopper::Config &c, int64_t sm_count) {
  Blocks blocks = tensor_core_blocks(p, c, c.ring());
  const int64_t programs = c.programs.value_or(0);
  blocks.programs = programs < 0 ? sm_count : programs;
  blocks.drhs_wgmma = true;
  blocks.tma_store = c.tma_store.value_or(0) != 0;
  return blocks;
}

} // namespace

std::optional<std::string> Hopper::check(const Problem &p, const Config &c) {
  const int64_t programs = c.programs.value_or(0);
  if (programs < -1)
    return fmt::format("programs (a persistent grid of the rows kernels: -1 one per SM, 0 one per tile, or a count) "
                       "must be >= -1, got {}",
                       programs);
  if (c.tma_store && *c.tma_store != 0 && *c.tma_store != 1)
    return fmt::format("tma_store must be 0 or 1, got {}", *c.tma_store);
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
  // The heuristic's blocks with the rows kernels one program a tile, and persistent, each
  // storing by TMA and through registers.
  for (int64_t programs : {0, -1})
    for (int64_t tmaStore : {1, 0}) {
      Config c = space.front();
      c.programs = programs == 0 ? std::nullopt : std::optional<int64_t>(programs);
      c.tma_store = tmaStore == 1 ? std::optional<int64_t>(1) : std::nullopt;
      products_detail::add_new(space, std::move(c), valid);
    }
  return space;
}

void Hopper::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                     std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  run(p, hopperBlocks(p, c, ex.sm_count()), in, out, ex);
}

} // namespace tokamax::ragged_detail
