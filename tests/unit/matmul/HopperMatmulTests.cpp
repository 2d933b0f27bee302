//===- HopperMatmulTests.cpp - the hopper matmul kernel and tile.tma_dot --===//
//
// The `hopper` matmul kernel (tma_dot main loop) on the CPU interpreter against a
// float64 reference: ragged M, N and K, every transpose, bf16 and f16, bias and alpha,
// f32 and same-dtype output, one and several programs; hopper_unsupported() names what
// the kernel cannot serve and the kernel then throws NotSupported; DSL misuse of tma_dot
// is reported with the problem; the same product on the DSL's Hopper primitives
// (tma_ring: TMA copies, mbarriers, wgmma from shared memory) and misuse of those
// primitives. Its PTX is checked in HopperPtxTests.cpp.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "unit/matmul/MatmulTestUtil.h"
#include "common/Numerics.h"

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

using namespace tokamax;
using Catch::Contains;
using test::describe;

namespace {

/// One unit in the last place of `out`, relative.
double ulp(DType out) {
  switch (out) {
  case DType::BF16: return 0x1p-7;
  case DType::F16: return 0x1p-10;
  default: return 0x1p-22;
  }
}

struct Checked {
  size_t unwritten = 0, wrong = 0;
  double rel = 0;
};

/// Runs matmul_hopper_kernel(spec, config) on the interpreter on random non-zero inputs
/// (c poisoned with NaN first) and compares every element with a float64 reference:
/// |got - ref| <= ulp(out) |ref| + 1e-5 sum_k |alpha a b| (+ bias rounding).
Checked runHopper(const MatmulSpec &spec, const MatmulConfig &config, double alpha) {
  uint32_t seed = static_cast<uint32_t>(spec.m * 131 + spec.n * 17 + spec.k * 3 + spec.trans_a * 7 + spec.trans_b);
  test::MatmulOperands o = test::matmul_operands(spec.m, spec.n, spec.k, spec.dtype, spec.out_dtype, spec.trans_a,
                                                 spec.trans_b, seed, 4.0);
  const std::vector<double> &a = o.a, &b = o.b, &bias = o.bias;
  std::vector<uint8_t> &ab = o.a_bytes, &bb = o.b_bytes, &biasb = o.bias_bytes, &cb = o.c_bytes;
  REQUIRE(std::isnan(test::from_bytes(cb, spec.out_dtype).back()));  // the poison reads back as NaN
  std::vector<HostArg> args{HostArg::tensor(ab.data(), ab.size()), HostArg::tensor(bb.data(), bb.size())};
  if (spec.has_bias)
    args.push_back(HostArg::tensor(biasb.data(), biasb.size()));
  args.push_back(HostArg::tensor(cb.data(), cb.size()));
  args.push_back(HostArg::value(alpha));
  interpret(matmul_hopper_kernel(spec, config), args);

  std::vector<double> got = test::from_bytes(cb, spec.out_dtype), ref(spec.m * spec.n);
  Checked r;
  for (int64_t i = 0; i < spec.m; ++i)
    for (int64_t j = 0; j < spec.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < spec.k; ++k) {
        s += a[i * spec.k + k] * b[k * spec.n + j];
        mag += std::fabs(a[i * spec.k + k] * b[k * spec.n + j]);
      }
      double beta = spec.has_bias ? bias[j] : 0.0;
      double want = alpha * s + beta, g = got[i * spec.n + j];
      ref[i * spec.n + j] = want;
      if (std::isnan(g)) {
        ++r.unwritten;
        continue;
      }
      double tol = ulp(spec.out_dtype) * std::fabs(want) + 1e-5 * (std::fabs(alpha) * mag + std::fabs(beta));
      if (std::fabs(g - want) > tol) {
        if (r.wrong++ < 4)
          UNSCOPED_INFO("c[" << i << ", " << j << "] = " << g << ", want " << want);
      }
    }
  r.rel = test::rel_error(got, ref);
  return r;
}

void checkHopper(const MatmulSpec &spec, const MatmulConfig &config, double alpha) {
  INFO(describe(spec, alpha) << " blocks " << config.block_m << "x" << config.block_n << "x" << config.block_k
                             << " warps " << config.num_warps << " stages " << config.num_stages);
  REQUIRE(hopper_unsupported(spec).empty());
  Checked r = runHopper(spec, config, alpha);
  CHECK(r.unwritten == 0);
  CHECK(r.wrong == 0);
  CHECK(r.rel < 4 * ulp(spec.out_dtype));
}


} // namespace

