//===- TmaReduceAddTests.cpp - tile.tma_store add (TMA reduce-add) ----------===//
//
// TensorArg::tma_reduce_add: programs adding overlapping [64, 64] f32 blocks, hanging over
// the tensor's edges, into one tensor match float64 on the interpreter; the sm_90a PTX
// hands each 128-byte strip to cp.reduce.async.bulk.tensor .add (no plain TMA store) and
// ptxas assembles it without spills; the DSL refuses what the op cannot add.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/PtxasUtil.h"
#include "common/TmaReduceKernel.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

/// Host values of one dtype, filled with seeded uniform values in [-1, 1].
struct HostTensor {
  DType dtype;
  std::vector<unsigned char> bytes;

  HostTensor(DType d, int64_t n, std::mt19937 &rng) : dtype(d), bytes(static_cast<size_t>(n) * dtype_size(d)) {
    std::uniform_real_distribution<double> dist(-1, 1);
    for (int64_t i = 0; i < n; ++i)
      store_from_double(dtype, bytes.data() + i * dtype_size(dtype), dist(rng));
  }
  double get(size_t i) const { return load_as_double(dtype, bytes.data() + i * dtype_size(dtype)); }
  std::vector<double> values() const {
    std::vector<double> v(bytes.size() / dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = get(i);
    return v;
  }
  HostArg arg() { return HostArg::tensor(bytes.data(), bytes.size()); }
};

} // namespace

TEST_CASE("tma_reduce_add: overlapping blocks over the edges add up on the interpreter", "[tma][interpreter]") {
  std::mt19937 rng(31);
  // Blocks hang over the bottom (rows 87.. of program 3) and the right edge (columns
  // 40..103 of programs 1 and 3); neighbours overlap by 35 rows and 24 columns.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{100, 72}, {64, 36}, {150, 108}, {1, 4}}) {
    INFO("out [" << rows << ", " << cols << "]");
    test::TmaReduceShape sh;
    sh.rows = rows;
    sh.cols = cols;
    dsl::Kernel k = test::tma_reduce_kernel(sh, DType::BF16);
    const int64_t n = sh.kBlock, kk = sh.kK;
    HostTensor a(DType::BF16, n * kk, rng), b(DType::BF16, sh.programs * kk * n, rng), out(DType::F32, rows * cols, rng);
    std::vector<double> ref = test::tma_reduce_reference(sh, a.values(), b.values(), out.values());
    std::vector<HostArg> args{a.arg(), b.arg(), out.arg()};
    interpret(k, args);
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::fabs(out.get(i) - ref[i]) <= 1e-5 * (1 + std::fabs(ref[i])));
    }
  }
}

TEST_CASE("tma_reduce_add: sm_90a PTX reduce-adds each strip by TMA and assembles without spills",
          "[tma][ptx]") {
  test::TmaReduceShape sh;
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  CompiledKernel compiled = compile(test::tma_reduce_kernel(sh, DType::BF16), options);
  const std::string &ptx = compiled.ptx;
  // Two strips of 32 f32 columns, each one bulk reduce-add in its own bulk group.
  CHECK(test::count(ptx, "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group") == 2);
  CHECK(test::count(ptx, "cp.async.bulk.commit_group") == 2);
  CHECK_FALSE(test::contains(ptx, "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"));
  CHECK(test::contains(ptx, "cp.async.bulk.wait_group 0"));
  CHECK(test::contains(ptx, "fence.proxy.async.shared::cta"));
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty())
    WARN("ptxas not found: the PTX is checked textually only");
  else
    test::check_assembles_without_spills(ptxas, ptx, "sm_90a");
}

TEST_CASE("tma_reduce_add misuse in the DSL is reported with the problem", "[tma][dsl]") {
  struct Case {
    DType dtype;
    std::vector<int64_t> tensor, tile;
    const char *error;
  };
  const std::vector<Case> cases{
      {DType::BF16, {64, 64}, {64, 64},
       "tma_reduce_add c: adds into f32 tensors only (a 16-bit sum would round at every partial sum), got bf16"},
      {DType::F64, {64, 64}, {64, 64}, "tma_reduce_add c: stores bf16, f16 or f32 tensors, got f64"},
      {DType::F32, {64, 64, 2}, {64, 64}, "tma_reduce_add c: needs a 2-D tensor"},
      {DType::F32, {64, 30}, {64, 32}, "tma_reduce_add c: rows must be multiples of 16 bytes (4 elements)"},
      {DType::F32, {64, 64}, {64, 16}, "needs a [BM, BN] tile with BM <= 256 and BN a multiple of 32 (128 bytes)"},
  };
  for (const Case &c : cases) {
    INFO(c.error);
    dsl::Kernel k("bad_tma_reduce_add", {4});
    dsl::TensorArg t = k.output("c", c.dtype, c.tensor);
    dsl::Value zero = k.constant(0, DType::I32);
    CHECK_THROWS_WITH(t.tma_reduce_add({zero, zero}, k.full(c.tile, 0.0, c.dtype)), Contains(c.error));
  }
  dsl::Kernel k("mixed", {4});
  dsl::TensorArg t = k.output("c", DType::F32, {64, 64});
  dsl::Value zero = k.constant(0, DType::I32);
  CHECK_THROWS_WITH(t.tma_reduce_add({zero, zero}, k.full({64, 32}, 0.0, DType::BF16)),
                    Contains("tma_reduce_add c: tile dtype bf16 does not match the tensor dtype f32; cast with .to()"));
}
