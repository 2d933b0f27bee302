//===- AttentionVarlenTestCase.h - Packed attention cases and their reference -*- C++ -*-===//
//
// What the packed (variable-length) attention tests share: a packed call (Packed: the
// case, its cu_seqlens and max lengths), its float64 reference (each sequence through
// AttentionReference.h alone, causal / window aligned bottom-right), its inputs with the
// cu_seqlens tensors, a run on the interpreter, and the cases' lengths and heads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/BadInput.h"
#include "unit/attention/AttentionTestCase.h"

#include <tokamax/ops/Attention.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace varlen_test {

using namespace tokamax;
using namespace attention_test;
using tokamax::bad_input::NamesArgument;

inline ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

inline HostBuffer int32s(const std::vector<int32_t> &v, std::vector<int64_t> shape = {}) {
  if (shape.empty())
    shape = {int64_t(v.size())};
  return HostBuffer(DType::I32, shape, std::vector<double>(v.begin(), v.end()));
}

inline std::vector<int32_t> cumulative(const std::vector<int32_t> &lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lengths)
    cu.push_back(cu.back() + l);
  return cu;
}

/// FlashAttention's bottom-right alignment: key j of a sequence with T queries and S
/// keys is visible to query i when j <= i + (S - T) (causal) and within the window of
/// that diagonal.
inline bool visibleInSequence(const Options &o, int64_t i, int64_t j, int64_t t, int64_t s) {
  const int64_t diagonal = i + (s - t);
  if (o.is_causal && j > diagonal)
    return false;
  return !o.window || ((!o.window->left || j >= diagonal - *o.window->left) &&
                       (!o.window->right || j <= diagonal + *o.window->right));
}

/// A packed call: `c.dims` is the packed tensors' ([total_q, N, H] ...: batch {}, t =
/// total_q, s = total_kv), so makeData, checkResults and dsinksScale take it as it is.
struct Packed {
  Case c;
  std::vector<int32_t> cu_q, cu_kv;
  int64_t max_q = 0, max_kv = 0;
};

struct Lengths {
  std::vector<int32_t> q, kv;
  int64_t max_q = 0, max_kv = 0;  ///< 0: the longest sequence's
};

inline Packed makePacked(const ImplDtype &id, const Dims &heads, const Lengths &l) {
  Packed p;
  p.c = implCase(id, heads);
  p.cu_q = cumulative(l.q), p.cu_kv = cumulative(l.kv);
  p.c.dims.batch = {};
  p.c.dims.t = p.cu_q.back(), p.c.dims.s = p.cu_kv.back();
  p.max_q = l.max_q ? l.max_q : *std::max_element(l.q.begin(), l.q.end());
  p.max_kv = l.max_kv ? l.max_kv : *std::max_element(l.kv.begin(), l.kv.end());
  return p;
}

inline std::string describe(const Packed &p) {
  std::vector<int32_t> q, kv;
  for (size_t b = 0; b + 1 < p.cu_q.size(); ++b)
    q.push_back(p.cu_q[b + 1] - p.cu_q[b]), kv.push_back(p.cu_kv[b + 1] - p.cu_kv[b]);
  return fmt::format("{} packed q_len [{}] kv_len [{}] max_seqlen {}/{}", attention_test::describe(p.c),
                     fmt::join(q, ","), fmt::join(kv, ","), p.max_q, p.max_kv);
}

/// float64 outputs of a packed call: each sequence through Reference on its own (batch
/// {}, T_b queries, S_b keys, the bottom-right mask [T_b, S_b]), placed at its rows.
inline Outputs packedReference(const Packed &p, const Inputs &in) {
  const Dims &d = p.c.dims;
  const bool vjp = !in.dout.empty();
  Outputs o;
  o.out.assign(size_t(product(d.outShape())), 0.0);
  o.lse.assign(size_t(d.n * d.t), kInf);
  o.row_attends.assign(size_t(d.n * d.t), 0);
  if (vjp) {
    o.dq.assign(in.q.size(), 0.0), o.dk.assign(in.k.size(), 0.0), o.dv.assign(in.v.size(), 0.0);
    o.key_seen.assign(size_t(d.s * d.k), 0);
    if (!in.sinks.empty())
      o.dsinks.assign(size_t(d.n), 0.0);
  }
  Options dense;  // causal and window go into the mask
  dense.scale = p.c.options.scale, dense.soft_cap = p.c.options.soft_cap;
  auto slice = [](const std::vector<double> &v, int64_t row, int64_t rows, int64_t width) {
    return v.empty() ? v : std::vector<double>(v.begin() + row * width, v.begin() + (row + rows) * width);
  };
  auto place = [](const std::vector<double> &from, std::vector<double> &to, int64_t row, int64_t width) {
    std::copy(from.begin(), from.end(), to.begin() + row * width);
  };
  for (size_t b = 0; b + 1 < p.cu_q.size(); ++b) {
    const int64_t q0 = p.cu_q[b], t = p.cu_q[b + 1] - q0, k0 = p.cu_kv[b], s = p.cu_kv[b + 1] - k0;
    Dims sd = d;
    sd.t = t, sd.s = s;
    Inputs si;
    si.q = slice(in.q, q0, t, d.n * d.h), si.dout = slice(in.dout, q0, t, d.n * d.hv);
    si.k = slice(in.k, k0, s, d.k * d.h), si.v = slice(in.v, k0, s, d.k * d.hv);
    si.sinks = in.sinks;
    if (t > 0 && s > 0) {
      si.mask_shape = {t, s};
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < s; ++j)
          si.mask.push_back(visibleInSequence(p.c.options, i, j, t, s));
    }
    const Outputs r = Reference(sd, dense, si).run();
    place(r.out, o.out, q0, d.n * d.hv);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < t; ++i) {
        o.lse[size_t(n * d.t + q0 + i)] = r.lse[size_t(n * t + i)];
        o.row_attends[size_t(n * d.t + q0 + i)] = r.row_attends[size_t(n * t + i)];
      }
    if (!vjp || t == 0)  // no queries: dk = dv = 0, no key seen
      continue;
    place(r.dq, o.dq, q0, d.n * d.h);
    place(r.dk, o.dk, k0, d.k * d.h);
    place(r.dv, o.dv, k0, d.k * d.hv);
    std::copy(r.key_seen.begin(), r.key_seen.end(), o.key_seen.begin() + k0 * d.k);
    for (size_t n = 0; n < r.dsinks.size(); ++n)
      o.dsinks[n] += r.dsinks[n];
  }
  return o;
}