TEST_CASE("hopper matmul on the interpreter: ragged M, N, K and every transpose", "[hopper][interpreter]") {
  // Rows of a and b must be multiples of 8 elements: K always is; M is when a is
  // transposed (a is [K, M]), so those cases take M from the second list.
  int cases = 0;
  for (int t = 0; t < 4; ++t) {
    bool ta = t & 1, tb = t & 2;
    for (int64_t m : ta ? std::vector<int64_t>{8, 72, 136} : std::vector<int64_t>{1, 17, 127})
      for (int64_t n : {8, 72, 136})
        for (int64_t k : {8, 64, 200}) {
          DType dtype = (m + n + k + t) % 2 ? DType::BF16 : DType::F16;
          MatmulSpec spec{m, n, k, dtype, (n + k) % 3 == 0 ? dtype : DType::F32, ta, tb, (m + k) % 2 == 1};
          double alpha = (cases % 3 == 0) ? 1.0 : (cases % 3 == 1 ? 0.5 : -1.5);
          checkHopper(spec, default_hopper_config(spec), alpha);
          ++cases;
        }
  }
  CHECK(cases == 108);
}

TEST_CASE("hopper matmul on the interpreter: dtypes, bias, alpha, output dtype", "[hopper][interpreter]") {
  for (DType dtype : {DType::BF16, DType::F16})
    for (bool out32 : {false, true})
      for (bool bias : {false, true})
        for (int t = 0; t < 4; ++t)
          for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{17, 72, 200}, {136, 8, 64}}) {
            bool ta = t & 1;
            MatmulSpec spec{ta ? m - m % 8 + 8 : m, n, k, dtype, out32 ? DType::F32 : dtype, ta, bool(t & 2), bias};
            checkHopper(spec, default_hopper_config(spec), bias ? -1.5 : 2.0);
          }
}

TEST_CASE("hopper matmul on the interpreter: several programs, grouped order, small blocks", "[hopper][interpreter]") {
  // 64x64 blocks with one warpgroup: 127 x 200 is 2 x 4 programs (grouped 2 along M),
  // 200 x 136 transposed a is 4 x 3; blocks 64 x 128 and 256 x 64 (2 warpgroups) too.
  struct Case {
    MatmulSpec spec;
    int64_t bm, bn;
    int warps;
  };
  for (Case c : {Case{{127, 200, 72, DType::BF16, DType::F32, false, false, true}, 64, 64, 4},
                 Case{{200, 136, 24, DType::F16, DType::F16, true, true, true}, 64, 64, 4},
                 Case{{130, 130, 40, DType::BF16, DType::BF16, false, true, false}, 64, 128, 4},
                 Case{{304, 72, 16, DType::F16, DType::F32, true, false, true}, 256, 64, 8}}) {
    MatmulConfig config = default_hopper_config(c.spec);
    config.block_m = c.bm;
    config.block_n = c.bn;
    config.num_warps = c.warps;
    config.group_m = 2;
    config.num_stages = 3;
    config.programs = 0;
    checkHopper(c.spec, config, 0.75);
    // Persistent: 3 programs loop over the tiles (uneven shares), in order and
    // warp-specialized.
    config.programs = 3;
    for (bool specialized : {true, false}) {
      config.warp_specialize = specialized;
      checkHopper(c.spec, config, -1.25);
    }
  }
}

TEST_CASE("hopper matmul on the interpreter: 32- and 16-wide K slices", "[hopper][interpreter]") {
  // K slices of 64 and 32 bytes (the 64- and 32-byte swizzles on the GPU), ragged K,
  // every transpose, persistent and one program per tile.
  for (int64_t bk : {32, 16})
    for (int t = 0; t < 4; ++t) {
      MatmulSpec spec{136, 200, 88, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 1};
      MatmulConfig config = default_hopper_config(spec);
      config.block_m = 64, config.block_n = 128, config.num_warps = 4;
      config.block_k = bk;
      config.num_stages = 64 / bk + 2;
      config.programs = t < 2 ? 0 : 3;
      INFO("block_k " << bk);
      checkHopper(spec, config, 1.5);
    }
}

