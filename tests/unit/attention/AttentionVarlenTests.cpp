//===- AttentionVarlenTests.cpp - Packed variable-length attention ---------===//
//
// Packed batches (AttentionOptions::cu_seqlens_q / cu_seqlens_kv with max_seqlen_q /
// max_seqlen_kv) on the interpreter: "hopper", "tile" (bf16, f16) and "chunked" (every dtype)
// against a float64 reference that runs AttentionReference.h's dense attention on each
// sequence alone, causal / window aligned bottom-right through a per-sequence mask
// [T_b, S_b]: forward (out, lse) and VJP (dq, dk, dv, dsinks), with empty sequences,
// q shorter and longer than kv (rows that see no key: exact zeros), GQA, Hv != H,
// windows, soft cap, sinks, many blocks and a max_seqlen past the longest sequence;
// every output starts as NaN. Then packed against padded (q_seq_lengths / kv_seq_lengths)
// bit for bit, bitwise reruns, auto's choice, every bad argument named before anything
// runs, the implementations that refuse, and the ops' binding.
//
//===----------------------------------------------------------------------===//
#include "unit/attention/AttentionTestCase.h"


#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

HostBuffer int32s(const std::vector<int32_t> &v, std::vector<int64_t> shape = {}) {
  if (shape.empty())
    shape = {int64_t(v.size())};
  return HostBuffer(DType::I32, shape, std::vector<double>(v.begin(), v.end()));
}

std::vector<int32_t> cumulative(const std::vector<int32_t> &lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lengths)
    cu.push_back(cu.back() + l);
  return cu;
}

/// Whether `message` has `name` as a word of its own (not inside a longer identifier).
class NamesArgument : public Catch::MatcherBase<std::string> {
public:
  explicit NamesArgument(std::string name) : name_(std::move(name)) {}
  bool match(const std::string &m) const override {
    auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = m.find(name_); at != std::string::npos; at = m.find(name_, at + 1))
      if ((at == 0 || !word(m[at - 1])) && (at + name_.size() == m.size() || !word(m[at + name_.size()])))
        return true;
    return false;
  }
  std::string describe() const override { return "names \"" + name_ + "\""; }

private:
  std::string name_;
};