/// A packed call's inputs (CaseData, as makeData makes them) with its cu_seqlens.
struct PackedData {
  CaseData data;
  HostBuffer cu_q, cu_kv;
  TensorView cu_q_view, cu_kv_view, sinks_view;

  explicit PackedData(const Packed &p)
      : data(makeData(p.c)), cu_q(int32s(p.cu_q)), cu_kv(int32s(p.cu_kv)), cu_q_view(cu_q.view()),
        cu_kv_view(cu_kv.view()), sinks_view(data.sinks ? data.sinks->view() : TensorView()) {}
  PackedData(const PackedData &) = delete;  // options point into it

  AttentionOptions options(const Packed &p) const {
    AttentionOptions o = apiOptions(p.c, nullptr, nullptr, nullptr, nullptr, data.sinks ? &sinks_view : nullptr);
    o.cu_seqlens_q = &cu_q_view, o.cu_seqlens_kv = &cu_kv_view;
    o.max_seqlen_q = p.max_q, o.max_seqlen_kv = p.max_kv;
    return o;
  }
};

/// The packed forward (and VJP) with `options`; every output starts as NaN.
inline InterpreterRun runPacked(const Packed &p, const PackedData &pd, const AttentionOptions &options) {
  const Case &c = p.c;
  const Dims &d = c.dims;
  const CaseData &data = pd.data;
  HostBuffer out(c.dtype, d.outShape()), lse(lseDtype(c.dtype), d.lseShape());
  TensorView outView = out.view(), lseView = lse.view();
  dot_product_attention_host(data.q.view(), data.k.view(), data.v.view(), outView, options, &lseView);
  InterpreterRun run;
  run.results.out = out.values(), run.results.lse = lse.values();
  run.bits = {out.storage, lse.storage};
  if (!c.vjp)
    return run;
  HostBuffer dq(c.dtype, d.qShape()), dk(c.dtype, d.kShape()), dv(c.dtype, d.vShape());
  std::optional<HostBuffer> dsinks;
  if (data.sinks)
    dsinks.emplace(DType::F32, data.sinks->shape);
  TensorView dsinksView = dsinks ? dsinks->view() : TensorView();
  dot_product_attention_vjp_host(data.dout.view(), data.q.view(), data.k.view(), data.v.view(), outView, lseView,
                                 dq.view(), dk.view(), dv.view(), options, nullptr, dsinks ? &dsinksView : nullptr);
  run.results.dq = dq.values(), run.results.dk = dk.values(), run.results.dv = dv.values();
  run.bits.insert(run.bits.end(), {dq.storage, dk.storage, dv.storage});
  if (dsinks) {
    run.results.dsinks = dsinks->values();
    run.bits.push_back(dsinks->storage);
  }
  return run;
}

inline InterpreterRun runPacked(const Packed &p, const PackedData &pd) { return runPacked(p, pd, pd.options(p)); }

/// "tile" and "chunked" with the dtypes they serve on packed calls.
inline const std::vector<ImplDtype> kPackedImpls = {{"tile", DType::BF16},    {"tile", DType::F16},
                                             {"chunked", DType::BF16}, {"chunked", DType::F16},
                                             {"chunked", DType::F32},  {"chunked", DType::F64}};

// Self-attention with an empty sequence, one of 1, lengths off the blocks and one past
// 64; max_seqlen past the longest.
inline const Lengths kSelf{{37, 0, 1, 70, 16}, {37, 0, 1, 70, 16}, 96, 96};
// q shorter and longer than kv (causal: rows that see no key), a sequence with keys and
// no queries (keys nobody sees), one with queries and no keys.
inline const Lengths kCross{{5, 30, 0, 70, 3, 1}, {20, 12, 7, 66, 0, 1}};
inline const Dims kGqa{.n = 4, .k = 2, .h = 40, .hv = 64}, kMha{.n = 2, .k = 2, .h = 64, .hv = 64};

} // namespace varlen_test
