//===- SassTests.cpp - The matmul and attention kernels' machine code ------===//
//
// The cubins the compiler makes for sm_90a (nvJitLink or ptxas; no GPU needed),
// disassembled with cuobjdump where the toolkit has it: the hopper kernel runs on
// Hopper's warpgroup tensor-core instructions (HGMMA) fed by TMA (UTMALDG) and
// mbarriers (SYNCS), the tile kernel on mma.sync (HMMA.16816) fed by cp.async (LDGSTS)
// and ldmatrix (LDSM); the hopper attention kernels on HGMMA, TMA and mbarriers too.
// Without cuobjdump the case says so and checks nothing.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Matmul.h>

#include <catch2/catch.hpp>

#include "PtxasUtil.h"

using namespace tokamax;
using test::contains;

namespace {

/// cuobjdump -sass of `kernel` assembled for sm_90a.
std::string sassOf(const std::string &cuobjdump, const dsl::Kernel &kernel) {
  CompileOptions options;
  options.arch = "sm_90a";
  CompiledKernel compiled = compile(kernel, options);
  REQUIRE(!compiled.cubin.empty());
  auto [status, sass] = test::run_cuobjdump_sass(cuobjdump, compiled.cubin);
  INFO(sass.substr(0, 2000));
  REQUIRE(status == 0);
  return sass;
}

} // namespace

TEST_CASE("matmul SASS: hopper on HGMMA fed by TMA, tile on HMMA fed by cp.async and ldmatrix", "[matmul][sass]") {
  const std::string cuobjdump = test::cuobjdump_path();
  if (cuobjdump.empty()) {
    WARN("cuobjdump not found (set TOKAMAX_CUOBJDUMP): the SASS is not checked");
    return;
  }
  MatmulSpec spec{4096, 4096, 4096, DType::BF16, DType::BF16};
  std::string hopper = sassOf(cuobjdump, matmul_hopper_kernel(spec, default_hopper_config(spec, 132)));
  CHECK(contains(hopper, "HGMMA.64x256x16.F32.BF16"));
  CHECK(contains(hopper, "UTMALDG.2D"));
  CHECK(contains(hopper, "SYNCS."));
  CHECK_FALSE(contains(hopper, "HMMA."));
  std::string tile = sassOf(cuobjdump, matmul_kernel(spec, default_config(spec)));
  CHECK(contains(tile, "HMMA.16816.F32.BF16"));
  CHECK(contains(tile, "LDGSTS"));
  CHECK(contains(tile, "LDSM.16.M88.4"));
  CHECK(contains(tile, "LDSM.16.MT88.4"));
  CHECK_FALSE(contains(tile, "HGMMA"));
}

TEST_CASE("attention SASS: the hopper forward, dk/dv and dq on HGMMA fed by TMA and mbarriers", "[attention][sass]") {
  const ArgSpec x{{4, 2048, 8, 128}, DType::BF16};
  BoundArgs forward = bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
  BoundArgs vjp = bind_attention_vjp({x, x, x, x, x, attention_lse_spec(x), {}, {}, {}, {}, x, x, x, {}});
  std::vector<dsl::Kernel> kernels = attention_op().implementation("hopper").kernels(
      forward, attention_op().implementation("hopper").heuristic(forward));
  for (dsl::Kernel &kernel : attention_vjp_op().implementation("hopper").kernels(
           vjp, attention_vjp_op().implementation("hopper").heuristic(vjp)))
    if (kernel.name().find("delta") == std::string::npos)
      kernels.push_back(std::move(kernel));
  REQUIRE(kernels.size() == 3u);  // forward, dk/dv, dq
  const std::string cuobjdump = test::cuobjdump_path();
  if (cuobjdump.empty()) {
    WARN("cuobjdump not found (set TOKAMAX_CUOBJDUMP): the SASS is not checked");
    return;
  }
  for (const dsl::Kernel &kernel : kernels) {
    INFO(kernel.name());
    std::string sass = sassOf(cuobjdump, kernel);
    CHECK(contains(sass, "HGMMA.64x"));
    CHECK(contains(sass, "UTMALDG.2D"));
    CHECK(contains(sass, "SYNCS."));
    CHECK_FALSE(contains(sass, "HMMA."));
  }
}