TEST_CASE("hopper matmul on the DSL's Hopper primitives (tma_ring) on the interpreter", "[hopper][interpreter]") {
  // The main loop of TMA copies into rings, mbarrier phases and async wgmma from shared
  // memory, as the interpreter runs it (copies complete when issued, waits do nothing):
  // ragged M, N and K (K shorter than one slice: every copy after the first reads past
  // the end), every transpose, one and two warpgroups, 2 to 4 stages, 64-, 32- and
  // 16-wide K slices.
  int cases = 0;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{17, 72, 200}, {136, 8, 64}, {1, 136, 8}, {200, 200, 136}})
    for (int t = 0; t < 4; ++t) {
      bool ta = t & 1;
      DType dtype = (cases % 2) ? DType::F16 : DType::BF16;
      MatmulSpec spec{ta ? m - m % 8 + 8 : m, n, k, dtype, cases % 3 ? DType::F32 : dtype, ta, bool(t & 2),
                      cases % 4 == 1};
      MatmulConfig config = default_hopper_config(spec);
      config.tma_ring = true;
      config.programs = 0;
      config.block_m = cases % 2 ? 128 : 64, config.block_n = 64;
      config.num_warps = cases % 2 ? 8 : 4;
      config.block_k = 64 >> (cases % 3);
      config.num_stages = 2 + cases % 3;
      config.group_m = 2;
      // In order; warp-specialized with one program per tile, and persistent over uneven
      // shares of the tiles (3 programs).
      for (int variant = 0; variant < 3; ++variant) {
        config.warp_specialize = variant > 0;
        config.programs = variant == 2 ? 3 : 0;
        INFO("block_k " << config.block_k << " stages " << config.num_stages << " variant " << variant);
        checkHopper(spec, config, cases % 2 ? 1.0 : -0.75);
      }
      ++cases;
    }
  CHECK(cases == 16);
}

TEST_CASE("TMA copies and mbarriers: misuse in the DSL is reported with the problem", "[hopper][dsl]") {
  using dsl::Kernel;
  auto kernel = [](bool wgmma) {
    return Kernel("tma_misuse", {.num_warps = 4, .mma_rows_per_warp = true, .wgmma_dots = wgmma});
  };
  {
    Kernel k = kernel(false);
    auto a = k.input("a", DType::BF16, {256, 64});
    auto bars = k.mbarriers(2);
    CHECK_THROWS_WITH(a.load_tma({0, 0}, {64, 64}, k.shared_buffer(2), 0, bars, 0),
                      Contains("load_tma a: needs KernelOptions::wgmma_dots"));
  }
  Kernel k = kernel(true);
  auto a = k.input("a", DType::BF16, {256, 64});
  auto x = k.input("x", DType::BF16, {4, 256, 64});
  auto ring = k.shared_buffer(2);
  auto bars = k.mbarriers(2);
  CHECK_THROWS_WITH(x.load_tma({0, 0, 0}, {2, 64, 64}, ring, 0, bars, 0),
                    Contains("or [1, rows, cols] blocks of 3-D ones (a batch at a time)"));
  CHECK_THROWS_WITH(a.load_tma({0, 0, 0}, {1, 64, 64}, ring, 0, bars, 0), Contains("copies 2-D blocks of 2-D tensors"));
  CHECK_THROWS_WITH(a.load_tma({0, 0}, {4, 64}, ring, 0, bars, 0), Contains("a multiple of 8 rows, 8 to 256, got 4"));
  CHECK_THROWS_WITH(a.load_tma({0, 0}, {512, 64}, ring, 0, bars, 0), Contains("got 512"));
  CHECK_THROWS_WITH(a.load_tma({0, 0}, {64, 8}, ring, 0, bars, 0),
                    Contains("32 or 64 bytes or a multiple of 128, got 16 bytes"));
  CHECK_THROWS_WITH(a.load_tma({0, 0}, {64, 64}, ring, 0, dsl::Mbarriers{}, 0),
                    Contains("do not come from this kernel's mbarriers()"));
  CHECK_THROWS_WITH(a.load_tma({0, 0}, {64, 64}, ring, 0, bars, 2), Contains("barrier 2 is outside the 2 barriers"));
  CHECK_THROWS_WITH(k.wait(bars, -1, 0), Contains("wait: barrier -1 is outside"));
  CHECK_THROWS_WITH(k.arrive(dsl::Mbarriers{5, 2}, 0), Contains("arrive: the barriers do not come from"));
  CHECK_THROWS_WITH(k.mbarriers(0), Contains("mbarriers needs 1 to 64 barriers, got 0"));
  CHECK_THROWS_WITH(k.mbarriers(2, 0), Contains("1 to 1024 arrivals per phase, got 0"));
  // What is valid builds and verifies: a copy, its wait and a release.
  auto full = k.mbarriers(2), empty = k.mbarriers(2, 128);
  CHECK(full.first == 2);
  CHECK(empty.first == 4);
  dsl::Value t = a.load_tma({k.program_id(0) * 64, 0}, {64, 64}, ring, 1, full, 1);
  k.wait(full, 1, 0);
  k.arrive(empty, 1);
  CHECK(t.shape() == std::vector<int64_t>{64, 64});
  const std::string ir = k.ir();
  CHECK(std::regex_search(ir, std::regex("tile.mbarriers = array<i64: 1, 1, 1, 1, 128, 128>")));
  CHECK(std::regex_search(ir, std::regex("tile.async_block_load .* barrier ")));
  CHECK(std::regex_search(ir, std::regex("tile.mbarrier_wait ")));
  CHECK(std::regex_search(ir, std::regex("tile.mbarrier_arrive ")));
}

