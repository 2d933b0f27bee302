//===- XentReference.h - linear_softmax_cross_entropy_loss in float64 -*- C++ -*-===//
//
// The loss and its gradients from the same (rounded) inputs in double precision, with
// the op's label rules: ignore_index rows give 0 and are not counted by "mean"; other
// labels outside [0, V) give NaN.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/CrossEntropy.h>

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
  for (int64_t i = 0; i < p.b; ++i)
    for (int64_t k = 0; k < p.d; ++k)
      for (int64_t j = 0; j < p.v; ++j)
        logits[size_t(i * p.v + j)] += x[size_t(i * p.d + k)] * w[size_t(k * p.v + j)];
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
  for (int64_t i = 0; i < p.b; ++i) {
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
  if (p.reduction == LossReduction::None) {
    f.loss = rows;
    return f;
  }
  double total = 0;
  for (double r : rows)
    total += r;
  f.loss = {p.reduction == LossReduction::Mean ? total / double(counted(p, labels)) : total};
  return f;
}

/// dloss: [B] for "none", else [1].
inline Gradients vjp(const Problem &p, const std::vector<double> &dloss, const std::vector<double> &x,
                     const std::vector<double> &w, const std::vector<int64_t> &labels) {
  const std::vector<double> logits = logitsOf(p, x, w);
  const std::vector<double> lse = forward(Problem{p.b, p.d, p.v, LossReduction::None, p.ignore_index}, x, w,
                                          labels).lse;
  Gradients g{std::vector<double>(size_t(p.b * p.d), 0.0), std::vector<double>(size_t(p.d * p.v), 0.0)};
  for (int64_t i = 0; i < p.b; ++i) {
    const int64_t l = labels[size_t(i)];
    double scale = p.reduction == LossReduction::None ? dloss[size_t(i)] : dloss[0];
    if (p.reduction == LossReduction::Mean)
      scale /= double(counted(p, labels));
    if (l == p.ignore_index)
      scale = 0;
    else if (!inRange(p, l))
      scale = std::numeric_limits<double>::quiet_NaN();
    for (int64_t j = 0; j < p.v; ++j) {
      const double dl = (std::exp(logits[size_t(i * p.v + j)] - lse[size_t(i)]) - (j == l ? 1.0 : 0.0)) * scale;
      for (int64_t k = 0; k < p.d; ++k) {
        g.dx[size_t(i * p.d + k)] += dl * w[size_t(k * p.v + j)];
        g.dw[size_t(k * p.v + j)] += x[size_t(i * p.d + k)] * dl;
      }
    }
  }
  return g;
}

} // namespace xent_test
