//===- Matmul.h - Matrix multiplication on tensor cores -----------*- C++ -*-===//
//
// c = alpha * op(a) @ op(b) (+ bias broadcast over rows), op(x) = x or x^T, accumulated
// in f32, as an Op (matmul_op) with three DSL kernels:
// - `hopper` (matmul_hopper_kernel, sm_90a): tile.tma_dot (TMA into a shared-memory
//   ring, wgmma from shared memory, a producer warpgroup) on a persistent grid, c
//   written through shared memory by TMA stores where c's rows allow; bf16, f16 (either
//   operand transposed) and fp8 e4m3 / e5m2 (a [M, K], b [N, K]).
// - `tile` (matmul_kernel, sm_80+): block M x N per program; tile.cp_async_dot (a
//   cp.async ring of num_stages swizzled shared buffers, ldmatrix, mma.sync: bf16/f16
//   m16n8k16, f32 as tf32 m16n8k8) when the rows of a and b are whole 16-byte chunks,
//   else a k-loop of masked register loads (the next K block's issued before the
//   current block's tile.dot); bf16, f16, f32.
// - `reference` (matmul_reference_kernel): small blocks, products summed with a plain
//   reduction (no tensor cores, exact f32 / f64 accumulation); every float dtype,
//   f64 included, on the device and on the interpreter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Tensor.h>

#include <optional>
#include <string>