TEST_CASE("specialized_loop: roles marked in the IR, misuse reported with the problem", "[hopper][dsl]") {
  using dsl::Kernel;
  using dsl::Value;
  auto nothing = [](Value) { return std::vector<Value>{}; };
  auto same = [](Value, std::vector<Value> c, std::vector<Value>) { return c; };
  auto options = [](int warps) {
    return dsl::KernelOptions{.num_warps = warps, .mma_rows_per_warp = true, .wgmma_dots = true};
  };
  {
    Kernel k("ws_warps", options(2));
    CHECK_THROWS_WITH(k.specialized_loop(0, 4, 1, {}, nothing, same), Contains("a multiple of 4), got 2"));
  }
  {
    Kernel k("ws_store", options(4));
    auto x = k.output("x", DType::F32, {64});
    CHECK_THROWS_WITH(k.specialized_loop(
                          0, 4, 1, {},
                          [&](Value i) {
                            x.store({i * Value(16)}, k.full({16}, 1.0, DType::F32));
                            return std::vector<Value>{};
                          },
                          same),
                      Contains("the producer may issue TMA copies") && Contains("tile.block_store"));
  }
  {
    Kernel k("ws_nested", options(4));
    k.loop(0, 2, 1, {}, [&](Value, std::vector<Value>) {
      CHECK_THROWS_WITH(k.specialized_loop(0, 4, 1, {}, nothing, same), Contains("at the kernel's top level"));
      return std::vector<Value>{};
    });
  }
  {
    // specialized_steps: only directly in a specialized_loop's consumer.
    Kernel k("ws_steps", options(4));
    CHECK_THROWS_WITH(k.specialized_steps(0, 4, 1, {}, nothing, same), Contains("directly in a specialized_loop's consumer"));
    k.specialized_loop(0, 2, 1, {}, nothing, [&](Value, std::vector<Value> c, std::vector<Value>) {
      k.when(k.program_id(0) > Value(0), [&] {
        CHECK_THROWS_WITH(k.specialized_steps(0, 4, 1, {}, nothing, same),
                          Contains("directly in a specialized_loop's consumer"));
      });
      // Marks the steps' producer ops; the loop itself and the consumers' ops stay unmarked.
      auto full = k.mbarriers(1);
      k.specialized_steps(0, 4, 1, {}, [&](Value) {
        k.wait(full, 0, 0);
        return std::vector<Value>{};
      }, [&](Value, std::vector<Value> d, std::vector<Value>) {
        k.arrive(full, 0);
        CHECK_THROWS_WITH(k.specialized_steps(0, 4, 1, {}, nothing, same),
                          Contains("directly in a specialized_loop's consumer"));
        return d;
      });
      return c;
    });
    const std::string ir = k.ir();
    CHECK(std::regex_search(ir, std::regex("tile.mbarrier_wait [^\\n]*[{]tile.producer[}]")));
    CHECK(std::regex_search(ir, std::regex("tile.mbarrier_arrive [^{\\n]*\\n")));
    CHECK(std::regex_search(ir, std::regex("[}] [{]tile.warp_specialize[}]")));
  }
  Kernel k("ws", options(4));
  auto a = k.input("a", DType::BF16, {256, 64});
  auto o = k.output("o", DType::F32, {64, 64});
  auto ring = k.shared_buffer(2);
  auto full = k.mbarriers(2), empty = k.mbarriers(2, 128);
  std::vector<Value> r = k.specialized_loop(
      0, 4, 1, {k.full({64, 64}, 0.0, DType::F32)},
      [&](Value i) {
        k.wait(empty, i % Value(2), (i / Value(2) + Value(1)) % Value(2));
        return std::vector<Value>{a.load_tma({i * Value(64), 0}, {64, 64}, ring, i % Value(2), full, i % Value(2))};
      },
      [&](Value i, std::vector<Value> c, std::vector<Value> tiles) {
        k.wait(full, i % Value(2), (i / Value(2)) % Value(2));
        Value acc = dsl::dot(tiles[0], tiles[0].trans(), c[0]);
        k.arrive(empty, i % Value(2));
        return std::vector<Value>{acc};
      });
  o.store({0, 0}, r[0]);
  CHECK_THROWS_WITH(k.specialized_loop(0, 4, 1, {}, nothing, same), Contains("a kernel has one specialized_loop"));
  const std::string ir = k.ir();
  CHECK(std::regex_search(ir, std::regex("tile.async_block_load [^\\n]* barrier [^\\n]*tile.producer")));
  CHECK(std::regex_search(ir, std::regex("tile.mbarrier_wait [^\\n]*[{]tile.producer[}]")));
  CHECK(std::regex_search(ir, std::regex("tile.mbarrier_wait [^{\\n]*\\n")));  // the consumers' wait: unmarked
  CHECK(std::regex_search(ir, std::regex("tile.mbarrier_arrive [^{\\n]*\\n")));
  CHECK(std::regex_search(ir, std::regex("[}] [{]tile.warp_specialize[}]")));
  CHECK_FALSE(std::regex_search(ir, std::regex("tile.dot [^\\n]*tile.producer")));
}

