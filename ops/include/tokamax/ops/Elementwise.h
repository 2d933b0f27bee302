//===- Elementwise.h - Memory-bound example ops ------------------*- C++ -*-===//
//
// copy, vector_add and gelu over contiguous tensors of any shape (treated as flat),
// in bf16, f16, f32 or f64; math in f32 (f64 for f64).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/Tensor.h>

namespace tokamax {
class Stream;

struct TOKAMAX_API ElementwiseSpec {
  int64_t n = 0;  ///< elements
  DType dtype = DType::F32;
};

struct TOKAMAX_API ElementwiseConfig {
  int64_t block = 4096;  ///< elements per program (power of two)
  int num_warps = 4;
};

TOKAMAX_API ElementwiseConfig default_config(const ElementwiseSpec &spec);

TOKAMAX_API dsl::Kernel copy_kernel(const ElementwiseSpec &spec, const ElementwiseConfig &config);
TOKAMAX_API dsl::Kernel vector_add_kernel(const ElementwiseSpec &spec, const ElementwiseConfig &config);
TOKAMAX_API dsl::Kernel gelu_kernel(const ElementwiseSpec &spec, const ElementwiseConfig &config);

/// out = x
TOKAMAX_API void copy(const TensorView &x, const TensorView &out, Stream &stream);
/// out = x + y
TOKAMAX_API void vector_add(const TensorView &x, const TensorView &y, const TensorView &out, Stream &stream);
/// out = x * Phi(x) (exact GELU, erf form)
TOKAMAX_API void gelu(const TensorView &x, const TensorView &out, Stream &stream);

// The same on host views (host_view(...)), through the CPU interpreter. Empty tensors
// are a no-op everywhere; a null pointer for a non-empty tensor is an Error.
TOKAMAX_API void copy_host(const TensorView &x, const TensorView &out);
TOKAMAX_API void vector_add_host(const TensorView &x, const TensorView &y, const TensorView &out);
TOKAMAX_API void gelu_host(const TensorView &x, const TensorView &out);

} // namespace tokamax
