//===- AttentionFp8Tests.cpp - attention_fp8 on the interpreter and ptxas ---===//
//
// fp8 q, k, v with per-(batch row, kv head) descales: binding (every bad argument named,
// what fp8 calls refuse), then hopper (the interpreter runs its kernels: V transposed,
// fp8 products, P cast to fp8) and reference against float64 on the fp8 values times
// their descales: T 1, S past the blocks and not a multiple of 16, GQA, causal, windows,
// soft cap, lengths, e4m3 and e5m2, lse. hopper rounds P to fp8 before P V (as
// FlashAttention-3 does), so its out is held to a bound of that rounding; its lse comes
// from the f32 P and is held as tightly as the reference's. Then the kernels as ptxas
// assembles them for sm_90a: fp8 wgmma, P moved by shuffles, no spills.
//
//===----------------------------------------------------------------------===//
#include "common/HopperPtxChecks.h"
#include "unit/attention/AttentionFp8TestCase.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/AttentionFp8.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;
using Catch::Matchers::Contains;

namespace {

/// `c` without `key`.
Config without(Config c, const std::string &key) {
  c.values.erase(key);
  return c;
}

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

/// q [2, 17, 4, 32] attending k / v [2, 40, 2, 32] (GQA 2:1), every descale.
AttentionFp8Specs fp8Specs(DType d = DType::F8E4M3) {
  return AttentionFp8Specs{.q = spec({2, 17, 4, 32}, d), .k = spec({2, 40, 2, 32}, d), .v = spec({2, 40, 2, 32}, d),
                           .q_descale = spec({2, 2}, DType::F32), .k_descale = spec({2, 2}, DType::F32),
                           .v_descale = spec({2, 2}, DType::F32), .out = spec({2, 17, 4, 32}, DType::BF16),
                           .lse = spec({2, 4, 17}, DType::F32)};
}

/// `c` on the interpreter, checked against float64.
void checkFp8(const Fp8Case &c) {
  INFO(describe(c));
  const Dims &d = c.dims;
  const Fp8Data data = makeFp8Data(c);
  HostBuffer out(DType::BF16, d.outShape()), lse(DType::F32, d.lseShape());
  const TensorView q = data.q.view(), k = data.k.view(), v = data.v.view(), qd = data.q_descale.view(),
                   kd = data.k_descale.view(), vd = data.v_descale.view(), ov = out.view(), lv = lse.view();
  const TensorView ql = data.q_lengths ? data.q_lengths->view() : TensorView(),
                   kvl = data.kv_lengths ? data.kv_lengths->view() : TensorView();
  AttentionFp8Descales ds;
  if (c.descales)
    ds = {&qd, &kd, &vd};
  dot_product_attention_fp8_host(q, k, v, ov, fp8Options(c, data.q_lengths ? &ql : nullptr,
                                                       data.kv_lengths ? &kvl : nullptr),
                                 ds, &lv);
  checkFp8Results(c, data, out.values(), lse.values());
}

} // namespace