TEST_CASE("hopper matmul on the interpreter: 2-CTA clusters", "[hopper][interpreter]") {
  // Blocks come in vertically adjacent pairs: an odd number of block rows leaves the last
  // pair's second block below M (zeros, nothing stored); one program per pair member and
  // persistent (3 pairs of programs over uneven shares), K-major and N-major b.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{200, 136, 72}, {64, 256, 40}, {17, 304, 16}})
    for (int t = 0; t < 4; ++t) {
      bool ta = t & 1;
      MatmulSpec spec{ta ? m - m % 8 + 8 : m, n, k, t % 2 ? DType::F16 : DType::BF16, DType::F32, ta, bool(t & 2),
                      t == 1};
      MatmulConfig config = default_hopper_config(spec);
      config.block_m = 64, config.block_n = 128, config.num_warps = 4, config.num_stages = 3;
      config.cluster_m = 2, config.group_m = 2;
      for (int64_t programs : {0, 6}) {
        config.programs = programs;
        checkHopper(spec, config, t == 3 ? -0.5 : 1.0);
      }
    }
}

TEST_CASE("hopper matmul on the interpreter: fp8 (e4m3, e5m2) with K-major operands", "[hopper][interpreter]") {
  // wgmma reads 8-bit operands K-major: a [M, K], b [N, K]; K rows of 16 bytes.
  for (DType dtype : {DType::F8E4M3, DType::F8E5M2})
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{17, 72, 208}, {130, 40, 16}, {1, 264, 400}})
      for (DType out : {DType::BF16, DType::F32}) {
        MatmulSpec spec{m, n, k, dtype, out, false, true, out == DType::F32};
        MatmulConfig config = default_hopper_config(spec);
        CHECK(config.block_k == 128);
        checkHopper(spec, config, out == DType::F32 ? 0.5 : 1.0);
      }
}