/// FlashAttention's bottom-right alignment: key j of a sequence with T queries and S
/// keys is visible to query i when j <= i + (S - T) (causal) and within the window of
/// that diagonal.
bool visibleInSequence(const Options &o, int64_t i, int64_t j, int64_t t, int64_t s) {
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

Packed makePacked(const ImplDtype &id, const Dims &heads, const Lengths &l) {
  Packed p;
  p.c = implCase(id, heads);
  p.cu_q = cumulative(l.q), p.cu_kv = cumulative(l.kv);
  p.c.dims.batch = {};
  p.c.dims.t = p.cu_q.back(), p.c.dims.s = p.cu_kv.back();
  p.max_q = l.max_q ? l.max_q : *std::max_element(l.q.begin(), l.q.end());
  p.max_kv = l.max_kv ? l.max_kv : *std::max_element(l.kv.begin(), l.kv.end());
  return p;
}

std::string describe(const Packed &p) {
  std::vector<int32_t> q, kv;
  for (size_t b = 0; b + 1 < p.cu_q.size(); ++b)
    q.push_back(p.cu_q[b + 1] - p.cu_q[b]), kv.push_back(p.cu_kv[b + 1] - p.cu_kv[b]);
  return fmt::format("{} packed q_len [{}] kv_len [{}] max_seqlen {}/{}", attention_test::describe(p.c),
                     fmt::join(q, ","), fmt::join(kv, ","), p.max_q, p.max_kv);
}

/// float64 outputs of a packed call: each sequence through Reference on its own (batch
/// {}, T_b queries, S_b keys, the bottom-right mask [T_b, S_b]), placed at its rows.
Outputs packedReference(const Packed &p, const Inputs &in) {
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
InterpreterRun runPacked(const Packed &p, const PackedData &pd, const AttentionOptions &options) {
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

InterpreterRun runPacked(const Packed &p, const PackedData &pd) { return runPacked(p, pd, pd.options(p)); }

/// "tile" and "chunked" with the dtypes they serve on packed calls.
const std::vector<ImplDtype> kPackedImpls = {{"tile", DType::BF16},    {"tile", DType::F16},
                                             {"chunked", DType::BF16}, {"chunked", DType::F16},
                                             {"chunked", DType::F32},  {"chunked", DType::F64}};

// Self-attention with an empty sequence, one of 1, lengths off the blocks and one past
// 64; max_seqlen past the longest.
const Lengths kSelf{{37, 0, 1, 70, 16}, {37, 0, 1, 70, 16}, 96, 96};
// q shorter and longer than kv (causal: rows that see no key), a sequence with keys and
// no queries (keys nobody sees), one with queries and no keys.
const Lengths kCross{{5, 30, 0, 70, 3, 1}, {20, 12, 7, 66, 0, 1}};
const Dims kGqa{.n = 4, .k = 2, .h = 40, .hv = 64}, kMha{.n = 2, .k = 2, .h = 64, .hv = 64};

/// The sequences whose rows differ in bits between `packed` ([total, W...]) and
/// `padded` ([B, M, W...]).
std::vector<size_t> differingSequences(const HostBuffer &packed, const HostBuffer &padded,
                                       const std::vector<int32_t> &cu, int64_t m) {
  const int64_t width = packed.numel() / std::max<int64_t>(1, packed.shape[0]);
  std::vector<size_t> differ;
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    if (std::memcmp(packed.element(cu[b] * width), padded.element(int64_t(b) * m * width),
                    size_t((cu[b + 1] - cu[b]) * width) * dtype_size(packed.dtype)) != 0)
      differ.push_back(b);
  return differ;
}

/// The same for lse: packed [N, total] against padded [B, N, M].
std::vector<size_t> differingLseSequences(const HostBuffer &packed, const HostBuffer &padded,
                                          const std::vector<int32_t> &cu, int64_t m) {
  const int64_t n = packed.shape[0], total = packed.shape[1];
  std::vector<size_t> differ;
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    for (int64_t h = 0; h < n; ++h)
      if (std::memcmp(packed.element(h * total + cu[b]), padded.element((int64_t(b) * n + h) * m),
                      size_t(cu[b + 1] - cu[b]) * dtype_size(packed.dtype)) != 0) {
        differ.push_back(b);
        break;
      }
  return differ;
}

/// The packed rows copied into [B, M, W...] (zeros past each sequence's length).
HostBuffer padded(const HostBuffer &packed, const std::vector<int32_t> &cu, int64_t m) {
  std::vector<int64_t> shape = packed.shape;
  shape[0] = m;
  shape.insert(shape.begin(), int64_t(cu.size() - 1));
  HostBuffer out(packed.dtype, shape, std::vector<double>(size_t(product(shape)), 0.0));
  const int64_t width = packed.numel() / std::max<int64_t>(1, packed.shape[0]);
  const size_t size = dtype_size(packed.dtype);
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    std::memcpy(out.bytes() + size_t(int64_t(b) * m * width) * size, packed.element(cu[b] * width),
                size_t((cu[b + 1] - cu[b]) * width) * size);
  return out;
}

} // namespace

TEST_CASE("attention varlen: the reference aligns causal and windows bottom-right", "[attention][varlen]") {
  // FlashAttention's examples: causal with 2 queries and 5 keys, the queries see keys
  // 0..3 and 0..4; 5 queries and 2 keys, queries 0-2 see nothing, 3 key 0, 4 keys 0-1.
  auto visibleKeys = [](Options o, int64_t i, int64_t t, int64_t s) {
    int64_t count = 0;
    for (int64_t j = 0; j < s; ++j)
      count += visibleInSequence(o, i, j, t, s);
    return count;
  };
  Options causal;
  causal.is_causal = true;
  CHECK(visibleKeys(causal, 0, 2, 5) == 4);
  CHECK(visibleKeys(causal, 1, 2, 5) == 5);
  for (int64_t i : {0, 1, 2})
    CHECK(visibleKeys(causal, i, 5, 2) == 0);
  CHECK(visibleKeys(causal, 3, 5, 2) == 1);
  CHECK(visibleKeys(causal, 4, 5, 2) == 2);
  Options window;  // [2, 1] around the diagonal i + 4: keys i + 2 .. i + 5 of 9
  window.window = Window{2, 1};
  CHECK((visibleInSequence(window, 0, 2, 5, 9) && visibleInSequence(window, 0, 5, 5, 9)));
  CHECK((!visibleInSequence(window, 0, 1, 5, 9) && !visibleInSequence(window, 0, 6, 5, 9)));
  CHECK(visibleKeys(window, 4, 5, 9) == 3);  // keys 6, 7, 8
}

TEST_CASE("attention varlen: tile and chunked match float64 forward and VJP", "[attention][varlen]") {
  struct Variant {
    Lengths lengths;
    Dims heads;
    std::function<void(Case &)> edit;
  };
  const std::vector<Variant> variants = {
      {kSelf, kGqa, [](Case &) {}},
      {kSelf, kMha, [](Case &c) { c.options.is_causal = true; }},
      {kCross, kMha, [](Case &c) { c.options.is_causal = true; }},
      {kCross, kMha, [](Case &c) {  // many blocks walked
         c.options.is_causal = true;
         c.config = Config{{"block_q", 16}, {"block_kv", 16}, {"num_warps", 1}};
       }},
      {kCross, kMha, [](Case &c) { c.options.is_causal = true, c.options.window = Window{6, std::nullopt}; }},
      {kCross, kMha, [](Case &c) { c.options.window = Window{4, 2}; }},
      {kCross, kGqa, [](Case &c) {  // sinks: rows that see no key get lse = the sink
         c.options.is_causal = true, c.options.scale = 0.3, c.options.soft_cap = 3.0, c.sinks = true;
       }},
  };
  for (const ImplDtype &id : kPackedImpls)
    for (const Variant &variant : variants) {
      Packed p = makePacked(id, variant.heads, variant.lengths);
      variant.edit(p.c);
      DYNAMIC_SECTION(describe(p)) {
        PackedData pd(p);
        const Outputs ref = packedReference(p, pd.data.inputs);
        const InterpreterRun got = runPacked(p, pd);
        // Every row written (the outputs started as NaN), against float64; rows that see
        // no key exact zeros (lse +inf, or the sink), keys nobody sees dk = dv = 0.
        checkResults(p.c, ref, got.results, &pd.data.inputs);
      }
    }
}

TEST_CASE("attention varlen: hopper matches float64 forward and VJP", "[attention][varlen][tma_ring]") {
  // sm_90a's kernels on the interpreter: TMA copies from each sequence's first row (a
  // block past its end reads the next sequence's rows, which the scores mask), stores
  // stopping at its end, the flat row statistics from its first row.
  const Dims heads{.n = 4, .k = 2, .h = 64, .hv = 64};
  const std::vector<std::function<void(Case &)>> variants = {
      [](Case &c) { c.options.is_causal = true; },
      [](Case &c) { c.options.window = Window{4, 2}; },
      [](Case &c) { c.options.is_causal = true, c.options.soft_cap = 3.0, c.sinks = true; },
  };
  for (const Lengths &lengths : {kSelf, kCross})
    for (const auto &edit : variants) {
      Packed p = makePacked({"hopper", DType::BF16}, heads, lengths);
      edit(p.c);
      DYNAMIC_SECTION(describe(p)) {
        PackedData pd(p);
        checkResults(p.c, packedReference(p, pd.data.inputs), runPacked(p, pd).results, &pd.data.inputs);
      }
    }
}

TEST_CASE("attention varlen: packed equals padded with sequence lengths bit for bit", "[attention][varlen]") {
  // q_len == kv_len, so causal's top-left and bottom-right alignments agree; the same
  // implementation and config, so the same blocks in the same order.
  const Lengths lengths{{70, 0, 1, 33, 64}, {70, 0, 1, 33, 64}, 80, 80};
  const Config config{{"block_q", 64}, {"block_kv", 64}, {"num_warps", 4}};
  const std::vector<ImplDtype> impls = {
      {"tile", DType::BF16}, {"tile", DType::F16}, {"chunked", DType::BF16}, {"hopper", DType::BF16}};
  for (const ImplDtype &id : impls)
    for (bool causal : {false, true}) {
      Packed p = makePacked(id, {.n = 2, .k = 1, .h = 64, .hv = 64}, lengths);
      p.c.options.is_causal = causal;
      if (std::string(id.implementation) != "hopper")  // (hopper: its heuristic, the same for both calls)
        p.c.config = config;
      DYNAMIC_SECTION(describe(p)) {
        PackedData pd(p);
        const InterpreterRun packed = runPacked(p, pd);
        // The padded call: [B, M, heads, dim] with q / kv_seq_lengths.
        const int64_t m = p.max_q, batch = int64_t(p.cu_q.size() - 1);
        const Dims &d = p.c.dims;
        auto asBuffer = [&](size_t i, DType dtype, std::vector<int64_t> shape) {
          HostBuffer b(dtype, std::move(shape));
          b.storage = packed.bits[i];
          return b;
        };
        const HostBuffer q = padded(pd.data.q, p.cu_q, m), k = padded(pd.data.k, p.cu_kv, m),
                         v = padded(pd.data.v, p.cu_kv, m), dout = padded(pd.data.dout, p.cu_q, m);
        std::vector<int32_t> lens;
        for (int64_t b = 0; b < batch; ++b)
          lens.push_back(p.cu_q[b + 1] - p.cu_q[b]);
        const HostBuffer lengthBuffer = int32s(lens);
        const TensorView lengthView = lengthBuffer.view();
        const AttentionOptions o = apiOptions(p.c, nullptr, nullptr, &lengthView, &lengthView);
        HostBuffer out(p.c.dtype, {batch, m, d.n, d.hv}), lse(DType::F32, {batch, d.n, m});
        TensorView outView = out.view(), lseView = lse.view();
        dot_product_attention_host(q.view(), k.view(), v.view(), outView, o, &lseView);
        HostBuffer dq(p.c.dtype, q.shape), dk(p.c.dtype, k.shape), dv(p.c.dtype, v.shape);
        dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), v.view(), outView, lseView, dq.view(),
                                       dk.view(), dv.view(), o);
        // The sequences whose rows differ, by output.
        const std::vector<size_t> none;
        CHECK(differingSequences(asBuffer(0, p.c.dtype, d.outShape()), out, p.cu_q, m) == none);
        CHECK(differingLseSequences(asBuffer(1, DType::F32, d.lseShape()), lse, p.cu_q, m) == none);
        CHECK(differingSequences(asBuffer(2, p.c.dtype, d.qShape()), dq, p.cu_q, m) == none);
        CHECK(differingSequences(asBuffer(3, p.c.dtype, d.kShape()), dk, p.cu_kv, m) == none);
        CHECK(differingSequences(asBuffer(4, p.c.dtype, d.vShape()), dv, p.cu_kv, m) == none);
      }
    }
}

