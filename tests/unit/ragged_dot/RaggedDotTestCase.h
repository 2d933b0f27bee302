//===- RaggedDotTestCase.h - ragged_dot calls against float64 -------*- C++ -*-===//
//
// One case (shape, group sizes, dtype, implementation, config): random inputs, the call
// run on the interpreter (or on the device by the GPU tests through `Runner`), and the
// results compared with a float64 reference written from the formulas in RaggedDot.h
// (sizes clamped to the rows, rows past the groups zero) with the attention tests'
// dtype-aware tolerances.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"
#include "common/ReferenceProducts.h"

#include <tokamax/ops/RaggedDot.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace ragged_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;

/// Each group's [start, end) rows as the op reads group_sizes.
inline std::vector<std::pair<int64_t, int64_t>> groupRows(const std::vector<int32_t> &sizes, int64_t m) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t start = 0;
  for (int32_t s : sizes) {
    const int64_t end = std::min<int64_t>(start + std::max<int32_t>(s, 0), m);
    rows.emplace_back(start, end);
    start = end;
  }
  return rows;
}

/// out [m, n] = lhs_g [., k] @ rhs[g] [k, n] per group; rows past the groups zero.
inline std::vector<double> forward(const std::vector<double> &lhs, const std::vector<double> &rhs,
                                   const std::vector<int32_t> &sizes, int64_t m, int64_t k, int64_t n) {
  std::vector<double> out(size_t(m * n), 0.0);
  const auto rows = groupRows(sizes, m);
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t r0 = rows[g].first, count = rows[g].second - r0;
    reference_products::addAB(lhs.data() + r0 * k, k, rhs.data() + int64_t(g) * k * n, n, out.data() + r0 * n, n,
                              count, k, n);
  }
  return out;
}

struct Gradients {
  std::vector<double> dlhs, drhs;
};

/// dlhs_g = dout_g rhs[g]^T and drhs[g] = lhs_g^T dout_g per group.
inline Gradients vjp(const std::vector<double> &dout, const std::vector<double> &lhs, const std::vector<double> &rhs,
                     const std::vector<int32_t> &sizes, int64_t m, int64_t k, int64_t n) {
  Gradients d{std::vector<double>(size_t(m * k), 0.0), std::vector<double>(sizes.size() * size_t(k * n), 0.0)};
  const auto rows = groupRows(sizes, m);
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t r0 = rows[g].first, count = rows[g].second - r0;
    const double *rhsG = rhs.data() + int64_t(g) * k * n;
    reference_products::addABt(dout.data() + r0 * n, n, rhsG, n, d.dlhs.data() + r0 * k, k, count, n, k);
    reference_products::addAtB(lhs.data() + r0 * k, k, dout.data() + r0 * n, n, d.drhs.data() + int64_t(g) * k * n,
                               n, count, k, n);
  }
  return d;
}

/// `g` random group sizes summing to `total` (some of them zero).
inline std::vector<int32_t> randomSizes(int64_t g, int64_t total, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 0; i + 1 < g; ++i)
    cuts.push_back(std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> sizes;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    sizes.push_back(int32_t(cuts[i + 1] - cuts[i]));
  return sizes;
}

struct Case {
  int64_t m = 1, k = 1, n = 1;
  std::vector<int32_t> sizes;  ///< G = sizes.size()
  DType dtype = DType::BF16;
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;

  int64_t g() const { return int64_t(sizes.size()); }
  tokamax::RaggedDotOptions options() const { return {implementation, config}; }
  std::string name() const {
    return fmt::format("m {} k {} n {} sizes [{}] {} {} {}", m, k, n, fmt::join(sizes, ", "),
                       tokamax::dtype_name(dtype), implementation.value_or("auto"),
                       config ? config->to_json() : "heuristic");
  }
};

struct Inputs {
  std::vector<double> lhs, rhs, dout;
};

inline Inputs randomInputs(const Case &c, uint64_t seed) {
  const double scale = 1 / std::sqrt(double(std::max<int64_t>(c.k, 1)));
  return {attention_test::randomNormal(size_t(c.m * c.k), c.dtype, seed),
          attention_test::randomNormal(size_t(c.g() * c.k * c.n), c.dtype, seed + 1, scale),
          attention_test::randomNormal(size_t(c.m * c.n), c.dtype, seed + 2)};
}

/// Runs the forward (out) or the VJP (dlhs, drhs) on host buffers.
using Runner = std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpretForward(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::ragged_dot_host(in[0]->view(), in[1]->view(), in[2]->view(), out[0]->view(), c.options());
}
inline void interpretVjp(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::ragged_dot_vjp_host(in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(), out[0]->view(),
                               out[1]->view(), c.options());
}

inline Tolerance raggedTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(d);
}

inline HostBuffer sizesBuffer(const Case &c) {
  return HostBuffer(DType::I32, {c.g()}, std::vector<double>(c.sizes.begin(), c.sizes.end()));
}

struct Result {
  bool ok = true;
  std::string message;
};

inline Result checkForward(const Case &c, uint64_t seed, const Runner &run = interpretForward) {
  Inputs in = randomInputs(c, seed);
  HostBuffer lhs(c.dtype, {c.m, c.k}, in.lhs), rhs(c.dtype, {c.g(), c.k, c.n}, in.rhs), sizes = sizesBuffer(c);
  HostBuffer out(c.dtype, {c.m, c.n});
  run(c, {&lhs, &rhs, &sizes}, {&out});
  Comparison cmp = attention_test::compare("out", out.values(), forward(in.lhs, in.rhs, c.sizes, c.m, c.k, c.n),
                                           out.shape, raggedTolerance(c.dtype), 1e-3);
  return {cmp.ok, c.name() + "\n" + cmp.message};
}

inline Result checkVjp(const Case &c, uint64_t seed, const Runner &run = interpretVjp) {
  Inputs in = randomInputs(c, seed);
  HostBuffer dout(c.dtype, {c.m, c.n}, in.dout), lhs(c.dtype, {c.m, c.k}, in.lhs),
      rhs(c.dtype, {c.g(), c.k, c.n}, in.rhs), sizes = sizesBuffer(c);
  HostBuffer dlhs(c.dtype, {c.m, c.k}), drhs(c.dtype, {c.g(), c.k, c.n});
  run(c, {&dout, &lhs, &rhs, &sizes}, {&dlhs, &drhs});
  Gradients ref = vjp(in.dout, in.lhs, in.rhs, c.sizes, c.m, c.k, c.n);
  Tolerance tol = raggedTolerance(c.dtype);
  Comparison cl = attention_test::compare("dlhs", dlhs.values(), ref.dlhs, dlhs.shape, tol, 1e-3);
  Comparison cr = attention_test::compare("drhs", drhs.values(), ref.drhs, drhs.shape, tol, 1e-3);
  return {cl.ok && cr.ok, c.name() + "\n" + cl.message + "\n" + cr.message};
}

} // namespace ragged_test
