//===- RaggedPlans.cpp - ragged_dot: launches and configs -------------------===//
//
//   forward:  rows_kernel (out);
//   VJP:      rows_kernel with rhs read transposed (dlhs = dout @ rhs[g]^T), then
//             groups_kernel (drhs[g] = lhs_g^T @ dout_g).
//
// Configs: block_m, block_n (the output tile), block_k (the reduction step), num_warps,
// and for tile async_copy and stages (the operand blocks through a cp.async ring where K
// and N are multiples of 8, else masked register loads one step ahead) and tma (opt-in
// until measured on the device, sm_90a only: the rows kernels' blocks by TMA through
// rings a producer warpgroup refills, products on wgmma from shared memory; the forward
// needs K a multiple of block_k); the VJP's two kernels take the same config. The tile heuristic takes 128 x 128 output tiles on 8
// warps with 32-element steps through a three-slot ring where the rows allow it,
// smaller where the problem is; exact products use matmul reference's 16 x 16 x 8
// blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/matmul/MatmulDetail.h"
#include "ops/lib/ragged/RaggedDetail.h"

#include "ops/lib/Dispatch.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace tokamax::ragged_detail {

namespace {

bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }

Blocks blocksOf(const Problem &p, Impl impl, const Config &hopperOrTile) {
  const Config c = impl == Impl::Hopper ? hopper_as_tile(hopperOrTile) : hopperOrTile;
  const bool exact = impl == Impl::Reference;
  return {exact,
          c.get("block_m"),
          c.get("block_n"),
          c.get("block_k"),
          static_cast<int>(c.get("num_warps")),
          !exact && c.get_or("async_copy", 0) != 0 && async_copy_serves(p),
          c.get_or("stages", 3),
          !exact && c.get_or("async_copy", 0) != 0 && async_copy_serves(p) && c.get_or("tma", 0) != 0};
}

int64_t ringBytes(const Problem &p, const Config &c) {
  if (!c.get_or("async_copy", 0))
    return 0;
  return c.get_or("stages", 3) * (c.get("block_m") + c.get("block_n")) * c.get("block_k") * int64_t(dtype_size(p.dtype));
}

/// 32-bit registers per thread: the accumulator and (without the ring) one step's blocks
/// held ahead.
int64_t registerEstimate(const Problem &p, const Config &c) {
  const int64_t threads = 32 * c.get("num_warps"), bm = c.get("block_m"), bn = c.get("block_n"),
                bk = c.get("block_k");
  const int64_t blocks = c.get_or("async_copy", 0) ? 0 : (bm + bn) * bk / 2;
  return (bm * bn * (p.compute == DType::F64 ? 2 : 1) + blocks) / threads;
}

/// rhs as the rows kernel reads it: [G, K, N], or 2-D [G K, N] for TMA.
TensorView rowsRhs(const TensorView &rhs, const Blocks &blocks, const ops_detail::KernelExecutor &ex) {
  if (!blocks.tma)
    return rhs;
  return TensorView(rhs.data(), rhs.dtype(), std::vector<int64_t>{rhs.shape()[0] * rhs.shape()[1], rhs.shape()[2]},
                    ex.device());
}

} // namespace

bool async_copy_serves(const Problem &p) { return isHalf(p.dtype) && p.K % 8 == 0 && p.N % 8 == 0; }

void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> in,
             std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const Blocks blocks = blocksOf(p, impl, config);
  if (!p.vjp) {
    if (p.M == 0 || p.N == 0)
      return;
    if (p.K == 0 || p.G == 0) {  // no products (or no groups): every row is zero
      ex.zero(out[0]);
      return;
    }
    RowsKernelSpec s{p.M, p.K, p.N, p.G, false, p.dtype, p.compute, blocks};
    ex.launch(s.key(), [s] { return rows_kernel(s); }, {in[0], rowsRhs(in[1], blocks, ex), in[2], out[0]});
    return;
  }
  const TensorView &dout = in[0], &lhs = in[1], &rhs = in[2], &sizes = in[3], &dlhs = out[0], &drhs = out[1];
  if (p.M > 0 && p.K > 0) {
    if (p.N == 0 || p.G == 0) {
      ex.zero(dlhs);
    } else {
      RowsKernelSpec s{p.M, p.N, p.K, p.G, true, p.dtype, p.compute, blocks};
      ex.launch(s.key(), [s] { return rows_kernel(s); }, {dout, rowsRhs(rhs, blocks, ex), sizes, dlhs});
    }
  }
  if (p.G > 0 && p.K > 0 && p.N > 0) {
    if (p.M == 0) {
      ex.zero(drhs);
    } else {
      // drhs streams through a cp.async ring (TMA serves only the rows kernels): at most
      // four slots, however deep the config's TMA rings.
      Blocks groups = blocks;
      groups.stages = std::min<int64_t>(groups.stages, 4);
      GroupsKernelSpec s{p.M, p.K, p.N, p.G, p.dtype, p.compute, groups};
      ex.launch(s.key(), [s] { return groups_kernel(s); }, {dout, lhs, sizes, drhs});
    }
  }
}

