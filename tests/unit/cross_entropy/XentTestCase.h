//===- XentTestCase.h - linear_softmax_cross_entropy_loss calls against float64 -*- C++ -*-===//
//
// One case (shape, dtype, reduction, labels, implementation, config): random inputs
// scaled so the logits are about N(0, 1), the call run on the interpreter (or on the
// device by the GPU tests through `Runner`), and the results compared with the float64
// reference of XentReference.h with the attention tests' dtype-aware tolerances.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"
#include "unit/cross_entropy/XentReference.h"

#include <tokamax/ops/CrossEntropy.h>

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace xent_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;

enum class Labels : uint8_t {
  InRange,     ///< every label in [0, V)
  SomeIgnored, ///< every third row ignore_index
  AllIgnored,  ///< every row ignore_index ("mean" is NaN)
  OutOfRange,  ///< row 1 (or 0) -1 or V: a NaN loss row
};

struct Case {
  int64_t b = 1, d = 1, v = 1;
  DType dtype = DType::BF16;
  LossReduction reduction = LossReduction::Mean;
  Labels labels = Labels::SomeIgnored;
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;
  int64_t ignore_index = -100;

  Problem problem() const { return {b, d, v, reduction, ignore_index}; }
  DType compute() const { return dtype == DType::F64 ? DType::F64 : DType::F32; }
  std::vector<int64_t> lossShape() const { return {reduction == LossReduction::None ? b : 1}; }
  tokamax::CrossEntropyOptions options() const { return {reduction, ignore_index, implementation, config}; }
  std::string name() const {
    return fmt::format("B {} D {} V {} {} {} labels {} {} {}", b, d, v, tokamax::dtype_name(dtype),
                       tokamax::loss_reduction_name(reduction), int(labels), implementation.value_or("auto"),
                       config ? config->to_json() : "heuristic");
  }
};

struct Inputs {
  std::vector<double> x, w, dloss;
  std::vector<int64_t> labels;
};

inline Inputs randomInputs(const Case &c, uint64_t seed) {
  const double wScale = 1 / std::sqrt(double(std::max<int64_t>(c.d, 1)));
  Inputs in{attention_test::randomNormal(size_t(c.b * c.d), c.dtype, seed),
            attention_test::randomNormal(size_t(c.d * c.v), c.dtype, seed + 1, wScale),
            attention_test::randomNormal(size_t(c.lossShape()[0]), c.compute(), seed + 2),
            {}};
  std::mt19937_64 rng(seed + 3);
  for (int64_t i = 0; i < c.b; ++i) {
    int64_t l = int64_t(rng() % uint64_t(c.v));
    if ((c.labels == Labels::SomeIgnored && i % 3 == 1) || c.labels == Labels::AllIgnored)
      l = c.ignore_index;
    in.labels.push_back(l);
  }
  if (c.labels == Labels::OutOfRange)
    in.labels[size_t(std::min<int64_t>(1, c.b - 1))] = c.b % 2 ? -1 : c.v;
  return in;
}

inline HostBuffer labelBuffer(const Case &c, const Inputs &in) {
  return HostBuffer(DType::I32, {c.b}, std::vector<double>(in.labels.begin(), in.labels.end()));
}

/// Runs the forward (loss, lse) or the VJP (dx, dw) on host buffers.
using Runner = std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpretForward(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::linear_softmax_cross_entropy_loss_host(in[0]->view(), in[1]->view(), in[2]->view(), out[0]->view(),
                                                  out[1]->view(), c.options());
}
inline void interpretVjp(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::linear_softmax_cross_entropy_loss_vjp_host(in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(),
                                                      in[4]->view(), out[0]->view(), out[1]->view(), c.options());
}

/// loss and lse are f32 sums of products of rounded inputs (f64 for f64); dx and dw go
/// through dlogits rounded to x's dtype.
inline Tolerance lossTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(DType::F32);
}
inline Tolerance gradTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(d);
}

/// compare() where the reference has NaNs (labels out of range): those elements must be
/// NaN in `got` too, and the rest compare as usual.
inline Comparison compareWithNaN(const std::string &name, std::vector<double> got, std::vector<double> ref,
                                 const std::vector<int64_t> &shape, Tolerance tol, double floor) {
  std::atomic<int64_t> misplaced{0};
  attention_test::forElements(int64_t(std::min(ref.size(), got.size())), [&](int64_t begin, int64_t end) {
    int64_t here = 0;
    for (int64_t i = begin; i < end; ++i)
      if (std::isnan(ref[size_t(i)])) {
        here += !std::isnan(got[size_t(i)]);
        got[size_t(i)] = ref[size_t(i)] = 0;
      }
    misplaced += here;
  });
  Comparison c = attention_test::compare(name, got, ref, shape, tol, floor);
  if (misplaced > 0) {
    c.ok = false;
    c.message += fmt::format("; {} elements not NaN where the reference is", misplaced.load());
  }
  return c;
}

struct Result {
  bool ok = true;
  std::string message;
};

inline Result checkForward(const Case &c, uint64_t seed, const Runner &run = interpretForward) {
  Inputs in = randomInputs(c, seed);
  HostBuffer x(c.dtype, {c.b, c.d}, in.x), w(c.dtype, {c.d, c.v}, in.w), labels = labelBuffer(c, in);
  HostBuffer loss(c.compute(), c.lossShape()), lse(c.compute(), {c.b});
  run(c, {&x, &w, &labels}, {&loss, &lse});
  Forward ref = forward(c.problem(), x.values(), w.values(), in.labels);
  Comparison cl = compareWithNaN("loss", loss.values(), ref.loss, loss.shape, lossTolerance(c.dtype), 1e-3);
  Comparison cs = compareWithNaN("lse", lse.values(), ref.lse, lse.shape, lossTolerance(c.dtype), 1e-3);
  return {cl.ok && cs.ok, c.name() + "\n" + cl.message + "\n" + cs.message};
}

/// The VJP from the float64 lse (the forward's residual, rounded to its dtype).
inline Result checkVjp(const Case &c, uint64_t seed, const Runner &run = interpretVjp) {
  Inputs in = randomInputs(c, seed);
  HostBuffer x(c.dtype, {c.b, c.d}, in.x), w(c.dtype, {c.d, c.v}, in.w), labels = labelBuffer(c, in);
  HostBuffer dloss(c.compute(), c.lossShape(), in.dloss);
  const Problem p = c.problem();
  HostBuffer lse(c.compute(), {c.b}, forward(p, x.values(), w.values(), in.labels).lse);
  HostBuffer dx(c.dtype, {c.b, c.d}), dw(c.dtype, {c.d, c.v});
  run(c, {&dloss, &x, &w, &labels, &lse}, {&dx, &dw});
  Gradients ref = vjp(p, dloss.values(), x.values(), w.values(), in.labels);
  Tolerance tol = gradTolerance(c.dtype);
  Comparison cx = compareWithNaN("dx", dx.values(), ref.dx, dx.shape, tol, 1e-3);
  Comparison cw = compareWithNaN("dw", dw.values(), ref.dw, dw.shape, tol, 1e-3);
  return {cx.ok && cw.ok, c.name() + "\n" + cx.message + "\n" + cw.message};
}

} // namespace xent_test