TEST_CASE("attention fp8: binding names every bad argument", "[attention][fp8]") {
  CHECK_NOTHROW(bind_attention_fp8(fp8Specs()));
  CHECK_NOTHROW(bind_attention_fp8(fp8Specs(DType::F8E5M2)));
  AttentionFp8Specs s = fp8Specs();
  s.q.dtype = DType::BF16;
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("attention_fp8: q must be f8e4m3 or f8e5m2, got bf16"));
  s = fp8Specs();
  s.v.dtype = DType::F8E5M2;
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("attention_fp8: v must have q's dtype f8e4m3, got f8e5m2"));
  s = fp8Specs();
  s.k_descale->shape = {2, 4};
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("attention_fp8: k_descale must be f32 [2, 2] (one per batch row "
                                                    "and kv head), got f32 [2, 4]"));
  s = fp8Specs();
  s.v_descale->dtype = DType::BF16;
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("v_descale must be f32 [2, 2]"));
  s = fp8Specs();
  s.out.dtype = DType::F8E4M3;
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("attention_fp8: out must be bf16 [2, 17, 4, 32], got f8e4m3"));
  s = fp8Specs();
  s.lse->shape = {2, 17, 4};
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("attention_fp8: lse must be f32 [2, 4, 17]"));
  s = fp8Specs();
  s.kv_seq_lengths = spec({2}, DType::I64);
  CHECK_THROWS_WITH(bind_attention_fp8(s), Contains("kv_seq_lengths must be int32 [2]"));
  AttentionOptions bnth;
  bnth.layout = AttentionLayout::BNTH;
  CHECK_THROWS_WITH(bind_attention_fp8(fp8Specs(), bnth), Contains("fp8 calls take the BTNH layout"));
  // attention itself points fp8 callers here.
  const ArgSpec q8 = spec({2, 17, 4, 32}, DType::F8E4M3);
  CHECK_THROWS_WITH(bind_attention({q8, q8, q8, {}, {}, {}, {}, spec({2, 17, 4, 32}, DType::BF16)}),
                    Contains("(fp8 q, k and v: dot_product_attention_fp8)"));
  // Options fp8 calls refuse, before anything runs.
  HostBuffer q(DType::F8E4M3, {1, 4, 1, 32}), out(DType::BF16, {1, 4, 1, 32}), bias(DType::F32, {1, 1, 4, 4});
  const TensorView qv = q.view(), ov = out.view(), bv = bias.view();
  AttentionOptions withBias;
  withBias.bias = &bv;
  CHECK_THROWS_WITH(dot_product_attention_fp8_host(qv, qv, qv, ov, withBias),
                    Contains("attention_fp8: fp8 calls take no bias"));
  // The op's implementations: hopper first, then reference; no VJP.
  const auto &impls = attention_fp8_op().implementations();
  REQUIRE(impls.size() == 2u);
  CHECK(impls[0]->name() == "hopper");
  CHECK(impls[1]->name() == "reference");
}

TEST_CASE("attention fp8: hopper and reference match float64", "[attention][fp8]") {
  const Dims gqa{{2}, 17, 40, 4, 2, 32, 32};
  for (const char *impl : {"hopper", "reference"}) {
    checkFp8({impl, {}, DType::F8E4M3, gqa, {}, false});
    checkFp8({impl, {}, DType::F8E4M3, gqa, {.is_causal = true}, true, {}, {}, 2});
    checkFp8({impl, {}, DType::F8E5M2, gqa, {}, true, {}, {}, 3});
    // One query; one key; head dim 64 with Hv 32; window and soft cap with lengths.
    checkFp8({impl, {}, DType::F8E4M3, {{1}, 1, 77, 2, 1, 64, 32}, {}, true, {}, {}, 4});
    checkFp8({impl, {}, DType::F8E4M3, {{2}, 9, 1, 2, 2, 32, 64}, {.scale = 0.3}, true, {}, {}, 5});
    checkFp8({impl, {}, DType::F8E4M3, {{2}, 33, 70, 2, 1, 64, 64},
              {.window = Window{5, 3}, .soft_cap = 7.0}, true, {33, 20}, {70, 9}, 6});
  }
}

TEST_CASE("attention fp8: hopper's configs (two warpgroups, overlap, 32-key steps) match float64",
          "[attention][fp8]") {
  // T past one 128-row block, S past the steps and not a multiple of 16: the heuristic's
  // two consumer warpgroups taking turns with each step's Q K^T issued ahead.
  checkFp8({"hopper", {}, DType::F8E4M3, {{1}, 130, 300, 2, 1, 64, 64}, {}, true, {}, {}, 7});
  checkFp8({"hopper", Config().set("block_q", 64).set("block_kv", 32).set("num_warps", 4).set("stages", 3),
            DType::F8E4M3, {{1}, 70, 97, 2, 2, 128, 128}, {.is_causal = true}, true, {}, {}, 8});
  checkFp8({"hopper", Config().set("block_q", 128).set("block_kv", 64).set("num_warps", 8).set("overlap", 1),
            DType::F8E4M3, {{2}, 140, 77, 2, 1, 32, 64}, {}, true, {}, {}, 9});
  // interleave_v: V's keys stored in the accumulator's column order, P V reading P's
  // registers as they are; the transposer and the product must agree on that order.
  const Config interleaved = Config()
                                 .set("block_q", 128)
                                 .set("block_kv", 128)
                                 .set("num_warps", 8)
                                 .set("overlap", 1)
                                 .set("pingpong", 1)
                                 .set("interleave_v", 1);
  checkFp8({"hopper", interleaved, DType::F8E4M3, {{1}, 130, 300, 2, 1, 64, 64}, {}, true, {}, {}, 10});
  checkFp8({"hopper", without(interleaved, "overlap"), DType::F8E5M2, {{2}, 77, 200, 4, 2, 128, 128},
            {.is_causal = true}, true, {}, {}, 11});
  checkFp8({"hopper", Config().set("block_q", 64).set("block_kv", 32).set("num_warps", 4).set("interleave_v", 1),
            DType::F8E4M3, {{1}, 33, 97, 2, 1, 128, 64}, {}, true, {}, {}, 12});
}

