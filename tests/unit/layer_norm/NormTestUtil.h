//===- NormTestUtil.h - Helpers of the norm tests -----------------*- C++ -*-===//
//
// float64 references written from the formulas, independently of the kernels, and
// host buffers for the *_host entry points.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/Numerics.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

/// A host tensor: values of one dtype in 8-byte aligned storage.
struct HostTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    storage.assign((numel() * dtype_size(d) + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);  // poisoned
  }
  HostTensor(DType d, std::vector<int64_t> s, const std::vector<double> &values) : HostTensor(d, std::move(s)) {
    for (size_t i = 0; i < values.size(); ++i)
      store_from_double(dtype, bytes() + i * dtype_size(dtype), values[i]);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  uint8_t *bytes() { return reinterpret_cast<uint8_t *>(storage.data()); }
  const uint8_t *bytes() const { return reinterpret_cast<const uint8_t *>(storage.data()); }
  TensorView view() const { return host_view(storage.data(), dtype, shape); }
  std::vector<double> values() const { return test::from_bytes(bytes(), size_t(numel()), dtype); }
};

std::vector<double> randomValues(size_t n, DType dtype, uint32_t seed, double lo = 0.05, double hi = 3.0,
                                 double shift = 0) {
  return test::random_values(n, dtype, seed, lo, hi, shift);
}

/// ||got - ref|| / max(||ref||, floor).
double relError(const std::vector<double> &got, const std::vector<double> &ref, double floor = 1e-30) {
  return test::rel_error(got, ref, floor);
}

/// Relative error bound of a norm's outputs in `d`.
double tolerance(DType d) {
  switch (d) {
  case DType::BF16: return 1e-2;
  case DType::F16: return 2e-3;
  case DType::F32: return 2e-5;
  default: return 1e-10;
  }
}

/// float64 layer/rms norm and its VJP over `axis` of x (row-major), from the formulas.
struct Reference {
  std::vector<double> y, mean, rstd, dx, dscale, doffset;
  /// ||dy * scale * rstd||: the size of dx's terms. dx itself can be far smaller (rows of
  /// one element: rms dx = rstd * dy * eps / (x^2 + eps)), and then any f32 evaluation
  /// loses digits to cancellation; errors are measured against this.
  double dx_scale;
};

Reference reference(bool layer, const std::vector<int64_t> &shape, int axis, const std::vector<double> &x,
                    const std::vector<double> *scale, const std::vector<double> *offset, const std::vector<double> &dy,
                    double eps) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int d = 0; d < axis; ++d)
    outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
  Reference r;
  r.dx_scale = 0;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dscale.assign(n, 0);
  r.doffset.assign(n, 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      double mean = 0;
      if (layer) {
        for (int64_t j = 0; j < n; ++j)
          mean += x[at(j)];
        mean /= double(n);
      }
      double var = 0;
      for (int64_t j = 0; j < n; ++j)
        var += (x[at(j)] - mean) * (x[at(j)] - mean);
      double rstd = 1 / std::sqrt(var / double(n) + eps);
      r.mean.push_back(mean);
      r.rstd.push_back(rstd);
      double c1 = 0, c2 = 0;
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (x[at(j)] - mean) * rstd, s = scale ? (*scale)[j] : 1.0;
        r.y[at(j)] = xhat * s + (offset ? (*offset)[j] : 0.0);
        c1 += dy[at(j)] * s * xhat;
        c2 += dy[at(j)] * s;
        r.dscale[j] += dy[at(j)] * xhat;
        r.doffset[j] += dy[at(j)];
      }
      c1 /= double(n);
      c2 /= double(n);
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (x[at(j)] - mean) * rstd, s = scale ? (*scale)[j] : 1.0;
        r.dx[at(j)] = rstd * (dy[at(j)] * s - (layer ? c2 : 0.0) - xhat * c1);
        r.dx_scale += std::pow(rstd * dy[at(j)] * s, 2);
      }
    }
  return r;
}

struct Case {
  bool layer = true;
  DType x = DType::F32;
  std::vector<int64_t> shape;
  int axis = -1;
  std::optional<DType> scale, offset;
  std::optional<std::string> implementation;
  std::optional<Config> fwd_config, vjp_config;
  double shift = 0;  // added to x (numerics of the variance)
  std::optional<DType> residual;  // mean / rstd dtype (default: the compute dtype)
  double tolerance_factor = 1;
};

