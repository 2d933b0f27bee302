//===- GradCheck.h - float64 host pieces of the Function gradient tests -*- C++ -*-===//
//
// The Function gradient tests compare grad() on the interpreter in float64 with central
// finite differences of a float64 host loss; their chains start with rms_norm over rows.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace grad_check {

/// rms_norm of each row of x [rows, cols]: x / sqrt(mean(x^2) + epsilon) * scale.
inline std::vector<double> rmsNormRows(const std::vector<double> &x, const std::vector<double> &scale, int64_t rows,
                                       int64_t cols, double epsilon = 1e-5) {
  std::vector<double> h(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = x.data() + r * cols;
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c)
      sq += row[c] * row[c];
    const double rstd = 1 / std::sqrt(sq / double(cols) + epsilon);
    for (int64_t c = 0; c < cols; ++c)
      h[size_t(r * cols + c)] = row[c] * rstd * scale[size_t(c)];
  }
  return h;
}

/// d loss() / d v[i] for every i by central differences of step h; `loss` reads v
/// (which is restored after each element).
template <class Loss>
std::vector<double> centralDifferences(std::vector<double> &v, const Loss &loss, double h = 1e-5) {
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const double up = loss();
    v[i] = saved - h;
    const double down = loss();
    v[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

} // namespace grad_check
