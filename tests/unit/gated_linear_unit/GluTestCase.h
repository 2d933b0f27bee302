//===- GluTestCase.h - gated_linear_unit calls against float64 -----*- C++ -*-===//
//
// One case (shape, dtype, activation, implementation, config): random inputs scaled so
// the pre-activations are about N(0, 1), the call run on the interpreter (or on the
// device by the GPU tests through `Runner`), and the results compared with the float64
// reference of GluReference.h with the attention tests' dtype-aware tolerances.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"
#include "unit/gated_linear_unit/GluReference.h"

#include <tokamax/ops/GatedLinearUnit.h>

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace glu_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;

struct Case {
  std::vector<int64_t> lead;  ///< x's leading dims (M is their product)
  int64_t k = 1, n = 1;
  DType dtype = DType::BF16;
  std::string activation = "swish";
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;

  int64_t m() const { return attention_test::product(lead); }
  std::vector<int64_t> xShape() const { return attention_test::concat(lead, {k}); }
  std::vector<int64_t> outShape() const { return attention_test::concat(lead, {n}); }
  std::vector<int64_t> wShape() const { return {k, 2, n}; }
  tokamax::GluOptions options() const { return {activation, implementation, config}; }
  std::string name() const {
    return fmt::format("x [{}] k {} n {} {} {} {} {}", fmt::join(xShape(), ", "), k, n, tokamax::dtype_name(dtype),
                       activation, implementation.value_or("auto"), config ? config->to_json() : "heuristic");
  }
};

struct Inputs {
  std::vector<double> x, w, dout;
};

inline Inputs randomInputs(const Case &c, uint64_t seed) {
  const double wScale = 1 / std::sqrt(double(std::max<int64_t>(c.k, 1)));
  return {attention_test::randomNormal(size_t(c.m() * c.k), c.dtype, seed),
          attention_test::randomNormal(size_t(c.k * 2 * c.n), c.dtype, seed + 1, wScale),
          attention_test::randomNormal(size_t(c.m() * c.n), c.dtype, seed + 2)};
}

/// Runs the forward (out) or the VJP (dx, dweights) on host buffers.
using Runner = std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpretForward(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::gated_linear_unit_host(in[0]->view(), in[1]->view(), out[0]->view(), c.options());
}
inline void interpretVjp(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::gated_linear_unit_vjp_host(in[0]->view(), in[1]->view(), in[2]->view(), out[0]->view(), out[1]->view(),
                                      c.options());
}

/// bf16 / f16 results carry their rounding (the VJP's also dh's); f32 and f64 are exact
/// up to accumulation order.
inline Tolerance gluTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(d);
}

struct Result {
  bool ok = true;
  std::string message;
};

inline Result checkForward(const Case &c, uint64_t seed, const Runner &run = interpretForward) {
  Inputs in = randomInputs(c, seed);
  HostBuffer x(c.dtype, c.xShape(), in.x), w(c.dtype, c.wShape(), in.w), out(c.dtype, c.outShape());
  run(c, {&x, &w}, {&out});
  const GluActivation act = tokamax::parse_glu_activation(c.activation);
  Comparison cmp = attention_test::compare("out", out.values(), forward(in.x, in.w, c.m(), c.k, c.n, act),
                                           out.shape, gluTolerance(c.dtype), 1e-3);
  return {cmp.ok, c.name() + "\n" + cmp.message};
}

inline Result checkVjp(const Case &c, uint64_t seed, const Runner &run = interpretVjp) {
  Inputs in = randomInputs(c, seed);
  HostBuffer dout(c.dtype, c.outShape(), in.dout), x(c.dtype, c.xShape(), in.x), w(c.dtype, c.wShape(), in.w);
  HostBuffer dx(c.dtype, c.xShape()), dw(c.dtype, c.wShape());
  run(c, {&dout, &x, &w}, {&dx, &dw});
  Gradients ref = vjp(in.dout, in.x, in.w, c.m(), c.k, c.n, tokamax::parse_glu_activation(c.activation));
  Tolerance tol = gluTolerance(c.dtype);
  Comparison cx = attention_test::compare("dx", dx.values(), ref.dx, dx.shape, tol, 1e-3);
  Comparison cw = attention_test::compare("dweights", dw.values(), ref.dw, dw.shape, tol, 1e-3);
  return {cx.ok && cw.ok, c.name() + "\n" + cx.message + "\n" + cw.message};
}

} // namespace glu_test