TEST_CASE("attention fp8: many small weights keep their mass through P's fp8 rounding", "[attention][fp8]") {
  // One query; key 0's logit 7 above the 999 others (scale 1): each other weight is e^-7
  // (0.0009) of key 0's, together 0.91 of it. Cast to fp8 as they are, they would round
  // to 0 (below half of e4m3's least subnormal, 2^-9) and out would lose half its mass;
  // P scaled by 2^8 first keeps them normal numbers.
  const int64_t S = 1000, H = 32;
  std::vector<double> q(H, 0.0), k(size_t(S * H), 0.0), v(size_t(S * H), 1.0);
  q[0] = 7, k[0] = 1;
  for (int64_t h = 0; h < H; ++h)
    v[size_t(h)] = 0;  // key 0's value row is zero: out is the small weights' share
  const double share = 999 * std::exp(-7.0) / (1 + 999 * std::exp(-7.0));
  HostBuffer qb(DType::F8E4M3, {1, 1, 1, H}, q), kb(DType::F8E4M3, {1, S, 1, H}, k),
      vb(DType::F8E4M3, {1, S, 1, H}, v), out(DType::BF16, {1, 1, 1, H}), lse(DType::F32, {1, 1, 1});
  const TensorView qv = qb.view(), kv = kb.view(), vv = vb.view(), ov = out.view(), lv = lse.view();
  for (const char *impl : {"hopper", "reference"}) {
    INFO(impl);
    AttentionOptions o;
    o.scale = 1.0;
    o.implementation = impl;
    dot_product_attention_fp8_host(qv, kv, vv, ov, o, {}, &lv);
    for (double x : out.values())
      CHECK(std::abs(x - share) <= 0.02 * share);
    CHECK(std::abs(lse.values()[0] - (7 + std::log(1 + 999 * std::exp(-7.0)))) <= 1e-4);
  }
}

TEST_CASE("attention fp8: hopper's plan transposes V, then runs one forward", "[attention][fp8]") {
  const ArgSpec q = spec({4, 2048, 16, 128}, DType::F8E4M3), d = spec({4, 16}, DType::F32);
  BoundArgs b = bind_attention_fp8({q, q, q, d, d, d, {}, {}, spec({4, 2048, 16, 128}, DType::BF16), {}});
  const Implementation &hopper = attention_fp8_op().implementation("hopper");
  std::vector<dsl::Kernel> kernels = hopper.kernels(b, hopper.heuristic(b));
  REQUIRE(kernels.size() == 2u);
  CHECK(kernels[0].name().find("v_transpose") != std::string::npos);
  CHECK(kernels[1].name().find("flash_forward_hopper_f8e4m3") != std::string::npos);
  // Head dims fp8 products cannot step through, and key steps below 32, are refused.
  const ArgSpec q16 = spec({1, 64, 2, 16}, DType::F8E4M3);
  BoundArgs small = bind_attention_fp8({q16, q16, q16, {}, {}, {}, {}, {}, spec({1, 64, 2, 16}, DType::BF16), {}});
  CHECK_THAT(hopper.why_not(small).value_or(""), Contains("head dims of 32, 64, 128 or 256"));
  const ArgSpec q32 = spec({1, 64, 2, 32}, DType::F8E4M3);
  BoundArgs b32 = bind_attention_fp8({q32, q32, q32, {}, {}, {}, {}, {}, spec({1, 64, 2, 32}, DType::BF16), {}});
  Config c = hopper.heuristic(b32);
  CHECK(c.get("block_kv") >= 32);
  c.set("block_kv", 16);
  CHECK_THAT(hopper.check_config(b32, c).value_or(""), Contains("key steps of 32 or more"));
}

