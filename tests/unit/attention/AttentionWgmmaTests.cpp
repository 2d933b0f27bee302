// Attention with "wgmma": 1 (products reading the cp.async ring on wgmma, sm_90a) and 2
// (the forward also issues the next step's q k^T before its softmax): the
// config is checked, the kernels assemble for sm_90a with every product that reads a
// ring block on wgmma and stay on mma.sync for sm_80, and the interpreter (which runs
// the same kernels) matches the reference.
#include "common/AttentionReference.h"
#include "common/PtxasUtil.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>

using namespace tokamax;
using namespace attention_test;

namespace {

Config wgmmaConfig(int64_t bq, int64_t bkv, int64_t warps) {
  return {{"block_q", bq}, {"block_kv", bkv}, {"num_warps", warps}, {"async_copy", 1}, {"wgmma", 1}};
}

} // namespace

TEST_CASE("attention: \"wgmma\" needs the cp.async ring and is 0, 1 or 2 (2 with 3+ stages)", "[attention]") {
  const ArgSpec x{{2, 64, 4, 64}, DType::BF16};
  BoundArgs args = bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
  const Implementation &tile = attention_op().implementation("tile");
  CHECK_FALSE(tile.check_config(args, wgmmaConfig(64, 64, 4)).has_value());
  auto noRing = tile.check_config(args, {{"block_q", 64}, {"block_kv", 64}, {"num_warps", 4}, {"wgmma", 1}});
  REQUIRE(noRing.has_value());
  CHECK_THAT(*noRing, Catch::Contains("async_copy"));
  Config two = wgmmaConfig(64, 64, 4);
  two.set("wgmma", 2);
  auto twoStages = tile.check_config(args, two);
  REQUIRE(twoStages.has_value());
  CHECK_THAT(*twoStages, Catch::Contains("stages"));
  two.set("stages", 3);
  CHECK_FALSE(tile.check_config(args, two).has_value());
  two.set("wgmma", 3);
  auto three = tile.check_config(args, two);
  REQUIRE(three.has_value());
  CHECK_THAT(*three, Catch::Contains("0, 1 or 2"));
  // The VJP's 4-warp 64 x 64 wgmma config at head dim 64 is refused (wrong dk / dv on an H100).
  AttentionVjpSpecs vjp{x, x, x, x, x, attention_lse_spec(x), {}, {}, {}, {}, x, x, x, {}};
  const BoundArgs vjpArgs = bind_attention_vjp(vjp);
  const Implementation &tileVjp = attention_vjp_op().implementation("tile");
  auto wrong = tileVjp.check_config(vjpArgs, wgmmaConfig(64, 64, 4));
  REQUIRE(wrong.has_value());
  CHECK_THAT(*wrong, Catch::Contains("wrong dk / dv"));
  CHECK_FALSE(tileVjp.check_config(vjpArgs, wgmmaConfig(64, 32, 4)).has_value());
  CHECK_FALSE(tileVjp.check_config(vjpArgs, wgmmaConfig(128, 64, 8)).has_value());
  CHECK(attention_op().implementation("reference").check_config(args, {{"block_q", 64}, {"block_kv", 64},
                                                                        {"num_warps", 4}, {"wgmma", 0}})
            .has_value());
}

TEST_CASE("attention: wgmma configs match the reference on the interpreter", "[attention]") {
  const DType dt = DType::BF16;
  HostBuffer q(dt, {1, 40, 4, 32}, randomNormal(40 * 4 * 32, dt, 11)), k(dt, {1, 70, 2, 32}, randomNormal(70 * 64, dt, 12));
  HostBuffer v(dt, {1, 70, 2, 32}, randomNormal(70 * 64, dt, 13));
  AttentionOptions o;
  o.is_causal = true;
  HostBuffer ref(dt, q.shape), got(dt, q.shape);
  o.implementation = "reference";
  dot_product_attention_host(q.view(), k.view(), v.view(), ref.view(), o);
  o.implementation = "tile";
  // The products on wgmma; and the forward issuing the next step's q k^T before its
  // softmax (3 and 4 ring stages): several key blocks, the masked edges and the inner ones.
  Config overlap3 = wgmmaConfig(32, 16, 2), overlap4 = wgmmaConfig(16, 16, 1);
  overlap3.set("wgmma", 2), overlap3.set("stages", 3);
  overlap4.set("wgmma", 2), overlap4.set("stages", 4);
  for (const Config &config : {wgmmaConfig(32, 16, 2), overlap3, overlap4}) {
    INFO(config.to_json());
    o.config = config;
    dot_product_attention_host(q.view(), k.view(), v.view(), got.view(), o);
    Comparison cmp = compare("out", got.values(), ref.values(), got.shape, Tolerance{6e-2, 1.5e-2});
    INFO(cmp.message);
    CHECK(cmp.ok);
  }
}

TEST_CASE("attention: wgmma kernels put the ring's products on wgmma for sm_90a and assemble", "[attention][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // S1 (H 64: 128-byte rows) and S2 (H 128: two 128-byte panels per row).
  for (int64_t h : {64, 128}) {
    const ArgSpec x{{4, 2048, 8, h}, DType::BF16};
    const ArgSpec lse = attention_lse_spec(x);
    BoundArgs fwd = bind_attention({x, x, x, {}, {}, {}, {}, x, lse});
    BoundArgs vjp = bind_attention_vjp({x, x, x, x, x, lse, {}, {}, {}, {}, x, x, x, {}});
    const int64_t bq = h == 64 ? 128 : 64;
    Config overlap = wgmmaConfig(bq, 64, 4);
    overlap.set("wgmma", 2), overlap.set("stages", 3);
    for (const auto &[op, args, config] :
         {std::tuple{&attention_op(), fwd, wgmmaConfig(bq, 64, 4)}, std::tuple{&attention_op(), fwd, overlap},
          std::tuple{&attention_vjp_op(), vjp, wgmmaConfig(64, 64, 4)}}) {
      for (const dsl::Kernel &kernel : op->implementation("tile").kernels(args, config)) {
        const bool flash = kernel.name().find("flash") != std::string::npos;
        CompileOptions options;
        options.assemble = false;
        options.arch = "sm_90a";
        const std::string ptx = compile(kernel, options).ptx;
        INFO(kernel.name() << " " << config.to_json());
        // Both products of the forward, all four of dk/dv's and all three of dq's read
        // a ring block as B.
        if (flash)
          CHECK(test::count(ptx, "wgmma.mma_async.sync.aligned.m64n") > 0);
        CHECK(test::count(ptx, "mma.sync.aligned.m16n8k16") == 0);
        options.arch = "sm_80";
        const std::string sm80 = compile(kernel, options).ptx;
        CHECK(test::count(sm80, "wgmma") == 0);
        if (flash)
          CHECK(test::count(sm80, "mma.sync.aligned.m16n8k16") > 0);
        if (ptxas.empty())
          continue;
        auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
        INFO(log);
        CHECK(status == 0);
      }
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
