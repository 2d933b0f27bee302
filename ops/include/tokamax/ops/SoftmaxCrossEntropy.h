//===- SoftmaxCrossEntropy.h - softmax_cross_entropy, forward and VJP -*- C++ -*-===//
//
//   logits [B, V], labels int32 [B] -> loss [B], lse [B]
//   lse_i  = log(sum_j exp(logits_ij))
//   loss_i = lse_i - logits_i[labels_i]
//
// The cross-entropy of given logits (no projection; for x @ w see CrossEntropy.h), one
// loss per row (no reduction). logits are bf16, f16, f32 or f64; loss and lse (the VJP's
// residual) are f32, f64 for f64 logits. A label outside [0, V) makes its row's loss
// NaN (a device kernel cannot throw), and its dlogits row too.
//
// The VJP (dloss [B], logits, labels, lse -> dlogits [B, V] in logits' dtype):
//   dlogits_ij = dloss_i * (exp(logits_ij - lse_i) - [j == labels_i])
// recomputes the softmax from the forward's lse instead of storing it.
//
// Implementations, in the order auto tries them:
//   "tile":      one program per block of rows walks V in column blocks with an online
//                max and sum of exponentials (the VJP: one program per [rows, columns]
//                tile); bf16, f16, f32; sm_80+.
//   "reference": one row per program, two passes over V (max, then the sum against
//                it); every dtype, f64 included; every GPU.
// No rows (B = 0) is a no-op; V = 0 is refused.
//
// This op is the worked example of docs/adding-an-op.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

struct TOKAMAX_API SoftmaxCrossEntropyOptions {
  /// "tile" or "reference"; std::nullopt: the first that serves the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

/// loss and lse (the VJP's residual) of logits against labels.
TOKAMAX_API void softmax_cross_entropy(const TensorView &logits, const TensorView &labels, const TensorView &loss,
                                       const TensorView &lse, Stream &stream,
                                       const SoftmaxCrossEntropyOptions &options = {});
/// dlogits from dloss and the forward's logits, labels and lse.
TOKAMAX_API void softmax_cross_entropy_vjp(const TensorView &dloss, const TensorView &logits,
                                           const TensorView &labels, const TensorView &lse,
                                           const TensorView &dlogits, Stream &stream,
                                           const SoftmaxCrossEntropyOptions &options = {});

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU). ----

TOKAMAX_API void softmax_cross_entropy_host(const TensorView &logits, const TensorView &labels,
                                            const TensorView &loss, const TensorView &lse,
                                            const SoftmaxCrossEntropyOptions &options = {});
TOKAMAX_API void softmax_cross_entropy_vjp_host(const TensorView &dloss, const TensorView &logits,
                                                const TensorView &labels, const TensorView &lse,
                                                const TensorView &dlogits,
                                                const SoftmaxCrossEntropyOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs); no attributes:
//   softmax_cross_entropy:     logits, labels | loss, lse
//   softmax_cross_entropy_vjp: dloss, logits, labels, lse | dlogits
// Configs: tile: block_rows (rows per program), block_v (columns per step of the walk
// over V; the VJP: columns per program), num_warps; reference: block_v.

TOKAMAX_API const Op &softmax_cross_entropy_op();
TOKAMAX_API const Op &softmax_cross_entropy_vjp_op();

/// Binds a call from specs; throws Error naming the bad argument and what it expected.
TOKAMAX_API BoundArgs bind_softmax_cross_entropy(const ArgSpec &logits, const ArgSpec &labels, const ArgSpec &loss,
                                                 const ArgSpec &lse);
TOKAMAX_API BoundArgs bind_softmax_cross_entropy_vjp(const ArgSpec &dloss, const ArgSpec &logits,
                                                     const ArgSpec &labels, const ArgSpec &lse,
                                                     const ArgSpec &dlogits);

/// loss's, lse's and dloss's spec for logits [B, V]: [B] in f32 (f64 for f64 logits).
TOKAMAX_API ArgSpec softmax_cross_entropy_row_spec(const ArgSpec &logits);

} // namespace tokamax
