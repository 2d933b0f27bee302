//===- AttentionFp8TestCase.h - One attention_fp8 case and its check -*- C++ -*-===//
//
// What the interpreter and GPU fp8 attention tests share: a case (implementation,
// dtype, sizes, options, descales, lengths), its random fp8 inputs and f32 descales
// (typed buffers for the op, and the float64 problem: each element times its batch
// row's and kv head's descale, through AttentionReference.h), and the check of a
// call's out and lse against it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "unit/attention/AttentionTestCase.h"

#include <tokamax/ops/AttentionFp8.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace attention_test {

struct Fp8Case {
  std::string implementation;
  std::optional<tokamax::Config> config;  ///< default: the heuristic
  tokamax::DType dtype = tokamax::DType::F8E4M3;
  Dims dims;
  Options options;
  bool descales = true;
  std::vector<int32_t> q_lengths, kv_lengths;
  uint64_t seed = 1;
};

inline std::string describe(const Fp8Case &c) {
  const Dims &d = c.dims;
  return fmt::format("{} {} B[{}] T{} S{} N{} K{} H{} Hv{}{}{}{}{}{}{}", c.implementation,
                     tokamax::dtype_name(c.dtype), fmt::join(d.batch, ","), d.t, d.s, d.n, d.k, d.h, d.hv,
                     c.options.is_causal ? " causal" : "", c.options.window ? " window" : "",
                     c.options.soft_cap ? " cap" : "", c.descales ? " descales" : "",
                     c.kv_lengths.empty() ? "" : " lengths", c.config ? " config " + c.config->to_json() : "");
}

/// A case's inputs (typed buffers) and the float64 outputs they should give.
struct Fp8Data {
  HostBuffer q, k, v, q_descale, k_descale, v_descale;
  std::optional<HostBuffer> q_lengths, kv_lengths;
  Outputs reference;
  double v_max = 0;  ///< the largest |v| times its descale
};

inline Fp8Data makeFp8Data(const Fp8Case &c, int threads = 1) {
  using tokamax::DType;
  const Dims &d = c.dims;
  const uint64_t seed = c.seed * 16;
  // Values spread over fp8's range (|x| up to ~4 sigma of 1.5), descales in [0.25, 1].
  const std::vector<double> q = randomNormal(size_t(product(d.qShape())), c.dtype, seed, 1.5),
                            k = randomNormal(size_t(product(d.kShape())), c.dtype, seed + 1, 1.5),
                            v = randomNormal(size_t(product(d.vShape())), c.dtype, seed + 2, 1.5);
  const int64_t perKvHead = d.rows() * d.k;
  auto descales = [&](uint64_t s) {
    if (!c.descales)
      return std::vector<double>(size_t(perKvHead), 1.0);
    std::vector<double> x = randomNormal(size_t(perKvHead), DType::F64, s, 1.0);
    for (double &e : x)
      e = 0.25 + 0.75 * std::abs(std::tanh(e));
    return roundedTo(DType::F32, x);
  };
  const std::vector<double> qd = descales(seed + 3), kd = descales(seed + 4), vd = descales(seed + 5);
  // Element i of a [B..., rows, heads, dim] tensor times the descale of its batch row and
  // kv head (query heads: their group's).
  auto dequantized = [&](const std::vector<double> &x, int64_t rows, int64_t heads, int64_t dim, int64_t group,
                         const std::vector<double> &scale) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t head = int64_t(i) / dim % heads, row = int64_t(i) / (dim * heads * rows);
      y[i] = x[i] * scale[size_t(row * d.k + head / group)];
    }
    return y;
  };
  Inputs in;
  in.q = dequantized(q, d.t, d.n, d.h, d.n / d.k, qd);
  in.k = dequantized(k, d.s, d.k, d.h, 1, kd);
  in.v = dequantized(v, d.s, d.k, d.hv, 1, vd);
  in.q_lengths = c.q_lengths, in.kv_lengths = c.kv_lengths;
  std::vector<int64_t> perHead = d.batch;
  perHead.push_back(d.k);
  Fp8Data data{HostBuffer(c.dtype, d.qShape(), q), HostBuffer(c.dtype, d.kShape(), k),
               HostBuffer(c.dtype, d.vShape(), v), HostBuffer(DType::F32, perHead, qd),
               HostBuffer(DType::F32, perHead, kd), HostBuffer(DType::F32, perHead, vd),
               std::nullopt, std::nullopt, Reference(d, c.options, in).run(threads), 0.0};
  if (!c.q_lengths.empty())
    data.q_lengths = HostBuffer(DType::I32, d.batch, std::vector<double>(c.q_lengths.begin(), c.q_lengths.end()));
  if (!c.kv_lengths.empty())
    data.kv_lengths = HostBuffer(DType::I32, d.batch, std::vector<double>(c.kv_lengths.begin(), c.kv_lengths.end()));
  for (double x : in.v)
    data.v_max = std::max(data.v_max, std::abs(x));
  return data;
}

