// Attention configs against a block's shared memory, as the compiler plans it: the
// configs auto runs on sm_90a (hopper where it serves, else tile) pass their checks at
// every head dim and their kernels lower for sm_90a within the 227 KiB a block may use
// (and assemble, where ptxas is found); a config that does not fit is refused naming the
// kernel, the bytes and the limit; the search spaces hold only configs that fit.
#include "common/PtxasUtil.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Error.h>

#include <set>
#include <string>

using namespace tokamax;
using Catch::Matchers::Contains;

namespace {

const int64_t kLimit = Arch::parse("sm_90a").shared_memory_per_block();

BoundArgs forwardArgs(int64_t t, int64_t h) {
  const ArgSpec x{{2, t, 4, h}, DType::BF16};
  return bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
}

BoundArgs vjpArgs(int64_t t, int64_t h) {
  const ArgSpec x{{2, t, 4, h}, DType::BF16};
  return bind_attention_vjp({x, x, x, x, x, attention_lse_spec(x), {}, {}, {}, {}, x, x, x, {}});
}

/// Every kernel of `impl` with `config` lowers to PTX for sm_90a, its launch's shared
/// memory within a block's and the figure the checks use, and ptxas (where found)
/// assembles it (`lowered`: IRs already seen).
void checkLowered(const Implementation &impl, const BoundArgs &args, const Config &config,
                  std::set<std::string> &lowered) {
  static const std::string ptxas = test::ptxas_path();
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  for (const dsl::Kernel &kernel : impl.kernels(args, config)) {
    if (!lowered.insert(kernel.ir()).second)
      continue;
    INFO(kernel.name());
    CompiledKernel compiled = compile(kernel, options);
    CHECK(int64_t(compiled.launch.shared_bytes) <= kLimit);
    CHECK(int64_t(compiled.launch.shared_bytes) == planned_shared_bytes(kernel));
    if (!ptxas.empty()) {
      auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, "sm_90a");
      INFO(log);
      CHECK(status == 0);
    }
  }
}

} // namespace

TEST_CASE("attention: auto's configs on sm_90a fit a block's shared memory at every head dim, forward and VJP",
          "[attention][shared]") {
  std::set<std::string> lowered;
  for (int64_t h : {32, 64, 96, 128, 192, 256})
    for (int64_t t : {1, 65, 1000})
      for (bool vjp : {false, true}) {
        const Op &op = vjp ? attention_vjp_op() : attention_op();
        const BoundArgs args = vjp ? vjpArgs(t, h) : forwardArgs(t, h);
        INFO("H " << h << ", T " << t << (vjp ? ", VJP" : ", forward"));
        const Implementation &hopper = op.implementation("hopper");
        const bool hopperServes = !hopper.why_not(args);
        // Hopper serves the head dims of one TMA box (its VJP up to 128); tile the rest.
        CHECK(hopperServes == (h != 96 && h != 192 && !(vjp && h > 128)));
        const Implementation &chosen = op.select(args, std::nullopt, "sm_90a");
        CHECK(chosen.name() == (hopperServes ? "hopper" : "tile"));
        const Config config = op.resolve_config(chosen, args, std::nullopt);
        INFO(chosen.name() << " " << config.to_json());
        CHECK(config == chosen.heuristic(args));
        CHECK_FALSE(chosen.check_config(args, config).has_value());
        checkLowered(chosen, args, config, lowered);
      }
  // At head dim 256 the hopper forward's 128 x 64 blocks do not fit (256 KiB): it takes
  // 32-key steps on the same two consumer warpgroups.
  const Config wide = attention_op().implementation("hopper").heuristic(forwardArgs(1000, 256));
  CHECK(wide.get("block_q") == 128);
  CHECK(wide.get("block_kv") == 32);
}

TEST_CASE("attention: a config past a block's shared memory is refused with the kernel, its bytes and the limit",
          "[attention][shared]") {
  const std::string limit = std::to_string(kLimit);
  const BoundArgs args = forwardArgs(1000, 256);
  const Implementation &hopper = attention_op().implementation("hopper");
  // What the heuristic took before: Q, the K / V rings and the output staged for its
  // store take 262192 bytes (the hand estimate said 196608).
  const Config tooBig{{"block_q", 128}, {"block_kv", 64}, {"num_warps", 8}, {"stages", 2}, {"overlap", 1},
                      {"pingpong", 1}};
  const std::string why = hopper.check_config(args, tooBig).value_or("(accepted)");
  CHECK_THAT(why, Contains("attention_flash_forward_hopper_bf16_h256_128x64") &&
                      Contains("needs 262192 bytes of shared memory a block") && Contains(limit));
  CHECK_THROWS_WITH(attention_op().resolve_config(hopper, args, tooBig),
                    Contains("is not valid for implementation \"hopper\"") && Contains("262192 bytes"));
  // The VJP's dq program holding 128 queries and walking 128-key steps through 3 slots.
  const BoundArgs vjp = vjpArgs(1000, 128);
  const Implementation &hopperVjp = attention_vjp_op().implementation("hopper");
  const Config threeStages{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 8}, {"stages", 3}};
  CHECK_THAT(hopperVjp.check_config(vjp, threeStages).value_or("(accepted)"),
             Contains("attention_flash_dq_hopper_bf16_h128_128x128") && Contains("bytes of shared memory a block") &&
                 Contains(limit));
  // Tile's cp.async ring of four 128-row stages at head dim 256.
  const Config ring{{"block_q", 128}, {"block_kv", 128}, {"num_warps", 8}, {"async_copy", 1}, {"stages", 4}};
  CHECK_THAT(attention_op().implementation("tile").check_config(args, ring).value_or("(accepted)"),
             Contains("bytes of shared memory a block") && Contains(limit));
}

TEST_CASE("attention: the search spaces hold only configs whose kernels fit a block's shared memory",
          "[attention][shared]") {
  for (int64_t h : {128, 256})
    for (bool vjp : {false, true}) {
      const Op &op = vjp ? attention_vjp_op() : attention_op();
      const BoundArgs args = vjp ? vjpArgs(1000, h) : forwardArgs(1000, h);
      for (const auto &impl : op.implementations()) {
        if (!impl->supported_on("sm_90a") || impl->why_not(args))
          continue;
        const std::vector<Config> space = impl->search_space(args);
        CHECK_FALSE(space.empty());
        for (const Config &c : space) {
          INFO("H " << h << (vjp ? " VJP " : " forward ") << impl->name() << " " << c.to_json());
          CHECK_FALSE(impl->check_config(args, c).has_value());
          for (const dsl::Kernel &kernel : impl->kernels(args, c))
            CHECK(planned_shared_bytes(kernel) <= kLimit);
        }
      }
    }
  // At head dim 256 the hopper forward's 128 x 64 blocks are out; 128 x 32 are in.
  const BoundArgs args = forwardArgs(1000, 256);
  bool narrow = false;
  for (const Config &c : attention_op().implementation("hopper").search_space(args)) {
    CHECK_FALSE((c.get("num_warps") == 8 && c.get("block_kv") == 64));
    narrow |= c.get("num_warps") == 8 && c.get("block_kv") == 32;
  }
  CHECK(narrow);
}
