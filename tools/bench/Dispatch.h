//===- Dispatch.h - tokamax-bench: the host cost of op calls -------*- C++ -*-===//
//
// CPU time per call of cached eager op calls (layer_norm [1, 64] bf16, matmul 64^3 bf16,
// the op calls of a traced Function) beside a bare cuLaunchKernel of the same kernels.
// Under the null driver (TOKAMAX_CUDA_DRIVER=libtokamax-null-cuda.so) a launch costs
// nothing, so the figures are the op layer's own host cost, measurable with no GPU.
// And the layer_norm gradient step, eager against its CUDA graph replay (GPU time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tokamax {
class Device;
class Stream;
} // namespace tokamax

namespace bench {

struct Figure {
  std::string key;  ///< JSON key
  double value = 0;
};

/// Prints the host dispatch figures and returns them.
std::vector<Figure> dispatch_figures(tokamax::Stream &stream, tokamax::Device &device);

/// The layer_norm gradient step (8 op calls) at the headline shape [32, 2048, 16, 64] and
/// at [1, 64], eager and replayed as a CUDA graph: device time per step, and the launch
/// overhead per kernel (step time less the kernels' CUPTI time, per kernel). GPU only.
std::vector<Figure> graph_figures(tokamax::Stream &stream, tokamax::Device &device);

} // namespace bench
