//===- RaggedDot.h - ragged_dot (grouped matmul), forward and VJP ----*- C++ -*-===//
//
//   lhs [M, K], rhs [G, K, N], group_sizes int32 [G] -> out [M, N]
//   out[r] = lhs[r] @ rhs[g] for the rows r of group g
//
// The grouped matmul of mixture-of-experts layers: the rows of lhs belong to the groups
// in order (group 0 holds rows [0, s0), group 1 rows [s0, s0 + s1), ...). lhs, rhs and
// out share one dtype (bf16, f16, f32 or f64); products accumulate in f32 (f64 for f64).
//
// group_sizes live where the call's tensors live and only the kernels read them (no
// host synchronisation), so a call cannot refuse bad sizes. They are read as: negative
// sizes count as 0, and the groups are clamped to the M rows (a group that would end
// past M ends at M; later groups are empty). Rows past the sum of the clamped sizes get
// zeros in out (and in the VJP's dlhs).
//
// The VJP: dlhs = ragged_dot(dout, rhs^T) (the same grouped kernel with rhs read
// transposed) and drhs[g] = lhs_g^T @ dout_g (a grouped kernel whose programs each sum
// one group's rows; an empty group's drhs is zero).
//
// Implementations, in the order auto tries them:
//   "hopper":    sm_90a, K and N multiples of 8: tile's kernels with the row kernels'
//                blocks always on TMA rings (a producer warpgroup) and wgmma.
//   "tile":      tensor-core products (mma.sync) over a grid of (row tiles of each
//                group, column tiles): every program finds its group from the sizes
//                (a scan over the G groups) and stores only its group's rows. With
//                rows of whole 16-byte chunks (K and N multiples of 8) the blocks go
//                through a cp.async ring ("async_copy", "stages"), else masked register
//                loads read one step ahead. bf16, f16; any M, K, N; sm_80+.
//   "reference": the same kernels with exact multiply-add products in f32 / f64 on small
//                blocks; every dtype, f64 included.
// Empty calls: no rows or columns is a no-op (the VJP zero-fills what it owns); K = 0
// or G = 0 gives out = 0. Each output must have fewer than 2^31 elements.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

struct TOKAMAX_API RaggedDotOptions {
  /// "hopper", "tile" or "reference"; std::nullopt: the first that serves the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

TOKAMAX_API void ragged_dot(const TensorView &lhs, const TensorView &rhs, const TensorView &group_sizes,
                            const TensorView &out, Stream &stream, const RaggedDotOptions &options = {});
/// dlhs and drhs from dout and the forward's inputs.
TOKAMAX_API void ragged_dot_vjp(const TensorView &dout, const TensorView &lhs, const TensorView &rhs,
                                const TensorView &group_sizes, const TensorView &dlhs, const TensorView &drhs,
                                Stream &stream, const RaggedDotOptions &options = {});

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU). ----

TOKAMAX_API void ragged_dot_host(const TensorView &lhs, const TensorView &rhs, const TensorView &group_sizes,
                                 const TensorView &out, const RaggedDotOptions &options = {});
TOKAMAX_API void ragged_dot_vjp_host(const TensorView &dout, const TensorView &lhs, const TensorView &rhs,
                                     const TensorView &group_sizes, const TensorView &dlhs, const TensorView &drhs,
                                     const RaggedDotOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs):
//   ragged_dot:     lhs, rhs, group_sizes | out
//   ragged_dot_vjp: dout, lhs, rhs, group_sizes | dlhs, drhs
// Configs: block_m, block_n (each program's output tile), block_k (the reduction step:
// K for out and, in the VJP, N for dlhs and the group's rows for drhs), num_warps; tile
// also async_copy (0 / 1) and stages (the ring's slots, 2 to 4); hopper stages, programs
// (the rows kernels' persistent grid: -1 one program an SM) and tma_store (0 / 1: the rows
// kernels' tiles whose rows all belong to their group leave by TMA stores).

TOKAMAX_API const Op &ragged_dot_op();
TOKAMAX_API const Op &ragged_dot_vjp_op();

/// Binds a call from specs; throws Error naming the bad argument.
TOKAMAX_API BoundArgs bind_ragged_dot(const ArgSpec &lhs, const ArgSpec &rhs, const ArgSpec &group_sizes,
                                      const ArgSpec &out);
TOKAMAX_API BoundArgs bind_ragged_dot_vjp(const ArgSpec &dout, const ArgSpec &lhs, const ArgSpec &rhs,
                                          const ArgSpec &group_sizes, const ArgSpec &dlhs, const ArgSpec &drhs);

/// out's spec for lhs [M, K] and rhs [G, K, N]: [M, N] in lhs's dtype.
TOKAMAX_API ArgSpec ragged_dot_out_spec(const ArgSpec &lhs, const ArgSpec &rhs);

} // namespace tokamax
