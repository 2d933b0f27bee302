//===- Common.h - linear_softmax_cross_entropy_loss problems, kernels, plans -*- C++ -*-===//
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

/// hopper (sm_90a): the tile kernels on TMA rings and wgmma (the "tma" configs), the
/// VJP's dx and dw products on the hopper matmul kernel.
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
  WPanel,    ///< hopper VJP: w's chunk columns copied to a [D, chunk_v] panel (0 past V)
  DwPanel,   ///< hopper VJP: a [D, chunk_v] panel copied to dw's chunk columns (those < V)
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

dsl::Kernel xent_kernel(const XentKernelSpec &spec);

//===----------------------------------------------------------------------===//
// Plans and configs (Plans.cpp)
//===----------------------------------------------------------------------===//

/// Runs the call: tensors in the op's argument order (inputs, then outputs).
void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

std::optional<std::string> why_not(const Problem &p, Impl impl);
Config heuristic(const Problem &p, Impl impl);
std::vector<Config> search_space(const Problem &p, Impl impl);
std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &config);

} // namespace tokamax::xent_detail
