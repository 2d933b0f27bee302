//===- Common.cpp - ragged_dot: what the implementations share -------===//
//
// The launches (run) every implementation makes at its blocks, and the checks tile and
// hopper share: hopper runs tile's kernels with TMA rings always on.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/ragged_dot/Common.h"

#include "ops/lib/framework/SharedMemory.h"
#include "ops/lib/products/Products.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>

namespace tokamax::ragged_detail {

namespace {

/// 32-bit registers per thread: the accumulator and (without the ring) one step's blocks
/// held ahead.
int64_t registerEstimate(const Problem &p, const ProductBlocks &b, const ProductRing &r) {
  const int64_t threads = 32 * b.num_warps;
  const int64_t blocks = r.async_copy ? 0 : (b.block_m + b.block_n) * b.block_k / 2;
  return (b.block_m * b.block_n * (p.compute == DType::F64 ? 2 : 1) + blocks) / threads;
}

/// Why the kernels run launches at `blocks` do not fit a block's shared memory, as the
/// compiler plans each.
std::optional<std::string> checkSharedMemory(const Problem &p, const Blocks &blocks) {
  // Views without data; rhs with its shape, which the rows kernel's view of it reads.
  std::array<TensorView, 4> inputs{};
  std::array<TensorView, 2> outputs{};
  inputs[p.vjp ? 2 : 1] = TensorView(0, p.dtype, std::vector<int64_t>{p.G, p.K, p.N}, 0);
  return ops_detail::check_shared_memory(
      [&](ops_detail::KernelExecutor &ex) { run(p, blocks, inputs, outputs, ex); });
}

/// rhs as the rows kernel reads it: [G, K, N], or 2-D [G K, N] for TMA.
TensorView rowsRhs(const TensorView &rhs, const Blocks &blocks, const ops_detail::KernelExecutor &ex) {
  if (!blocks.tma)
    return rhs;
  return TensorView(rhs.data(), rhs.dtype(), std::vector<int64_t>{rhs.shape()[0] * rhs.shape()[1], rhs.shape()[2]},
                    ex.device());
}

} // namespace

bool async_copy_serves(const Problem &p) {
  return (p.dtype == DType::BF16 || p.dtype == DType::F16) && p.K % 8 == 0 && p.N % 8 == 0;
}

std::optional<std::string> why_not_offsets(const Problem &p) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (p.M * std::max(p.K, p.N) > kMax || p.G * p.K * p.N > kMax)
    return fmt::format("an output of M {}, K {}, N {} with {} groups has 2^31 elements or more", p.M, p.K, p.N, p.G);
  return std::nullopt;
}

Blocks tensor_core_blocks(const Problem &p, const ProductBlocks &b, const ProductRing &r) {
  const bool async = r.async_copy && async_copy_serves(p);
  return {.exact = false,
          .block_m = b.block_m,
          .block_n = b.block_n,
          .block_k = b.block_k,
          .num_warps = static_cast<int>(b.num_warps),
          .async_copy = async,
          .stages = r.stages.value_or(3),
          .tma = async && r.tma};
}

std::optional<std::string> check_tensor_core_blocks(const Problem &p, const ProductBlocks &b, const ProductRing &r,
                                                    const Blocks &launched) {
  if (auto problem = check_block_sizes(b, /*tile=*/true))
    return problem;
  if (auto problem = check_ring_keys(r, async_copy_serves(p), p.K, p.N))
    return problem;
  if (auto problem = check_tma_ring_keys(b, r, int64_t(dtype_size(p.dtype))))
    return problem;
  if (r.tma && !p.vjp && p.K % b.block_k != 0)
    return fmt::format("tma needs K a multiple of block_k (a block of a group's rhs must not reach into the next "
                       "group's rows), got K {} and block_k {}",
                       p.K, b.block_k);
  if (const int64_t registers = registerEstimate(p, b, r); registers > 160)
    return fmt::format("block_m {} x block_n {} with {} warps needs ~{} registers per thread for the accumulator and "
                       "blocks",
                       b.block_m, b.block_n, b.num_warps, registers);
  return checkSharedMemory(p, launched);
}

void run(const Problem &p, const Blocks &blocks, std::span<const TensorView> in, std::span<const TensorView> out,
         ops_detail::KernelExecutor &ex) {
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

} // namespace tokamax::ragged_detail
