//===- MatmulOpTests.cpp - matmul on the op framework (no GPU) --------------===//
//
// matmul_op: binding names what is wrong, BoundArgs round-trip through JSON, the auto
// order per architecture and dtype (hopper, tile, reference) with NotSupported reasons
// for explicit choices, every config of every search space is valid, invalid configs are
// refused, and matmul_host (the interpreter) matches a float64 reference for each
// implementation, the persistent hopper grid included.
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/Numerics.h"

#include <cmath>
#include <limits>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType dtype) { return ArgSpec{std::move(shape), dtype}; }

BoundArgs bind(int64_t m, int64_t n, int64_t k, DType dtype, DType out, bool ta = false, bool tb = false,
               bool bias = false) {
  return bind_matmul(spec(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, dtype),
                     spec(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, dtype),
                     bias ? std::optional<ArgSpec>(spec({n}, out)) : std::nullopt, spec({m, n}, out), ta, tb, 1.0);
}

} // namespace

TEST_CASE("matmul op: binding names what does not fit", "[matmul][op]") {
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8}, DType::BF16), spec({16, 4}, DType::BF16), std::nullopt,
                                spec({4, 4}, DType::BF16), false, false, 1.0),
                    Contains("op(a) is [4, 8], op(b) is [16, 4] and c is [4, 4]"));
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8}, DType::BF16), spec({8, 4}, DType::F16), std::nullopt,
                                spec({4, 4}, DType::BF16), false, false, 1.0),
                    Contains("a is bf16 but b is f16"));
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8}, DType::BF16), spec({8, 4}, DType::BF16), spec({5}, DType::BF16),
                                spec({4, 4}, DType::BF16), false, false, 1.0),
                    Contains("bias must be a [4] bf16 tensor, got bf16 [5]"));
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8}, DType::BF16), spec({8, 4}, DType::BF16), std::nullopt,
                                spec({4, 4}, DType::BF16), false, false, std::nan("")),
                    Contains("alpha must be finite"));
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8}, DType::I32), spec({8, 4}, DType::I32), std::nullopt,
                                spec({4, 4}, DType::I32), false, false, 1.0),
                    Contains("dtype must be bf16, f16, f32, f64, f8e4m3 or f8e5m2, got i32"));
  CHECK_THROWS_WITH(bind_matmul(spec({4, 8, 1}, DType::BF16), spec({8, 4}, DType::BF16), std::nullopt,
                                spec({4, 4}, DType::BF16), false, false, 1.0),
                    Contains("must be 2-D"));
}

TEST_CASE("matmul op: BoundArgs round-trip through JSON and validate", "[matmul][op]") {
  BoundArgs args = bind(127, 1000, 64, DType::BF16, DType::F32, true, false, true);
  BoundArgs back = BoundArgs::from_json(args.to_json());
  CHECK(back == args);
  CHECK_NOTHROW(matmul_op().validate(back));
  CHECK(find_op("matmul") == &matmul_op());
  MatmulSpec s = matmul_spec(back);
  CHECK(s.m == 127);
  CHECK(s.n == 1000);
  CHECK(s.k == 64);
  CHECK(s.trans_a);
  CHECK(s.has_bias);
  back.attributes["beta"] = "1";
  CHECK_THROWS_WITH(matmul_op().validate(back), Contains("unknown attribute \"beta\""));
}

