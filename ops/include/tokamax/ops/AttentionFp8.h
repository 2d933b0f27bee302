//===- AttentionFp8.h - dot_product_attention's forward on fp8 q, k, v -*- C++ -*-===//
//
// The forward of dot_product_attention (Attention.h) with q, k and v in fp8 (f8e4m3 or
// f8e5m2, one dtype for the three) and optional descales, one per (batch row, kv head),
// as FlashAttention-3's fp8 forward takes them:
//   q [B..., T, N, H], k [B..., S, K, H], v [B..., S, K, Hv] -> out [B..., T, N, Hv] bf16
//   q_descale, k_descale, v_descale: f32 [B..., K], positive, each optional (absent = 1)
//   logits = scale * (q k^T) * q_descale[b, g] * k_descale[b, g]   (g = n / (N / K))
//   out    = softmax(logits) @ v * v_descale[b, g]
// lse (optional) is f32 [B..., N, T]. From AttentionOptions: scale (default 1 /
// sqrt(H)), is_causal, local_window, logits_soft_cap, q_seq_lengths / kv_seq_lengths,
// GQA, implementation and config, with attention's meanings; bias, mask, sinks, packed
// sequences and the BNTH layout are refused. Forward only: there is no VJP.
//
// Implementations, in auto's order:
//   "hopper"     sm_90a: attention's hopper forward on fp8 wgmma (k32 steps): S = Q K^T
//                with both operands in shared memory, P cast to fp8 in registers (moved
//                into wgmma's A fragments by warp shuffles), V read transposed from a
//                copy [B K, Hv, S] the plan writes first (wgmma reads fp8 B operands
//                K-major only). Head dims 32, 64, 128 or 256; key steps of 32 or more.
//                P is rounded to fp8 before P V (as FlashAttention-3 does): out carries
//                that rounding, about 2^-4 of each weight, averaged over the keys.
//   "reference"  materialised f32 logits of the fp8 values (sm_89 or newer: the casts;
//                every GPU past that, and the interpreter), P V in f32.
//
// The op (autotuning, precompilation, tools): "attention_fp8",
//   q, k, v, q_descale?, k_descale?, v_descale?, q_seq_lengths?, kv_seq_lengths? | out, lse?
// with attention's attributes "scale", "is_causal", "window_left", "window_right",
// "logits_soft_cap".
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Attention.h>

namespace tokamax {

/// The descales of an fp8 call: f32 [B..., K] each, positive (the kernels fold q's and k's
/// into the softmax's exponent scale); null = 1.
struct TOKAMAX_API AttentionFp8Descales {
  const TensorView *q = nullptr, *k = nullptr, *v = nullptr;
};

/// out (bf16) and, when given, lse (f32) from fp8 q, k, v, launched on `stream`.
TOKAMAX_API void dot_product_attention_fp8(const TensorView &q, const TensorView &k, const TensorView &v,
                                           const TensorView &out, Stream &stream, const AttentionOptions &options = {},
                                           const AttentionFp8Descales &descales = {},
                                           const TensorView *lse = nullptr);
/// The same on host tensors, on the CPU interpreter (implementation choice as on sm_90a).
TOKAMAX_API void dot_product_attention_fp8_host(const TensorView &q, const TensorView &k, const TensorView &v,
                                                const TensorView &out, const AttentionOptions &options = {},
                                                const AttentionFp8Descales &descales = {},
                                                const TensorView *lse = nullptr);

/// One call's specs, in the op's argument order.
struct TOKAMAX_API AttentionFp8Specs {
  ArgSpec q, k, v;
  std::optional<ArgSpec> q_descale, k_descale, v_descale, q_seq_lengths, kv_seq_lengths;
  ArgSpec out;
  std::optional<ArgSpec> lse;
};

TOKAMAX_API const Op &attention_fp8_op();
/// Binds a call from specs (options' tensors and implementation are ignored); throws Error
/// naming the bad argument, or where options hold what fp8 calls refuse (BNTH).
TOKAMAX_API BoundArgs bind_attention_fp8(const AttentionFp8Specs &specs, const AttentionOptions &options = {});

} // namespace tokamax
