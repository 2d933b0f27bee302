//===- PagedAttention.h - Decode attention over a paged KV cache -*- C++ -*-===//
//
// The KV cache lives in pages: k_pages [num_pages, page_size, K, H], v_pages
// [num_pages, page_size, K, Hv]. Sequence b's key j sits in row j % page_size of page
// page_table[b, j / page_size] (page_table int32 [B, max_pages]); seq_lengths int32 [B]
// counts its keys, the new tokens included.
//
// paged_attention (forward only):
//   q [B, Tq, N, H] holds Tq (1..16) new tokens per sequence, the last Tq positions:
//   query i sits at position seq_len - Tq + i and sees keys j <= that position (causal
//   among the new tokens, everything before them).
//   logits = scale * q k^T            (scale defaults to 1 / sqrt(H))
//   logits = cap * tanh(logits / cap) (logits_soft_cap)
//   out [B, Tq, N, Hv] = softmax(logits) @ v; lse [B, N, Tq] (optional) the rows'
//   log-sum-exp in f32 (f64 for f64 inputs). GQA / MQA: N % K == 0, query head n reads
//   kv head n / (N / K). A query that sees no key (seq_len < Tq puts it before position
//   0) gives out = 0 and lse = +inf.
//
// paged_kv_append: k [B, Tq, K, H] and v [B, Tq, K, Hv] are written into their pages at
//   positions seq_len - Tq .. seq_len - 1 (seq_lengths already count them), IN PLACE:
//   k_pages and v_pages are the op's outputs, of which only those rows are written;
//   every other row keeps what the buffers held. (The framework's outputs are plain
//   tensors the op writes; an op that updates part of one is the caller's contract, so
//   the append is an eager op: Functions do not trace it.)
//
// Shapes: Tq 1..16; page_size a power of two in [8, 256]; H and Hv powers of two in
// [16, 256]; B, N, K at least 1 and at most 65535; bf16, f16, f32 or f64 (q, the pages,
// k, v and out one dtype). No sequences (B = 0) is a no-op.
//
// Runtime properties the device cannot check without a synchronisation (every run on the
// interpreter checks them and throws Error: the _host entry points, the C ABI and Python
// on host tensors): every seq_len in [Tq, max_pages * page_size] and
// every page_table entry of a page in use in [0, num_pages). On the device a length is
// clamped to [0, max_pages * page_size]; a page index out of range reads zeros (the
// block loads are bounded by k_pages' shape) and the append's store to it is dropped:
// no fault, but a wrong result. Entries past a sequence's last page are never read.
//
// Implementations, in the order auto tries them:
//   "tile"       split-KV (FlashDecoding): programs (split, kv head, sequence) each pack
//                the N / K query heads of one kv head x Tq rows into one tile (the heads
//                of a group share every page they load), walk their share of the
//                sequence's pages (page table lookup per page, a few pages a step
//                through a cp.async ring in shared memory, an online softmax on tensor
//                cores), and write a partial out and lse (f32) to a workspace; a combine
//                kernel merges the splits by their lse. One split writes out directly.
//                bf16, f16; sm_80+. The append: one program per token copies its K x H
//                row. bf16, f16, f32.
//   "reference"  pages gathered into a dense [B, max_pages * page_size, K, H] workspace,
//                then exact attention in f32 (f64); every dtype. The append: one program
//                per (token, kv head); every dtype.
// Every implementation is deterministic: reruns are bitwise identical.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

struct TOKAMAX_API PagedAttentionOptions {
  std::optional<double> scale;            ///< default 1 / sqrt(H)
  std::optional<double> logits_soft_cap;  ///< > 0
  /// "tile" or "reference"; std::nullopt: the first that serves the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

struct TOKAMAX_API PagedKvAppendOptions {
  std::optional<std::string> implementation;
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

TOKAMAX_API void paged_attention(const TensorView &q, const TensorView &k_pages, const TensorView &v_pages,
                                 const TensorView &page_table, const TensorView &seq_lengths, const TensorView &out,
                                 Stream &stream, const PagedAttentionOptions &options = {},
                                 const TensorView *lse = nullptr);
/// Writes k and v into k_pages and v_pages in place (see the header comment).
TOKAMAX_API void paged_kv_append(const TensorView &k, const TensorView &v, const TensorView &page_table,
                                 const TensorView &seq_lengths, const TensorView &k_pages, const TensorView &v_pages,
                                 Stream &stream, const PagedKvAppendOptions &options = {});

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU); seq_lengths and page_table are
// checked against the rules above first. ----

TOKAMAX_API void paged_attention_host(const TensorView &q, const TensorView &k_pages, const TensorView &v_pages,
                                      const TensorView &page_table, const TensorView &seq_lengths,
                                      const TensorView &out, const PagedAttentionOptions &options = {},
                                      const TensorView *lse = nullptr);
TOKAMAX_API void paged_kv_append_host(const TensorView &k, const TensorView &v, const TensorView &page_table,
                                      const TensorView &seq_lengths, const TensorView &k_pages,
                                      const TensorView &v_pages, const PagedKvAppendOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs; lse optional):
//   paged_attention:  q, k_pages, v_pages, page_table, seq_lengths | out, lse?
//   paged_kv_append:  k, v, page_table, seq_lengths | k_pages, v_pages
// Attributes: paged_attention: "scale", "logits_soft_cap" (present only when set);
// paged_kv_append: none.
// Configs: paged_attention tile: block_rows (packed query rows per program, a power of
// two >= 16), pages_per_step, num_splits (programs along each sequence's keys),
// num_warps, stages (slots of the page ring; 1: no ring); reference: block_kv (keys per
// step of the dense walk). paged_kv_append: tile: num_warps; reference: none.

struct TOKAMAX_API PagedAttentionSpecs {
  ArgSpec q, k_pages, v_pages, page_table, seq_lengths, out;
  std::optional<ArgSpec> lse;
};

TOKAMAX_API const Op &paged_attention_op();
TOKAMAX_API const Op &paged_kv_append_op();

/// Binds a call from specs (options' implementation and config are ignored); throws
/// Error naming the bad argument and what it expected.
TOKAMAX_API BoundArgs bind_paged_attention(const PagedAttentionSpecs &specs,
                                           const PagedAttentionOptions &options = {});
TOKAMAX_API BoundArgs bind_paged_kv_append(const ArgSpec &k, const ArgSpec &v, const ArgSpec &page_table,
                                           const ArgSpec &seq_lengths, const ArgSpec &k_pages,
                                           const ArgSpec &v_pages);

/// lse's spec for q [B, Tq, N, H]: f32 (f64 for f64 q) [B, N, Tq].
TOKAMAX_API ArgSpec paged_attention_lse_spec(const ArgSpec &q);
/// out's spec: q's shape with v_pages' head dim, q's dtype.
TOKAMAX_API ArgSpec paged_attention_out_spec(const ArgSpec &q, const ArgSpec &v_pages);

/// Most new tokens per sequence in one call.
inline constexpr int64_t kPagedAttentionMaxNewTokens = 16;

} // namespace tokamax