/// Runs forward and VJP on the interpreter; checks y, the residuals, dx, dscale, doffset.
void check(const Case &c) {
  const DType compute = c.x == DType::F64 ? DType::F64 : DType::F32;
  const int rank = int(c.shape.size());
  const int axis = c.axis < 0 ? c.axis + rank : c.axis;
  const int64_t n = c.shape[axis];
  HostTensor x(c.x, c.shape, randomValues(HostTensor(c.x, c.shape).numel(), c.x, 1, 0.05, 3.0, c.shift));
  const int64_t rows = x.numel() / n;
  HostTensor dy(c.x, c.shape, randomValues(x.numel(), c.x, 2));
  std::optional<HostTensor> scale, offset;
  if (c.scale)
    scale.emplace(*c.scale, std::vector<int64_t>{n}, randomValues(n, *c.scale, 3, 0.5, 1.5));
  if (c.offset && c.layer)
    offset.emplace(*c.offset, std::vector<int64_t>{n}, randomValues(n, *c.offset, 4));
  std::vector<double> sv = scale ? scale->values() : std::vector<double>{}, ov = offset ? offset->values() : sv;
  const double eps = 1e-5;
  Reference ref = reference(c.layer, c.shape, axis, x.values(), scale ? &sv : nullptr, offset ? &ov : nullptr,
                            dy.values(), eps);

  NormOptions fwd{.axis = c.axis, .epsilon = eps, .implementation = c.implementation, .config = c.fwd_config};
  NormOptions vjp{.axis = c.axis, .epsilon = eps, .implementation = c.implementation, .config = c.vjp_config};
  const DType residual = c.residual.value_or(compute);
  HostTensor y(c.x, c.shape), mean(residual, {rows}), rstd(residual, {rows});
  TensorView sView = scale ? scale->view() : TensorView(), oView = offset ? offset->view() : TensorView();
  TensorView yv = y.view(), mv = mean.view(), rv = rstd.view(), xv = x.view();
  if (c.layer)
    layer_norm_host(xv, scale ? &sView : nullptr, offset ? &oView : nullptr, yv, fwd, &mv, &rv);
  else
    rms_norm_host(xv, scale ? &sView : nullptr, yv, fwd, &rv);
  double tol = tolerance(c.x) * c.tolerance_factor;
  CHECK(relError(y.values(), ref.y) <= tol);
  // The mean's error is relative to the rows' spread: a mean near zero (one row of
  // centred values) is as accurate as any, in absolute terms.
  double stdNorm = 0;
  for (double r : ref.rstd)
    stdNorm += 1 / (r * r);
  if (c.layer)
    CHECK(relError(mean.values(), ref.mean, 1e-2 * std::sqrt(stdNorm)) <= tolerance(residual) * c.tolerance_factor);
  CHECK(relError(rstd.values(), ref.rstd) <= tolerance(residual) * c.tolerance_factor);

  DType paramType = c.scale.value_or(c.x);
  HostTensor dx(c.x, c.shape), dscale(paramType, {n}), doffset(c.offset.value_or(c.x), {n});
  TensorView dxv = dx.view(), dsv = dscale.view(), dov = doffset.view(), dyv = dy.view();
  if (c.layer)
    layer_norm_vjp_host(dyv, xv, scale ? &sView : nullptr, mv, rv, dxv, &dsv, &dov, vjp);
  else
    rms_norm_vjp_host(dyv, xv, scale ? &sView : nullptr, rv, dxv, &dsv, vjp);
  // dx goes through f32 residuals and a cancellation; bf16 / f16 round the output.
  // f64 math on f32 residuals is exact to about f32's precision.
  double f64Tol = residual == DType::F32 ? 1e-6 : 1e-10;
  CHECK(relError(dx.values(), ref.dx, 1e-2 * std::sqrt(ref.dx_scale)) <= std::max(tol, c.x == DType::F64 ? f64Tol : 1e-4));
  CHECK(relError(dscale.values(), ref.dscale) <=
        std::max(tolerance(paramType), c.x == DType::F64 ? f64Tol : 1e-4) * c.tolerance_factor);
  if (c.layer)
    CHECK(relError(doffset.values(), ref.doffset) <= std::max(tolerance(doffset.dtype), 1e-4));
}

std::string describe(const Case &c) {
  std::string s = std::string(c.layer ? "layer_norm " : "rms_norm ") + std::string(dtype_name(c.x)) + " [";
  for (size_t i = 0; i < c.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(c.shape[i]);
  s += "] axis " + std::to_string(c.axis);
  s += c.scale ? " scale " + std::string(dtype_name(*c.scale)) : " no-scale";
  s += c.offset ? " offset " + std::string(dtype_name(*c.offset)) : " no-offset";
  s += " impl " + c.implementation.value_or("auto");
  if (c.fwd_config)
    s += " fwd " + c.fwd_config->to_json();
  if (c.vjp_config)
    s += " vjp " + c.vjp_config->to_json();
  return s;
}

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

BoundArgs layerArgs(DType d, std::vector<int64_t> shape, int axis = -1) {
  int64_t n = shape[axis < 0 ? axis + shape.size() : axis];
  return bind_layer_norm(spec(shape, d), spec({n}, d), spec({n}, d), spec(shape, d), std::nullopt, std::nullopt, axis,
                         1e-5);
}

} // namespace