std::optional<std::string> why_not(const Problem &p, Impl impl) {
  if (impl != Impl::Reference && !isHalf(p.dtype))
    return fmt::format("{} serves bf16 and f16 (tensor cores), not {}; use reference", impl_name(impl),
                       dtype_name(p.dtype));
  if (impl == Impl::Hopper && !async_copy_serves(p))
    return fmt::format("hopper reads lhs and rhs by TMA in rows of whole 16-byte chunks: K {} and N {} must be "
                       "multiples of 8; use tile",
                       p.K, p.N);
  if (impl == Impl::Hopper && !p.vjp && p.K % 16 != 0)
    return fmt::format("hopper's forward steps through each group's rhs in blocks of 16, 32 or 64 rows that must "
                       "divide K {}; use tile",
                       p.K);
  // The kernels' row offsets are 32-bit.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (p.M * std::max(p.K, p.N) > kMax || p.G * p.K * p.N > kMax)
    return fmt::format("an output of M {}, K {}, N {} with {} groups has 2^31 elements or more", p.M, p.K, p.N, p.G);
  return std::nullopt;
}

Config heuristic(const Problem &p, Impl impl) {
  // [128, 128] tiles on two consumer warpgroups (ptxas: 168 registers at launch, no
  // spills), K steps of 64 (or the largest of 32 and 16 dividing K: the forward's rhs
  // blocks may not reach into the next group) through a four-slot ring.
  if (impl == Impl::Hopper) {
    const int64_t bk = p.vjp || p.K % 64 == 0 ? 64 : p.K % 32 == 0 ? 32 : 16;
    return {{"block_m", 128}, {"block_n", 128}, {"block_k", bk}, {"num_warps", 8}, {"stages", 4}};
  }
  if (impl == Impl::Reference)
    return {{"block_m", 16}, {"block_n", 16}, {"block_k", 8}, {"num_warps", 4}};
  // Per-group row counts are unknown on the host: the tile follows M / G, the mean group.
  const int64_t rows = p.vjp ? std::max(p.M / std::max<int64_t>(p.G, 1), p.K) : p.M / std::max<int64_t>(p.G, 1);
  const int64_t bm = std::clamp<int64_t>(ops_detail::next_power_of_two(std::max<int64_t>(rows, 1)), 16, 128);
  const int64_t bn = std::clamp<int64_t>(ops_detail::next_power_of_two(std::max(p.N, p.vjp ? p.K : 1)), 16, 128);
  Config c{{"block_m", bm}, {"block_n", bn}, {"block_k", 32}, {"num_warps", std::clamp<int64_t>(bm * bn / 1024, 1, 8)}};
  if (async_copy_serves(p))
    c.set("async_copy", 1).set("stages", 3);
  return c;
}

std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &config) {
  for (const char *key : {"block_m", "block_n", "block_k", "num_warps"})
    if (!config.has(key))
      return fmt::format("missing \"{}\"", key);
  if (impl == Impl::Hopper)
    if (auto problem = check_hopper_keys(config))
      return problem;
  const Config c = impl == Impl::Hopper ? hopper_as_tile(config) : config;
  const bool tile = impl != Impl::Reference;
  for (const auto &[key, value] : c.values)
    if (key != "block_m" && key != "block_n" && key != "block_k" && key != "num_warps" &&
        !(tile && (key == "async_copy" || key == "stages" || key == "tma")))
      return fmt::format("unknown key \"{}\" for {}", key, impl_name(impl));
  const int64_t bm = c.get("block_m"), bn = c.get("block_n"), bk = c.get("block_k"), w = c.get("num_warps");
  if (auto problem = check_block_sizes(c, tile))
    return problem;
  if (!tile)
    return std::nullopt;
  if (auto problem = check_ring_keys(c, async_copy_serves(p), p.K, p.N))
    return problem;
  if (auto problem = check_tma_ring_keys(c, int64_t(dtype_size(p.dtype))))
    return problem;
  if (c.get_or("tma", 0) && !p.vjp && p.K % bk != 0)
    return fmt::format("tma needs K a multiple of block_k (a block of a group's rhs must not reach into the next "
                       "group's rows), got K {} and block_k {}",
                       p.K, bk);
  if (ringBytes(p, c) > ops_detail::kHopperSharedBudget)
    return fmt::format("the cp.async ring needs {} KiB of shared memory (at most 220)", ringBytes(p, c) / 1024);
  if (registerEstimate(p, c) > 160)
    return fmt::format("block_m {} x block_n {} with {} warps needs ~{} registers per thread for the accumulator and "
                       "blocks",
                       bm, bn, w, registerEstimate(p, c));
  return std::nullopt;
}

std::vector<Config> search_space(const Problem &p, Impl impl) {
  if (impl == Impl::Hopper)
    return hopper_search_space(heuristic(p, impl), [&](const Config &c) { return !check_config(p, impl, c); });
  return block_search_space(heuristic(p, impl), impl == Impl::Reference, async_copy_serves(p), Config{},
                            [&](const Config &c) { return !check_config(p, impl, c); });
}

} // namespace tokamax::ragged_detail
