//===- AttentionTestCase.h - One attention test case and its checks -*- C++ -*-===//
//
// What the interpreter and GPU attention tests share on top of AttentionReference.h: a
// test case (implementation, dtype, sizes, options, which optional tensors), its random
// inputs as typed buffers and float64 values, the AttentionOptions that call it, and the
// check of an implementation's outputs against the float64 reference (tolerances by
// dtype, exact zeros where nothing is attended).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/AttentionReference.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace attention_test {

struct Case {
  std::string implementation;  ///< "reference", "chunked", "tile"; empty = auto
  DType dtype = DType::BF16;
  Dims dims;
  Options options;
  std::optional<std::string> bias_dims;  ///< broadcastShape's `full` ("bnts", "nts", "s", ...)
  std::optional<DType> bias_dtype;       ///< default: dtype
  std::optional<std::string> mask_dims;
  bool mask_empty_row = false;  ///< the mask hides every key of query row min(1, T - 1)
  std::vector<int32_t> q_lengths, kv_lengths;
  /// Sinks (f32 [N]): `sink_values` where given, else with `sinks` random values around
  /// `sink_mean` (spread 1.5), large enough to take a visible share of each row.
  bool sinks = false;
  double sink_mean = 2.0;
  std::vector<double> sink_values;
  std::optional<tokamax::Config> config;  ///< default: the implementation's heuristic
  std::optional<tokamax::Config> vjp_config;  ///< the VJP's, where it differs from config
  bool deterministic = true;                  ///< AttentionOptions::deterministic (the VJP's)
  /// AttentionOptions::layout BNTH: q, k, v, dout are handed over as [B..., heads, seq, dim]
  /// copies and out, dq, dk, dv come back in that layout; runOnInterpreter turns them back,
  /// so its results and bits compare with the BTNH run's directly.
  bool bnth = false;
  bool vjp = true;
  double tolerance_factor = 1;
  uint64_t seed = 1;
};

inline std::string describe(const Case &c) {
  const Dims &d = c.dims;
  std::string s = fmt::format("{} {} B[{}] T{} S{} N{} K{} H{} Hv{}",
                              c.implementation.empty() ? "auto" : c.implementation, tokamax::dtype_name(c.dtype),
                              fmt::join(d.batch, ","), d.t, d.s, d.n, d.k, d.h, d.hv);
  auto side = [](const std::optional<int64_t> &v) { return v ? std::to_string(*v) : std::string("-"); };
  if (c.options.scale)
    s += fmt::format(" scale {}", *c.options.scale);
  if (c.options.is_causal)
    s += " causal";
  if (c.options.window)
    s += fmt::format(" window [{}, {}]", side(c.options.window->left), side(c.options.window->right));
  if (c.options.soft_cap)
    s += fmt::format(" cap {}", *c.options.soft_cap);
  if (c.bias_dims)
    s += fmt::format(" bias [{}] {}", fmt::join(d.broadcastShape(*c.bias_dims), ","),
                     tokamax::dtype_name(c.bias_dtype.value_or(c.dtype)));
  if (c.mask_dims)
    s += fmt::format(" mask [{}]{}", fmt::join(d.broadcastShape(*c.mask_dims), ","),
                     c.mask_empty_row ? " empty row" : "");
  if (!c.q_lengths.empty())
    s += fmt::format(" q_len [{}]", fmt::join(c.q_lengths, ","));
  if (!c.kv_lengths.empty())
    s += fmt::format(" kv_len [{}]", fmt::join(c.kv_lengths, ","));
  if (!c.sink_values.empty())
    s += fmt::format(" sinks [{}]", fmt::join(c.sink_values, ","));
  else if (c.sinks)
    s += fmt::format(" sinks ~{}", c.sink_mean);
  if (c.config)
    s += " config " + c.config->to_json();
  if (c.vjp_config)
    s += " vjp config " + c.vjp_config->to_json();
  if (!c.deterministic)
    s += " deterministic=false";
  return s + (c.vjp ? " fwd+vjp" : " fwd");
}

