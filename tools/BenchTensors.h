//===- BenchTensors.h - Inputs and arguments shared by the op benchmark tools -===//
#pragma once

#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tokamax::bench {

/// A bf16 device tensor of roughly normal values with standard deviation `stddev` (a
/// sum of 4 uniforms: close enough for timing), deterministic in `seed`.
inline Tensor random_bf16(std::vector<int64_t> shape, double stddev, Stream &stream, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  std::vector<uint16_t> host(size_t(t.numel()));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t &v : host) {
    double u = 0;
    for (int i = 0; i < 4; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      u += double(s >> 11) * 0x1.0p-53 - 0.5;
    }
    uint8_t bytes[2];
    store_from_double(DType::BF16, bytes, u * 1.732 * stddev);
    v = uint16_t(bytes[0] | (bytes[1] << 8));
  }
  t.copy_from_host(host.data(), host.size() * 2);
  stream.synchronize();
  return t;
}

/// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split(const std::string &list) {
  std::vector<std::string> items;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start)
      items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

} // namespace tokamax::bench