TEST_CASE("attention varlen: reruns give the same bits", "[attention][varlen]") {
  for (const ImplDtype &id : {ImplDtype{"tile", DType::BF16}, ImplDtype{"chunked", DType::F32}}) {
    Packed p = makePacked(id, kGqa, kCross);
    p.c.options.is_causal = true, p.c.sinks = true;
    DYNAMIC_SECTION(describe(p)) {
      PackedData pd(p);
      const InterpreterRun first = runPacked(p, pd), second = runPacked(p, pd);
      REQUIRE(first.bits.size() == 6u);  // out, lse, dq, dk, dv, dsinks
      for (size_t i = 0; i < first.bits.size(); ++i) {
        INFO("output " << i);
        CHECK(first.bits[i] == second.bits[i]);
      }
    }
  }
}

TEST_CASE("attention varlen: auto picks hopper for 16-bit inputs on sm_90a and chunked for f32 and f64",
          "[attention][varlen]") {
  // (tile where hopper cannot serve: head dims that are not one TMA box, kGqa's 40.)
  struct Pick {
    DType dtype;
    Dims heads;
    const char *expected;
  };
  for (const Pick &pick : {Pick{DType::BF16, kMha, "hopper"}, Pick{DType::F16, kGqa, "tile"},
                           Pick{DType::F32, kMha, "chunked"}, Pick{DType::F64, kMha, "chunked"}}) {
    Packed p = makePacked({pick.expected, pick.dtype}, pick.heads, kCross);
    p.c.options.is_causal = true, p.c.vjp = false;
    DYNAMIC_SECTION(describe(p)) {
      PackedData pd(p);
      AttentionOptions automatic = pd.options(p);
      automatic.implementation.reset();
      CHECK(runPacked(p, pd, automatic).bits == runPacked(p, pd).bits);
      const Dims &d = p.c.dims;
      const ArgSpec q = spec(d.qShape(), pick.dtype), k = spec(d.kShape(), pick.dtype),
                    v = spec(d.vShape(), pick.dtype), cu = spec({int64_t(p.cu_q.size())}, DType::I32);
      const BoundArgs b = bind_attention_varlen({q, k, v, cu, cu, std::nullopt, spec(d.outShape(), pick.dtype),
                                                 attention_varlen_lse_spec(q)},
                                                automatic);
      CHECK(attention_varlen_op().select(b, std::nullopt, "sm_90a").name() == pick.expected);
      CHECK(attention_varlen_op().select(b, std::nullopt, "sm_80").name() ==
            std::string(pick.dtype == DType::BF16 || pick.dtype == DType::F16 ? "tile" : "chunked"));
    }
  }
}

