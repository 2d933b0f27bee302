//===- Attention.h - dot_product_attention, forward and VJP --------*- C++ -*-===//
//
// Layout (batch, seq, heads, head_dim), any number (>= 0) of batch dims B... in front:
//   q [B..., T, N, H], k [B..., S, K, H], v [B..., S, K, Hv] -> out [B..., T, N, Hv]
// or, with AttentionOptions::layout = BNTH (PyTorch SDPA's), heads before seq, read and
// written in place by every implementation (the gradients take their primals' layout):
//   q [B..., N, T, H], k [B..., K, S, H], v [B..., K, S, Hv] -> out [B..., N, T, Hv]
// GQA / MQA: N % K == 0 and query head n reads kv head n / (N / K). H, Hv <= 256.
// No queries (T = 0 or an empty batch dim) is a no-op (the VJP's dk, dv, dbias are zero);
// S, N, K, H and Hv must be at least 1; batch rows and heads at most 65535.
//
//   logits = scale * q k^T + bias           (scale defaults to 1 / sqrt(H))
//   logits = cap * tanh(logits / cap)       (logits_soft_cap)
//   logits = masked where not attended      (mask, causal, local window, seq lengths)
//   out    = softmax(logits) @ v            (f32 statistics; f64 for f64)
//
// Masks combine by AND: `mask` (bool, true = attend), is_causal (key j <= query i,
// top-left aligned), local_window (i - left <= j <= i + right, a side absent = unbounded),
// q_seq_lengths / kv_seq_lengths (int32, one per batch row: rows and keys at or past the
// length are padding). A query row that attends no key gives out = 0, zero gradients,
// and lse = +inf (so exp(logits - lse) = 0 everywhere in the VJP). Padding keys' v rows
// (and a packed sequence's neighbours') must be finite: the kernels give them weight
// 0, and 0 x NaN is NaN in out (the interpreter and every implementation alike).
//
// Sinks (optional, f32 [N]: one learnable logit per query head, as in gpt-oss) join each
// row's softmax denominator as one more logit whose value row is zero:
//   Z = sum_j exp(logits_j) + exp(sinks[n]),  out = sum_j exp(logits_j) / Z v_j,
//   lse = log Z (the sink included).
// A row that attends no key then has out = 0 and lse = sinks[n] (finite); padding rows
// (at or past q_seq_length) keep out = 0 and lse = +inf. The VJP's dq, dk, dv and dbias
// follow from that lse unchanged; dsinks[n] = -sum over batch rows and queries of
// exp(sinks[n] - lse) * delta (delta = rowsum(dout * out)), summed in a fixed order.
//
// Packed variable-length batches (AttentionOptions::cu_seqlens_q / cu_seqlens_kv, both
// or neither; int32 [B + 1] with 0 = cu[0] <= cu[1] <= ... <= cu[B] = total): B sequences
// packed without padding, sequence b's queries the rows [cu_q[b], cu_q[b + 1]) and its
// keys the rows [cu_kv[b], cu_kv[b + 1]):
//   q [total_q, N, H], k [total_kv, K, H], v [total_kv, K, Hv] -> out [total_q, N, Hv],
//   lse [N, total_q] (f32; f64 for f64).
// max_seqlen_q / max_seqlen_kv (required with them) bound every sequence's lengths: they
// size the grid, so a longer sequence is the caller's error (rows past the bound are
// neither computed nor written; the interpreter checks it). is_causal and local_window
// align each sequence's last query with its last key, as FlashAttention does: key j is
// visible to query i when j <= i + (kv_len - q_len) (and within the window of that
// diagonal). A sequence attends only its own keys; a query row that sees no key gives
// out = 0 and lse = +inf as above (with sinks: lse = sinks[n]). Not with bias, mask,
// q_seq_lengths / kv_seq_lengths or the BNTH layout. Served by "hopper" (not its opt-in
// fused dq), "tile" and "chunked" ("reference" refuses); the ops are "attention_varlen" and
// "attention_varlen_vjp" (below).
//
// bias and mask broadcast to [B..., N, T, S]: each of (all batch dims together), N, T, S
// may be 1. The residual lse (log-sum-exp of each row's logits) is f32 (f64 for f64
// inputs) [B..., N, T].
//
// Implementations, in the order auto tries them:
//   "hopper"     sm_90a's TMA and wgmma: Q by TMA, K/V blocks through TMA rings a
//                producer warpgroup refills, S = Q K^T with both operands in shared
//                memory and P V with P from registers, every option (each block
//                masked); bf16, f16; head dims 16-256 (powers of two), S a multiple of
//                16. The VJP's "hopper": dk/dv programs hold a K / V block and stream
//                the Q / dO blocks of the group's heads, dq programs hold Q / dO and
//                stream K / V (deterministic, no atomics); head dims up to 128. With
//                "fused_dq": 1 (opt-in; H 64) the dk/dv programs add dS K into an f32
//                dq sum by TMA instead, each query block's adds in key-block order
//                unless deterministic = false.
//   "tile"       FlashAttention-2 class on mma.sync (sm_80+): one program per (query
//                block, head, batch row), K/V blocks streamed with an online softmax
//                (exp2, scale folded), whole KV blocks skipped where causal / window /
//                lengths mask them, masks computed only on edge blocks. bf16, f16.
//   "chunked"    an online softmax over KV chunks (no T x S buffer, O(T) extra memory),
//                any GPU, every dtype (bf16/f16 products on tensor cores, f32/f64 exact).
//   "reference"  materialised logits [B, N, T, S] in f32 (f64); every dtype and option;
//                refuses (NotSupported) a call whose logits would not fit in memory.
// Sinks are served by every implementation: the forward folds exp(sink) into its
// softmax's final sum (one epilogue every flash kernel shares), the VJP's delta kernel
// also writes per-program partial sums of dsinks, which a small kernel adds up.
// The VJP (dq, dk, dv, dbias) follows FlashAttention-2: delta = rowsum(dout * out), dk/dv
// per key block walking the query blocks (GQA heads of a group summed in the program),
// dq per query block in a separate pass; dbias from dS reduced over its broadcast dims.
// Every implementation is deterministic: reruns are bitwise identical. The hopper VJP's
// opt-in config "fused_dq": 1 adds each dk/dv step's dS K into an f32 dq sum instead (no
// dq pass); with options.deterministic (the default) each query block's adds land in a
// fixed order, key block after key block (a semaphore per batch row, query head and
// query block in global memory); deterministic = false drops that ordering, and its dq
// adds land in no fixed order. Every other VJP is deterministic either way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tokamax {