namespace tokamax {
class Stream;

struct TOKAMAX_API MatmulSpec {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::BF16;      ///< a and b
  DType out_dtype = DType::BF16;  ///< c (and bias): dtype or f32 (f64 for f64)
  bool trans_a = false, trans_b = false, has_bias = false;
  /// c += alpha * op(a) @ op(b) (+ bias): c's tile is read before it is written (kernels
  /// that other ops' plans run; the matmul op itself overwrites c)
  bool accumulate = false;
  /// Windows of wider tensors, from the launch's `window` (an i32 after alpha; the
  /// hopper kernels only): b_cols > 0 makes b's stored K extent b_cols (b is [N, b_cols]
  /// with trans_b, else [b_cols, N]) and op(b)'s K the window from `window`; c_cols > 0
  /// makes c [M, c_cols] and the product's columns those from `window`. E.g. a chunk of a
  /// weight's columns read, or a gradient's written, in place.
  int64_t b_cols = 0, c_cols = 0;
  bool windowed() const { return b_cols > 0 || c_cols > 0; }
  /// b's stored K extent and c's stored row (b_cols / c_cols where windowed, else k / n).
  int64_t b_stored_k() const { return b_cols > 0 ? b_cols : k; }
  int64_t c_stored_n() const { return c_cols > 0 ? c_cols : n; }
};

struct TOKAMAX_API MatmulConfig {
  int64_t block_m = 128, block_n = 128, block_k = 32;  ///< powers of two
  int64_t group_m = 8;  ///< programs along M sharing B blocks in L2 (grouped launch order)
  int num_warps = 8;
  int64_t num_stages = 4;  ///< hopper and tile (cp.async): depth of the shared-memory ring
  bool warp_specialize = true;  ///< hopper: a producer warpgroup issues the loads
  /// hopper: 2 pairs programs into clusters computing vertically adjacent blocks, each
  /// loading half of the shared B slice for both (TMA multicast); needs warp_specialize
  int64_t cluster_m = 1;
  /// hopper: c leaves through shared memory and TMA stores (where c's rows are 16-byte
  /// multiples and two [block_m][128-byte] strips fit beside the ring), so the next
  /// tile's main loop starts while it is written out
  bool tma_store = true;
  /// hopper: wgmma takes A from registers (ldmatrix from the ring) and B from shared
  /// memory; a as [M, K] only
  bool a_in_registers = false;
  /// hopper, warp-specialized persistent kernels (programs fewer than the tiles; no
  /// effect otherwise): the producer warpgroup and the consumers run separate copies of
  /// the tile loop, the producer with 40 registers per thread and the consumers with
  /// what that frees (setmaxnreg; 232 with 8 warps)
  bool rebalance_registers = false;
  /// hopper, bf16 / f16: the main loop written in the DSL's Hopper primitives instead of
  /// tma_dot: TMA copies of a's and b's slices into rings of shared buffers completing on
  /// mbarriers, wgmma with both operands read from shared memory issued asynchronously
  /// (one product in flight while the next slice is awaited). With warp_specialize a
  /// producer warpgroup issues the copies (Kernel::specialized_loop) over all of a
  /// program's tiles (persistent with `programs`), refilling a slot once the consumers'
  /// mbarrier arrivals release it, so the next tile's loads overlap the epilogue; without,
  /// one program per tile (programs 0), every warp a consumer, a slot refilled once all
  /// its warps are past it. cluster_m and a_in_registers do not apply.
  bool tma_ring = false;
  /// hopper: persistent grid of this many programs (0: one per tile; in a Config, -1
  /// means one per SM of the device)
  int64_t programs = 0;
};

struct TOKAMAX_API MatmulOptions {
  bool trans_a = false;  ///< a is [K, M] (used transposed)
  bool trans_b = false;  ///< b is [N, K] (used transposed)
  double alpha = 1.0;
  std::optional<TensorView> bias;  ///< [N], c's dtype, added to every row
  /// "hopper", "tile" or "reference"; empty: hopper on sm_90a when it serves the call,
  /// else tile, else reference (f64, fp8 off sm_90a). a, b, c and bias must be 16-byte
  /// aligned (every kernel reads them with 16-byte vectors; TMA needs it too).
  /// An explicit one that cannot serve the call throws NotSupported with the reason.
  std::string implementation;
  std::optional<MatmulConfig> config;  ///< else the implementation's heuristic
};

/// The `tile` heuristic: blocks up to 128 x 128; with rows of whole 16-byte chunks the
/// cp.async ring (64-byte K slices, 4 stages, 64 x 64 warp tiles), else two mma K steps
/// per block and about 32 x 64 per warp.
TOKAMAX_API MatmulConfig default_config(const MatmulSpec &spec);
/// Parameters of both kernels: a, b, [bias,] c, alpha (f32 scalar; f64 for f64).
TOKAMAX_API dsl::Kernel matmul_kernel(const MatmulSpec &spec, const MatmulConfig &config);
TOKAMAX_API dsl::Kernel matmul_reference_kernel(const MatmulSpec &spec);

/// The `hopper` kernel (sm_90a): tma_dot main loop (TMA into a shared-memory ring,
/// wgmma from shared memory, a producer warpgroup), grouped tile order, the same
/// epilogue (its store through TMA with config.tma_store when c's rows are whole 16-byte
/// chunks); with config.programs > 0 a persistent grid loops over the tiles; with
/// config.cluster_m = 2 over pairs of vertically adjacent blocks (2-CTA clusters). Serves bf16,
/// f16 and fp8 (a [M, K], b [N, K]) when the rows of a and b are multiples of 16 bytes;
/// hopper_unsupported() says why not otherwise (empty when it serves the spec).
TOKAMAX_API std::string hopper_unsupported(const MatmulSpec &spec);
/// Persistent over `sm_count` programs (one per SM).
TOKAMAX_API MatmulConfig default_hopper_config(const MatmulSpec &spec, int sm_count = Arch::parse("sm_90a").sm_count());
TOKAMAX_API dsl::Kernel matmul_hopper_kernel(const MatmulSpec &spec, const MatmulConfig &config);

/// The op: arguments a, b, bias (optional), c; attributes trans_a, trans_b, alpha;
/// implementations hopper, tile, reference (auto picks the first that serves the call
/// on the device). Configs hold MatmulConfig's fields ("programs": -1 is one per SM).
TOKAMAX_API const Op &matmul_op();
/// Throws Error naming the argument when shapes or dtypes do not fit together.
TOKAMAX_API BoundArgs bind_matmul(const ArgSpec &a, const ArgSpec &b, const std::optional<ArgSpec> &bias,
                                  const ArgSpec &c, bool trans_a, bool trans_b, double alpha);
TOKAMAX_API MatmulSpec matmul_spec(const BoundArgs &args);

/// c = alpha * op(a) @ op(b) (+ bias); a, b (one dtype), c and bias contiguous; the
/// implementation as MatmulOptions::implementation says, the config from options, an
/// autotuning scope or the per-device cache, else the implementation's heuristic.
TOKAMAX_API void matmul(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream,
                        const MatmulOptions &options = {});
/// The same on the CPU interpreter (host tensor views, see host_view()).
TOKAMAX_API void matmul_host(const TensorView &a, const TensorView &b, const TensorView &c,
                             const MatmulOptions &options = {});

} // namespace tokamax
