// Device tensors for a function's inputs (random, never zero: standardize()) and outputs,
// as the export tools run them (runtime only).
#pragma once

#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Tensor.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tokamax::tools {

struct DeviceBuffers {
  std::vector<Tensor> in, out;
  std::vector<TensorView> inViews, outViews;

  DeviceBuffers(const std::vector<TensorSpec> &inputs, const std::vector<TensorSpec> &outputs, Device &device) {
    uint32_t seed = 1;
    for (const TensorSpec &s : inputs)
      in.push_back(standardize(s, seed++, device));
    for (const TensorSpec &s : outputs)
      out.push_back(Tensor::empty(s.shape, s.dtype, device));
    for (const Tensor &t : in)
      inViews.push_back(t.view());
    for (const Tensor &t : out)
      outViews.push_back(t.view());
  }

  std::vector<std::vector<uint8_t>> output_bytes() const {
    std::vector<std::vector<uint8_t>> bytes;
    for (const Tensor &t : out) {
      bytes.emplace_back(t.nbytes());
      t.copy_to_host(bytes.back().data(), bytes.back().size());
    }
    return bytes;
  }

  /// How many output elements are NaN or infinite.
  size_t non_finite_outputs() const {
    size_t n = 0;
    for (const Tensor &t : out)
      for (double v : t.to_host_doubles())
        n += !std::isfinite(v);
    return n;
  }
};

} // namespace tokamax::tools
