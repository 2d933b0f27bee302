//===- GluReference.h - float64 gated_linear_unit for the tests ----*- C++ -*-===//
//
// An independent float64 gated linear unit, forward and VJP, written with plain loops from
// the formulas in GatedLinearUnit.h: x [M, K], weights [K, 2, N], out / dout [M, N].
// The activations' derivatives are written out by hand here (the kernels' are checked
// against them and, through grad, against finite differences).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/ReferenceProducts.h"

#include <tokamax/ops/GatedLinearUnit.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace glu_test {

using tokamax::GluActivation;

inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

inline double activate(GluActivation a, double x) {
  constexpr double c = 0.7978845608028654;  // sqrt(2 / pi)
  switch (a) {
  case GluActivation::Swish: return x * sigmoid(x);
  case GluActivation::GeluTanh: return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
  case GluActivation::Gelu: return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
  case GluActivation::Sigmoid: return sigmoid(x);
  case GluActivation::Relu: return x > 0 ? x : 0;
  case GluActivation::None: return x;
  }
  return x;
}

inline double derivative(GluActivation a, double x) {
  constexpr double c = 0.7978845608028654;
  switch (a) {
  case GluActivation::Swish: return sigmoid(x) + x * sigmoid(x) * (1 - sigmoid(x));
  case GluActivation::GeluTanh: {
    const double t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  case GluActivation::Gelu:
    return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)) + x * std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
  case GluActivation::Sigmoid: return sigmoid(x) * (1 - sigmoid(x));
  case GluActivation::Relu: return x > 0 ? 1 : 0;
  case GluActivation::None: return 1;
  }
  return 1;
}

struct Pre {
  std::vector<double> a, b;  ///< [M, N]: x W0, x W1
};

/// x W0 and x W1 (W is [K, 2, N]: W0's rows at stride 2N, W1's from column N).
inline Pre preActivations(const std::vector<double> &x, const std::vector<double> &w, int64_t m, int64_t k,
                          int64_t n) {
  Pre p{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  reference_products::addAB(x.data(), k, w.data(), 2 * n, p.a.data(), n, m, k, n);
  reference_products::addAB(x.data(), k, w.data() + n, 2 * n, p.b.data(), n, m, k, n);
  return p;
}

inline std::vector<double> forward(const std::vector<double> &x, const std::vector<double> &w, int64_t m, int64_t k,
                                   int64_t n, GluActivation act) {
  Pre p = preActivations(x, w, m, k, n);
  std::vector<double> out(p.a.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = activate(act, p.a[i]) * p.b[i];
  return out;
}

struct Gradients {
  std::vector<double> dx, dw;  ///< [M, K], [K, 2, N]
};

/// da, db [M, N] by rows, then dx by tiles of (rows, K) and dw by tiles of (K, N): no
/// element has two writers, and each still sums in index order (j for dx, i for dw).
inline Gradients vjp(const std::vector<double> &dout, const std::vector<double> &x, const std::vector<double> &w,
                     int64_t m, int64_t k, int64_t n, GluActivation act) {
  Pre p = preActivations(x, w, m, k, n);
  Gradients g{std::vector<double>(size_t(m * k)), std::vector<double>(size_t(k * 2 * n))};
  const int threads = attention_test::hostThreads();
  std::vector<double> da(size_t(m * n)), db(size_t(m * n));
  attention_test::parallelChunks(m, 16, threads, [&](int, int64_t begin, int64_t end) {
    for (size_t ij = size_t(begin * n); ij < size_t(end * n); ++ij) {
      da[ij] = dout[ij] * p.b[ij] * derivative(act, p.a[ij]);
      db[ij] = dout[ij] * activate(act, p.a[ij]);
    }
  });
  reference_products::addABt(da.data(), n, w.data(), 2 * n, g.dx.data(), k, m, n, k);
  reference_products::addABt(db.data(), n, w.data() + n, 2 * n, g.dx.data(), k, m, n, k);
  reference_products::addAtB(x.data(), k, da.data(), n, g.dw.data(), 2 * n, m, k, n);
  reference_products::addAtB(x.data(), k, db.data(), n, g.dw.data() + n, 2 * n, m, k, n);
  return g;
}

} // namespace glu_test
