// What the matmul device tests share (MatmulGpuTests.cpp, MatmulHopperGpuTests.cpp): random
// operands exactly representable in their dtype, a run of matmul on the device against a
// float64 host reference, and the tolerance by input and output dtype.
#pragma once

#include "common/Numerics.h"

#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace matmul_gpu_test {

using namespace tokamax;


/// Values uniform in [-2, 2], exactly representable in `dtype`.
inline std::vector<double> randomValues(size_t n, DType dtype, uint32_t seed) {
  return test::uniform_values(n, dtype, seed, -2.0, 2.0);
}

inline Tensor upload(const std::vector<double> &values, std::vector<int64_t> shape, DType dtype) {
  std::vector<uint8_t> bytes = test::to_bytes(values, dtype);
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from_host(bytes.data(), bytes.size());
  return t;
}


/// Tolerance on the relative (Frobenius) error of c, by input and output dtype.
/// tf32 keeps 10 mantissa bits of each f32 operand: one product is off by up to ~1e-3
/// relative, and with K that small nothing averages out (a bias can also cancel part
/// of the result), so very short K gets a looser bound.
inline double tolerance(DType in, DType out, int64_t k = 1 << 20) {
  if (in == DType::F32 && out == DType::F32 && k < 16)
    return 1e-2;
  if (out == DType::F64)
    return 1e-12;
  if (out == DType::BF16)
    return 1e-2;
  if (out == DType::F16)
    return 2e-3;
  if (in == DType::F32)
    return 2e-3;  // f32 inputs run as tf32
  // fp8 wgmma accumulates with fewer bits than f32: 1.2e-3 at K = 4096 on the H200.
  if (is_fp8(in))
    return std::max(1e-3, 3e-5 * std::sqrt(double(k)));
  // 16-bit products are exact; f32 accumulation error grows like sqrt(K) (wgmma adds
  // each k16 group at the largest exponent: 1.8e-5 at K = 16384 on the H200).
  return std::max(1e-5, 3e-7 * std::sqrt(double(k)));
}

struct Case {
  int64_t m, n, k;
  DType dtype, out;
  bool ta, tb, bias;
  double alpha = 1.0;
  std::string impl = "tile";
  std::optional<MatmulConfig> config = {};
};

/// Runs matmul on the device; returns the relative error against float64.
inline double runCase(const Case &c, Stream &stream) {
  uint32_t seed = static_cast<uint32_t>(c.m * 7919 + c.n * 131 + c.k);
  std::vector<double> a = randomValues(c.m * c.k, c.dtype, seed), b = randomValues(c.k * c.n, c.dtype, seed + 1);
  std::vector<double> bias = randomValues(c.n, c.out, seed + 2);
  std::vector<double> as = test::stored(a, c.m, c.k, c.ta);
  std::vector<double> bs = test::stored(b, c.k, c.n, c.tb);
  Tensor ta = upload(as, c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k}, c.dtype);
  Tensor tb = upload(bs, c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n}, c.dtype);
  Tensor tbias = upload(bias, {c.n}, c.out);
  Tensor tc = upload(std::vector<double>(c.m * c.n, NAN), {c.m, c.n}, c.out);  // poisoned
  MatmulOptions options;
  options.trans_a = c.ta;
  options.trans_b = c.tb;
  options.alpha = c.alpha;
  options.implementation = c.impl;
  options.config = c.config;
  if (c.bias)
    options.bias = tbias.view();
  matmul(ta, tb, tc, stream, options);
  stream.synchronize();
  std::vector<double> got = tc.to_host_doubles();
  return test::rel_error(got, test::matmul_reference(a, b, c.m, c.n, c.k, c.alpha, c.bias ? &bias : nullptr));
}

inline std::string describe(const Case &c) {
  return c.impl + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " +
         std::string(dtype_name(c.dtype)) + "->" + std::string(dtype_name(c.out)) + (c.ta ? " a^T" : "") +
         (c.tb ? " b^T" : "") + (c.bias ? " +bias" : "");
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;


} // namespace matmul_gpu_test
