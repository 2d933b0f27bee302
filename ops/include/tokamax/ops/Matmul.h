//===- Matmul.h - Matrix multiplication on tensor cores -----------*- C++ -*-===//
//
// c = alpha * op(a) @ op(b) (+ bias broadcast over rows), op(x) = x or x^T, accumulated
// in f32. Two DSL kernels:
// - `tile` (matmul_kernel): block M x N per program, a k-loop carrying the f32
//   accumulator (tile.dot -> mma.sync: bf16/f16 m16n8k16, f32 as tf32 m16n8k8), the next
//   K block's loads issued before the current block's dot, masked loads for ragged
//   M, N, K; bf16, f16, f32.
// - `reference` (matmul_reference_kernel): small blocks, products summed with a plain
//   reduction (no tensor cores, exact f32 / f64 accumulation); every float dtype,
//   f64 included, on the device and on the interpreter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/Tensor.h>

#include <optional>

namespace tokamax {
class Stream;

struct TOKAMAX_API MatmulOptions {
  bool trans_a = false;  ///< a is [K, M] (used transposed)
  bool trans_b = false;  ///< b is [N, K] (used transposed)
  double alpha = 1.0;
  std::optional<TensorView> bias;  ///< [N], c's dtype, added to every row
};

struct TOKAMAX_API MatmulSpec {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::BF16;      ///< a and b
  DType out_dtype = DType::BF16;  ///< c (and bias): dtype or f32 (f64 for f64)
  bool trans_a = false, trans_b = false, has_bias = false;
};

struct TOKAMAX_API MatmulConfig {
  int64_t block_m = 128, block_n = 128, block_k = 32;  ///< powers of two
  int64_t group_m = 8;  ///< programs along M sharing B blocks in L2 (grouped launch order)
  int num_warps = 8;
};

TOKAMAX_API MatmulConfig default_config(const MatmulSpec &spec);
/// Parameters of both kernels: a, b, [bias,] c, alpha (f32 scalar; f64 for f64).
TOKAMAX_API dsl::Kernel matmul_kernel(const MatmulSpec &spec, const MatmulConfig &config);
TOKAMAX_API dsl::Kernel matmul_reference_kernel(const MatmulSpec &spec);

/// c = alpha * op(a) @ op(b) (+ bias); a, b (one dtype), c and bias contiguous. bf16, f16
/// and f32 run the tile kernel, f64 the reference kernel.
TOKAMAX_API void matmul(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream,
                        const MatmulOptions &options = {});

} // namespace tokamax