TEST_CASE("matmul op: auto order per architecture and dtype", "[matmul][op]") {
  const Op &op = matmul_op();
  CHECK(op.select(bind(256, 512, 128, DType::BF16, DType::BF16), std::nullopt, "sm_90a").name() == "hopper");
  CHECK(op.select(bind(256, 512, 128, DType::BF16, DType::BF16), std::nullopt, "sm_80").name() == "tile");
  // K = 17: 34-byte rows of a, no TMA; the tile kernel takes it.
  CHECK(op.select(bind(256, 512, 17, DType::F16, DType::F16), std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(bind(16, 16, 16, DType::F32, DType::F32), std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(bind(16, 16, 16, DType::F64, DType::F64), std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(bind(64, 64, 64, DType::F8E4M3, DType::BF16, false, true), std::nullopt, "sm_90a").name() ==
        "hopper");
  CHECK(op.select(bind(64, 64, 64, DType::F8E4M3, DType::BF16, false, true), std::nullopt, "sm_80").name() ==
        "reference");
  CHECK(op.select(bind(64, 64, 64, DType::F8E5M2, DType::F32), std::nullopt, "sm_90a").name() == "reference");
  // Explicit choices that cannot serve the call say why.
  CHECK_THROWS_AS(op.select(bind(256, 512, 128, DType::BF16, DType::BF16), "hopper", "sm_80"), NotSupported);
  CHECK_THROWS_WITH(op.select(bind(16, 16, 16, DType::F64, DType::F64), "tile", "sm_90a"),
                    Contains("takes bf16, f16 or f32, got f64"));
  CHECK_THROWS_WITH(op.select(bind(64, 64, 64, DType::F8E4M3, DType::BF16), "hopper", "sm_90a"),
                    Contains("K-major only"));
}

TEST_CASE("matmul op: search spaces hold valid configs, invalid ones are refused", "[matmul][op]") {
  for (const BoundArgs &args : {bind(4096, 4096, 4096, DType::BF16, DType::BF16),
                                bind(8192, 8192, 512, DType::F16, DType::F32, true, true),
                                bind(4096, 4096, 4096, DType::F8E4M3, DType::BF16, false, true)}) {
    INFO(args.to_json());
    for (const auto &impl : matmul_op().implementations()) {
      if (impl->why_not(args))
        continue;
      std::vector<Config> space = impl->search_space(args);
      INFO(impl->name());
      REQUIRE(!space.empty());
      CHECK(space.front() == impl->heuristic(args));
      if (impl->name() != "reference")
        CHECK(space.size() >= 6);
      for (const Config &config : space) {
        INFO(config.to_json());
        CHECK_FALSE(impl->check_config(args, config).has_value());
      }
    }
  }
  const Implementation &hopper = matmul_op().implementation("hopper");
  BoundArgs args = bind(4096, 4096, 4096, DType::BF16, DType::BF16);
  Config config = hopper.heuristic(args);
  CHECK(config.get("programs") == -1);  // one program per SM
  config.set("num_stages", 5);          // 5 x 48 KiB does not fit
  CHECK_THAT(*hopper.check_config(args, config), Contains("bytes of shared memory a block, more than the 232448"));
  config = hopper.heuristic(args).set("block_k", 8);
  CHECK_THAT(*hopper.check_config(args, config), Contains("block_k must be 16, 32 or 64"));
  config = hopper.heuristic(args).set("block_k", 32).set("num_stages", 8);  // 64-byte rows, 8 x 24 KiB
  CHECK(!hopper.check_config(args, config));
  config = hopper.heuristic(args).set("block_m", 64);
  CHECK_THAT(*hopper.check_config(args, config), Contains("multiple of 16 * num_warps"));
  config = hopper.heuristic(args).set("rebalance_registers", 1);
  CHECK(!hopper.check_config(args, config));
  config.set("warp_specialize", 0);
  CHECK_THAT(*hopper.check_config(args, config), Contains("rebalance_registers needs warp_specialize"));
  // Only configs that rebalance registers name the key (older saved configs stay valid).
  CHECK_FALSE(hopper.heuristic(args).has("rebalance_registers"));
  CHECK_THROWS_AS(matmul_op().resolve_config(hopper, args, hopper.heuristic(args).set("block_n", 96)), Error);
}

TEST_CASE("matmul op: the precompiled hopper kernels are the ones a call builds", "[matmul][op]") {
  // tokamax-compile precompiles matmul_hopper_kernel(spec, default_hopper_config(spec));
  // the op's heuristic (one program per SM) must give the same kernel on 132 SMs, or a
  // precompiled cache would never hit.
  for (DType dtype : {DType::BF16, DType::F8E4M3}) {
    MatmulSpec spec{4096, 4096, 4096, dtype, DType::BF16, false, dtype == DType::F8E4M3};
    BoundArgs args = bind(spec.m, spec.n, spec.k, dtype, DType::BF16, false, spec.trans_b);
    const Implementation &hopper = matmul_op().implementation("hopper");
    std::vector<dsl::Kernel> kernels = hopper.kernels(args, hopper.heuristic(args));
    REQUIRE(kernels.size() == 1);
    CHECK(kernels[0].ir() == matmul_hopper_kernel(spec, default_hopper_config(spec)).ir());
  }
}

TEST_CASE("matmul op: matmul_host matches float64 with each implementation", "[matmul][op][interpreter]") {
  struct Case {
    const char *impl;
    int64_t m, n, k;
    DType dtype, out;
    bool ta, tb, bias;
  };
  // The hopper heuristic's persistent grid runs 3 programs on the interpreter: 300 x 520
  // is 3 x 3 tiles of 128 x 256, so each program loops over 3.
  for (const Case &c : {Case{"hopper", 300, 520, 72, DType::BF16, DType::F32, false, false, true},
                        Case{"hopper", 17, 40, 48, DType::F8E4M3, DType::BF16, false, true, false},
                        Case{"tile", 33, 20, 19, DType::F16, DType::F32, true, true, true},
                        Case{"reference", 9, 7, 5, DType::F64, DType::F64, false, true, true}}) {
    INFO(c.impl << " " << c.m << "x" << c.n << "x" << c.k << " " << dtype_name(c.dtype));
    test::MatmulOperands o = test::matmul_operands(c.m, c.n, c.k, c.dtype, c.out, c.ta, c.tb, 7, 2.0);
    const std::vector<double> &a = o.a, &b = o.b, &bias = o.bias;
    std::vector<uint8_t> &ab = o.a_bytes, &bb = o.b_bytes, &biasb = o.bias_bytes, &cb = o.c_bytes;
    MatmulOptions options;
    options.trans_a = c.ta;
    options.trans_b = c.tb;
    options.alpha = -0.5;
    options.implementation = c.impl;
    if (c.bias)
      options.bias = host_view(biasb.data(), c.out, {c.n});
    matmul_host(host_view(ab.data(), c.dtype, {c.ta ? c.k : c.m, c.ta ? c.m : c.k}),
                host_view(bb.data(), c.dtype, {c.tb ? c.n : c.k, c.tb ? c.k : c.n}),
                host_view(cb.data(), c.out, {c.m, c.n}), options);
    std::vector<double> got = test::from_bytes(cb, c.out);
    std::vector<double> ref = test::matmul_reference(a, b, c.m, c.n, c.k, -0.5, c.bias ? &bias : nullptr);
    size_t unwritten = 0;
    for (double g : got)
      unwritten += std::isnan(g);
    CHECK(unwritten == 0);
    CHECK(test::rel_error(got, ref) < (c.out == DType::BF16 ? 1e-2 : c.out == DType::F64 ? 1e-12 : 1e-5));
  }
}

TEST_CASE("matmul op: the interpreter refuses views that do not match the binding", "[matmul][op]") {
  // Regression: matmul_host read a row-strided a or c as if dense (a wrong answer, no
  // error), and matmul_op().interpret did not check its views at all.
  std::vector<float> a(16 * 32, 1.0f), b(32 * 8, 1.0f), c(16 * 8, 0.0f);
  const int64_t aShape[] = {16, 16}, aStrides[] = {32, 1};  // every other block of 16 columns
  TensorView strided(reinterpret_cast<uint64_t>(a.data()), DType::F32, aShape, aStrides);
  TensorView bv = host_view(b.data(), DType::F32, {16, 8}), cv = host_view(c.data(), DType::F32, {16, 8});
  CHECK_THROWS_WITH(matmul_host(strided, bv, cv), Catch::Contains("contiguous"));
  const int64_t cStrides[] = {16, 1};
  const int64_t cShape[] = {16, 8};
  TensorView stridedC(reinterpret_cast<uint64_t>(c.data()), DType::F32, cShape, cStrides);
  CHECK_THROWS_WITH(matmul_host(host_view(a.data(), DType::F32, {16, 16}), bv, stridedC), Catch::Contains("contiguous"));

  BoundArgs args = bind_matmul(ArgSpec{{16, 16}, DType::F32}, ArgSpec{{16, 8}, DType::F32}, std::nullopt,
                               ArgSpec{{16, 8}, DType::F32}, false, false, 1.0);
  TensorView av = host_view(a.data(), DType::F32, {16, 16});
  TensorView wrongShape = host_view(a.data(), DType::F32, {8, 32});
  std::vector<TensorView> out{cv};
  std::vector<TensorView> in{wrongShape, bv, TensorView()};
  CHECK_THROWS_WITH(matmul_op().interpret(args, in, out, std::string("reference")), Catch::Contains("a is f32 [8, 32]"));
  in = {strided, bv, TensorView()};
  CHECK_THROWS_WITH(matmul_op().interpret(args, in, out, std::string("reference")), Catch::Contains("a must be contiguous"));
  // A null pointer is refused before anything runs (on the device it would poison the context).
  in = {TensorView(0, DType::F32, aShape), bv, TensorView()};
  CHECK_THROWS_WITH(matmul_op().interpret(args, in, out, std::string("reference")), Catch::Contains("a has no data"));
  std::vector<TensorView> nullOut{TensorView(0, DType::F32, cShape)};
  in = {av, bv, TensorView()};
  CHECK_THROWS_WITH(matmul_op().interpret(args, in, nullOut, std::string("reference")), Catch::Contains("c has no data"));
  CHECK_NOTHROW(matmul_op().interpret(args, in, out, std::string("reference")));
  CHECK(c[0] == 16.0f);
}

TEST_CASE("matmul op: empty products, no rows or columns is a no-op, K = 0 gives bias or 0", "[matmul][op]") {
  // Regression: M = 0 threw "needs M, N, K >= 1" while layer_norm on [0, 64] was a no-op.
  for (const char *impl : {"", "tile", "reference"}) {
    INFO("implementation \"" << impl << "\"");
    MatmulOptions options;
    options.implementation = impl;
    // M = 0 and N = 0: nothing to write, nothing read (null views are fine when empty).
    std::vector<float> b(4 * 8, 1.0f);
    CHECK_NOTHROW(matmul_host(host_view(nullptr, DType::F32, {0, 4}), host_view(b.data(), DType::F32, {4, 8}),
                              host_view(nullptr, DType::F32, {0, 8}), options));
    std::vector<float> a(5 * 4, 1.0f);
    CHECK_NOTHROW(matmul_host(host_view(a.data(), DType::F32, {5, 4}), host_view(nullptr, DType::F32, {4, 0}),
                              host_view(nullptr, DType::F32, {5, 0}), options));
    // K = 0: an empty sum. c = bias in every row, or zeros; c starts as garbage.
    std::vector<float> c(5 * 8, std::nanf("")), bias(8);
    for (int j = 0; j < 8; ++j)
      bias[j] = 0.25f * float(j) - 1.0f;
    MatmulOptions withBias = options;
    withBias.bias = host_view(bias.data(), DType::F32, {8});
    matmul_host(host_view(nullptr, DType::F32, {5, 0}), host_view(nullptr, DType::F32, {0, 8}),
                host_view(c.data(), DType::F32, {5, 8}), withBias);
    for (int i = 0; i < 5 * 8; ++i)
      CHECK(c[i] == bias[i % 8]);
    std::fill(c.begin(), c.end(), std::nanf(""));
    matmul_host(host_view(nullptr, DType::F32, {5, 0}), host_view(nullptr, DType::F32, {0, 8}),
                host_view(c.data(), DType::F32, {5, 8}), options);
    for (float v : c)
      CHECK(v == 0.0f);
  }
  // Negative sizes are impossible in a view; shapes that disagree are still refused.
  CHECK_THROWS_WITH(bind_matmul(ArgSpec{{0, 4}, DType::F32}, ArgSpec{{3, 8}, DType::F32}, std::nullopt,
                                ArgSpec{{0, 8}, DType::F32}, false, false, 1.0),
                    Catch::Contains("op(a) is [0, 4], op(b) is [3, 8]"));
  // The kernels are built only for non-empty products.
  BoundArgs empty = bind_matmul(ArgSpec{{0, 4}, DType::BF16}, ArgSpec{{4, 8}, DType::BF16}, std::nullopt,
                                ArgSpec{{0, 8}, DType::F32}, false, false, 1.0);
  for (const auto &impl : matmul_op().implementations())
    CHECK(impl->kernels(empty, impl->heuristic(empty)).empty());
}