namespace {

/// A valid small packed call (q [10, 2, 16], kv [12, 2, 16], sequences 4 + 6 / 5 + 7)
/// to break one argument of; the outputs start as NaN and stay so when it throws.
struct Setup {
  HostBuffer q{DType::BF16, {10, 2, 16}, randomNormal(320, DType::BF16, 1)};
  HostBuffer k{DType::BF16, {12, 2, 16}, randomNormal(384, DType::BF16, 2)};
  HostBuffer v{DType::BF16, {12, 2, 16}, randomNormal(384, DType::BF16, 3)};
  HostBuffer out{DType::BF16, {10, 2, 16}}, lse{DType::F32, {2, 10}}, dq{DType::BF16, {10, 2, 16}};
  HostBuffer dk{DType::BF16, {12, 2, 16}}, dv{DType::BF16, {12, 2, 16}};
  HostBuffer cu_q = int32s({0, 4, 10}), cu_kv = int32s({0, 5, 12});
  TensorView qv = q.view(), kv = k.view(), vv = v.view(), outv = out.view(), lsev = lse.view();
  TensorView dqv = dq.view(), dkv = dk.view(), dvv = dv.view();
  TensorView cu_qv = cu_q.view(), cu_kvv = cu_kv.view();
  AttentionOptions o{.cu_seqlens_q = &cu_qv, .cu_seqlens_kv = &cu_kvv, .max_seqlen_q = 6, .max_seqlen_kv = 7,
                     .implementation = "chunked"};
  std::deque<HostBuffer> kept;
  std::deque<TensorView> views;

