//===- MatmulTests.cpp - matmul kernels: numerics on the interpreter, PTX -===//
//
// The tile and reference matmul kernels on the CPU interpreter against float64
// references (odd M, N, K in {1, 17, 127}, transposes, bias, every dtype; ragged shapes
// through the cp.async ring); the tile kernel's PTX for sm_80 and sm_90a (cp.async ring
// and masked register loads) uses ldmatrix and mma.sync and passes ptxas without spills
// and with one barrier per K slice; layout assignment gives the dot mma
// layouts and keeps the k-loop accumulator in them; f64 dots are rejected on the GPU with
// a clear error.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "unit/matmul/MatmulTestUtil.h"
#include "common/PtxasUtil.h"
#include "common/Numerics.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

/// Values uniform in [-2, 2], exactly representable in `dtype`.
std::vector<double> uniformValues(size_t n, DType dtype, uint32_t seed) {
  return test::uniform_values(n, dtype, seed, -2.0, 2.0);
}


double tolerance(DType out) {
  switch (out) {
  case DType::BF16: return 8e-3;
  case DType::F16: return 1e-3;
  case DType::F64: return 1e-12;
  default: return 1e-5;
  }
}

/// Runs one matmul kernel on the interpreter; returns {result, float64 reference}.
std::pair<std::vector<double>, std::vector<double>> interpretMatmul(const MatmulSpec &spec, bool reference,
                                                                    double alpha = 1.0) {
  uint32_t seed = static_cast<uint32_t>(spec.m * 131 + spec.n * 17 + spec.k);
  std::vector<double> a = uniformValues(spec.m * spec.k, spec.dtype, seed);       // [M, K]
  std::vector<double> b = uniformValues(spec.k * spec.n, spec.dtype, seed + 1);   // [K, N]
  std::vector<double> bias = uniformValues(spec.n, spec.out_dtype, seed + 2);
  std::vector<double> aStored = test::stored(a, spec.m, spec.k, spec.trans_a);
  std::vector<double> bStored = test::stored(b, spec.k, spec.n, spec.trans_b);
  std::vector<uint8_t> ab = test::to_bytes(aStored, spec.dtype), bb = test::to_bytes(bStored, spec.dtype),
                       biasb = test::to_bytes(bias, spec.out_dtype),
                       cb(spec.m * spec.n * dtype_size(spec.out_dtype), 0xA5);
  std::vector<HostArg> args{HostArg::tensor(ab.data(), ab.size()), HostArg::tensor(bb.data(), bb.size())};
  if (spec.has_bias)
    args.push_back(HostArg::tensor(biasb.data(), biasb.size()));
  args.push_back(HostArg::tensor(cb.data(), cb.size()));
  args.push_back(HostArg::value(alpha));
  dsl::Kernel kernel = reference ? matmul_reference_kernel(spec) : matmul_kernel(spec, default_config(spec));
  interpret(kernel, args);
  return {test::from_bytes(cb, spec.out_dtype),
          test::matmul_reference(a, b, spec.m, spec.n, spec.k, alpha, spec.has_bias ? &bias : nullptr)};
}

using test::describe;

using test::contains;
using test::count;

/// The text of pipeline stage `stage` (e.g. "02-layouts.mlir") of the matmul kernel for
/// `spec` at its default config, compiled to PTX without assembling.
std::string matmulStage(const MatmulSpec &spec, const std::string &stage) {
  auto dir = std::filesystem::temp_directory_path() / ("tokamax-matmul-dump-" + std::to_string(::getpid()));
  CompileOptions options;
  options.assemble = false;
  options.dump_dir = dir.string();
  compile(matmul_kernel(spec, default_config(spec)), options);
  std::ifstream in(dir / "matmul" / stage);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove_all(dir);
  return text;
}

} // namespace

TEST_CASE("matmul tile kernel on the interpreter: odd M, N, K", "[matmul][interpreter]") {
  for (int64_t m : {1, 17, 127})
    for (int64_t n : {1, 17, 127})
      for (int64_t k : {1, 17, 127}) {
        MatmulSpec spec{m, n, k, DType::BF16, DType::F32};
        spec.has_bias = (m + n + k) % 2 == 1;
        auto [got, ref] = interpretMatmul(spec, false, 0.5);
        INFO(describe(spec));
        CHECK(test::rel_error(got, ref) < tolerance(spec.out_dtype));
      }
}

