//===- GluReference.h - float64 gated_linear_unit for the tests ----*- C++ -*-===//
//
// An independent float64 gated linear unit, forward and VJP, written with plain loops from
// the formulas in GatedLinearUnit.h: x [M, K], weights [K, 2, N], out / dout [M, N].
// The activations' derivatives are written out by hand here (the kernels' are checked
// against them and, through grad, against finite differences).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "unit/AttentionReference.h"

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

/// By tiles of 16 rows by 256 columns in parallel: the tile stays in cache while W streams
/// past once, and each element still sums over K in order.
inline Pre preActivations(const std::vector<double> &x, const std::vector<double> &w, int64_t m, int64_t k,
                          int64_t n) {
  Pre p{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  constexpr int64_t kRows = 16, kCols = 256;
  const int64_t panels = (n + kCols - 1) / kCols, blocks = (m + kRows - 1) / kRows;
  attention_test::parallelChunks(blocks * panels, 1, attention_test::hostThreads(), [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / panels * kRows, r1 = std::min(m, r0 + kRows);
      const int64_t c0 = t % panels * kCols, cols = std::min(n - c0, kCols);
      int64_t kk = 0;
      // Four steps of K per pass over the tile: the same sums in the same order, with a
      // quarter of the tile's loads and stores.
      for (; kk + 4 <= k; kk += 4) {
        const double *w0 = w.data() + kk * 2 * n + c0;
        for (int64_t i = r0; i < r1; ++i) {
          const double *xv = &x[size_t(i * k + kk)];
          const double x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
          double *a = &p.a[size_t(i * n + c0)], *b = &p.b[size_t(i * n + c0)];
          for (int64_t j = 0; j < cols; ++j) {
            a[j] = a[j] + x0 * w0[j] + x1 * w0[2 * n + j] + x2 * w0[4 * n + j] + x3 * w0[6 * n + j];
            b[j] = b[j] + x0 * w0[n + j] + x1 * w0[3 * n + j] + x2 * w0[5 * n + j] + x3 * w0[7 * n + j];
          }
        }
      }
      for (; kk < k; ++kk) {
        const double *w0 = w.data() + kk * 2 * n + c0, *w1 = w0 + n;
        for (int64_t i = r0; i < r1; ++i) {
          const double xv = x[size_t(i * k + kk)];
          double *a = &p.a[size_t(i * n + c0)], *b = &p.b[size_t(i * n + c0)];
          for (int64_t j = 0; j < cols; ++j) {
            a[j] += xv * w0[j];
            b[j] += xv * w1[j];
          }
        }
      }
    }
  });
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
  constexpr int64_t kRows = 16, kBlock = 64, kCols = 256;
  const int64_t rowBlocks = (m + kRows - 1) / kRows, kBlocks = (k + kBlock - 1) / kBlock;
  attention_test::parallelChunks(rowBlocks * kBlocks, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / kBlocks * kRows, r1 = std::min(m, r0 + kRows);
      const int64_t k0 = t % kBlocks * kBlock, k1 = std::min(k, k0 + kBlock);
      for (int64_t c0 = 0; c0 < n; c0 += kCols) {
        const int64_t cols = std::min(n - c0, kCols);
        for (int64_t kk = k0; kk < k1; ++kk) {
          const double *w0 = w.data() + kk * 2 * n + c0, *w1 = w0 + n;
          int64_t i = r0;
          // Four rows' sums side by side: independent chains hide the adds' latency, each
          // still in column order.
          for (; i + 4 <= r1; i += 4) {
            const double *a0 = &da[size_t(i * n + c0)], *b0 = &db[size_t(i * n + c0)];
            double *s = &g.dx[size_t(i * k + kk)];
            double s0 = s[0], s1 = s[k], s2 = s[2 * k], s3 = s[3 * k];
            for (int64_t j = 0; j < cols; ++j) {
              s0 += a0[j] * w0[j] + b0[j] * w1[j];
              s1 += a0[n + j] * w0[j] + b0[n + j] * w1[j];
              s2 += a0[2 * n + j] * w0[j] + b0[2 * n + j] * w1[j];
              s3 += a0[3 * n + j] * w0[j] + b0[3 * n + j] * w1[j];
            }
            s[0] = s0;
            s[k] = s1;
            s[2 * k] = s2;
            s[3 * k] = s3;
          }
          for (; i < r1; ++i) {
            const double *a0 = &da[size_t(i * n + c0)], *b0 = &db[size_t(i * n + c0)];
            double s = g.dx[size_t(i * k + kk)];
            for (int64_t j = 0; j < cols; ++j)
              s += a0[j] * w0[j] + b0[j] * w1[j];
            g.dx[size_t(i * k + kk)] = s;
          }
        }
      }
    }
  });
  const int64_t panels = (n + kCols - 1) / kCols;
  attention_test::parallelChunks(kBlocks * panels, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k0 = t / panels * kBlock, k1 = std::min(k, k0 + kBlock);
      const int64_t c0 = t % panels * kCols, cols = std::min(n - c0, kCols);
      int64_t i = 0;
      // Four rows per pass, as in preActivations.
      for (; i + 4 <= m; i += 4) {
        const double *a = &da[size_t(i * n + c0)], *b = &db[size_t(i * n + c0)];
        for (int64_t kk = k0; kk < k1; ++kk) {
          const double x0 = x[size_t(i * k + kk)], x1 = x[size_t((i + 1) * k + kk)], x2 = x[size_t((i + 2) * k + kk)],
                       x3 = x[size_t((i + 3) * k + kk)];
          double *dw0 = &g.dw[size_t(kk * 2 * n + c0)], *dw1 = dw0 + n;
          for (int64_t j = 0; j < cols; ++j) {
            dw0[j] = dw0[j] + x0 * a[j] + x1 * a[n + j] + x2 * a[2 * n + j] + x3 * a[3 * n + j];
            dw1[j] = dw1[j] + x0 * b[j] + x1 * b[n + j] + x2 * b[2 * n + j] + x3 * b[3 * n + j];
          }
        }
      }
      for (; i < m; ++i) {
        const double *a = &da[size_t(i * n + c0)], *b = &db[size_t(i * n + c0)];
        for (int64_t kk = k0; kk < k1; ++kk) {
          const double xv = x[size_t(i * k + kk)];
          double *dw0 = &g.dw[size_t(kk * 2 * n + c0)], *dw1 = dw0 + n;
          for (int64_t j = 0; j < cols; ++j) {
            dw0[j] += xv * a[j];
            dw1[j] += xv * b[j];
          }
        }
      }
    }
  });
  return g;
}

} // namespace glu_test
