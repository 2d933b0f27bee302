//===- GluReference.h - float64 gated_linear_unit for the tests ----*- C++ -*-===//
//
// An independent float64 gated linear unit, forward and VJP, written with plain loops from
// the formulas in GatedLinearUnit.h: x [M, K], weights [K, 2, N], out / dout [M, N].
// The activations' derivatives are written out by hand here (the kernels' are checked
// against them and, through grad, against finite differences).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/GatedLinearUnit.h>

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

inline Pre preActivations(const std::vector<double> &x, const std::vector<double> &w, int64_t m, int64_t k,
                          int64_t n) {
  Pre p{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) {
      const double xv = x[size_t(i * k + kk)];
      const double *w0 = w.data() + kk * 2 * n, *w1 = w0 + n;
      for (int64_t j = 0; j < n; ++j) {
        p.a[size_t(i * n + j)] += xv * w0[j];
        p.b[size_t(i * n + j)] += xv * w1[j];
      }
    }
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

inline Gradients vjp(const std::vector<double> &dout, const std::vector<double> &x, const std::vector<double> &w,
                     int64_t m, int64_t k, int64_t n, GluActivation act) {
  Pre p = preActivations(x, w, m, k, n);
  Gradients g{std::vector<double>(size_t(m * k)), std::vector<double>(size_t(k * 2 * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const size_t ij = size_t(i * n + j);
      const double da = dout[ij] * p.b[ij] * derivative(act, p.a[ij]), db = dout[ij] * activate(act, p.a[ij]);
      for (int64_t kk = 0; kk < k; ++kk) {
        const size_t w0 = size_t(kk * 2 * n + j), w1 = w0 + size_t(n);
        g.dx[size_t(i * k + kk)] += da * w[w0] + db * w[w1];
        g.dw[w0] += x[size_t(i * k + kk)] * da;
        g.dw[w1] += x[size_t(i * k + kk)] * db;
      }
    }
  return g;
}

} // namespace glu_test
