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
// bit for bit, bitwise reruns and auto's choice. The cases and the reference:
// AttentionVarlenTestCase.h; the arguments: AttentionVarlenArgumentTests.cpp.
//
//===----------------------------------------------------------------------===//
#include "unit/attention/AttentionVarlenTestCase.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;
using namespace varlen_test;

namespace {

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

TEST_CASE("attention varlen: hopper's forward with overlap (the dense heuristic's) matches float64",
          "[attention][varlen][tma_ring]") {
  // Each step's Q K^T issued before the previous step's P V, on two consumer warpgroups
  // taking turns: what the dense heuristic runs where no pair is hidden, here with the
  // packed calls' edge masks (a sequence's last key block, the extra last step).
  const Dims heads{.n = 4, .k = 2, .h = 64, .hv = 64};
  for (const Lengths &lengths : {kSelf, kCross})
    for (bool softcap : {false, true}) {
      Packed p = makePacked({"hopper", DType::BF16}, heads, lengths);
      p.c.config = Config{{"block_q", 128}, {"block_kv", 32}, {"num_warps", 8}, {"stages", 2}, {"overlap", 1},
                          {"pingpong", 1}};
      p.c.vjp = false;  // the forward's config (the VJP takes other keys)
      if (softcap)
        p.c.options.soft_cap = 3.0;
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