TEST_CASE("matmul tile kernel on the interpreter: transposes and dtypes", "[matmul][interpreter]") {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (bool out32 : {false, true})
      for (int t = 0; t < 4; ++t)
        for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{17, 127, 17}, {127, 17, 127}}) {
          MatmulSpec spec{m, n, k, dtype, out32 ? DType::F32 : dtype, bool(t & 1), bool(t & 2), t == 3};
          auto [got, ref] = interpretMatmul(spec, false);
          INFO(describe(spec));
          CHECK(test::rel_error(got, ref) < tolerance(spec.out_dtype));
        }
}

TEST_CASE("matmul tile kernel (cp.async ring) on the interpreter: ragged blocks, transposes, dtypes",
          "[matmul][interpreter]") {
  // Rows of whole 16-byte chunks take cp_async_dot; M, N and K still leave partial
  // blocks and partial K slices (zero-filled chunks), and M = 1 or N = 8 single rows.
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{8, 8, 8}, {136, 24, 40}, {24, 264, 136}}) {
        MatmulSpec spec{m, n, k, dtype, t == 2 ? DType::F32 : dtype, bool(t & 1), bool(t & 2), t == 3};
        INFO(describe(spec));
        REQUIRE(contains(matmul_kernel(spec, default_config(spec)).ir(), "tile.cp_async_dot"));
        auto [got, ref] = interpretMatmul(spec, false, 0.75);
        CHECK(test::rel_error(got, ref) < tolerance(spec.out_dtype));
      }
  // M = 1 (a not transposed: its row is K) and a 3-stage ring over 9 K slices.
  MatmulSpec spec{1, 16, 72, DType::BF16, DType::F32};
  MatmulConfig config = default_config(spec);
  config.block_k = 16;
  config.num_stages = 3;
  REQUIRE(contains(matmul_kernel(spec, config).ir(), "tile.cp_async_dot"));
  auto [got, ref] = interpretMatmul(spec, false);
  CHECK(test::rel_error(got, ref) < tolerance(DType::F32));
}

TEST_CASE("matmul reference kernel on the interpreter: every dtype, f64 included", "[matmul][interpreter]") {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 17, 127}, {127, 1, 17}, {17, 17, 1}}) {
        DType out = dtype == DType::F64 ? DType::F64 : DType::F32;
        MatmulSpec spec{m, n, k, dtype, out, bool(t & 1), bool(t & 2), t != 0};
        auto [got, ref] = interpretMatmul(spec, true, -1.5);
        INFO(describe(spec));
        CHECK(test::rel_error(got, ref) < tolerance(out));
      }
}

TEST_CASE("matmul specs are validated", "[matmul]") {
  MatmulSpec spec{16, 16, 16, DType::F64, DType::F64};
  CHECK_THROWS_AS(matmul_kernel(spec, default_config(spec)), NotSupported);
  CHECK_NOTHROW(matmul_reference_kernel(spec));
  spec = {0, 16, 16, DType::BF16, DType::BF16};
  CHECK_THROWS_WITH(matmul_reference_kernel(spec), Contains("needs M, N, K >= 1"));
  spec = {16, 16, 16, DType::BF16, DType::F16};
  CHECK_THROWS_WITH(matmul_kernel(spec, default_config(spec)), Contains("c must be bf16 or f32"));
  spec = {16, 16, 16, DType::I32, DType::I32};
  CHECK_THROWS_WITH(matmul_reference_kernel(spec), Contains("dtype must be bf16, f16, f32, f64, f8e4m3 or f8e5m2"));
}

