//===- XentReference.h - linear_softmax_cross_entropy_loss in float64 -*- C++ -*-===//
//
// The loss and its gradients from the same (rounded) inputs in double precision, with
// the op's label rules: ignore_index rows give 0 and are not counted by "mean"; other
// labels outside [0, V) give NaN.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "unit/AttentionReference.h"

#include <tokamax/ops/CrossEntropy.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace xent_test {

using tokamax::LossReduction;

struct Problem {
  int64_t b = 1, d = 1, v = 1;
  LossReduction reduction = LossReduction::Mean;
  int64_t ignore_index = -100;
};

struct Forward {
  std::vector<double> loss, lse;  ///< loss: [B], or [1] reduced
};

struct Gradients {
  std::vector<double> dx, dw;
};

/// By tiles of 16 rows by 256 columns in parallel: the tile stays in cache while W streams
/// past once, and each element still sums over D in order.
inline std::vector<double> logitsOf(const Problem &p, const std::vector<double> &x, const std::vector<double> &w) {
  std::vector<double> logits(size_t(p.b * p.v), 0.0);
  constexpr int64_t kRows = 16, kCols = 256;
  const int64_t panels = (p.v + kCols - 1) / kCols, blocks = (p.b + kRows - 1) / kRows;
  attention_test::parallelChunks(blocks * panels, 1, attention_test::hostThreads(), [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / panels * kRows, i1 = std::min(p.b, i0 + kRows);
      const int64_t c0 = t % panels * kCols, cols = std::min(p.v - c0, kCols);
      int64_t k = 0;
      // Four steps of D per pass over the tile: the same sums in the same order, with a
      // quarter of the tile's loads and stores.
      for (; k + 4 <= p.d; k += 4) {
        const double *w0 = &w[size_t(k * p.v + c0)], *w1 = w0 + p.v, *w2 = w1 + p.v, *w3 = w2 + p.v;
        for (int64_t i = i0; i < i1; ++i) {
          const double *xv = &x[size_t(i * p.d + k)];
          const double x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
          double *row = &logits[size_t(i * p.v + c0)];
          for (int64_t j = 0; j < cols; ++j)
            row[j] = row[j] + x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j];
        }
      }
      for (; k < p.d; ++k) {
        const double *wk = &w[size_t(k * p.v + c0)];
        for (int64_t i = i0; i < i1; ++i) {
          const double xv = x[size_t(i * p.d + k)];
          double *row = &logits[size_t(i * p.v + c0)];
          for (int64_t j = 0; j < cols; ++j)
            row[j] += xv * wk[j];
        }
      }
    }
  });
  return logits;
}

inline bool inRange(const Problem &p, int64_t label) { return label >= 0 && label < p.v; }

inline int64_t counted(const Problem &p, const std::vector<int64_t> &labels) {
  int64_t n = 0;
  for (int64_t l : labels)
    n += l != p.ignore_index;
  return n;
}

inline Forward forward(const Problem &p, const std::vector<double> &x, const std::vector<double> &w,
                       const std::vector<int64_t> &labels) {
  const std::vector<double> logits = logitsOf(p, x, w);
  Forward f;
  f.lse.resize(size_t(p.b));
  std::vector<double> rows(size_t(p.b));
  attention_test::parallelChunks(p.b, 4, attention_test::hostThreads(), [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double *row = &logits[size_t(i * p.v)];
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < p.v; ++j)
        m = std::max(m, row[j]);
      for (int64_t j = 0; j < p.v; ++j)
        s += std::exp(row[j] - m);
      f.lse[size_t(i)] = m + std::log(s);
      const int64_t l = labels[size_t(i)];
      rows[size_t(i)] = l == p.ignore_index ? 0.0
                        : inRange(p, l)     ? f.lse[size_t(i)] - row[l]
                                            : std::numeric_limits<double>::quiet_NaN();
    }
  });
  if (p.reduction == LossReduction::None) {
    f.loss = rows;
    return f;
  }
  // Serial, in row order: the loss doesn't depend on the thread count.
  double total = 0;
  for (double r : rows)
    total += r;
  f.loss = {p.reduction == LossReduction::Mean ? total / double(counted(p, labels)) : total};
  return f;
}