TEST_CASE("hopper_unsupported names what the hopper kernel cannot serve", "[hopper]") {
  MatmulSpec spec{128, 128, 128, DType::F32, DType::F32};
  CHECK_THAT(hopper_unsupported(spec), Contains("bf16, f16, f8e4m3 or f8e5m2") && Contains("got f32"));
  CHECK_THROWS_AS(matmul_hopper_kernel(spec, default_hopper_config(spec)), NotSupported);
  CHECK_THROWS_WITH(matmul_hopper_kernel(spec, default_hopper_config(spec)), Contains("bf16, f16, f8e4m3"));

  // a [M, K] with K = 17: 34-byte rows, no TMA.
  spec = {128, 128, 17, DType::BF16, DType::F32};
  CHECK_THAT(hopper_unsupported(spec), Contains("multiples of 16 bytes") && Contains("a's rows have 17 elements"));
  CHECK_THROWS_AS(matmul_hopper_kernel(spec, default_hopper_config(spec)), NotSupported);
  CHECK_THROWS_WITH(matmul_hopper_kernel(spec, default_hopper_config(spec)), Contains("multiples of 16 bytes"));
  // Transposed, the same K is the length of b's rows ([N, K]), and a's rows are M long.
  spec = {128, 128, 17, DType::F16, DType::F16, true, true};
  CHECK_THAT(hopper_unsupported(spec), Contains("b's 17"));
  spec = {17, 128, 64, DType::F16, DType::F16, true, false};
  CHECK_THAT(hopper_unsupported(spec), Contains("a's rows have 17 elements"));
  CHECK_THROWS_AS(matmul_hopper_kernel(spec, default_hopper_config(spec)), NotSupported);
  // fp8: K-major operands only, and 16-byte rows are 16 elements.
  spec = {128, 128, 64, DType::F8E4M3, DType::BF16, false, false};
  CHECK_THAT(hopper_unsupported(spec), Contains("K-major only"));
  CHECK_THROWS_AS(matmul_hopper_kernel(spec, default_hopper_config(spec)), NotSupported);
  spec = {128, 128, 64, DType::F8E5M2, DType::F32, true, true};
  CHECK_THAT(hopper_unsupported(spec), Contains("K-major only"));
  spec = {128, 128, 24, DType::F8E4M3, DType::F32, false, true};
  CHECK_THAT(hopper_unsupported(spec), Contains("a's rows have 24 elements"));
  spec = {128, 128, 32, DType::F8E4M3, DType::F32, false, true};
  CHECK(hopper_unsupported(spec).empty());
  // The tile kernel has no fp8 path; fp8 products come out as bf16 or f32.
  CHECK_THROWS_AS(matmul_kernel(spec, default_config(spec)), NotSupported);
  spec.out_dtype = DType::F8E4M3;
  CHECK_THROWS_WITH(matmul_hopper_kernel(spec, default_hopper_config(spec)), Contains("c must be bf16 or f32"));
  // K = 17 is fine with a transposed and b not: both rows are M and N long.
  spec = {128, 128, 17, DType::BF16, DType::BF16, true, false};
  CHECK(hopper_unsupported(spec).empty());
  CHECK_NOTHROW(matmul_hopper_kernel(spec, default_hopper_config(spec)));
}

TEST_CASE("tma_dot misuse in the DSL is reported with the problem", "[hopper][dsl]") {
  struct Case {
    DType dtype;
    std::vector<int64_t> a, b, acc;
    dsl::TmaDotOptions options;
    const char *error;
  };
  const std::vector<Case> cases{
      {DType::F32, {128, 64}, {64, 128}, {128, 128}, {}, "tma_dot: a must be bf16, f16, f8e4m3 or f8e5m2, got f32"},
      {DType::F8E4M3, {128, 128}, {128, 128}, {128, 128}, {.block_k = 128}, "8-bit operands must both be K-major"},
      {DType::F8E5M2, {128, 128}, {128, 128}, {128, 128}, {.block_k = 16, .trans_b = true},
       "block_k must be 32, 64 or 128 (one 32-, 64- or 128-byte swizzle row), got 16"},
      {DType::BF16, {128, 64}, {64, 64}, {32, 64}, {}, "the accumulator must be an f32 [BM, BN] tile with BM, BN powers of two in [64, 256]"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 32}, {}, "got [128, 32]"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 128}, {.block_k = 48}, "block_k must be 16, 32 or 64"},
      {DType::F16, {128, 64}, {64, 128}, {128, 128}, {.stages = 1}, "stages must be in [2, 8], got 1"},
      {DType::F16, {128, 64}, {64, 128}, {128, 128}, {.stages = 9}, "stages must be in [2, 8], got 9"},
      {DType::BF16, {128, 64}, {72, 128}, {128, 128}, {}, "op(a) has K = 64 but op(b) has K = 72"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 128}, {.trans_b = true}, "op(a) has K = 64 but op(b) has K = 128"},
      {DType::BF16, {128, 17}, {17, 128}, {128, 128}, {}, "rows of a must be multiples of 16 bytes (8 elements)"},
      {DType::F16, {128, 64}, {64, 100}, {128, 128}, {}, "rows of b must be multiples of 16 bytes (8 elements)"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 128}, {.cluster_m = 4}, "cluster_m must be 1 or 2, got 4"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 128}, {.warp_specialize = false, .cluster_m = 2},
       "cluster_m = 2 needs warp_specialize"},
      {DType::BF16, {128, 64}, {64, 64}, {128, 64}, {.cluster_m = 2}, "cluster_m = 2 with b as [K, N] needs block N >= 128"},
      {DType::BF16, {64, 128}, {64, 128}, {128, 128}, {.trans_a = true, .a_in_registers = true},
       "a_in_registers needs a as [M, K] (trans_a = false)"},
      {DType::BF16, {128, 64}, {64, 128}, {128, 128}, {.warp_specialize = false, .rebalance_registers = true},
       "rebalance_registers needs warp_specialize"},
  };
  for (const Case &c : cases) {
    INFO(c.error);
    dsl::Kernel k("bad_tma_dot", {8});
    dsl::TensorArg a = k.input("a", c.dtype, c.a), b = k.input("b", c.dtype, c.b);
    dsl::Value zero = k.constant(0, DType::I32);
    CHECK_THROWS_WITH(dsl::tma_dot(a, b, zero, zero, k.full(c.acc, 0.0, DType::F32), c.options), Contains(c.error));
    CHECK_THROWS_AS(dsl::tma_dot(a, b, zero, zero, k.full(c.acc, 0.0, DType::F32), c.options), Error);
  }
  // a and b of one kernel only.
  dsl::Kernel k1("one", {8}), k2("two", {8});
  dsl::TensorArg a = k1.input("a", DType::BF16, {128, 64}), b = k2.input("b", DType::BF16, {64, 128});
  dsl::Value zero = k1.constant(0, DType::I32);
  CHECK_THROWS_WITH(dsl::tma_dot(a, b, zero, zero, k1.full({128, 128}, 0.0, DType::F32)),
                    Contains("a and b must be tensor parameters of one kernel"));
  // a mixed pair.
  dsl::Kernel k3("mixed", {8});
  a = k3.input("a", DType::BF16, {128, 64});
  b = k3.input("b", DType::F16, {64, 128});
  zero = k3.constant(0, DType::I32);
  CHECK_THROWS_WITH(dsl::tma_dot(a, b, zero, zero, k3.full({128, 128}, 0.0, DType::F32)),
                    Contains("a is bf16 but b is f16"));
}