TEST_CASE("attention fp8: the hopper forward assembles on fp8 wgmma without spills", "[attention][fp8][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (auto [h, causal] : {std::pair{64, false}, std::pair{64, true}, std::pair{128, false}, std::pair{128, true}}) {
    const ArgSpec q = spec({4, 2048, 16, h}, DType::F8E4M3), d = spec({4, 16}, DType::F32);
    AttentionOptions o;
    o.is_causal = causal;
    BoundArgs b = bind_attention_fp8({q, q, q, d, d, d, {}, {}, spec({4, 2048, 16, h}, DType::BF16), {}}, o);
    const Implementation &hopper = attention_fp8_op().implementation("hopper");
    const Config heuristic = hopper.heuristic(b);
    // The bf16 forward at the same config: its shuffles are the row reductions'.
    const ArgSpec x = spec({4, 2048, 16, h}, DType::BF16);
    const BoundArgs bf16 = bind_attention({x, x, x, {}, {}, {}, {}, x, {}, {}}, o);
    const int64_t bf16Shuffles =
        test::count(test::sm90a_ptx(attention_op().implementation("hopper").kernels(bf16, heuristic).back()).ptx,
                    "shfl.sync");
    for (const Config &c : {heuristic, Config(heuristic).set("interleave_v", 1)}) {
      const bool interleaved = c.has("interleave_v");
      std::vector<dsl::Kernel> kernels = hopper.kernels(b, c);
      REQUIRE(kernels.size() == 2u);
      INFO("H " << h << (causal ? " causal " : " ") << c.to_json());
      const tokamax::CompiledKernel compiled = test::sm90a_ptx(kernels[1]);
      const std::string &ptx = compiled.ptx;
      CHECK(test::count(ptx, "wgmma.mma_async.sync.aligned.m64n") == test::count(ptx, ".f32.e4m3.e4m3"));
      CHECK(test::count(ptx, ".f32.e4m3.e4m3") > 0);
      CHECK(test::count(ptx, "cvt.rn.satfinite.e4m3x2.f32") > 0);  // P to fp8, two at a time
      // interleave_v: P's fp8 registers are P V's A operand as they are (V's keys stored in
      // their order), so no more shuffles than the bf16 forward at the same config (its row
      // reductions'); without it, P moves by quad shuffles.
      if (interleaved)
        CHECK(test::count(ptx, "shfl.sync") <= bf16Shuffles);
      else
        CHECK(test::count(ptx, "shfl.sync") > bf16Shuffles);
      const int64_t warps = c.get("num_warps");
      const bool twoPrograms = c.has("blocks_per_sm") && c.get("blocks_per_sm") == 2;
      test::check_hopper_ptx(compiled,
                             {.min_copies = 3, .producer = warps == 8 || twoPrograms, .tensor_maps = 3,
                              .threads = uint32_t(32 * (warps + 4))},
                             ptxas);
      // The transpose kernel assembles too, and moves V in 16-byte vectors: interleave_v's
      // key order is set inside each thread's bytes (a gather by pointers read V a byte at
      // a time and took 0.6 ms at S2 on an H100, a third of the forward).
      CompileOptions options;
      options.assemble = false;
      options.arch = "sm_90a";
      const std::string transposePtx = compile(kernels[0], options).ptx;
      CHECK(test::count(transposePtx, "ld.global.u8") == 0);
      CHECK(test::count(transposePtx, "ld.global.v4.b32") > 0);
      CHECK(test::count(transposePtx, "st.global.v4.b32") > 0);
      if (!ptxas.empty())
        test::check_assembles_without_spills(ptxas, transposePtx, "sm_90a");
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