  Setup() = default;
  Setup(const Setup &) = delete;
  /// A view of `b`, kept alive as long as the setup.
  const TensorView *keep(HostBuffer b) {
    kept.push_back(std::move(b));
    views.push_back(kept.back().view());
    return &views.back();
  }
  static bool allNaN(const HostBuffer &b) {
    const std::vector<double> x = b.values();
    return std::all_of(x.begin(), x.end(), [](double e) { return std::isnan(e); });
  }
};

/// The error of the packed forward (vjp: the VJP) with `edit`'s change; checks that
/// nothing was written when it threw.
std::string errorWith(const std::function<void(Setup &)> &edit, bool vjp = false) {
  Setup s;
  edit(s);
  const std::string message = errorOf([&] {
    if (vjp)
      dot_product_attention_vjp_host(s.outv, s.qv, s.kv, s.vv, s.outv, s.lsev, s.dqv, s.dkv, s.dvv, s.o);
    else
      dot_product_attention_host(s.qv, s.kv, s.vv, s.outv, s.o, &s.lsev);
  });
  if (message != "<no error>") {
    INFO(message);
    CHECK((Setup::allNaN(s.out) && Setup::allNaN(s.lse) && Setup::allNaN(s.dq) && Setup::allNaN(s.dk)));
  }
  return message;
}

} // namespace