class Stream;

/// Key j is visible to query i when i - left <= j <= i + right; an absent side is unbounded.
struct TOKAMAX_API LocalWindow {
  std::optional<int64_t> left, right;
};

/// Where the heads dim sits in q, k, v, out and their gradients (see the header comment).
enum class AttentionLayout : uint8_t {
  BTNH,  ///< [B..., seq, heads, head_dim]: the default
  BNTH,  ///< [B..., heads, seq, head_dim]: PyTorch SDPA's
};

struct TOKAMAX_API AttentionOptions {
  std::optional<double> scale;  ///< default 1 / sqrt(H)
  bool is_causal = false;
  std::optional<LocalWindow> local_window;
  std::optional<double> logits_soft_cap;  ///< > 0
  /// Optional tensors (see the header comment); null = absent.
  const TensorView *bias = nullptr;            ///< q's dtype or f32, broadcastable to [B..., N, T, S]
  const TensorView *mask = nullptr;            ///< bool, broadcastable to [B..., N, T, S]
  const TensorView *q_seq_lengths = nullptr;   ///< int32 [B...]
  const TensorView *kv_seq_lengths = nullptr;  ///< int32 [B...]
  const TensorView *sinks = nullptr;           ///< f32 [N]: one extra logit per query head
  /// Packed variable-length sequences (see the header comment): int32 [B + 1] each,
  /// both or neither, with max_seqlen_q / max_seqlen_kv (>= every sequence's length).
  const TensorView *cu_seqlens_q = nullptr;
  const TensorView *cu_seqlens_kv = nullptr;
  std::optional<int64_t> max_seqlen_q, max_seqlen_kv;
  /// The VJP: reruns give the same bits (see the header comment). false lets the hopper
  /// VJP's opt-in fused dq add in any order; the forward and every other VJP ignore it.
  bool deterministic = true;
  AttentionLayout layout = AttentionLayout::BTNH;
  /// "tile", "hopper" (sm_90a), "chunked" or "reference"; std::nullopt = auto.
  std::optional<std::string> implementation;
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). With options.cu_seqlens_q /
// cu_seqlens_kv a call is a packed one (attention_varlen / attention_varlen_vjp). ----

/// out (and, when lse is given, the residual the VJP takes).
TOKAMAX_API void dot_product_attention(const TensorView &q, const TensorView &k, const TensorView &v,
                                       const TensorView &out, Stream &stream, const AttentionOptions &options = {},
                                       const TensorView *lse = nullptr);

/// dq, dk, dv (and dbias when given: options.bias's shape, summed over its broadcast
/// dims; dsinks when given: f32 [N], needs options.sinks) from dout and the forward's
/// out and lse. `options` must be the forward's.
TOKAMAX_API void dot_product_attention_vjp(const TensorView &dout, const TensorView &q, const TensorView &k,
                                           const TensorView &v, const TensorView &out, const TensorView &lse,
                                           const TensorView &dq, const TensorView &dk, const TensorView &dv,
                                           Stream &stream, const AttentionOptions &options = {},
                                           const TensorView *dbias = nullptr, const TensorView *dsinks = nullptr);

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU). ----