TEST_CASE("tma_store misuse in the DSL is reported with the problem", "[hopper][dsl]") {
  struct Case {
    DType dtype;
    std::vector<int64_t> tensor, tile;
    const char *error;
  };
  const std::vector<Case> cases{
      {DType::F64, {64, 64}, {64, 64}, "tma_store c: stores bf16, f16 or f32 tensors, got f64"},
      {DType::F32, {64, 64, 2}, {64, 64}, "tma_store c: needs a 2-D tensor"},
      {DType::BF16, {64, 60}, {64, 64}, "rows must be multiples of 16 bytes (8 elements), got [64, 60]"},
      {DType::BF16, {64, 64}, {64, 32}, "needs a [BM, BN] tile with BM <= 256 and BN a multiple of 64 (128 bytes)"},
      {DType::F32, {64, 64}, {512, 32}, "needs a [BM, BN] tile with BM <= 256 and BN a multiple of 32 (128 bytes)"},
  };
  for (const Case &c : cases) {
    INFO(c.error);
    dsl::Kernel k("bad_tma_store", {4});
    dsl::TensorArg t = k.output("c", c.dtype, c.tensor);
    dsl::Value zero = k.constant(0, DType::I32);
    CHECK_THROWS_WITH(t.tma_store({zero, zero}, k.full(c.tile, 0.0, c.dtype)), Contains(c.error));
  }
  dsl::Kernel k("mixed", {4});
  dsl::TensorArg t = k.output("c", DType::BF16, {64, 64});
  dsl::Value zero = k.constant(0, DType::I32);
  CHECK_THROWS_WITH(t.tma_store({zero, zero}, k.full({64, 64}, 0.0, DType::F32)),
                    Contains("tile dtype f32 does not match the tensor dtype bf16; cast with .to()"));
}

TEST_CASE("a kernel asking for more shared memory than its target has is refused at compile time", "[hopper]") {
  // Eight 48 KiB stages of [128 + 256] x 64 bf16: 384 KiB, where sm_90a gives a block at
  // most 227 KiB. The launch would fail on the device only; compile() says so first.
  MatmulSpec spec{1024, 1024, 1024, DType::BF16, DType::BF16, false, true};
  MatmulConfig config = default_hopper_config(spec);
  config.num_stages = 8;
  CompileOptions options;
  options.assemble = false;
  CHECK_THROWS_WITH(compile(matmul_hopper_kernel(spec, config), options),
                    Contains("bytes of shared memory a block; sm_90a allows at most 232448"));
  config.num_stages = 4;  // 192 KiB: compiles
  CHECK_NOTHROW(compile(matmul_hopper_kernel(spec, config), options));
}