TEST_CASE("attention varlen: bad arguments are named before anything runs", "[attention][varlen]") {
  using S = Setup &;
  // The setup itself is valid (the VJP of NaN out / lse only runs).
  CHECK(errorWith([](S) {}) == "<no error>");
  // cu_seqlens: int32 [B + 1], both of one length, both or neither.
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(HostBuffer(DType::F32, {3}, {0, 4, 10})); }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(HostBuffer(DType::I64, {3}, {0, 5, 12})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 12, 12}, {1, 4})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({0, 4, 10, 10})); }),
             NamesArgument("cu_seqlens_q") || NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = nullptr; }), NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = nullptr; }), NamesArgument("cu_seqlens_q"));
  // max_seqlen_*: required, >= 1, and (on host tensors) >= every sequence's length.
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q.reset(); }), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv.reset(); }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 0; }), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv = -1; }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 5; }), NamesArgument("max_seqlen_q"));    // a sequence of 6
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv = 6; }), NamesArgument("max_seqlen_kv"));  // one of 7
  // cu_seqlens that decrease, do not start at 0 or do not end at the total.
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({0, 11, 10})), s.o.max_seqlen_q = 20; }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({2, 4, 10})); }), NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 11})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 13})), s.o.max_seqlen_kv = 8; }),
             NamesArgument("cu_seqlens_kv"));
  // Not with bias, mask, sequence lengths or the BNTH layout.
  CHECK_THAT(errorWith([](S s) { s.o.bias = s.keep(HostBuffer(DType::F32, {2, 10, 12}, std::vector<double>(240))); }),
             Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.mask = s.keep(HostBuffer(DType::Bool, {10, 12}, std::vector<double>(120, 1))); }),
             Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.q_seq_lengths = s.keep(int32s({4, 6})); }), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.kv_seq_lengths = s.keep(int32s({5, 7})); }), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.layout = AttentionLayout::BNTH; }),
             Catch::Contains("layout") || Catch::Contains("bnth", Catch::CaseSensitive::No));
  // Shapes: q rank 3, out [total_q, N, Hv], lse [N, total_q] f32.
  CHECK_THAT(errorWith([](S s) {
               s.qv = *s.keep(HostBuffer(DType::BF16, {1, 10, 2, 16}, std::vector<double>(320, 0.5)));
             }),
             NamesArgument("q"));
  CHECK_THAT(errorWith([](S s) { s.outv = *s.keep(HostBuffer(DType::BF16, {10, 2, 8})); }), NamesArgument("out"));
  CHECK_THAT(errorWith([](S s) { s.outv = *s.keep(HostBuffer(DType::BF16, {9, 2, 16})); }), NamesArgument("out"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::F32, {10, 2})); }), NamesArgument("lse"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::BF16, {2, 10})); }), NamesArgument("lse"));
  // The VJP checks the same, and its gradients' shapes.
  CHECK(errorWith([](S) {}, true) == "<no error>");
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv.reset(); }, true), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = nullptr; }, true), NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.kv_seq_lengths = s.keep(int32s({5, 7})); }, true), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 5; }, true), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::F32, {10, 2})); }, true), NamesArgument("lse"));
  CHECK_THAT(errorWith([](S s) { s.dqv = *s.keep(HostBuffer(DType::BF16, {10, 2, 8})); }, true),
             NamesArgument("dq"));
  CHECK_THAT(errorWith([](S s) { s.dkv = *s.keep(HostBuffer(DType::BF16, {10, 2, 16})); }, true),
             NamesArgument("dk"));
  CHECK_THAT(errorWith([](S s) { s.dvv = *s.keep(HostBuffer(DType::BF16, {12, 1, 16})); }, true),
             NamesArgument("dv"));
}

TEST_CASE("attention varlen: reference refuses packed calls", "[attention][varlen]") {
  for (const char *impl : {"reference"})
    for (bool vjp : {false, true}) {
      INFO(impl << (vjp ? " VJP" : " forward"));
      CHECK_THAT(errorWith([&](Setup &s) { s.o.implementation = impl; }, vjp), Catch::Contains("packed"));
    }
  // f32 on "reference" as well (the dtype it would otherwise serve).
  CHECK_THAT(errorWith([](Setup &s) {
               s.qv = *s.keep(HostBuffer(DType::F32, {10, 2, 16}, std::vector<double>(320, 0.5)));
               s.kv = s.vv = *s.keep(HostBuffer(DType::F32, {12, 2, 16}, std::vector<double>(384, 0.5)));
               s.outv = *s.keep(HostBuffer(DType::F32, {10, 2, 16}));
               s.o.implementation = "reference";
             }),
             Catch::Contains("packed"));
}

