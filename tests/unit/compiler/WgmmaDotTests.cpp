// tile.dot on wgmma from the DSL: the ring kernel (tests/common/AsyncRingKernel.h) with its
// dots on mma.sync, on wgmma and on async wgmma compiles for sm_90a into what each asks
// for (the async dot committed, then the sum, then the wait its results flow through),
// assembles with ptxas, and stays on mma.sync for sm_80; dot_async / dot_wait misuse is
// reported. Numerics: InterpreterDslTests.cpp (interpreter), KernelGpuTests.cpp (device).
#include "common/AsyncRingKernel.h"
#include "common/PtxasUtil.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Error.h>

using namespace tokamax;
using test::RingDots;

namespace {

std::string ptxFor(RingDots dots, const std::string &arch) {
  CompileOptions options;
  options.assemble = false;
  options.arch = arch;
  return compile(test::async_ring_kernel(test::AsyncRingShape{}, DType::BF16, dots), options).ptx;
}

} // namespace

TEST_CASE("wgmma dots: the ring kernel's dot on mma.sync, wgmma and async wgmma", "[ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (RingDots dots : {RingDots::Mma, RingDots::Wgmma, RingDots::WgmmaAsync}) {
    INFO("dots " << int(dots));
    const std::string ptx = ptxFor(dots, "sm_90a");
    const size_t wgmma = test::count(ptx, "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16");
    if (dots == RingDots::Mma) {
      CHECK(wgmma == 0);
      CHECK(test::count(ptx, "fence.proxy.async") == 0);
    } else {
      CHECK(wgmma > 0);  // K 64: four per dot, in the loop
      CHECK(test::count(ptx, "mma.sync.aligned") == 0);
      CHECK(test::count(ptx, "fence.proxy.async.shared::cta") > 0);
      CHECK(test::count(ptx, "wgmma.wait_group.sync.aligned 0") > 0);
    }
    CHECK(test::count(ptxFor(dots, "sm_80"), "wgmma") == 0);
    if (!ptxas.empty()) {
      auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
      INFO(log);
      CHECK(status == 0);
    }
  }
}

TEST_CASE("wgmma dots: dot_wait checks what it waits for", "[dsl]") {
  dsl::Kernel k("bad_wait");
  dsl::TensorArg x = k.input("x", DType::F32, {64, 64});
  dsl::Value t = x.load({0, 0}, {64, 64});
  CHECK_THROWS_WITH(dsl::dot_wait(t, 8), Catch::Contains("dot_wait") && Catch::Contains("pending"));
  CHECK_THROWS_WITH(dsl::dot_wait(t, -1), Catch::Contains("[0, 7]"));
  CHECK_THROWS_WITH(dsl::dot_wait(k.program_id(0)), Catch::Contains("dot_wait") && Catch::Contains("tile"));
}
