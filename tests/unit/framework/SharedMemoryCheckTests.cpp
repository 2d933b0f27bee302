// The ops' configs against a block's shared memory, as the compiler plans each kernel
// (ops/lib/framework/SharedMemory.h), beyond attention (AttentionSharedMemoryTests.cpp):
// gated_linear_unit's gate kernel, ragged_dot's, matmul's tile and hopper kernels and
// layer_norm's staged VJP. A config past the 227 KiB a block may use is refused naming
// the kernel, its bytes and the limit; every config of the search spaces fits.
#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/runtime/Arch.h>

#include <string>

using namespace tokamax;
using Catch::Matchers::Contains;

namespace {

const int64_t kLimit = Arch::parse("sm_90a").shared_memory_per_block();

struct Case {
  const char *what;
  const Op &op;
  BoundArgs args;
  const char *impl;
  Config tooBig;
  const char *kernel;  ///< the kernel the refusal names
  int64_t bytes;       ///< what it needs
};

std::vector<Case> cases() {
  const DType bf = DType::BF16;
  const ArgSpec x{{8192, 4096}, bf}, w{{4096, 2, 14336}, bf}, gout{{8192, 14336}, bf};
  const BoundArgs glu = bind_gated_linear_unit(x, w, gout, GluActivation::Swish);
  const ArgSpec lhs{{32768, 4096}, bf}, rhs{{8, 4096, 4096}, bf}, sizes{{8}, DType::I32};
  const ArgSpec square{{8192, 8192}, bf};
  const BoundArgs matmul = bind_matmul(square, square, std::nullopt, square, false, false, 1.0);
  const ArgSpec rows{{4, 16376}, DType::F32}, param{{16376}, DType::F32}, stat{{4}, DType::F32};
  Config hopperMatmul = matmul_op().implementation("hopper").heuristic(matmul);
  hopperMatmul.set("num_stages", 5);  // five 48 KiB stages
  return {
      {"glu tile: 4 stages of [64 + 2 x 256, 64]", gated_linear_unit_op(), glu, "tile",
       Config{{"block_m", 64}, {"block_n", 256}, {"block_k", 64}, {"num_warps", 8}, {"group_m", 8},
              {"async_copy", 1}, {"stages", 4}},
       "glu_gate", 294912},
      {"glu hopper: 5 stages of [128 + 2 x 128, 64]", gated_linear_unit_op(), glu, "hopper",
       Config{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_warps", 8}, {"group_m", 8}, {"stages", 5}},
       "glu_gate", 245840},
      {"ragged_dot tile: 3 stages of [128 + 256, 128]", ragged_dot_op(), bind_ragged_dot(lhs, rhs, sizes, lhs), "tile",
       Config{{"block_m", 128}, {"block_n", 256}, {"block_k", 128}, {"num_warps", 8}, {"async_copy", 1},
              {"stages", 3}},
       "ragged_dot", 294912},
      {"matmul hopper: 5 stages", matmul_op(), matmul, "hopper", hopperMatmul, "matmul_hopper", 245840},
      {"layer_norm staged: two f32 rows of 16376", layer_norm_vjp_op(),
       bind_layer_norm_vjp(rows, rows, param, stat, stat, rows, param, param, -1), "tile",
       Config{{"block_rows", 1}, {"block_cols", 4096}, {"num_warps", 4}, {"staged", 1}, {"programs", 2}},
       "layer_norm_vjp_dx_staged", 262272},
  };
}

} // namespace

TEST_CASE("ops: a config past a block's shared memory is refused with the kernel, its bytes and the limit",
          "[op][shared]") {
  for (const Case &c : cases()) {
    INFO(c.what);
    const std::string why = c.op.implementation(c.impl).check_config(c.args, c.tooBig).value_or("(accepted)");
    CHECK_THAT(why, Contains(std::string("kernel ") + c.kernel + " needs " + std::to_string(c.bytes) +
                             " bytes of shared memory a block") &&
                        Contains(std::to_string(kLimit)));
  }
}

TEST_CASE("ops: the search spaces hold only configs whose kernels fit a block's shared memory", "[op][shared]") {
  for (const Case &c : cases()) {
    const Implementation &impl = c.op.implementation(c.impl);
    for (const Config &config : impl.search_space(c.args)) {
      INFO(c.what << ": " << config.to_json());
      CHECK_FALSE(impl.check_config(c.args, config).has_value());
      for (const dsl::Kernel &kernel : impl.kernels(c.args, config))
        CHECK(planned_shared_bytes(kernel) <= kLimit);
    }
  }
}
