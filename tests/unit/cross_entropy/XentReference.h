//===- XentReference.h - linear_softmax_cross_entropy_loss in float64 -*- C++ -*-===//
//
// The loss and its gradients from the same (rounded) inputs in double precision, with
// the op's label rules: ignore_index rows give 0 and are not counted by "mean"; other
// labels outside [0, V) give NaN.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/ReferenceProducts.h"

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

inline std::vector<double> logitsOf(const Problem &p, const std::vector<double> &x, const std::vector<double> &w) {
  std::vector<double> logits(size_t(p.b * p.v), 0.0);
  reference_products::addAB(x.data(), p.d, w.data(), p.v, logits.data(), p.v, p.b, p.d, p.v);
  return logits;
}

/// log(sum(exp(row))) of one row of logits, against its max.
inline double logSumExp(const double *row, int64_t v) {
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < v; ++j)
    m = std::max(m, row[j]);
  for (int64_t j = 0; j < v; ++j)
    s += std::exp(row[j] - m);
  return m + std::log(s);
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
      f.lse[size_t(i)] = logSumExp(row, p.v);
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

/// dloss: [B] for "none", else [1]. dlogits [B, V] by rows, then dx and dw as products
/// (each element summed in index order), so a NaN row still poisons its dx row and every
/// dw element.
inline Gradients vjp(const Problem &p, const std::vector<double> &dloss, const std::vector<double> &x,
                     const std::vector<double> &w, const std::vector<int64_t> &labels) {
  const std::vector<double> logits = logitsOf(p, x, w);
  Gradients g{std::vector<double>(size_t(p.b * p.d), 0.0), std::vector<double>(size_t(p.d * p.v), 0.0)};
  const int threads = attention_test::hostThreads();
  const int64_t n = counted(p, labels);
  std::vector<double> dl(size_t(p.b * p.v));
  attention_test::parallelChunks(p.b, 4, threads, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double *row = &logits[size_t(i * p.v)];
      const double lse = logSumExp(row, p.v);
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
  reference_products::addABt(dl.data(), p.v, w.data(), p.v, g.dx.data(), p.d, p.b, p.v, p.d);
  reference_products::addAtB(x.data(), p.d, dl.data(), p.v, g.dw.data(), p.v, p.b, p.d, p.v);
  return g;
}

} // namespace xent_test
