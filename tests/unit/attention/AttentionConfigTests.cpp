// Attention configs: every config of the tile and chunked search spaces computes what
// the reference implementation does (interpreter, small shapes with masks that make
// edge and inner blocks), and the tile kernels at the headline shape assemble for
// sm_90a (configs that fit the register file without spills).
#include "common/AttentionReference.h"
#include "common/PtxasUtil.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>

using namespace tokamax;
using namespace attention_test;

namespace {

struct Result {
  HostBuffer out, lse, dq, dk, dv;
};

/// Forward and VJP on the interpreter with one implementation and config.
Result run(const std::string &impl, const std::optional<Config> &config, const HostBuffer &q, const HostBuffer &k,
           const HostBuffer &v, const HostBuffer &dout, const AttentionOptions &base) {
  AttentionOptions o = base;
  o.implementation = impl;
  o.config = config;
  Result r{HostBuffer(q.dtype, dout.shape), HostBuffer(DType::F32, {1, 4, 40}), HostBuffer(q.dtype, q.shape),
           HostBuffer(q.dtype, k.shape), HostBuffer(q.dtype, v.shape)};
  TensorView lse = r.lse.view();
  dot_product_attention_host(q.view(), k.view(), v.view(), r.out.view(), o, &lse);
  dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), v.view(), r.out.view(), lse, r.dq.view(),
                                 r.dk.view(), r.dv.view(), o);
  return r;
}

} // namespace

TEST_CASE("attention: every tile and chunked config matches the reference implementation", "[attention]") {
  // T 40 queries, S 70 keys, 4 heads on 2 kv heads, causal with a left window: with
  // 16- and 32-wide blocks some key blocks are fully visible (the inner loop) and some
  // are edges.
  const DType dt = DType::BF16;
  HostBuffer q(dt, {1, 40, 4, 32}, randomNormal(40 * 4 * 32, dt, 1)), k(dt, {1, 70, 2, 32}, randomNormal(70 * 64, dt, 2));
  HostBuffer v(dt, {1, 70, 2, 32}, randomNormal(70 * 64, dt, 3)), dout(dt, {1, 40, 4, 32}, randomNormal(40 * 128, dt, 4));
  AttentionOptions o;
  o.is_causal = true;
  o.local_window = LocalWindow{33, std::nullopt};
  Result ref = run("reference", std::nullopt, q, k, v, dout, o);
  const ArgSpec qs{{1, 40, 4, 32}, dt}, ks{{1, 70, 2, 32}, dt};
  BoundArgs fwd = bind_attention({qs, ks, ks, {}, {}, {}, {}, qs, attention_lse_spec(qs)}, o);
  for (const char *impl : {"tile", "chunked"}) {
    std::vector<Config> configs = attention_op().implementation(impl).search_space(fwd);
    // Small blocks make the loops walk several steps here.
    configs.push_back({{"block_q", 16}, {"block_kv", 16}, {"num_warps", 1}, {"prefetch", 1}});
    configs.push_back({{"block_q", 32}, {"block_kv", 16}, {"num_warps", 2}, {"prefetch", 1}});
    // Rings deeper than the steps some loops walk.
    configs.push_back({{"block_q", 16}, {"block_kv", 16}, {"num_warps", 1}, {"async_copy", 1}, {"stages", 4}});
    configs.push_back({{"block_q", 32}, {"block_kv", 16}, {"num_warps", 2}, {"async_copy", 1}, {"stages", 3}});
    for (const Config &c : configs) {
      if (c.get("block_q") > 64)
        continue;  // the interpreter's time; the GPU tests cover the large blocks
      Result got = run(impl, c, q, k, v, dout, o);
      INFO(impl << " " << c.to_json());
      for (auto [name, a, b] : {std::tuple{"out", &got.out, &ref.out}, std::tuple{"dq", &got.dq, &ref.dq},
                                std::tuple{"dk", &got.dk, &ref.dk}, std::tuple{"dv", &got.dv, &ref.dv}}) {
        Comparison cmp = compare(name, a->values(), b->values(), a->shape, Tolerance{6e-2, 1.5e-2});
        INFO(cmp.message);
        CHECK(cmp.ok);
      }
    }
  }
}

TEST_CASE("attention: the tile kernels at the headline shape assemble, the 8-warp ones without spills",
          "[attention][ptx]") {
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty()) {
    WARN("ptxas not found: the kernels are not assembled");
    return;
  }
  const ArgSpec x{{32, 2048, 16, 64}, DType::BF16};
  const ArgSpec lse = attention_lse_spec(x);
  BoundArgs fwd = bind_attention({x, x, x, {}, {}, {}, {}, x, lse});
  BoundArgs vjp = bind_attention_vjp({x, x, x, x, x, lse, {}, {}, {}, {}, x, x, x, {}});
  // The heuristic's kernels, and configs whose accumulators fit the register file.
  Config fwdFits{{"block_q", 128}, {"block_kv", 32}, {"num_warps", 4}, {"async_copy", 1}};
  Config vjpFits{{"block_q", 32}, {"block_kv", 64}, {"num_warps", 4}};
  for (const auto &[op, args, fits] : {std::tuple{&attention_op(), fwd, fwdFits}, std::tuple{&attention_vjp_op(), vjp, vjpFits}}) {
    const Implementation &tile = op->implementation("tile");
    for (const Config &c : {tile.heuristic(args), fits}) {
      for (const dsl::Kernel &kernel : tile.kernels(args, c)) {
        CompileOptions options;
        options.assemble = false;
        auto [status, log] = test::run_ptxas(ptxas, compile(kernel, options).ptx, "sm_90a");
        INFO(kernel.name() << " " << c.to_json() << "\n" << log);
        CHECK(status == 0);
        if (c == fits)
          CHECK(test::contains(log, "0 bytes spill stores"));
      }
    }
  }
}

