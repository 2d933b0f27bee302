// f64 exp, exp2, log, tanh and erf: the GPU lowering's expansion assembles for sm_90a and
// sm_80; the attention GPU tests check its numerics in f64 against a float64 reference.
#include "common/PtxasUtil.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Elementwise.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace tokamax;
using namespace tokamax::dsl;

namespace {

Kernel f64MathKernel() {
  Kernel k("f64_math");
  TensorArg x = k.input("x", DType::F64, {256});
  TensorArg y = k.output("y", DType::F64, {5, 256});
  Value v = x.load({0}, {256});
  y.store({0, 0}, exp(v).expand(0));
  y.store({1, 0}, exp2(v).expand(0));
  y.store({2, 0}, log(abs(v)).expand(0));
  y.store({3, 0}, tanh(v).expand(0));
  y.store({4, 0}, erf(v).expand(0));
  return k;
}

} // namespace

TEST_CASE("f64 exp, exp2, log, tanh and erf lower to PTX that assembles", "[ptx]") {
  for (const char *arch : {"sm_80", "sm_90a"}) {
    CompileOptions options;
    options.arch = arch;
    options.assemble = false;
    CompiledKernel compiled = compile(f64MathKernel(), options);
    INFO(arch);
    CHECK(test::contains(compiled.ptx, "cvt.rni.f64.f64"));  // exp's range reduction
    CHECK(!test::contains(compiled.ptx, ".extern"));        // no libdevice call
    CHECK(!test::contains(compiled.ptx, "ex2.approx"));  // no f32 shortcut
    if (std::string ptxas = test::ptxas_path(); !ptxas.empty()) {
      auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, arch);
      INFO(log);
      CHECK(status == 0);
    }
  }
}

TEST_CASE("gelu in f64 compiles for the GPU (exact erf in f64)", "[ptx]") {
  // Regression: gelu on f64 failed in tile-to-llvm ("math.erf on f64 runs on the
  // interpreter only") instead of being served.
  tokamax::ElementwiseSpec spec{4096, DType::F64};
  CompileOptions options;
  options.assemble = false;
  CompiledKernel compiled = compile(gelu_kernel(spec, default_config(spec)), options);
  CHECK(!test::contains(compiled.ptx, ".extern"));
  if (std::string ptxas = test::ptxas_path(); !ptxas.empty())
    CHECK(test::run_ptxas(ptxas, compiled.ptx, "sm_90a").first == 0);
}