TEST_CASE("matmul tile kernel PTX uses ldmatrix and mma.sync and assembles", "[matmul][ptx]") {
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty())
    WARN("ptxas not found: the PTX is checked textually only");
  struct Case {
    DType dtype;
    const char *mma;
  };
  for (Case c : {Case{DType::BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
                 Case{DType::F16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
                 Case{DType::F32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}})
    for (const char *arch : {"sm_80", "sm_90a"})
      for (int t = 0; t < 4; ++t)
        for (bool ring : {true, false}) {
          // 4096^3 streams through the cp.async ring; odd M and K (rows that are not
          // whole 16-byte chunks) take masked register loads and tile.dot.
          MatmulSpec spec{ring ? 4096 : 4095, 4096, ring ? 4096 : 4091, c.dtype, c.dtype, bool(t & 1), bool(t & 2),
                          t == 1};
          INFO(describe(spec) << " " << arch);
          CompileOptions options;
          options.arch = arch;
          options.assemble = false;
          MatmulConfig config = default_config(spec);
          CompiledKernel compiled = compile(matmul_kernel(spec, config), options);
          CHECK(contains(compiled.ptx, c.mma));
          // 16-bit operands always take ldmatrix; f32 (tf32) only when K is contiguous.
          if (c.dtype != DType::F32 || !spec.trans_a)
            CHECK(contains(compiled.ptx, "ldmatrix.sync.aligned.m8n8.x4"));
          CHECK(compiled.launch.block_threads == 32 * config.num_warps);
          if (ring) {
            // Four 16 KiB stages (128 x 128 blocks, 64-byte K slices), 4 warps of 64 x 64.
            CHECK(config.num_warps == 4);
            CHECK(contains(compiled.ptx, "cp.async.cg.shared.global"));
            CHECK(contains(compiled.ptx, "cp.async.wait_group 2;"));
            CHECK(compiled.launch.shared_bytes == 4 * 16 * 1024);
            CHECK(compiled.launch.dynamic_shared);
            // The epilogue stores 16 bytes per lane (pairs traded among quad lanes first).
            CHECK(contains(compiled.ptx, "shfl.sync.idx.b32"));
            CHECK(contains(compiled.ptx, "st.global.v4.b32"));
          } else {
            CHECK(!contains(compiled.ptx, "cp.async"));
            CHECK(compiled.launch.shared_bytes <= 48 * 1024);
          }
          // One barrier per K slice or k-loop iteration (both operands staged together,
          // double-buffered) and none elsewhere without a bias to convert.
          if (!spec.has_bias)
            CHECK(count(compiled.ptx, "bar.sync") == 1);
          if (ptxas.empty())
            continue;
          auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, arch);
          INFO(log);
          CHECK(status == 0);
          CHECK(contains(log, "0 bytes spill stores"));
        }
}

TEST_CASE("tile.dot gets mma layouts and the k-loop keeps its accumulator in them", "[matmul][layout]") {
  MatmulSpec spec{512, 512, 510, DType::BF16, DType::BF16};  // 1020-byte rows: register loads
  const std::string ir = matmulStage(spec, "02-layouts.mlir");
  REQUIRE(!ir.empty());
  const std::string mma = "#tile.mma<{warpsPerCTA = [4, 2]}>";
  CHECK(contains(ir, "tile.dot_op<{opIdx = 0, parent = " + mma + ", kWidth = 2}>"));
  CHECK(contains(ir, "tile.dot_op<{opIdx = 1, parent = " + mma + ", kWidth = 2}>"));
  // The loop's accumulator is carried in the mma layout: no conversion of a 128x128 f32
  // tile anywhere (only the operands move).
  CHECK(contains(ir, "tensor<128x128xf32, " + mma + ">"));
  CHECK(!contains(ir, "tile.convert_layout %arg4"));
  CHECK(count(ir, "tile.convert_layout") == 2);

  // Through the cp.async ring: the accumulator is in the mma layout from the start
  // (64 x 64 warp tiles) and nothing converts.
  spec.k = 512;
  const std::string ringIr = matmulStage(spec, "02-layouts.mlir");
  REQUIRE(contains(ringIr, "tile.cp_async_dot"));
  CHECK(contains(ringIr, "tensor<128x128xf32, #tile.mma<{warpsPerCTA = [2, 2]}>>"));
  CHECK(count(ringIr, "tile.convert_layout") == 0);
}