TEST_CASE("attention: more batch rows than a grid dimension holds is refused with the reason", "[attention]") {
  const ArgSpec q{{70000, 4, 1, 16}, DType::BF16};
  BoundArgs args = bind_attention({q, q, q, {}, {}, {}, {}, q, attention_lse_spec(q)});
  for (const auto &impl : attention_op().implementations())
    CHECK(impl->why_not(args).has_value());
  CHECK_THROWS_AS(attention_op().select(args, std::nullopt, "sm_90a"), NotSupported);
  CHECK_THROWS_WITH(attention_op().select(args, std::string("chunked"), "sm_90a"), Catch::Contains("65535"));
}

TEST_CASE("attention: no queries is a no-op, the VJP's dk and dv are zero", "[attention]") {
  const DType dt = DType::F32;
  HostBuffer q(dt, {2, 0, 2, 16}), k(dt, {2, 5, 2, 16}, randomNormal(2 * 5 * 2 * 16, dt, 1));
  HostBuffer v(dt, {2, 5, 2, 16}, randomNormal(2 * 5 * 2 * 16, dt, 2)), out(dt, {2, 0, 2, 16}), lse(dt, {2, 2, 0});
  for (const char *impl : {"chunked", "reference"}) {
    HostBuffer dq(dt, {2, 0, 2, 16}), dk(dt, {2, 5, 2, 16}), dv(dt, {2, 5, 2, 16});  // NaN-filled
    AttentionOptions o;
    o.implementation = impl;
    TensorView lv = lse.view();
    CHECK_NOTHROW(dot_product_attention_host(q.view(), k.view(), v.view(), out.view(), o, &lv));
    CHECK_NOTHROW(dot_product_attention_vjp_host(out.view(), q.view(), k.view(), v.view(), out.view(), lv, dq.view(),
                                                 dk.view(), dv.view(), o));
    for (int64_t i = 0; i < dk.numel(); ++i) {
      INFO(impl << " element " << i);
      REQUIRE(dk.at(i) == 0.0);
      REQUIRE(dv.at(i) == 0.0);
    }
  }
}

TEST_CASE("attention: configs are checked key by key, the cp.async ring where head dims allow it", "[attention]") {
  auto bind = [](int64_t h, DType dt) {
    const ArgSpec x{{2, 64, 4, h}, dt};
    return bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
  };
  const Implementation &tile = attention_op().implementation("tile");
  const Implementation &reference = attention_op().implementation("reference");
  BoundArgs args = bind(64, DType::BF16);
  CHECK(tile.heuristic(args).get_or("async_copy", 0) == 1);
  // Rows of 20 bf16 are not whole 16-byte chunks: the heuristic keeps registers.
  CHECK(tile.heuristic(bind(20, DType::BF16)).get_or("async_copy", 0) == 0);
  CHECK(attention_op().implementation("chunked").heuristic(bind(64, DType::F32)).get_or("async_copy", 0) == 0);
  for (const Config &c : tile.search_space(args))
    CHECK_FALSE(tile.check_config(args, c).has_value());
  auto why = [&](const Implementation &impl, const BoundArgs &a, Config c) {
    auto reason = impl.check_config(a, c);
    return reason ? *reason : std::string("(accepted)");
  };
  Config base{{"block_q", 64}, {"block_kv", 64}, {"num_warps", 4}};
  Config c = base;
  c.set("stages", 3);
  CHECK_THAT(why(tile, args, c), Catch::Contains("stages (the cp.async ring's slots) must be 2, 3 or 4"));
  c.set("async_copy", 1);
  CHECK(why(tile, args, c) == "(accepted)");
  c.set("stages", 5);
  CHECK_THAT(why(tile, args, c), Catch::Contains("must be 2, 3 or 4 with \"async_copy\": 1, got 5"));
  c = base;
  c.set("async_copy", 2);
  CHECK_THAT(why(tile, args, c), Catch::Contains("async_copy must be 0 or 1, got 2"));
  c = base;
  c.set("async_copy", 1);
  CHECK_THAT(why(reference, args, c), Catch::Contains("reference takes no \"async_copy\""));
  c = base;
  c.set("stages_", 2);
  CHECK_THAT(why(tile, args, c), Catch::Contains("unknown key \"stages_\""));
  Config big{{"block_q", 128}, {"block_kv", 128}, {"num_warps", 8}, {"async_copy", 1}, {"stages", 4}};
  CHECK_THAT(why(tile, bind(256, DType::BF16), big), Catch::Contains("needs 589824 bytes of shared memory a block"));
}
