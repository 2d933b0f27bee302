//===- SoftmaxCrossEntropyTestCase.h - softmax_cross_entropy against float64 -*- C++ -*-===//
//
// One case (shape, dtype, labels, implementation, config): random logits, the call run on
// the interpreter (or on the device by the GPU tests through `Runner`), and the results
// compared with the float64 reference below (the op's rules: a label outside [0, V)
// gives a NaN loss and a NaN dlogits row) with the attention tests' tolerances.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"

#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace sce_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- The float64 reference. ----

struct Forward {
  std::vector<double> loss, lse;
};

inline bool inRange(int64_t label, int64_t v) { return label >= 0 && label < v; }

inline Forward forward(int64_t b, int64_t v, const std::vector<double> &logits, const std::vector<int64_t> &labels) {
  Forward f{std::vector<double>(size_t(b)), std::vector<double>(size_t(b))};
  for (int64_t i = 0; i < b; ++i) {
    const double *row = &logits[size_t(i * v)];
    const double m = *std::max_element(row, row + v);
    double s = 0;
    for (int64_t j = 0; j < v; ++j)
      s += std::exp(row[j] - m);
    const int64_t l = labels[size_t(i)];
    f.lse[size_t(i)] = m + std::log(s);
    f.loss[size_t(i)] = inRange(l, v) ? f.lse[size_t(i)] - row[l] : kNaN;
  }
  return f;
}

inline std::vector<double> vjp(int64_t b, int64_t v, const std::vector<double> &dloss,
                               const std::vector<double> &logits, const std::vector<int64_t> &labels) {
  const std::vector<double> lse = forward(b, v, logits, labels).lse;
  std::vector<double> d(size_t(b * v));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t l = labels[size_t(i)];
    const double g = inRange(l, v) ? dloss[size_t(i)] : kNaN;
    for (int64_t j = 0; j < v; ++j)
      d[size_t(i * v + j)] = g * (std::exp(logits[size_t(i * v + j)] - lse[size_t(i)]) - (j == l ? 1.0 : 0.0));
  }
  return d;
}

// ---- Cases. ----

struct Case {
  int64_t b = 1, v = 1;
  DType dtype = DType::BF16;
  bool outOfRange = false;  ///< rows 1 and 2 (or row 0) get labels -1 and V
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;

  DType compute() const { return dtype == DType::F64 ? DType::F64 : DType::F32; }
  tokamax::SoftmaxCrossEntropyOptions options() const { return {implementation, config}; }
  std::string name() const {
    return fmt::format("B {} V {} {} {} {} {}", b, v, tokamax::dtype_name(dtype),
                       outOfRange ? "labels out of range" : "labels in range", implementation.value_or("auto"),
                       config ? config->to_json() : "heuristic");
  }
};

struct Inputs {
  std::vector<double> logits, dloss;
  std::vector<int64_t> labels;
};

/// Logits of standard deviation 2 (rows from flat to peaked), dloss about 1.
inline Inputs randomInputs(const Case &c, uint64_t seed) {
  Inputs in{attention_test::randomNormal(size_t(c.b * c.v), c.dtype, seed, 2.0),
            attention_test::randomNormal(size_t(c.b), c.compute(), seed + 1), {}};
  std::mt19937_64 rng(seed + 2);
  for (int64_t i = 0; i < c.b; ++i)
    in.labels.push_back(int64_t(rng() % uint64_t(c.v)));
  if (c.outOfRange) {
    in.labels[size_t(std::min<int64_t>(1, c.b - 1))] = -1;
    in.labels[size_t(std::min<int64_t>(2, c.b - 1))] = c.v;
  }
  return in;
}

inline HostBuffer labelBuffer(const Case &c, const Inputs &in) {
  return HostBuffer(DType::I32, {c.b}, std::vector<double>(in.labels.begin(), in.labels.end()));
}

/// Runs the forward (logits, labels | loss, lse) or the VJP (dloss, logits, labels, lse |
/// dlogits) on host buffers.
using Runner =
    std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpretForward(const Case &c, const std::vector<HostBuffer *> &in,
                             const std::vector<HostBuffer *> &out) {
  tokamax::softmax_cross_entropy_host(in[0]->view(), in[1]->view(), out[0]->view(), out[1]->view(), c.options());
}
inline void interpretVjp(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::softmax_cross_entropy_vjp_host(in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(),
                                          out[0]->view(), c.options());
}

/// loss and lse: f32 sums of exponentials (f64 for f64); dlogits carry their dtype's
/// rounding.
inline Tolerance rowTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(DType::F32);
}

/// compare() where the reference has NaNs: those elements must be NaN in `got` too.
inline Comparison compareWithNaN(const std::string &name, std::vector<double> got, std::vector<double> ref,
                                 const std::vector<int64_t> &shape, Tolerance tol) {
  int64_t misplaced = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i)
    if (std::isnan(ref[i])) {
      misplaced += !std::isnan(got[i]);
      got[i] = ref[i] = 0;
    }
  Comparison c = attention_test::compare(name, got, ref, shape, tol, 1e-3);
  if (misplaced) {
    c.ok = false;
    c.message += fmt::format("; {} elements not NaN where the reference is", misplaced);
  }
  return c;
}

struct Result {
  bool ok = true;
  std::string message;
};

inline Result checkForward(const Case &c, uint64_t seed, const Runner &run = interpretForward) {
  Inputs in = randomInputs(c, seed);
  HostBuffer logits(c.dtype, {c.b, c.v}, in.logits), labels = labelBuffer(c, in);
  HostBuffer loss(c.compute(), {c.b}), lse(c.compute(), {c.b});
  run(c, {&logits, &labels}, {&loss, &lse});
  Forward ref = forward(c.b, c.v, logits.values(), in.labels);
  Comparison cl = compareWithNaN("loss", loss.values(), ref.loss, loss.shape, rowTolerance(c.dtype));
  Comparison cs = compareWithNaN("lse", lse.values(), ref.lse, lse.shape, rowTolerance(c.dtype));
  return {cl.ok && cs.ok, c.name() + "\n" + cl.message + "\n" + cs.message};
}

/// The VJP from the float64 lse (the forward's residual, rounded to its dtype).
inline Result checkVjp(const Case &c, uint64_t seed, const Runner &run = interpretVjp) {
  Inputs in = randomInputs(c, seed);
  HostBuffer logits(c.dtype, {c.b, c.v}, in.logits), labels = labelBuffer(c, in);
  HostBuffer dloss(c.compute(), {c.b}, in.dloss);
  HostBuffer lse(c.compute(), {c.b}, forward(c.b, c.v, logits.values(), in.labels).lse);
  HostBuffer dlogits(c.dtype, {c.b, c.v});
  run(c, {&dloss, &logits, &labels, &lse}, {&dlogits});
  const Tolerance tol = c.dtype == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(c.dtype);
  Comparison cd = compareWithNaN("dlogits", dlogits.values(),
                                 vjp(c.b, c.v, dloss.values(), logits.values(), in.labels), dlogits.shape, tol);
  return {cd.ok, c.name() + "\n" + cd.message};
}

} // namespace sce_test