/// dloss: [B] for "none", else [1]. dlogits [B, V] by rows, then dx by tiles of (rows, D)
/// and dw by tiles of (D, V): no element has two writers, and each still sums in index
/// order (j for dx, i for dw), so a NaN row still poisons its dx row and every dw element.
inline Gradients vjp(const Problem &p, const std::vector<double> &dloss, const std::vector<double> &x,
                     const std::vector<double> &w, const std::vector<int64_t> &labels) {
  const std::vector<double> logits = logitsOf(p, x, w);
  Gradients g{std::vector<double>(size_t(p.b * p.d), 0.0), std::vector<double>(size_t(p.d * p.v), 0.0)};
  const int threads = attention_test::hostThreads();
  const int64_t n = counted(p, labels);
  std::vector<double> dl(size_t(p.b * p.v));
  attention_test::parallelChunks(p.b, 4, threads, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // lse as forward computes it, from the same logits.
      const double *row = &logits[size_t(i * p.v)];
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < p.v; ++j)
        m = std::max(m, row[j]);
      for (int64_t j = 0; j < p.v; ++j)
        s += std::exp(row[j] - m);
      const double lse = m + std::log(s);
      const int64_t l = labels[size_t(i)];
      double scale = p.reduction == LossReduction::None ? dloss[size_t(i)] : dloss[0];
      if (p.reduction == LossReduction::Mean)
        scale /= double(n);
      if (l == p.ignore_index)
        scale = 0;
      else if (!inRange(p, l))
        scale = std::numeric_limits<double>::quiet_NaN();
      for (int64_t j = 0; j < p.v; ++j)
        dl[size_t(i * p.v + j)] = (std::exp(row[j] - lse) - (j == l ? 1.0 : 0.0)) * scale;
    }
  });
  constexpr int64_t kRows = 16, kBlock = 64, kCols = 256;
  const int64_t rowBlocks = (p.b + kRows - 1) / kRows, kBlocks = (p.d + kBlock - 1) / kBlock;
  attention_test::parallelChunks(rowBlocks * kBlocks, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / kBlocks * kRows, i1 = std::min(p.b, i0 + kRows);
      const int64_t k0 = t % kBlocks * kBlock, k1 = std::min(p.d, k0 + kBlock);
      for (int64_t c0 = 0; c0 < p.v; c0 += kCols) {
        const int64_t cols = std::min(p.v - c0, kCols);
        for (int64_t k = k0; k < k1; ++k) {
          const double *wk = &w[size_t(k * p.v + c0)];
          int64_t i = i0;
          // Four rows' sums side by side: independent chains hide the adds' latency, each
          // still in column order.
          for (; i + 4 <= i1; i += 4) {
            const double *d0 = &dl[size_t(i * p.v + c0)], *d1 = d0 + p.v, *d2 = d1 + p.v, *d3 = d2 + p.v;
            double *s = &g.dx[size_t(i * p.d + k)];
            double s0 = s[0], s1 = s[p.d], s2 = s[2 * p.d], s3 = s[3 * p.d];
            for (int64_t j = 0; j < cols; ++j) {
              s0 += d0[j] * wk[j];
              s1 += d1[j] * wk[j];
              s2 += d2[j] * wk[j];
              s3 += d3[j] * wk[j];
            }
            s[0] = s0;
            s[p.d] = s1;
            s[2 * p.d] = s2;
            s[3 * p.d] = s3;
          }
          for (; i < i1; ++i) {
            const double *d0 = &dl[size_t(i * p.v + c0)];
            double s = g.dx[size_t(i * p.d + k)];
            for (int64_t j = 0; j < cols; ++j)
              s += d0[j] * wk[j];
            g.dx[size_t(i * p.d + k)] = s;
          }
        }
      }
    }
  });
  const int64_t panels = (p.v + kCols - 1) / kCols;
  attention_test::parallelChunks(kBlocks * panels, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k0 = t / panels * kBlock, k1 = std::min(p.d, k0 + kBlock);
      const int64_t c0 = t % panels * kCols, cols = std::min(p.v - c0, kCols);
      int64_t i = 0;
      // Four rows per pass, as in logitsOf.
      for (; i + 4 <= p.b; i += 4) {
        const double *d0 = &dl[size_t(i * p.v + c0)], *d1 = d0 + p.v, *d2 = d1 + p.v, *d3 = d2 + p.v;
        for (int64_t k = k0; k < k1; ++k) {
          const double x0 = x[size_t(i * p.d + k)], x1 = x[size_t((i + 1) * p.d + k)],
                       x2 = x[size_t((i + 2) * p.d + k)], x3 = x[size_t((i + 3) * p.d + k)];
          double *dw = &g.dw[size_t(k * p.v + c0)];
          for (int64_t j = 0; j < cols; ++j)
            dw[j] = dw[j] + x0 * d0[j] + x1 * d1[j] + x2 * d2[j] + x3 * d3[j];
        }
      }
      for (; i < p.b; ++i) {
        const double *di = &dl[size_t(i * p.v + c0)];
        for (int64_t k = k0; k < k1; ++k) {
          const double xv = x[size_t(i * p.d + k)];
          double *dw = &g.dw[size_t(k * p.v + c0)];
          for (int64_t j = 0; j < cols; ++j)
            dw[j] += xv * di[j];
        }
      }
    }
  });
  return g;
}

} // namespace xent_test
