//===- Registry.cpp - Kernels known to tokamax-compile ----------------------===//
#include <tokamax/ops/Registry.h>

#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Softmax.h>

#include <fmt/format.h>

namespace tokamax {

std::vector<RegisteredKernel> registered_kernels() {
  std::vector<RegisteredKernel> kernels;
  auto elementwise = [&](const char *name, auto build, int64_t n, DType dtype) {
    ElementwiseSpec spec{n, dtype};
    kernels.push_back({fmt::format("{}[{} {}]", name, n, dtype_name(dtype)),
                       [=] { return build(spec, default_config(spec)); }});
  };
  auto softmax = [&](int64_t rows, int64_t cols, DType dtype) {
    SoftmaxSpec spec{rows, cols, dtype};
    kernels.push_back({fmt::format("softmax[{}x{} {}]", rows, cols, dtype_name(dtype)),
                       [=] { return softmax_kernel(spec, default_config(spec)); }});
  };
  // The examples' shapes.
  elementwise("vector_add", vector_add_kernel, (int64_t(1) << 24) + 17, DType::F32);
  elementwise("gelu", gelu_kernel, int64_t(1) << 24, DType::BF16);
  softmax(4096, 1000, DType::F32);
  // The benchmark's shapes.
  // (16384 x 4096 and 1048576 x 64 bf16 copies are the same flat kernel.)
  elementwise("copy", copy_kernel, int64_t(16384) * 4096, DType::BF16);
  softmax(16384, 4096, DType::BF16);
  softmax(1048576, 64, DType::BF16);
  return kernels;
}

} // namespace tokamax