TEST_CASE("f64 and integer dots stay on the interpreter with a clear error", "[matmul][ptx]") {
  for (DType dtype : {DType::F64, DType::I32}) {
    dsl::Kernel k("mm64");
    auto a = k.input("a", dtype, {16, 16});
    auto c = k.output("c", dtype == DType::F64 ? DType::F64 : DType::F32, {16, 16});
    dsl::Value t = a.load({0, 0}, {16, 16});
    c.store({0, 0}, dsl::dot(t, t, 0.0));
    CompileOptions options;
    options.assemble = false;
    CHECK_THROWS_WITH(compile(k, options), Contains("stage 'tile-to-llvm' failed") &&
                                               Contains("'tile.dot' op runs on the CPU interpreter only"));
  }
  // sm_70 has no mma.sync for these shapes.
  dsl::Kernel k("mm70");
  auto a = k.input("a", DType::BF16, {16, 16});
  auto c = k.output("c", DType::F32, {16, 16});
  dsl::Value t = a.load({0, 0}, {16, 16});
  c.store({0, 0}, dsl::dot(t, t, 0.0));
  CompileOptions options;
  options.assemble = false;
  options.arch = "sm_70";
  CHECK_THROWS_WITH(compile(k, options), Contains("needs tensor cores (mma.sync, sm_80 or newer)"));
}

TEST_CASE("cp_async_dot misuse in the DSL is reported with the problem", "[matmul][dsl]") {
  struct Case {
    DType dtype;
    std::vector<int64_t> a, b, acc;
    dsl::CpAsyncDotOptions options;
    const char *error;
  };
  const std::vector<Case> cases{
      {DType::F8E4M3, {64, 64}, {64, 64}, {64, 64}, {}, "cp_async_dot: a must be bf16, f16 or f32, got f8e4m3"},
      {DType::BF16, {64, 64}, {64, 64}, {64, 64}, {.block_k = 24}, "block_k must be a multiple of 16 up to 128"},
      {DType::F32, {64, 64}, {64, 64}, {64, 64}, {.block_k = 128}, "block_k must be a multiple of 8 up to 64"},
      {DType::F16, {64, 64}, {64, 64}, {64, 64}, {.stages = 1}, "stages must be in [2, 8], got 1"},
      {DType::BF16, {64, 64}, {64, 64}, {8, 64}, {}, "BM, BN powers of two in [16, 256], got [8, 64]"},
      {DType::BF16, {64, 60}, {60, 64}, {64, 64}, {}, "rows of a must be multiples of 16 bytes (8 elements)"},
      {DType::BF16, {64, 64}, {72, 64}, {64, 64}, {}, "op(a) has K = 64 but op(b) has K = 72"},
  };
  for (const Case &c : cases) {
    INFO(c.error);
    dsl::Kernel k("bad_cp_async_dot", {4});
    dsl::TensorArg a = k.input("a", c.dtype, c.a), b = k.input("b", c.dtype, c.b);
    dsl::Value zero = k.constant(0, DType::I32);
    CHECK_THROWS_WITH(dsl::cp_async_dot(a, b, zero, zero, k.full(c.acc, 0.0, DType::F32), c.options),
                      Contains(c.error));
  }
}

TEST_CASE("the cp.async ring needs sm_80", "[matmul][ptx]") {
  MatmulSpec spec{256, 512, 320, DType::F16, DType::F16};
  CompileOptions options;
  options.arch = "sm_75";
  options.assemble = false;
  CHECK_THROWS_WITH(compile(matmul_kernel(spec, default_config(spec)), options),
                    Contains("cp.async and mma.sync (sm_80 or newer)") && Contains("sm_75"));
}

TEST_CASE("warp-collective inline asm (mma.sync, ldmatrix) is convergent in the LLVM IR", "[matmul][ptx]") {
  // LLVM may copy a call that is not convergent into both arms of a lane-dependent
  // branch; a warp split between two copies of an .aligned instruction hangs.
  const std::string ll = matmulStage({512, 512, 512, DType::BF16, DType::BF16}, "06-kernel.ll");
  REQUIRE(!ll.empty());
  std::map<std::string, std::string> groups;  // "#N" -> its attributes
  const std::regex group(R"(attributes (#\d+) = \{([^}]*)\})");
  for (auto it = std::sregex_iterator(ll.begin(), ll.end(), group); it != std::sregex_iterator(); ++it)
    groups[(*it)[1]] = (*it)[2];
  const std::regex call(R"(asm sideeffect "[^"]*\.aligned[^"]*"[^\n]*\) (#\d+))");
  size_t calls = 0;
  for (auto it = std::sregex_iterator(ll.begin(), ll.end(), call); it != std::sregex_iterator(); ++it, ++calls) {
    INFO(it->str());
    CHECK(contains(groups[(*it)[1]], "convergent"));
  }
  CHECK(calls > 0);
}
