// What `tokamax-compile precompile --arch sm_90a` compiles (registered_kernels) holds
// every kernel the headline gradient (examples/attention.cpp) runs on sm_90a: its hopper
// attention VJP's and its glue's (fill, cast, add, sum) included, so that a must-hit
// cache built that way serves it. (ctest's dispatch-headline-must-hit-null-driver runs
// the gradient's plan against such a cache.)
#include "common/HeadlineGrad.h"

#include <catch2/catch.hpp>

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Registry.h>

#include <set>
#include <string>

using namespace tokamax;

namespace {

/// The tile IR of every kernel precompiled for `arch`, and their names.
struct Precompiled {
  std::set<std::string> irs, names;
  explicit Precompiled(const std::string &arch) {
    for (const RegisteredKernel &registered : registered_kernels())
      if (registered.only_arch.empty() || registered.only_arch == arch) {
        const dsl::Kernel kernel = registered.build();
        irs.insert(kernel.ir());
        names.insert(kernel.name());
      }
  }
};

} // namespace

TEST_CASE("precompile: sm_90a's registered kernels hold every kernel of the headline gradient there",
          "[function][precompile]") {
  const Precompiled precompiled("sm_90a");
  // The hopper VJP auto picks on sm_90a, at the headline shape: delta, dk/dv, dq.
  for (const char *name : {"attention_delta_hopper_bf16_h64_64x128", "attention_flash_dkdv_hopper_bf16_h64_64x128_ahead",
                           "attention_flash_dq_hopper_bf16_h64_128x128"})
    CHECK(precompiled.names.count(name) == 1);
  const Function g = test::headline_grad("hopper", test::kHeadlineShape);
  size_t hopperVjps = 0;
  for (const Function::Call &call : g.calls())
    hopperVjps += call.args.op == "attention_vjp" && call.op->select(call.args, call.implementation, "sm_90a").name() ==
                                                         "hopper";
  CHECK(hopperVjps == 1);
  const std::vector<dsl::Kernel> kernels = g.kernels("sm_90a");
  CHECK(kernels.size() >= 15);
  for (const dsl::Kernel &kernel : kernels) {
    INFO(kernel.name());
    CHECK(precompiled.irs.count(kernel.ir()) == 1);
  }
}

TEST_CASE("precompile: sm_80's registered kernels hold every kernel of the headline gradient there (tile)",
          "[function][precompile]") {
  const Precompiled precompiled("sm_80");
  for (const dsl::Kernel &kernel : test::headline_grad("tile", test::kHeadlineShape).kernels("sm_80")) {
    INFO(kernel.name());
    CHECK(precompiled.irs.count(kernel.ir()) == 1);
  }
}