/// The case's options around views of its lengths (which must outlive them).
inline tokamax::AttentionOptions fp8Options(const Fp8Case &c, const tokamax::TensorView *q_lengths,
                                            const tokamax::TensorView *kv_lengths) {
  tokamax::AttentionOptions o = maskOptions(c.options);
  o.q_seq_lengths = q_lengths, o.kv_seq_lengths = kv_lengths;
  if (!c.implementation.empty())
    o.implementation = c.implementation;
  o.config = c.config;
  return o;
}

/// out and lse of a call against float64. out: bf16's rounding of the f32 result (2^-8
/// relative); hopper also rounds each weight of P to fp8 (half a unit: 2^-4 for e4m3,
/// 2^-3 for e5m2) before P V, an error of at most that share of the largest |v| (in
/// practice far less: the roundings average out over the keys, which the test holds it
/// to: within half the bound, as a wrong key, head or descale moves out by a share of
/// |v| itself). lse comes from the f32 P, but Hopper's fp8 tensor cores accumulate the
/// logits with about 14 bits (DeepSeek-V3's report; the hopper lse differed by up to
/// 3.4e-4 at 0.92 on an H100): 2e-3 relative there, 1e-4 on the interpreter's exact
/// products and for reference.
inline void checkFp8Results(const Fp8Case &c, const Fp8Data &data, const std::vector<double> &out,
                            const std::vector<double> &lse, bool device = false) {
  const double lseTolerance = device && c.implementation != "reference" ? 2e-3 : 1e-4;
  const Outputs &ref = data.reference;
  const bool hopper = c.implementation != "reference";
  const double pRounding = c.dtype == tokamax::DType::F8E4M3 ? 0x1p-4 : 0x1p-3;
  const double tolerance = ((hopper ? pRounding : 0.0) + 0x1p-8) * data.v_max + 1e-6;
  double worst = 0;
  REQUIRE(out.size() == ref.out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("out[" << i << "] = " << out[i] << ", float64 " << ref.out[i]);
    REQUIRE(std::isfinite(out[i]));
    REQUIRE(std::abs(out[i] - ref.out[i]) <= tolerance);
    worst = std::max(worst, std::abs(out[i] - ref.out[i]));
  }
  REQUIRE(lse.size() == ref.lse.size());
  for (size_t r = 0; r < lse.size(); ++r) {
    INFO("lse[" << r << "] = " << lse[r] << ", float64 " << ref.lse[r]);
    if (ref.lse[r] == kInf) {
      REQUIRE(lse[r] == kInf);
      continue;
    }
    REQUIRE(std::abs(lse[r] - ref.lse[r]) <= lseTolerance * std::max(1.0, std::abs(ref.lse[r])));
  }
  INFO("largest error " << worst << " against the bound " << tolerance);
  if (hopper)
    CHECK(worst <= 0.5 * tolerance);
}

} // namespace attention_test