TEST_CASE("attention varlen: the ops' arguments and binding round-trip through JSON", "[attention][varlen]") {
  CHECK(attention_varlen_op().arg_names() ==
        std::vector<std::string>{"q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "sinks", "out", "lse"});
  CHECK(attention_varlen_op().num_inputs() == 6);
  CHECK(attention_varlen_vjp_op().arg_names() ==
        std::vector<std::string>{"dout", "q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_kv", "sinks",
                                 "dq", "dk", "dv", "dsinks"});
  CHECK(attention_varlen_vjp_op().num_inputs() == 9);
  CHECK(find_op("attention_varlen") == &attention_varlen_op());
  CHECK(find_op("attention_varlen_vjp") == &attention_varlen_vjp_op());

  const ArgSpec q = spec({10, 4, 32}, DType::BF16), kv = spec({12, 2, 32}, DType::BF16),
                cu = spec({3}, DType::I32), sinks = spec({4}, DType::F32), lse = attention_varlen_lse_spec(q);
  CHECK(lse == spec({4, 10}, DType::F32));
  CHECK(attention_varlen_lse_spec(spec({10, 4, 32}, DType::F64)) == spec({4, 10}, DType::F64));
  AttentionOptions o{.is_causal = true, .local_window = LocalWindow{4, std::nullopt}, .logits_soft_cap = 20.0,
                     .max_seqlen_q = 6, .max_seqlen_kv = 7};
  const BoundArgs f = bind_attention_varlen({q, kv, kv, cu, cu, sinks, q, lse}, o);
  const BoundArgs b = bind_attention_varlen_vjp({q, q, kv, kv, q, lse, cu, cu, sinks, q, kv, kv, sinks}, o);
  CHECK(f.op == "attention_varlen");
  CHECK(b.op == "attention_varlen_vjp");
  for (const BoundArgs *bound : {&f, &b}) {
    INFO(bound->to_json());
    CHECK(bound->attributes.at("max_seqlen_q") == "6");
    CHECK(bound->attributes.at("max_seqlen_kv") == "7");
    CHECK(bound->attribute("is_causal") == "1");
    CHECK(bound->attribute("window_left") == "4");
    CHECK(bound->attributes.count("window_right") == 0);
    CHECK(bound->attributes.count("layout") == 0);
    CHECK(bound->attributes.count("logits_soft_cap") == 1);
    CHECK(BoundArgs::from_json(bound->to_json()) == *bound);
  }
  CHECK_NOTHROW(attention_varlen_op().validate(BoundArgs::from_json(f.to_json())));
  CHECK_NOTHROW(attention_varlen_vjp_op().validate(BoundArgs::from_json(b.to_json())));
  BoundArgs missing = f;
  missing.attributes.erase("max_seqlen_q");
  CHECK_THAT(errorOf([&] { attention_varlen_op().validate(missing); }), NamesArgument("max_seqlen_q"));
  // Binding needs max_seqlen_q / _kv, and the specs' cu_seqlens int32 [B + 1].
  AttentionOptions noMax = o;
  noMax.max_seqlen_q.reset();
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, cu, cu, sinks, q, lse}, noMax); }),
             NamesArgument("max_seqlen_q"));
  noMax = o, noMax.max_seqlen_kv.reset();
  const AttentionVarlenVjpSpecs vjpSpecs{q, q, kv, kv, q, lse, cu, cu, sinks, q, kv, kv, sinks};
  CHECK_THAT(errorOf([&] { bind_attention_varlen_vjp(vjpSpecs, noMax); }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, spec({3}, DType::I64), cu, sinks, q, lse}, o); }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, cu, spec({4}, DType::I32), sinks, q, lse}, o); }),
             NamesArgument("cu_seqlens_kv") || NamesArgument("cu_seqlens_q"));

  // The op run on the interpreter gives the host entry point's bits.
  Packed p = makePacked({"chunked", DType::BF16}, kGqa, Lengths{{4, 6}, {5, 7}});
  p.c.options.is_causal = true, p.c.sinks = true, p.c.vjp = false;
  PackedData pd(p);
  const InterpreterRun host = runPacked(p, pd);
  const Dims &d = p.c.dims;
  HostBuffer out(DType::BF16, d.outShape()), lseOut(DType::F32, d.lseShape());
  const AttentionOptions po = pd.options(p);
  const BoundArgs call = bind_attention_varlen(
      {spec(d.qShape(), DType::BF16), spec(d.kShape(), DType::BF16), spec(d.vShape(), DType::BF16), cu, cu, sinks,
       spec(d.outShape(), DType::BF16), spec(d.lseShape(), DType::F32)},
      po);
  const TensorView in[] = {pd.data.q.view(), pd.data.k.view(), pd.data.v.view(), pd.cu_q_view, pd.cu_kv_view,
                           pd.sinks_view};
  const TensorView outs[] = {out.view(), lseOut.view()};
  attention_varlen_op().interpret(call, in, outs, "chunked");
  CHECK(out.storage == host.bits[0]);
  CHECK(lseOut.storage == host.bits[1]);
}
