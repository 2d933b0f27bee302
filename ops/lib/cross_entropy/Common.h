//===- Common.h - linear_softmax_cross_entropy_loss problems, kernels, implementations -*- C++ -*-===//
//
// Internal to ops/lib/cross_entropy. A bound call becomes a Problem; kernels see x [B, D], w [D, V],
// labels [B], the row losses / lse / row scales [B] in the accumulation dtype and loss
// ([B] or [1]). A kernel's IR is a pure function of its XentKernelSpec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/CrossEntropy.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::xent_detail {

using Impl = ProductImpl;

struct Problem {
  bool vjp = false;
  int64_t B = 0, D = 0, V = 0;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< accumulation, loss and lse: f32, f64 for f64
  LossReduction reduction = LossReduction::Mean;
  int64_t ignore_index = -100;
};

/// Reads a validated BoundArgs of either op.
Problem problem_of(const BoundArgs &args);

enum class KernelKind : uint8_t {
  Rows,      ///< forward: each row's loss and lse, or a split of V's partials
  Combine,   ///< forward with split_v > 1: the splits' partials merged into loss and lse
  Reduce,    ///< forward: sum / mean of the row losses (one program, fixed order)
  RowScale,  ///< VJP: each row's upstream gradient g_i (0 ignored, NaN out of range)
  DLogits,   ///< VJP: dlogits of one chunk of V columns, [B, chunk_v], from recomputed logits
  Dx,        ///< VJP: dx (f32 accumulator, then x's dtype) += dlogits chunk @ w chunk^T
  Dw,        ///< VJP: dw's chunk columns = x^T @ dlogits chunk
  DxRound,   ///< hopper VJP: the f32 dx accumulator rounded into dx
};

struct XentKernelSpec {
  Problem p;
  KernelKind kind = KernelKind::Rows;
  bool exact = false;  ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_b = 64, block_v = 128, block_k = 32, block_d = 64;
  int64_t chunk_v = 0;  ///< the VJP's chunk of V columns (a multiple of block_v)
  int64_t split_v = 1;  ///< the forward's programs per row block, each over a range of V
  int num_warps = 4;
  /// The rows and dlogits kernels on TMA rings (config "tma", sm_90a): x's and w's
  /// blocks copied by a producer warpgroup into rings of `stages` slots, the logit tile
  /// on wgmma; the rows kernel walks its V tiles and their D steps as one flat loop.
  bool tma = false;
  int stages = 3;
  /// The tma dlogits kernel's persistent programs walking the chunk's tiles (0: one per
  /// tile), so the producer loads a tile's blocks while the consumers write the last.
  int64_t programs = 0;

  KernelKey key() const;
};

/// The VJP's chunk of V columns: whole block_v tiles, as many as keep the [B, chunk]
/// dlogits buffer near 128 MiB, at most V rounded up.
int64_t chunk_columns(const Problem &p, int64_t block_v, size_t element_bytes);
/// The forward's splits of V: `wanted` clamped to [1, 32] and to the V tiles, then
/// lowered so that no split is empty.
int64_t split_count(const Problem &p, int64_t block_v, int64_t wanted);
/// The splits of 128-wide V tiles that give `row_blocks` row blocks about four programs
/// per SM of an H100 / H200 (132 SMs).
int64_t four_programs_per_sm(const Problem &p, int64_t row_blocks);

dsl::Kernel xent_kernel(const XentKernelSpec &spec);

//===----------------------------------------------------------------------===//
// Configs (the forward and the VJP take the same; each checks the other's keys away)
//===----------------------------------------------------------------------===//

/// Every implementation's keys: the logit tile [block_b, block_v], its D step block_k,
/// the warps, and one key of each direction.
struct XentBlocks {
  int64_t block_b = 0, block_v = 0, block_k = 0, num_warps = 0;
  /// The forward's programs per row block, each over a range of V (1-32), whose partial
  /// log-sum-exps the combine kernel merges in a fixed order.
  std::optional<int64_t> split_v;
  /// The VJP's V columns per chunk (a multiple of block_v); else as many as keep the
  /// dlogits chunk near 128 MiB.
  std::optional<int64_t> chunk_v;

  static constexpr auto keys = std::tuple{
      ConfigKey{"block_b", &XentBlocks::block_b}, ConfigKey{"block_v", &XentBlocks::block_v},
      ConfigKey{"block_k", &XentBlocks::block_k}, ConfigKey{"num_warps", &XentBlocks::num_warps},
      ConfigKey{"split_v", &XentBlocks::split_v, KeyUse::Optional},
      ConfigKey{"chunk_v", &XentBlocks::chunk_v, KeyUse::Optional}};
  bool operator==(const XentBlocks &) const = default;
};

/// reference's: XentBlocks and the VJP's block of D for its own dx and dw kernels
/// (required there).
struct ReferenceConfig : XentBlocks {
  std::optional<int64_t> block_d;

  static constexpr auto keys = std::tuple_cat(
      XentBlocks::keys,
      std::tuple{ConfigKey{"block_d", &ReferenceConfig::block_d, KeyUse::Optional}});
  bool operator==(const ReferenceConfig &) const = default;
};

