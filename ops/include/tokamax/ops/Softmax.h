//===- Softmax.h - Row softmax ------------------------------------*- C++ -*-===//
#pragma once

#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/Tensor.h>

#include <optional>

namespace tokamax {
class Stream;

/// softmax over the last axis of a contiguous [rows, cols] tensor; math in f32.
struct TOKAMAX_API SoftmaxSpec {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::F32;
};

struct TOKAMAX_API SoftmaxConfig {
  int64_t block_rows = 1;  ///< rows per program (power of two)
  int num_warps = 4;
};

/// Largest row length the single-pass kernel holds in registers.
inline constexpr int64_t kSoftmaxMaxCols = 32768;

TOKAMAX_API SoftmaxConfig default_config(const SoftmaxSpec &spec);
TOKAMAX_API dsl::Kernel softmax_kernel(const SoftmaxSpec &spec, const SoftmaxConfig &config);
struct TOKAMAX_API SoftmaxOptions {
  /// Overrides default_config (block_rows a power of two, num_warps 1 to 16).
  std::optional<SoftmaxConfig> config;
};

/// y = softmax(x) along the last axis; x and y of shape [..., cols] (leading axes flattened).
/// No rows is a no-op; an empty last axis is an Error.
TOKAMAX_API void softmax(const TensorView &x, const TensorView &y, Stream &stream, const SoftmaxOptions &options = {});
/// The same on host views, through the CPU interpreter.
TOKAMAX_API void softmax_host(const TensorView &x, const TensorView &y, const SoftmaxOptions &options = {});

} // namespace tokamax