inline DType lseDtype(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

/// A case's inputs as typed buffers (for the op) and as float64 values (for the reference).
struct CaseData {
  HostBuffer q, k, v, dout;
  std::optional<HostBuffer> bias, mask, q_lengths, kv_lengths, sinks;
  Inputs inputs;
};

inline CaseData makeData(const Case &c) {
  const Dims &d = c.dims;
  CaseData data;
  Inputs &in = data.inputs;
  const uint64_t seed = c.seed * 16;
  in.q = randomNormal(size_t(product(d.qShape())), c.dtype, seed);
  in.k = randomNormal(size_t(product(d.kShape())), c.dtype, seed + 1);
  in.v = randomNormal(size_t(product(d.vShape())), c.dtype, seed + 2);
  data.q = HostBuffer(c.dtype, d.qShape(), in.q);
  data.k = HostBuffer(c.dtype, d.kShape(), in.k);
  data.v = HostBuffer(c.dtype, d.vShape(), in.v);
  if (c.vjp) {
    in.dout = randomNormal(size_t(product(d.outShape())), c.dtype, seed + 3);
    data.dout = HostBuffer(c.dtype, d.outShape(), in.dout);
  }
  if (c.bias_dims) {
    const DType bd = c.bias_dtype.value_or(c.dtype);
    in.bias_shape = d.broadcastShape(*c.bias_dims);
    in.bias = randomNormal(size_t(product(in.bias_shape)), bd, seed + 4);
    data.bias = HostBuffer(bd, in.bias_shape, in.bias);
  }
  if (c.mask_dims) {
    in.mask_shape = d.broadcastShape(*c.mask_dims);
    in.mask = randomMask(size_t(product(in.mask_shape)), seed + 5, 0.75);
    if (c.mask_empty_row) {
      const int64_t tm = in.mask_shape[in.mask_shape.size() - 2], sm = in.mask_shape.back();
      for (size_t i = 0; i < in.mask.size(); ++i)
        if (int64_t(i) / sm % tm == std::min<int64_t>(1, tm - 1))
          in.mask[i] = 0;
    }
    data.mask = HostBuffer(DType::Bool, in.mask_shape, std::vector<double>(in.mask.begin(), in.mask.end()));
  }
  auto lengths = [&](const std::vector<int32_t> &l, std::optional<HostBuffer> &buffer, std::vector<int32_t> &into) {
    if (l.empty())
      return;
    into = l;
    buffer = HostBuffer(DType::I32, d.batch, std::vector<double>(l.begin(), l.end()));
  };
  lengths(c.q_lengths, data.q_lengths, in.q_lengths);
  lengths(c.kv_lengths, data.kv_lengths, in.kv_lengths);
  if (c.sinks || !c.sink_values.empty()) {
    in.sinks = c.sink_values;
    if (in.sinks.empty())
      for (double x : randomNormal(size_t(d.n), DType::F64, seed + 6, 1.5))
        in.sinks.push_back(c.sink_mean + x);
    in.sinks = roundedTo(DType::F32, in.sinks);
    data.sinks = HostBuffer(DType::F32, {d.n}, in.sinks);
  }
  return data;
}

/// AttentionOptions with `o`'s scale, causal mask, window and soft cap.
inline tokamax::AttentionOptions maskOptions(const Options &o) {
  tokamax::AttentionOptions a;
  a.scale = o.scale;
  a.is_causal = o.is_causal;
  if (o.window)
    a.local_window = tokamax::LocalWindow{o.window->left, o.window->right};
  a.logits_soft_cap = o.soft_cap;
  return a;
}

/// The case's AttentionOptions around views of its optional tensors (which must outlive it).
inline tokamax::AttentionOptions apiOptions(const Case &c, const tokamax::TensorView *bias,
                                            const tokamax::TensorView *mask, const tokamax::TensorView *q_lengths,
                                            const tokamax::TensorView *kv_lengths,
                                            const tokamax::TensorView *sinks = nullptr) {
  tokamax::AttentionOptions o = maskOptions(c.options);
  o.deterministic = c.deterministic;
  o.layout = c.bnth ? tokamax::AttentionLayout::BNTH : tokamax::AttentionLayout::BTNH;
  o.bias = bias, o.mask = mask, o.q_seq_lengths = q_lengths, o.kv_seq_lengths = kv_lengths, o.sinks = sinks;
  if (!c.implementation.empty())
    o.implementation = c.implementation;
  o.config = c.config;
  return o;
}

/// What an implementation produced, widened to double (gradients empty without a VJP).
struct Results {
  std::vector<double> out, lse, dq, dk, dv, dbias, dsinks;
};

/// The size of dsinks[n] before its terms cancel: sum over the rows of |exp(sink - lse)
/// delta| (delta from the reference's out and dout), the largest over the heads.
inline double dsinksScale(const Case &c, const Inputs &in, const Outputs &ref) {
  const Dims &d = c.dims;
  std::vector<double> scale(size_t(d.n), 0.0);
  for (int64_t r = 0; r < int64_t(ref.lse.size()); ++r) {
    const int64_t row = r / (d.n * d.t), n = r / d.t % d.n, t = r % d.t, q = (row * d.t + t) * d.n + n;
    if (ref.lse[r] == kInf)
      continue;
    double delta = 0;
    for (int64_t j = 0; j < d.hv; ++j)
      delta += in.dout[q * d.hv + j] * ref.out[q * d.hv + j];
    scale[n] += std::abs(std::exp(in.sinks[n] - ref.lse[r]) * delta);
  }
  return *std::max_element(scale.begin(), scale.end());
}

/// Every output against the reference; rows that see no key must be exact zeros (out,
/// dq) with lse = +inf (with sinks: exactly the sink, +inf on padding rows), and keys no
/// attending row sees must get exactly zero dk / dv. dsinks is a sum over every row whose
/// terms cancel: measured against 1% of its terms' absolute sum (dsinksScale).
/// dq, dk and dbias are sums of dS = P (dP - delta) terms that can cancel to zero (a row
/// with one visible key, a bias constant along S): they are measured against at least 1%
/// of dv's rms (dv = P^T dout does not cancel), and their worst element gets 2.5x the
/// bound, since delta = rowsum(dout * out) comes from the stored (rounded) out: in a row
/// that sees few keys, where dP - delta nearly cancels, that rounding is most of dq (bf16
/// at T 4097, S 1000, causal: 0.0129 off in a query-1 row of rms 0.14, on the GPU and the
/// interpreter alike).
inline void checkResults(const Case &c, const Outputs &ref, const Results &got, const Inputs *in = nullptr) {
  const Dims &d = c.dims;
  const double f = c.tolerance_factor;
  double dvSq = 0;
  for (double x : ref.dv)
    dvSq += x * x;
  const double floor = ref.dv.empty() ? 0.0 : 1e-2 * std::sqrt(dvSq / double(ref.dv.size()));
  std::vector<Comparison> comparisons = {
      compare("out", got.out, ref.out, d.outShape(), tolerance(c.dtype) * f),
      compare("lse", got.lse, ref.lse, d.lseShape(), tolerance(c.dtype == DType::F64 ? DType::F64 : DType::F32) * f)};
  if (c.vjp) {
    const Tolerance sums = {tolerance(c.dtype).max_scaled * 2.5, tolerance(c.dtype).rms_relative};
    comparisons.push_back(compare("dq", got.dq, ref.dq, d.qShape(), sums * f, floor));
    comparisons.push_back(compare("dk", got.dk, ref.dk, d.kShape(), sums * f, floor));
    comparisons.push_back(compare("dv", got.dv, ref.dv, d.vShape(), tolerance(c.dtype) * f));
    if (c.bias_dims)
      comparisons.push_back(compare("dbias", got.dbias, ref.dbias, d.broadcastShape(*c.bias_dims),
                                    looser(sums, tolerance(c.bias_dtype.value_or(c.dtype))) * f, floor));
    if (!ref.dsinks.empty()) {
      REQUIRE(in);
      comparisons.push_back(compare("dsinks", got.dsinks, ref.dsinks, {d.n},
                                    looser(sums, tolerance(DType::F32)) * f, 1e-2 * dsinksScale(c, *in, ref)));
    }
  }
  for (const Comparison &cmp : comparisons) {
    INFO(cmp.message);
    CHECK(cmp.ok);
  }
  // Exact zeros where nothing is attended.
  int64_t hiddenRows = 0, nonzero = 0;
  for (int64_t r = 0; r < int64_t(ref.row_attends.size()); ++r) {
    if (ref.row_attends[r])
      continue;
    ++hiddenRows;
    const int64_t row = r / (d.n * d.t), n = r / d.t % d.n, t = r % d.t, q = (row * d.t + t) * d.n + n;
    nonzero += got.lse[r] != ref.lse[r];  // +inf, or exactly the sink
    for (int64_t j = 0; j < d.hv; ++j)
      nonzero += got.out[q * d.hv + j] != 0.0;
    for (int64_t j = 0; c.vjp && j < d.h; ++j)
      nonzero += got.dq[q * d.h + j] != 0.0;
  }
  for (int64_t key = 0; c.vjp && key < int64_t(ref.key_seen.size()); ++key) {
    for (int64_t j = 0; !ref.key_seen[key] && j < d.h; ++j)
      nonzero += got.dk[key * d.h + j] != 0.0;
    for (int64_t j = 0; !ref.key_seen[key] && j < d.hv; ++j)
      nonzero += got.dv[key * d.hv + j] != 0.0;
  }
  INFO(hiddenRows << " query rows see no key; " << nonzero
                  << " of their out / dq / lse values (or unseen keys' dk / dv) are not exact zeros / +inf (the "
                     "sink)");
  CHECK(nonzero == 0);
}

using tokamax::AttentionOptions;
using tokamax::TensorView;

/// Forward (and VJP) of a case on the interpreter; the outputs start poisoned (NaN).
/// `b` with its seq and heads dims (the two before the last) swapped: BTNH <-> BNTH, the
/// elements' bits moved as they are.
inline HostBuffer swapSeqHeads(const HostBuffer &b) {
  const size_t r = b.shape.size();
  std::vector<int64_t> shape = b.shape;
  std::swap(shape[r - 3], shape[r - 2]);
  HostBuffer t(b.dtype, shape);
  const int64_t a = b.shape[r - 3], c = b.shape[r - 2], d = b.shape[r - 1], outer = b.numel() / (a * c * d);
  const size_t size = tokamax::dtype_size(b.dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < c; ++j)
        std::memcpy(t.bytes() + size_t(((o * c + j) * a + i) * d) * size, b.element(((o * a + i) * c + j) * d),
                    size_t(d) * size);
  return t;
}

struct InterpreterRun {
  Results results;
  std::vector<std::vector<uint64_t>> bits;  ///< out, lse, dq, dk, dv, dbias, dsinks as stored
};

inline InterpreterRun runOnInterpreter(const Case &c, const CaseData &data) {
  const Dims &d = c.dims;
  // BNTH: copies in that layout; outputs made in it and turned back below.
  auto layout = [&](const HostBuffer &b) { return c.bnth ? swapSeqHeads(b) : b; };
  auto shaped = [&](std::vector<int64_t> s) {
    if (c.bnth)
      std::swap(s[s.size() - 3], s[s.size() - 2]);
    return s;
  };
  HostBuffer qIn = layout(data.q), kIn = layout(data.k), vIn = layout(data.v), doutIn = layout(data.dout);
  TensorView q = qIn.view(), k = kIn.view(), v = vIn.view();
  TensorView bias = data.bias ? data.bias->view() : TensorView(), mask = data.mask ? data.mask->view() : TensorView();
  TensorView ql = data.q_lengths ? data.q_lengths->view() : TensorView();
  TensorView kvl = data.kv_lengths ? data.kv_lengths->view() : TensorView();
  TensorView sinks = data.sinks ? data.sinks->view() : TensorView();
  AttentionOptions options =
      apiOptions(c, data.bias ? &bias : nullptr, data.mask ? &mask : nullptr, data.q_lengths ? &ql : nullptr,
                 data.kv_lengths ? &kvl : nullptr, data.sinks ? &sinks : nullptr);
  HostBuffer out(c.dtype, shaped(d.outShape())), lse(lseDtype(c.dtype), d.lseShape());
  TensorView outView = out.view(), lseView = lse.view();
  tokamax::dot_product_attention_host(q, k, v, outView, options, &lseView);
  InterpreterRun run;
  const HostBuffer outBack = layout(out);
  run.results.out = outBack.values();
  run.results.lse = lse.values();
  run.bits = {outBack.storage, lse.storage};
  if (!c.vjp)
    return run;
  if (c.vjp_config)
    options.config = c.vjp_config;
  HostBuffer dq(c.dtype, shaped(d.qShape())), dk(c.dtype, shaped(d.kShape())), dv(c.dtype, shaped(d.vShape()));
  std::optional<HostBuffer> dbias, dsinks;
  if (data.bias)
    dbias.emplace(data.bias->dtype, data.bias->shape);
  if (data.sinks)
    dsinks.emplace(DType::F32, data.sinks->shape);
  TensorView dqView = dq.view(), dkView = dk.view(), dvView = dv.view();
  TensorView dbiasView = dbias ? dbias->view() : TensorView(), dsinksView = dsinks ? dsinks->view() : TensorView();
  tokamax::dot_product_attention_vjp_host(doutIn.view(), q, k, v, outView, lseView, dqView, dkView, dvView, options,
                                          dbias ? &dbiasView : nullptr, dsinks ? &dsinksView : nullptr);
  const HostBuffer dqBack = layout(dq), dkBack = layout(dk), dvBack = layout(dv);
  run.results.dq = dqBack.values();
  run.results.dk = dkBack.values();
  run.results.dv = dvBack.values();
  run.bits.insert(run.bits.end(), {dqBack.storage, dkBack.storage, dvBack.storage});
  if (dbias) {
    run.results.dbias = dbias->values();
    run.bits.push_back(dbias->storage);
  }
  if (dsinks) {
    run.results.dsinks = dsinks->values();
    run.bits.push_back(dsinks->storage);
  }
  return run;
}

/// Runs the case on the interpreter and checks it against the float64 reference.
inline void check(const Case &c) {
  CaseData data = makeData(c);
  Outputs ref = Reference(c.dims, c.options, data.inputs).run();
  checkResults(c, ref, runOnInterpreter(c, data).results, &data.inputs);
}

/// An implementation and one dtype it serves.
struct ImplDtype {
  const char *implementation;
  tokamax::DType dtype;
};

/// A case of `id`'s implementation and dtype; hopper's forward and VJP with small steps,
/// for the interpreter's time.
inline Case implCase(const ImplDtype &id, Dims dims) {
  Case c;
  c.implementation = id.implementation;
  c.dtype = id.dtype;
  c.dims = std::move(dims);
  if (c.implementation == "hopper") {
    c.config = tokamax::Config{{"block_q", 64}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}};
    c.vjp_config = tokamax::Config{{"block_q", 16}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}};
  }
  return c;
}

/// The message of the tokamax::Error `call` throws, or a note that it threw none.
template <class Call> std::string errorOf(Call &&call) {
  try {
    call();
  } catch (const tokamax::Error &e) {
    return e.what();
  } catch (const std::exception &e) {
    return std::string("<not a tokamax::Error: ") + e.what() + ">";
  }
  return "<no error>";
}

} // namespace attention_test
