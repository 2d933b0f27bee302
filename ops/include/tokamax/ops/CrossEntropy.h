//===- CrossEntropy.h - linear_softmax_cross_entropy_loss, forward and VJP -*- C++ -*-===//
//
//   x [B, D], w [D, V], labels int32 [B] -> loss ([B] for "none", [1] for "sum" / "mean"),
//   lse [B]
//   logits = x w,  loss_i = logsumexp(logits_i) - logits_i[labels_i]
//
// The output layer's loss without the [B, V] logits: each program owns a block of rows
// and walks V (or one of split_v ranges of V, merged afterwards in a fixed order) in
// tiles with an online log-sum-exp, picking the label's logit when its tile passes. x and w share one dtype (bf16, f16, f32 or f64); products accumulate in
// f32 (f64 for f64) and loss / lse are in that accumulation dtype.
//
// Labels: a row whose label equals ignore_index contributes 0 (and its gradient is 0)
// and is not counted by "mean" (a mean over no rows is NaN, 0 / 0). Any other label
// outside [0, V) makes its row's loss NaN (a device kernel cannot throw), and so the
// gradients it reaches (its dx row, every dw entry; for "sum" / "mean" the whole loss).
//
// The reductions are deterministic (no float atomics; reruns are bitwise identical):
// "sum" / "mean" add the row losses in a fixed order in one small program.
//
// The VJP (dloss of loss's shape, x, w, labels, lse -> dx, dw) recomputes the logits
// once from x, w and the forward's lse to form dlogits = (softmax - onehot) * g_i with
// g_i = dloss_i ("none"), dloss ("sum") or dloss / count ("mean"), one chunk of V
// columns at a time (a [B, chunk] buffer of about 128 MiB at most, never [B, V]); each
// chunk's dx = dlogits w^T adds into an f32 [B, D] accumulator and its dw columns =
// x^T dlogits are written once. Deterministic as the forward.
//
// Implementations, in the order auto tries them:
//   "tile":      logit tiles on tensor cores (mma.sync; bf16 / f16 in, f32 accumulation);
//                any B, D, V; sm_80+.
//   "reference": the same kernels with exact multiply-add products in f32 / f64 on small
//                blocks; every dtype, f64 included.
// Empty calls: B = 0 gives no rows (a reduced loss of 0; the VJP zero-fills dw); D = 0
// gives logits 0; V = 0 is refused.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

enum class LossReduction : uint8_t { None, Sum, Mean };

/// "none", "sum" or "mean".
TOKAMAX_API const char *loss_reduction_name(LossReduction reduction);
/// Parses a name; throws Error naming the argument `reduction` otherwise.
TOKAMAX_API LossReduction parse_loss_reduction(const std::string &name);

struct TOKAMAX_API CrossEntropyOptions {
  LossReduction reduction = LossReduction::Mean;
  int64_t ignore_index = -100;
  /// "tile" or "reference"; std::nullopt: the first that serves the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

/// loss and lse (the VJP's residual, [B] in the accumulation dtype).
TOKAMAX_API void linear_softmax_cross_entropy_loss(const TensorView &x, const TensorView &w,
                                                   const TensorView &labels, const TensorView &loss,
                                                   const TensorView &lse, Stream &stream,
                                                   const CrossEntropyOptions &options = {});
/// dx and dw from dloss and the forward's inputs and lse (options must be the forward's).
TOKAMAX_API void linear_softmax_cross_entropy_loss_vjp(const TensorView &dloss, const TensorView &x,
                                                       const TensorView &w, const TensorView &labels,
                                                       const TensorView &lse, const TensorView &dx,
                                                       const TensorView &dw, Stream &stream,
                                                       const CrossEntropyOptions &options = {});

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU). ----

TOKAMAX_API void linear_softmax_cross_entropy_loss_host(const TensorView &x, const TensorView &w,
                                                        const TensorView &labels, const TensorView &loss,
                                                        const TensorView &lse,
                                                        const CrossEntropyOptions &options = {});
TOKAMAX_API void linear_softmax_cross_entropy_loss_vjp_host(const TensorView &dloss, const TensorView &x,
                                                            const TensorView &w, const TensorView &labels,
                                                            const TensorView &lse, const TensorView &dx,
                                                            const TensorView &dw,
                                                            const CrossEntropyOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs):
//   linear_softmax_cross_entropy_loss:     x, w, labels | loss, lse
//   linear_softmax_cross_entropy_loss_vjp: dloss, x, w, labels, lse | dx, dw
// Attributes "reduction" (its name) and "ignore_index" (decimal).
// Configs: block_b (rows per program), block_v (the logit tile's columns), block_k (D
// slice of the logit product), num_warps; the VJP adds block_d (dx's and dw's D block)
// and, optional, chunk_v (V columns per chunk, a multiple of block_v); the forward,
// optional, split_v (programs per row block over ranges of V, 1 to 32).

TOKAMAX_API const Op &linear_softmax_cross_entropy_loss_op();
TOKAMAX_API const Op &linear_softmax_cross_entropy_loss_vjp_op();

/// Binds a call from specs; throws Error naming the bad argument.
TOKAMAX_API BoundArgs bind_linear_softmax_cross_entropy_loss(const ArgSpec &x, const ArgSpec &w,
                                                             const ArgSpec &labels, const ArgSpec &loss,
                                                             const ArgSpec &lse, LossReduction reduction,
                                                             int64_t ignore_index);
TOKAMAX_API BoundArgs bind_linear_softmax_cross_entropy_loss_vjp(const ArgSpec &dloss, const ArgSpec &x,
                                                                 const ArgSpec &w, const ArgSpec &labels,
                                                                 const ArgSpec &lse, const ArgSpec &dx,
                                                                 const ArgSpec &dw, LossReduction reduction,
                                                                 int64_t ignore_index);

/// loss's spec ([B] or [1]) and lse's ([B]) for x [B, D] and w [D, V]: the accumulation
/// dtype (f32, f64 for f64).
TOKAMAX_API ArgSpec cross_entropy_loss_spec(const ArgSpec &x, const ArgSpec &w, LossReduction reduction);
TOKAMAX_API ArgSpec cross_entropy_lse_spec(const ArgSpec &x, const ArgSpec &w);

} // namespace tokamax