/// tile's: reference's and, opt-in until measured, "tma" (sm_90a): the rows and dlogits
/// kernels' x and w blocks by TMA through rings of `stages` slots (2-4, 3 where absent)
/// a producer warpgroup refills, the logit tiles on wgmma.
struct TileConfig : ReferenceConfig {
  bool tma = false;
  std::optional<int64_t> stages;

  static constexpr auto keys = std::tuple_cat(
      ReferenceConfig::keys,
      std::tuple{ConfigKey{"tma", &TileConfig::tma, KeyUse::Optional},
                 ConfigKey{"stages", &TileConfig::stages, KeyUse::Optional}});
  bool operator==(const TileConfig &) const = default;
};

/// hopper's: always on TMA rings (`stages` deep, 3 where absent); its VJP's dx and dw
/// run on the hopper matmul, so no block_d.
struct HopperConfig : XentBlocks {
  std::optional<int64_t> stages;

  static constexpr auto keys = std::tuple_cat(
      XentBlocks::keys, std::tuple{ConfigKey{"stages", &HopperConfig::stages, KeyUse::Optional}});
  static std::optional<std::string> refused_key(const std::string &key);
  bool operator==(const HopperConfig &) const = default;
};

//===----------------------------------------------------------------------===//
// What the implementations share (Common.cpp)
//===----------------------------------------------------------------------===//

/// What a config asks of the kernels, whichever implementation's.
struct Blocks {
  bool exact = false;  ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_b = 0, block_v = 0, block_k = 0, num_warps = 0;
  int64_t block_d = 0;  ///< the VJP's dx / dw kernels' block of D (0: none, hopper)
  std::optional<int64_t> split_v, chunk_v;
  bool tma = false;     ///< the rows and dlogits kernels on TMA rings
  int64_t stages = 3;   ///< their slots
};
/// Each kernel's spec at `blocks`.
XentKernelSpec spec_of(const Problem &p, const Blocks &blocks, KernelKind kind);
/// Launches the kernel of `spec` on `args`.
void launch(ops_detail::KernelExecutor &executor, const XentKernelSpec &spec,
            const std::vector<ops_detail::KernelExecutor::Arg> &args);

/// What every implementation checks of its blocks: `block_d` where the VJP's dx and dw
/// run on the op's own kernels (reference, tile), no key of the other direction,
/// split_v and chunk_v, the block sizes (from 16 on tensor cores), the warps and exact
/// products' partial products (reference).
std::optional<std::string> check_blocks(const Problem &p, Impl impl, const XentBlocks &c,
                                        std::optional<int64_t> block_d);
/// The VJP's block_d (reference, tile; an Error where it is missing), 0 for the forward.
int64_t own_block_d(const Problem &p, std::optional<int64_t> block_d);
/// What tile and hopper check of the TMA rings (`tma`: tile's key, always on for
/// hopper) and of the accumulators' registers.
std::optional<std::string> check_tensor_cores(const Problem &p, const XentBlocks &c, int64_t block_d, bool tma,
                                              std::optional<int64_t> stages);

/// The forward: the rows kernel (each row's loss and lse; the loss itself for "none",
/// else the call's scratch; with split_v > 1 each split's partials, merged by the
/// combine kernel), then for "sum" / "mean" the reduce kernel.
void run_forward(const Problem &p, const Blocks &blocks, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);
/// The VJP's empty sums (B or D zero): zeroes what is not empty; whether it did.
bool zero_empty_vjp(const Problem &p, std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);
/// The call (reference, tile): the forward, or the VJP: the row-scale kernel (scale [B]
/// in the call's scratch), a zero fill of the f32 dx accumulator [B, D], then per chunk
/// of V columns (c0 passed at launch, one kernel for every chunk): dlogits [B, chunk]
/// recomputed from x, w and lse, dx_acc += dlogits w[:, chunk]^T (rounded into dx each
/// time) and dw[:, chunk] = x^T dlogits. The logits are recomputed once; the scratch is
/// B x chunk (about 128 MiB at most) plus B x D f32.
void run(const Problem &p, const Blocks &blocks, std::span<const TensorView> inputs,
         std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

//===----------------------------------------------------------------------===//
// The implementations, in auto's order (Hopper.cpp, Tile.cpp, Reference.cpp)
//===----------------------------------------------------------------------===//

/// sm_90a: the rows and dlogits kernels on TMA rings and wgmma, the VJP's dx and dw
/// products on the hopper matmul (3.1x tile's forward and 3.4x its forward + backward
/// at X1 on an H100).
struct Hopper { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Hopper, xent_detail::Problem, HopperConfig) };

/// Tensor cores (mma.sync), opt-in TMA rings on sm_90a.
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Tile, xent_detail::Problem, TileConfig) };

/// Exact multiply-adds in the accumulation dtype: every dtype, every GPU.
struct Reference { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Reference, xent_detail::Problem, ReferenceConfig) };

} // namespace tokamax::xent_detail
