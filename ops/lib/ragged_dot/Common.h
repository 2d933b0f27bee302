//===- Common.h - ragged_dot problems, kernels, implementations -*- C++ -*-===//
//
// Internal to ops/lib/ragged_dot. A bound call becomes a Problem; kernels see lhs [M, K],
// rhs [G, K, N], group_sizes [G] and out [M, N] (the VJP: dout [M, N], dlhs, drhs). A
// kernel's IR is a pure function of its spec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/RaggedDot.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::ragged_detail {

using Impl = ProductImpl;

struct Problem {
  bool vjp = false;
  int64_t M = 0, K = 0, N = 0, G = 0;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< accumulation: f32, f64 for f64
};

/// Reads a validated BoundArgs of ragged_dot / ragged_dot_vjp.
Problem problem_of(const BoundArgs &args);

/// Block sizes and product kind shared by both kernels.
struct Blocks {
  bool exact = false;  ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_m = 128, block_n = 128, block_k = 32;
  int num_warps = 8;
  bool async_copy = false;  ///< operand blocks through a cp.async ring (tile)
  int64_t stages = 3;       ///< the ring's slots
  /// With async_copy, sm_90a only, the rows kernels (forward, dlhs): the blocks by TMA
  /// through rings a producer warpgroup refills (tma_ring_loop), products on wgmma from
  /// shared memory; rhs read as a 2-D [G R, C] (or [G C, R]) tensor.
  bool tma = false;
  /// With tma, the rows kernels only: a persistent grid of this many programs walking
  /// the tiles (tma_tile_loop), 0 one program per tile.
  int64_t programs = 0;
  /// With tma, the VJP's drhs kernel's whole steps on wgmma (both operands read from its
  /// cp.async ring by descriptors) instead of mma.sync.
  bool drhs_wgmma = false;
  /// With tma, the rows kernels: a tile whose rows all belong to its group leaves through
  /// shared memory by TMA stores (the consumers go on while it is written out); a group's
  /// last, partial tile by masked thread stores.
  bool tma_store = false;
};

/// The most groups a persistent rows kernel serves: it holds every group's first row
/// and first row tile as scalars for its whole run.
inline constexpr int64_t kPersistentMaxGroups = 16;

/// out [M, C] = lhs [M, R] @ rhs[g] per group, rhs [G, R, C] (or [G, C, R] read
/// transposed: the VJP's dlhs = dout @ rhs^T). Grid: row tiles x column tiles, in grouped order.
struct RowsKernelSpec {
  int64_t M = 0, R = 0, C = 0, G = 0;
  bool trans_rhs = false;
  DType dtype = DType::BF16, compute = DType::F32;
  Blocks blocks;

  KernelKey key() const;
};
dsl::Kernel rows_kernel(const RowsKernelSpec &spec);
/// Programs along the row axis: enough for every group's row tiles plus the zero tail.
int64_t row_programs(int64_t M, int64_t G, int64_t block_m);

/// drhs [G, K, N]: drhs[g] = lhs_g^T @ dout_g, one program per (g, K tile, N tile)
/// summing the group's rows block_k at a time.
struct GroupsKernelSpec {
  int64_t M = 0, K = 0, N = 0, G = 0;
  DType dtype = DType::BF16, compute = DType::F32;
  Blocks blocks;

  KernelKey key() const;
};
dsl::Kernel groups_kernel(const GroupsKernelSpec &spec);

//===----------------------------------------------------------------------===//
// What the implementations share (Common.cpp)
//===----------------------------------------------------------------------===//

/// Whether the tile kernels can stream their blocks with cp.async: 16-bit dtypes and
/// rows of lhs (K) and of rhs and dout (N) of whole 16-byte chunks.
bool async_copy_serves(const Problem &p);

/// The kernels' row offsets are 32-bit: why outputs of 2^31 elements are refused.
std::optional<std::string> why_not_offsets(const Problem &p);

/// The tensor-core kernels' blocks at a config's blocks and operand ring (the ring only
/// where async_copy_serves).
Blocks tensor_core_blocks(const Problem &p, const ProductBlocks &blocks, const ProductRing &ring);
/// What tile and hopper check of those: the block sizes, the ring's keys, K a multiple
/// of block_k for the forward's TMA rings, the registers and the shared memory of the
/// kernels `launched` (the implementation's blocks at that config) runs.
std::optional<std::string> check_tensor_core_blocks(const Problem &p, const ProductBlocks &blocks,
                                                    const ProductRing &ring, const Blocks &launched);

/// Runs the call at `blocks`: tensors in the op's argument order (inputs, then outputs).
///   forward:  rows_kernel (out);
///   VJP:      rows_kernel with rhs read transposed (dlhs = dout @ rhs[g]^T), then
///             groups_kernel (drhs[g] = lhs_g^T @ dout_g).
void run(const Problem &p, const Blocks &blocks, std::span<const TensorView> inputs,
         std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

//===----------------------------------------------------------------------===//
// The implementations, in auto's order (Tile.cpp, Hopper.cpp, Reference.cpp); the VJP's
// two kernels take the forward's config.
//===----------------------------------------------------------------------===//

/// Tensor cores (mma.sync) with the operand blocks through a cp.async ring where K and N
/// are multiples of 8, else masked register loads one step ahead; opt-in "tma" (sm_90a):
/// the rows kernels' blocks by TMA through rings a producer warpgroup refills, products
/// on wgmma from shared memory (the forward needs K a multiple of block_k).
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Tile, ragged_detail::Problem, TileBlocks) };

/// hopper's config: the blocks, the rings' depth and, for the rows kernels (forward,
/// dlhs), an optional persistent grid.
struct HopperConfig : HopperBlocks {
  std::optional<int64_t> programs;  ///< -1: one per SM, 0 (or absent): one per tile, or a count
  std::optional<int64_t> tma_store;  ///< 1: the rows kernels' whole tiles leave by TMA stores (Blocks::tma_store)

  static constexpr auto keys = std::tuple_cat(
      HopperBlocks::keys, std::tuple{ConfigKey{"programs", &HopperConfig::programs, KeyUse::Optional},
                                     ConfigKey{"tma_store", &HopperConfig::tma_store, KeyUse::Optional}});
  bool operator==(const HopperConfig &) const = default;
};

/// sm_90a: tile's kernels with the rows kernels always on TMA rings and wgmma.
struct Hopper { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Hopper, ragged_detail::Problem, HopperConfig) };

/// Exact multiply-adds in the accumulation dtype: every dtype, every GPU.
struct Reference { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Reference, ragged_detail::Problem, ProductBlocks) };

} // namespace tokamax::ragged_detail
