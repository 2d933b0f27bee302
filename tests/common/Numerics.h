// Host-side numerics shared by the tests: random inputs exactly representable in a
// dtype, dtype <-> bytes conversion, and the relative error against a float64 reference.
#pragma once

#include <tokamax/runtime/DType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace test {

/// alpha * a @ b (+ bias over rows) in float64: a is row-major [m, k], b [k, n], bias
/// [n] or null.
inline std::vector<double> matmul_reference(const std::vector<double> &a, const std::vector<double> &b, int64_t m,
                                            int64_t n, int64_t k, double alpha,
                                            const std::vector<double> *bias = nullptr) {
  std::vector<double> ref(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double *row = ref.data() + i * n;
    for (int64_t x = 0; x < k; ++x) {
      const double ax = a[i * k + x], *brow = b.data() + x * n;
      for (int64_t j = 0; j < n; ++j)
        row[j] += ax * brow[j];
    }
    for (int64_t j = 0; j < n; ++j)
      row[j] = alpha * row[j] + (bias ? (*bias)[j] : 0.0);
  }
  return ref;
}

/// A row-major [rows, cols] matrix as stored: itself, or its transpose ([cols, rows])
/// when `transpose` (matmul operands given with trans_a / trans_b).
inline std::vector<double> stored(const std::vector<double> &x, int64_t rows, int64_t cols, bool transpose) {
  if (!transpose)
    return x;
  std::vector<double> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[c * rows + r] = x[r * cols + c];
  return t;
}

/// Magnitudes uniform in [lo, hi] with random signs (never zero when lo > 0), plus
/// `shift`, each rounded to `dtype`.
inline std::vector<double> random_values(size_t n, tokamax::DType dtype, uint32_t seed, double lo = 0.05,
                                         double hi = 3.0, double shift = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  uint8_t one[8];
  for (double &x : v) {
    tokamax::store_from_double(dtype, one, shift + (rng() & 1 ? 1 : -1) * dist(rng));
    x = tokamax::load_as_double(dtype, one);
  }
  return v;
}

/// Values uniform in [lo, hi], each rounded to `dtype`.
inline std::vector<double> uniform_values(size_t n, tokamax::DType dtype, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  uint8_t one[8];
  for (double &x : v) {
    tokamax::store_from_double(dtype, one, dist(rng));
    x = tokamax::load_as_double(dtype, one);
  }
  return v;
}

inline std::vector<uint8_t> to_bytes(const std::vector<double> &values, tokamax::DType dtype) {
  size_t size = tokamax::dtype_size(dtype);
  std::vector<uint8_t> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i)
    tokamax::store_from_double(dtype, bytes.data() + i * size, values[i]);
  return bytes;
}

inline std::vector<double> from_bytes(const uint8_t *bytes, size_t count, tokamax::DType dtype) {
  size_t size = tokamax::dtype_size(dtype);
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = tokamax::load_as_double(dtype, bytes + i * size);
  return v;
}

inline std::vector<double> from_bytes(const std::vector<uint8_t> &bytes, tokamax::DType dtype) {
  return from_bytes(bytes.data(), bytes.size() / tokamax::dtype_size(dtype), dtype);
}

/// One matmul's host operands: random non-zero a [m, k], b [k, n] (magnitudes in
/// [0.05, 2]) and bias [n] (in [0.5, bias_hi]) from seeds seed, seed + 1, seed + 2; their
/// bytes as stored (a as [k, m] when trans_a, b as [n, k] when trans_b); c's bytes
/// poisoned with NaN, so unwritten elements show.
struct MatmulOperands {
  std::vector<double> a, b, bias;
  std::vector<uint8_t> a_bytes, b_bytes, bias_bytes, c_bytes;
};

inline MatmulOperands matmul_operands(int64_t m, int64_t n, int64_t k, tokamax::DType dtype, tokamax::DType out,
                                      bool trans_a, bool trans_b, uint32_t seed, double bias_hi) {
  MatmulOperands o;
  o.a = random_values(m * k, dtype, seed, 0.05, 2.0);
  o.b = random_values(k * n, dtype, seed + 1, 0.05, 2.0);
  o.bias = random_values(n, out, seed + 2, 0.5, bias_hi);
  o.a_bytes = to_bytes(stored(o.a, m, k, trans_a), dtype);
  o.b_bytes = to_bytes(stored(o.b, k, n, trans_b), dtype);
  o.bias_bytes = to_bytes(o.bias, out);
  o.c_bytes = to_bytes(std::vector<double>(m * n, std::numeric_limits<double>::quiet_NaN()), out);
  return o;
}

/// ||got - ref|| / max(||ref||, floor); NaN counts as infinitely wrong.
inline double rel_error(const std::vector<double> &got, const std::vector<double> &ref, double floor = 1e-150) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  double e = std::sqrt(num) / std::max(std::sqrt(den), floor);
  return std::isnan(e) ? INFINITY : e;
}

} // namespace test