TEST_CASE("hopper matmul: windows of b and c (b_cols / c_cols) read and write in place", "[matmul][hopper]") {
  // The cross-entropy VJP's products: dx (+)= dlogits @ w[:, c0 : c0 + C]^T (b's K window)
  // and dw[:, c0 : c0 + C] = x^T @ dlogits (c's column window), here with K and N ragged
  // and windows in the middle, at the start and overhanging the stored extent (K past it
  // reads 0, columns past it are dropped). c's other columns must stay as they were.
  const DType dtype = DType::BF16;
  for (bool transB : {true, false})
    for (int64_t window : {0, 40, 96}) {
      // b's K window: op(b) [K = 64, N = 72] from column (trans_b) or row `window` of b,
      // stored with 136 along K.
      const int64_t M = 80, N = 72, K = 64, extent = 136;
      MatmulSpec spec{M, N, K, dtype, DType::F32, false, transB};
      spec.b_cols = extent;
      INFO(describe(spec) << " b window from " << window);
      std::vector<double> a = test::random_values(M * K, dtype, 11, 0.05, 2.0),
                          wide = test::random_values(extent * N, dtype, 12, 0.05, 2.0);  // [extent, N] logical
      std::vector<uint8_t> ab = test::to_bytes(a, dtype),
                           bb = test::to_bytes(transB ? test::stored(wide, extent, N, true) : wide, dtype),
                           cb = test::to_bytes(std::vector<double>(M * N, std::nan("")), DType::F32);
      std::vector<HostArg> args{HostArg::tensor(ab.data(), ab.size()), HostArg::tensor(bb.data(), bb.size()),
                                HostArg::tensor(cb.data(), cb.size()), HostArg::value(1.0),
                                HostArg::value(double(window))};
      interpret(matmul_hopper_kernel(spec, default_hopper_config(spec)), args);
      std::vector<double> got = test::from_bytes(cb, DType::F32), ref(M * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < K && window + k < extent; ++k)
            ref[i * N + j] += a[i * K + k] * wide[(window + k) * N + j];
      CHECK(test::rel_error(got, ref) < 1e-6);
    }
  for (bool accumulate : {false, true})
    for (int64_t window : {0, 56, 120}) {
      // c's column window: op(a) @ b [M = 64, N = 64] into columns from `window` of c
      // [64, 152] (the last window overhangs by 32 columns).
      const int64_t M = 64, N = 64, K = 48, extent = 152;
      MatmulSpec spec{M, N, K, dtype, DType::F32, true, false};
      spec.c_cols = extent;
      spec.accumulate = accumulate;
      INFO(describe(spec) << " c window from " << window << (accumulate ? " accumulating" : ""));
      std::vector<double> a = test::random_values(M * K, dtype, 21, 0.05, 2.0),
                          b = test::random_values(K * N, dtype, 22, 0.05, 2.0),
                          c = test::random_values(M * extent, DType::F32, 23, 0.5, 1.0);
      std::vector<uint8_t> ab = test::to_bytes(test::stored(a, M, K, true), dtype), bb = test::to_bytes(b, dtype),
                           cb = test::to_bytes(c, DType::F32);
      std::vector<HostArg> args{HostArg::tensor(ab.data(), ab.size()), HostArg::tensor(bb.data(), bb.size()),
                                HostArg::tensor(cb.data(), cb.size()), HostArg::value(1.0),
                                HostArg::value(double(window))};
      interpret(matmul_hopper_kernel(spec, default_hopper_config(spec)), args);
      std::vector<double> got = test::from_bytes(cb, DType::F32), ref = c;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N && window + j < extent; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += a[i * K + k] * b[k * N + j];
          ref[i * extent + window + j] = (accumulate ? c[i * extent + window + j] : 0.0) + s;
        }
      CHECK(test::rel_error(got, ref) < 1e-6);
      size_t untouched = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < extent; ++j)
          untouched += (j < window || j >= window + N) && got[i * extent + j] == c[i * extent + j];
      CHECK(untouched == size_t(M * (extent - std::min<int64_t>(N, extent - window))));
    }
  // Only the hopper kernel takes windows.
  MatmulSpec windowed{64, 64, 64, dtype, DType::F32, false, true};
  windowed.b_cols = 128;
  CHECK_THROWS_AS(matmul_kernel(windowed, default_config(windowed)), NotSupported);
  // A window's last tile (or K slice) may not reach past it into the wider tensor.
  MatmulSpec ragged{64, 72, 64, dtype, DType::F32, false, false};
  ragged.c_cols = 200;
  CHECK_THROWS_WITH(matmul_hopper_kernel(ragged, default_hopper_config(ragged)),
                    Contains("a window of c (c_cols 200) needs N 72 to be a multiple of block_n 64"));
  MatmulSpec shortK{64, 64, 40, dtype, DType::F32, false, true};
  shortK.b_cols = 200;
  CHECK_THROWS_WITH(matmul_hopper_kernel(shortK, default_hopper_config(shortK)),
                    Contains("a window of b (b_cols 200) needs K 40 to be a multiple of block_k 64"));
}
