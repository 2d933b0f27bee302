//===- HopperMatmulTests.cpp - the hopper matmul kernel and tile.tma_dot --===//
//
// The `hopper` matmul kernel (tma_dot main loop) on the CPU interpreter against a
// float64 reference: ragged M, N and K, every transpose, bf16 and f16, bias and alpha,
// f32 and same-dtype output, one and several programs; hopper_unsupported() names what
// the kernel cannot serve and the kernel then throws NotSupported; DSL misuse of tma_dot
// is reported with the problem; the sm_90a PTX uses TMA, mbarriers and wgmma, carries
// the tensor maps as parameters, asks for dynamic shared memory and passes ptxas
// without spills; other architectures are refused with a clear error.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "PtxasUtil.h"
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

namespace {

std::string describe(const MatmulSpec &s, double alpha) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
         std::string(dtype_name(s.dtype)) + "->" + std::string(dtype_name(s.out_dtype)) + (s.trans_a ? " a^T" : "") +
         (s.trans_b ? " b^T" : "") + (s.has_bias ? " +bias" : "") + " alpha=" + std::to_string(alpha);
}

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

using test::contains;

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

TEST_CASE("hopper matmul PTX: TMA, mbarriers, wgmma, tensor maps, dynamic shared memory", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty())
    WARN("ptxas not found: the PTX is checked textually only");
  for (DType dtype : {DType::BF16, DType::F16})
    for (int t = 0; t < 8; ++t) {
      MatmulSpec spec{256, 512, 320, dtype, dtype, bool(t & 1), bool(t & 2), t == 2};
      MatmulConfig config = default_hopper_config(spec);
      config.warp_specialize = t < 4;
      config.tma_store = t % 3 != 0;
      INFO(describe(spec, 1.0) << (config.warp_specialize ? " warp-specialized" : " in order")
                               << (config.tma_store ? ", TMA stores" : ", thread stores"));
      REQUIRE(config.block_m == 128);
      REQUIRE(config.block_n == 256);
      CompileOptions options;
      options.arch = "sm_90a";
      options.assemble = false;
      CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
      const std::string &ptx = compiled.ptx;
      const std::string types = dtype == DType::BF16 ? ".f32.bf16.bf16" : ".f32.f16.f16";
      CHECK(contains(ptx, "wgmma.mma_async.sync.aligned.m64n256k16" + types));
      CHECK(contains(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"));
      CHECK(contains(ptx, "mbarrier.try_wait.parity"));
      // The epilogue: 16-byte stores per thread, or swizzled strips in shared memory
      // handed to TMA in bulk groups (two buffers: the reuse waits for reads only), all
      // waited for before the kernel returns.
      CHECK(contains(ptx, "st.global.v4.b32") == !config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.commit_group;") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.wait_group.read 1;") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.wait_group 0;") == config.tma_store);
      CHECK(contains(ptx, ".param .align 64 .b8"));

      const LaunchInfo &launch = compiled.launch;
      // A warp-specialized kernel has a producer warpgroup beside its 8 warps; the
      // epilogue's barriers count only the 256 consumer threads.
      CHECK(launch.block_threads == (config.warp_specialize ? 384u : 256u));
      CHECK(contains(ptx, ".maxntid 384, 1, 1") == config.warp_specialize);
      // 2 x 2 tiles: fewer than the 132 persistent programs, so one program each.
      CHECK(launch.grid[0] == 2 * 2);
      CHECK(launch.dynamic_shared);
      CHECK(launch.shared_bytes > 48 * 1024);
      CHECK(launch.shared_bytes <= 227 * 1024);
      REQUIRE(launch.tensor_maps.size() == (config.tma_store ? 3u : 2u));
      const TensorMapParam &ma = launch.tensor_maps[0], &mb = launch.tensor_maps[1];
      if (config.tma_store) {  // c: [block_m rows][64 columns] strips
        CHECK(launch.tensor_maps[2].param == (spec.has_bias ? 3u : 2u));
        CHECK(launch.tensor_maps[2].box_inner == 64);
        CHECK(launch.tensor_maps[2].box_outer == uint32_t(config.block_m));
      }
      CHECK(ma.param == 0);
      CHECK(mb.param == 1);
      // K-major operands (a [M, K], b [N, K]) take one [rows][64] box; MN-major ones
      // [64 K][64] boxes.
      CHECK(ma.box_inner == 64);
      CHECK(ma.box_outer == (spec.trans_a ? 64u : uint32_t(config.block_m)));
      CHECK(mb.box_inner == 64);
      CHECK(mb.box_outer == (spec.trans_b ? uint32_t(config.block_n) : 64u));
      // The launch info survives its JSON form.
      LaunchInfo back = LaunchInfo::from_json(launch.to_json());
      CHECK(back.dynamic_shared == launch.dynamic_shared);
      REQUIRE(back.tensor_maps.size() == launch.tensor_maps.size());
      CHECK(back.tensor_maps[1].box_outer == mb.box_outer);

      if (ptxas.empty())
        continue;
      auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
      INFO(log);
      CHECK(status == 0);
      CHECK(contains(log, "0 bytes spill stores"));
      CHECK(contains(log, "0 bytes spill loads"));
      // ptxas keeps the wgmma chain asynchronous (no serialization warning).
      CHECK_FALSE(contains(log, "serialized"));
    }
}

TEST_CASE("hopper matmul PTX with 64- and 32-byte swizzled K slices", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (int64_t bk : {32, 16})
    for (int t = 0; t < 4; ++t) {
      MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16, bool(t & 1), bool(t & 2), false};
      MatmulConfig config = default_hopper_config(spec);
      config.block_k = bk;
      config.num_stages = 8;
      INFO(describe(spec, 1.0) << " block_k " << bk);
      CompileOptions options;
      options.arch = "sm_90a";
      options.assemble = false;
      CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
      CHECK(contains(compiled.ptx, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"));
      const LaunchInfo &launch = compiled.launch;
      REQUIRE(launch.tensor_maps.size() >= 2);
      // K-major operands: [rows][block_k] boxes swizzled by their 2 * block_k-byte rows;
      // MN-major ones: [block_k][64] boxes with the 128-byte swizzle.
      for (auto [map, kMajor, rows] : {std::tuple{launch.tensor_maps[0], !spec.trans_a, config.block_m},
                                      std::tuple{launch.tensor_maps[1], spec.trans_b, config.block_n}}) {
        CHECK(map.box_inner == uint32_t(kMajor ? bk : 64));
        CHECK(map.box_outer == uint32_t(kMajor ? rows : bk));
        CHECK(map.swizzle == uint32_t(kMajor ? 2 * bk : 128));
      }
      LaunchInfo back = LaunchInfo::from_json(launch.to_json());
      REQUIRE(back.tensor_maps.size() == launch.tensor_maps.size());
      CHECK(back.tensor_maps[0].swizzle == launch.tensor_maps[0].swizzle);
      CHECK(back.tensor_maps[1].swizzle == launch.tensor_maps[1].swizzle);
      if (ptxas.empty())
        continue;
      auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, "sm_90a");
      INFO(log);
      CHECK(status == 0);
      CHECK(contains(log, "0 bytes spill stores"));
      CHECK_FALSE(contains(log, "serialized"));
    }
}

TEST_CASE("hopper matmul PTX with A in registers: ldmatrix from the ring, wgmma RS", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (DType dtype : {DType::BF16, DType::F8E4M3})
    for (int64_t bytes : {128, 64, 32})
      for (bool specialized : {true, false}) {
        const bool fp8 = dtype == DType::F8E4M3;
        MatmulSpec spec{256, 512, 320, dtype, DType::BF16, false, fp8, false};
        MatmulConfig config = default_hopper_config(spec);
        config.block_k = bytes / int64_t(dtype_size(dtype));
        config.num_stages = bytes == 128 ? 4 : 8;
        config.a_in_registers = true;
        config.warp_specialize = specialized;
        INFO(describe(spec, 1.0) << " block_k " << config.block_k << (specialized ? " warp-specialized" : ""));
        CompileOptions options;
        options.arch = "sm_90a";
        options.assemble = false;
        CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
        const std::string &ptx = compiled.ptx;
        CHECK(contains(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
        // A is a brace list of four registers, B a descriptor; no transpose immediate for A.
        const std::string type = fp8 ? "k32.f32.e4m3.e4m3" : "k16.f32.bf16.bf16";
        std::regex rs("wgmma\\.mma_async\\.sync\\.aligned\\.m64n256" + std::regex_replace(type, std::regex("\\."), "\\.") +
                      " \\{[^}]*\\}, \\{%r\\d+, %r\\d+, %r\\d+, %r\\d+\\}, %rd\\d+, acc, 1, 1" + (fp8 ? ";" : ", [01];"));
        CHECK(std::regex_search(ptx, rs));
        if (!fp8)
          CHECK_THROWS_WITH(matmul_hopper_kernel({256, 512, 320, dtype, DType::BF16, true, false, false}, config),
                            Contains("a_in_registers needs a as [M, K]"));
        if (ptxas.empty())
          continue;
        auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
        INFO(log);
        CHECK(status == 0);
        CHECK(contains(log, "0 bytes spill stores"));
        // wgmma reads A's registers until its group completes, and two slices' groups
        // are in flight: with 128-byte slices (16 words per slice) beside the 128-word
        // accumulator that outgrows the 168 registers a thread of a warp-specialized
        // 384-thread program has, and ptxas serializes the wgmma; narrower slices fit.
        if (bytes < 128 || !specialized)
          CHECK_FALSE(contains(log, "serialized"));
      }
}

TEST_CASE("hopper matmul PTX with 2-CTA clusters: multicast TMA, remote releases, cluster barriers", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (int t = 0; t < 4; ++t)
    for (int64_t programs : {0, 6}) {
      MatmulSpec spec{1000, 512, 320, DType::BF16, DType::BF16, bool(t & 1), bool(t & 2), t == 1};
      MatmulConfig config = default_hopper_config(spec);
      config.cluster_m = 2;
      config.programs = programs;
      INFO(describe(spec, 1.0) << " programs " << programs);
      CompileOptions options;
      options.arch = "sm_90a";
      options.assemble = false;
      CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
      const std::string &ptx = compiled.ptx;
      CHECK(contains(ptx, ".reqnctapercluster 2, 1, 1"));
      CHECK(contains(ptx, "mbarrier::complete_tx::bytes.multicast::cluster"));
      CHECK(contains(ptx, "%cluster_ctarank"));
      CHECK(contains(ptx, "fence.mbarrier_init.release.cluster"));
      CHECK(contains(ptx, "barrier.cluster.arrive.aligned"));
      CHECK(contains(ptx, "barrier.cluster.wait.aligned"));
      CHECK(contains(ptx, "mapa.shared::cluster.u32"));
      CHECK(contains(ptx, "mbarrier.arrive.release.cluster.shared::cluster.b64"));
      const LaunchInfo &launch = compiled.launch;
      CHECK(launch.cluster == 2);
      // 8 block rows (1000 / 128) in 4 pairs x 2 block columns: 16 programs, or 6 persistent ones.
      CHECK(launch.grid[0] == (programs ? 6u : 16u));
      CHECK(LaunchInfo::from_json(launch.to_json()).cluster == 2);
      // Each CTA loads half of b's rows: a K-major b's box is [128][64].
      REQUIRE(launch.tensor_maps.size() == 3);
      CHECK(launch.tensor_maps[1].box_outer == (spec.trans_b ? 128u : 64u));
      if (ptxas.empty())
        continue;
      auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
      INFO(log);
      CHECK(status == 0);
      // At 168 registers (384 threads, one CTA per SM) the persistent loop with a bias
      // and a transposed a spills a few words; the others fit.
      if (!(spec.has_bias && programs))
        CHECK(contains(log, "0 bytes spill stores"));
      CHECK_FALSE(contains(log, "serialized"));
    }
}

TEST_CASE("hopper matmul stores c through TMA only where c's rows and shared memory allow", "[hopper][ptx]") {
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  auto tmaStores = [&](const MatmulSpec &spec, const MatmulConfig &config) {
    CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
    INFO(describe(spec, 1.0) << " blocks " << config.block_m << "x" << config.block_n << " stages "
                             << config.num_stages);
    CHECK(compiled.launch.shared_bytes <= 227 * 1024);
    bool tma = contains(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared::cta");
    CHECK(tma == (compiled.launch.tensor_maps.size() == 3));
    CHECK(tma != contains(compiled.ptx, "st.global"));
    return tma;
  };
  MatmulSpec spec{512, 512, 256, DType::BF16, DType::BF16};
  MatmulConfig config = default_hopper_config(spec);
  CHECK(tmaStores(spec, config));
  // 256 x 128 blocks: four 48 KiB stages leave no room for two [256][128 B] strips.
  config.block_m = 256, config.block_n = 128;
  CHECK_FALSE(tmaStores(spec, config));
  config.num_stages = 3;
  CHECK(tmaStores(spec, config));
  // c's rows of 1000 bytes are not whole 16-byte chunks: TMA cannot address them.
  MatmulSpec ragged{512, 500, 256, DType::BF16, DType::BF16, false, true};  // b as [N, K]
  CHECK_FALSE(tmaStores(ragged, default_hopper_config(ragged)));
  config = default_hopper_config(spec);
  config.tma_store = false;
  CHECK_FALSE(tmaStores(spec, config));
}

TEST_CASE("fp8 hopper matmul PTX: wgmma k32 on e4m3 / e5m2, 128-element TMA boxes", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (auto [dtype, name] : {std::pair{DType::F8E4M3, "e4m3"}, std::pair{DType::F8E5M2, "e5m2"}}) {
    MatmulSpec spec{256, 512, 384, dtype, DType::BF16, false, true};
    CompileOptions options;
    options.arch = "sm_90a";
    options.assemble = false;
    CompiledKernel compiled = compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options);
    INFO(name);
    CHECK(contains(compiled.ptx, std::string("wgmma.mma_async.sync.aligned.m64n256k32.f32.") + name + "." + name));
    REQUIRE(compiled.launch.tensor_maps.size() == 3);  // a, b and c (bf16 strips of 64 columns)
    for (const TensorMapParam &map : compiled.launch.tensor_maps)
      CHECK(map.box_inner == (map.param == 2 ? 64u : 128u));  // 128 one-byte elements: one swizzle row
    if (ptxas.empty())
      continue;
    auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, "sm_90a");
    INFO(log);
    CHECK(status == 0);
    CHECK(contains(log, "0 bytes spill stores"));
    CHECK_FALSE(contains(log, "serialized"));
  }
}

TEST_CASE("hopper matmul PTX keeps warpgroup-wide instructions out of lane-dependent code", "[hopper][ptx]") {
  // wgmma.fence / commit_group / wait_group are .aligned: every thread of the warp must
  // reach the same instruction. With a short K the consumer loop is unrolled, and
  // branching around the lanes' mbarrier arrivals once let LLVM copy the final
  // wait_group into both sides of such a branch (a hang on the GPU). Each instruction
  // must appear once per unrolled K step, the final wait once.
  auto count = [](const std::string &text, const std::regex &re) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
  };
  const std::regex fence(R"(wgmma\.fence\.sync\.aligned)"), commit(R"(wgmma\.commit_group\.sync\.aligned)"),
      wait1(R"(wgmma\.wait_group\.sync\.aligned\s+1;)"), wait0(R"(wgmma\.wait_group\.sync\.aligned\s+0;)");
  for (DType dtype : {DType::BF16, DType::F8E4M3})
    for (int64_t k : {64, 128, 192, 256, 320, 512, 528, 4096}) {
      MatmulSpec spec{4097, 520, k, dtype, DType::BF16, false, true};
      for (bool specialized : {true, false}) {
        MatmulConfig config = default_hopper_config(spec);
        config.warp_specialize = specialized;
        CompileOptions options;
        options.arch = "sm_90a";
        options.assemble = false;
        std::string ptx = compile(matmul_hopper_kernel(spec, config), options).ptx;
        INFO(dtype_name(dtype) << " K = " << k << (specialized ? " warp-specialized" : " in order"));
        CHECK(count(ptx, wait0) == 1);
        CHECK(count(ptx, fence) >= 1);
        CHECK(count(ptx, fence) == count(ptx, commit));
        CHECK(count(ptx, commit) == count(ptx, wait1));
        CHECK(ptx.find("@p mbarrier.arrive.shared::cta.b64") != std::string::npos);  // predicated, not branched
      }
    }
}

TEST_CASE("hopper matmul compiles for sm_90a only", "[hopper][ptx]") {
  MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16};
  for (const char *arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    CompileOptions options;
    options.arch = arch;
    options.assemble = false;
    CHECK_THROWS_AS(compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options), Error);
    CHECK_THROWS_WITH(compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options),
                      Contains("sm_90a") && Contains(arch));
  }
}

TEST_CASE("hopper matmul with fewer rows than its warpgroups cover is refused at lowering", "[hopper][ptx]") {
  // 8 warps (2 warpgroups) need block M >= 128: each warpgroup owns 64-row slabs.
  MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16};
  MatmulConfig config = default_hopper_config(spec);
  config.block_m = 64;
  config.num_warps = 8;
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  CHECK_THROWS_WITH(compile(matmul_hopper_kernel(spec, config), options),
                    Contains("block M a multiple of 16 * num_warps") && Contains("8 warps for block M 64"));
  config.num_warps = 4;
  CHECK_NOTHROW(compile(matmul_hopper_kernel(spec, config), options));
}