TOKAMAX_API void dot_product_attention_host(const TensorView &q, const TensorView &k, const TensorView &v,
                                            const TensorView &out, const AttentionOptions &options = {},
                                            const TensorView *lse = nullptr);
TOKAMAX_API void dot_product_attention_vjp_host(const TensorView &dout, const TensorView &q, const TensorView &k,
                                                const TensorView &v, const TensorView &out, const TensorView &lse,
                                                const TensorView &dq, const TensorView &dk, const TensorView &dv,
                                                const AttentionOptions &options = {},
                                                const TensorView *dbias = nullptr,
                                                const TensorView *dsinks = nullptr);

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs; absent optional arguments are std::nullopt):
//   attention:     q, k, v, bias?, mask?, q_seq_lengths?, kv_seq_lengths?, sinks? | out, lse?
//   attention_vjp: dout, q, k, v, out, lse, bias?, mask?, q_seq_lengths?, kv_seq_lengths?,
//                  sinks? | dq, dk, dv, dbias?, dsinks?
// (sinks and dsinks came last: a call bound before they existed, read back from JSON by
// BoundArgs::from_json (autotuning results, Functions), gets them as absent.)
// Attributes (canonical printed values): "scale", "is_causal" ("0"/"1"), "window_left",
// "window_right" (present only when bounded), "logits_soft_cap" (present only when set);
// attention_vjp also "deterministic" (present only when false: "0"); both "layout" (present
// only for BNTH: "bnth").

//   attention_varlen:     q, k, v, cu_seqlens_q, cu_seqlens_kv, sinks? | out, lse?
//   attention_varlen_vjp: dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_kv, sinks? |
//                         dq, dk, dv, dsinks?
// with attention's attributes (no "layout") and "max_seqlen_q", "max_seqlen_kv".

/// The specs of one call (bias / mask / lengths / lse / dbias / sinks / dsinks optional).
/// sinks and dsinks are the last fields (not in argument order), so that aggregate
/// initializers written before they existed still mean what they meant.
struct TOKAMAX_API AttentionSpecs {
  ArgSpec q, k, v;
  std::optional<ArgSpec> bias, mask, q_seq_lengths, kv_seq_lengths;
  ArgSpec out;
  std::optional<ArgSpec> lse;
  std::optional<ArgSpec> sinks;
};
struct TOKAMAX_API AttentionVjpSpecs {
  ArgSpec dout, q, k, v, out, lse;
  std::optional<ArgSpec> bias, mask, q_seq_lengths, kv_seq_lengths;
  ArgSpec dq, dk, dv;
  std::optional<ArgSpec> dbias;
  std::optional<ArgSpec> sinks, dsinks;
};

/// A packed variable-length call's specs (q, k, v, out as [total, heads, dim]).
struct TOKAMAX_API AttentionVarlenSpecs {
  ArgSpec q, k, v, cu_seqlens_q, cu_seqlens_kv;
  std::optional<ArgSpec> sinks;
  ArgSpec out;
  std::optional<ArgSpec> lse;
};
struct TOKAMAX_API AttentionVarlenVjpSpecs {
  ArgSpec dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_kv;
  std::optional<ArgSpec> sinks;
  ArgSpec dq, dk, dv;
  std::optional<ArgSpec> dsinks;
};

TOKAMAX_API const Op &attention_op();
TOKAMAX_API const Op &attention_vjp_op();
TOKAMAX_API const Op &attention_varlen_op();
TOKAMAX_API const Op &attention_varlen_vjp_op();

/// Binds a call from specs (options' tensors and implementation are ignored: the specs
/// say which optional tensors there are); throws Error naming the bad argument.
TOKAMAX_API BoundArgs bind_attention(const AttentionSpecs &specs, const AttentionOptions &options = {});
TOKAMAX_API BoundArgs bind_attention_vjp(const AttentionVjpSpecs &specs, const AttentionOptions &options = {});
/// The same for packed sequences (options' max_seqlen_q / max_seqlen_kv are required;
/// its tensors are ignored: the specs say which there are).
TOKAMAX_API BoundArgs bind_attention_varlen(const AttentionVarlenSpecs &specs, const AttentionOptions &options);
TOKAMAX_API BoundArgs bind_attention_varlen_vjp(const AttentionVarlenVjpSpecs &specs,
                                                const AttentionOptions &options);

/// The residual's spec of a packed call, q [total_q, N, H]: f32 (f64) [N, total_q].
TOKAMAX_API ArgSpec attention_varlen_lse_spec(const ArgSpec &q);

/// The residual's spec for q [B..., T, N, H] (BNTH: [B..., N, T, H]): f32 (f64 for f64
/// q) [B..., N, T].
TOKAMAX_API ArgSpec attention_lse_spec(const ArgSpec &q, AttentionLayout layout = AttentionLayout::BTNH);

/// Largest head dim (H and Hv) any implementation serves.
inline constexpr int64_t kAttentionMaxHeadDim = 256;

} // namespace tokamax
