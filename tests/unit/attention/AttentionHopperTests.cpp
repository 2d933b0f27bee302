// The hopper attention kernels (TMA, a producer warpgroup, wgmma), forward and VJP: their
// configs and the calls they refuse are named, the interpreter (which runs the same
// kernels: each step's copies, then its products) matches the reference implementation
// with every option, and the kernels assemble for sm_90a with their copies on TMA, the
// warp roles' register limits and every product on wgmma.
#include "common/AttentionReference.h"
#include "common/HopperPtxChecks.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>

using namespace tokamax;
using namespace attention_test;

namespace {

AttentionOptions causalIf(bool causal) {
  AttentionOptions o;
  o.is_causal = causal;
  return o;
}

BoundArgs forwardArgs(std::vector<int64_t> q, std::vector<int64_t> kv, DType d = DType::BF16, bool causal = false) {
  const ArgSpec qs{q, d}, ks{kv, d};
  return bind_attention({qs, ks, ks, {}, {}, {}, {}, qs, attention_lse_spec(qs)}, causalIf(causal));
}

BoundArgs vjpArgs(std::vector<int64_t> q, std::vector<int64_t> kv, DType d = DType::BF16, bool causal = false) {
  const ArgSpec qs{q, d}, ks{kv, d};
  return bind_attention_vjp({qs, qs, ks, ks, qs, attention_lse_spec(qs), {}, {}, {}, {}, qs, ks, ks, {}},
                            causalIf(causal));
}

} // namespace

TEST_CASE("attention hopper: configs and the calls it refuses are named", "[attention][hopper]") {
  const Implementation &hopper = attention_op().implementation("hopper");
  CHECK(hopper.supported_on("sm_90a"));
  CHECK_FALSE(hopper.supported_on("sm_80"));
  BoundArgs args = forwardArgs({2, 100, 4, 64}, {2, 192, 2, 64});
  CHECK_FALSE(hopper.why_not(args).has_value());
  Config c = hopper.heuristic(args);
  // Head dim 64, no pair hidden: 256-key steps (blocks past S = 192 read zeros, 3-D tensor
  // maps) without overlap; 128-key steps with overlap elsewhere.
  CHECK(c.get("block_kv") == 256);
  CHECK(c.get_or("overlap", 0) == 0);
  CHECK_FALSE(hopper.check_config(args, c).has_value());
  CHECK_THAT(hopper.check_config(args, Config(c).set("overlap", 1)).value_or("valid"),
             Catch::Contains("registers per thread"));
  {
    BoundArgs causal = forwardArgs({2, 100, 4, 64}, {2, 192, 2, 64}, DType::BF16, true);
    Config cc = hopper.heuristic(causal);
    CHECK(cc.get("block_kv") == 128);
    CHECK(cc.get_or("overlap", 0) == 0);
    BoundArgs wide = forwardArgs({2, 100, 4, 128}, {2, 192, 2, 128});
    Config wc = hopper.heuristic(wide);
    CHECK(wc.get("block_kv") == 128);
    CHECK(wc.get_or("overlap", 0) == 1);
  }
  c.set("block_kv", 128).set("overlap", 1);
  auto why = [&](const char *key, int64_t value) {
    Config changed = c;
    changed.set(key, value);
    return hopper.check_config(args, changed).value_or("valid");
  };
  CHECK_THAT(why("block_kv", 512), Catch::Contains("power of two in [16, 256]"));
  // With overlap (c now has 128-key steps and it), 256-key steps need more registers than
  // the scores and accumulator may take; without overlap they fit.
  CHECK(c.get_or("overlap", 0) == 1);
  CHECK_THAT(why("block_kv", 256), Catch::Contains("registers per thread"));
  {
    Config wide = c;
    wide.set("overlap", 0).set("block_kv", 256);
    CHECK_FALSE(hopper.check_config(args, wide).has_value());
  }
  CHECK_THAT(why("num_warps", 2), Catch::Contains("num_warps 4 or 8"));
  CHECK_THAT(why("block_q", 32), Catch::Contains("block_q = 16 * num_warps"));
  CHECK_THAT(why("stages", 5), Catch::Contains("2, 3 or 4"));
  CHECK_THAT(why("async_copy", 1), Catch::Contains("unknown key \"async_copy\""));
  CHECK_THAT(why("overlap", 2), Catch::Contains("overlap must be 0 or 1"));
  CHECK_THAT(why("pingpong", 2), Catch::Contains("pingpong must be 0 or 1"));
  CHECK_THAT(why("exp2_fma", 9), Catch::Contains("exp2_fma (eighths of the exponentials on the FMA pipes) must be "
                                                "in [0, 8], got 9"));
  CHECK_FALSE(hopper.check_config(args, Config(c).set("exp2_fma", 3)).has_value());
  {
    // Two programs an SM: one consumer warpgroup, shared memory for both.
    const Config two{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 4}, {"stages", 2}, {"blocks_per_sm", 2}};
    CHECK_FALSE(hopper.check_config(args, two).has_value());
    CHECK_THAT(hopper.check_config(args, Config(two).set("blocks_per_sm", 3)).value_or("valid"),
               Catch::Contains("blocks_per_sm must be 1 or 2, got 3"));
    CHECK_THAT(hopper.check_config(args, Config(c).set("blocks_per_sm", 2)).value_or("valid"),
               Catch::Contains("blocks_per_sm 2 takes one consumer warpgroup"));
    // At head dim 128 Q and a two-slot ring of 128-key K / V blocks pass half the SM's
    // shared memory; 64-key steps fit.
    BoundArgs wide = forwardArgs({2, 100, 4, 128}, {2, 192, 2, 128});
    CHECK_THAT(hopper.check_config(wide, two).value_or("valid"),
               Catch::Contains("more than the 115712 a block may use (2 blocks an SM)"));
    // The share is the compiler's plan of each kernel: its blocks_per_sm with its bytes.
    const SharedPlan plan = planned_shared(hopper.kernels(args, two).front());
    CHECK(plan.blocks_per_sm == 2);
    CHECK(plan.bytes > 0);
    CHECK(plan.bytes <= 115712);
    CHECK(planned_shared(hopper.kernels(args, c).front()).blocks_per_sm == 1);
    CHECK_FALSE(hopper.check_config(wide, Config(two).set("block_kv", 64)).has_value());
  }
  CHECK_THAT(hopper.check_config(args, Config(c).set("block_kv", 256).set("overlap", 0).set("exp2_fma", 3))
                 .value_or("valid"),
             Catch::Contains("exp2_fma 3 beside 256-key steps"));
  {
    Config four = c;
    four.set("num_warps", 4);
    four.set("block_q", 64);
    four.set("pingpong", 1);
    CHECK_THAT(hopper.check_config(args, four).value_or("valid"), Catch::Contains("num_warps 8"));
  }
  CHECK_FALSE(hopper.why_not(forwardArgs({2, 100, 4, 64}, {2, 100, 2, 64})).has_value());  // any S
  CHECK_THAT(*hopper.why_not(forwardArgs({2, 100, 4, 48}, {2, 192, 2, 48})), Catch::Contains("head dims"));
  CHECK_THAT(*hopper.why_not(forwardArgs({2, 100, 4, 64}, {2, 192, 2, 64}, DType::F32)), Catch::Contains("bf16"));
  // The VJP: block_q is dk/dv's query step, the held rows are 16 x num_warps.
  const Implementation &hopperVjp = attention_vjp_op().implementation("hopper");
  BoundArgs vjp = vjpArgs({2, 100, 4, 64}, {2, 192, 2, 64});
  CHECK_FALSE(hopperVjp.why_not(vjp).has_value());
  Config vc = hopperVjp.heuristic(vjp);
  CHECK(vc.get("num_warps") == 8);
  CHECK_FALSE(hopperVjp.check_config(vjp, vc).has_value());
  Config odd = vc;
  odd.set("block_q", 48);
  CHECK_THAT(hopperVjp.check_config(vjp, odd).value_or("valid"), Catch::Contains("dk/dv step"));
  odd = vc;
  odd.set("block_q", 256);
  CHECK_THAT(hopperVjp.check_config(vjp, odd).value_or("valid"), Catch::Contains("registers"));
  odd = vc;
  odd.set("overlap", 1);
  CHECK_THAT(hopperVjp.check_config(vjp, odd).value_or("valid"), Catch::Contains("for hopper's VJP"));
  CHECK_THAT(*hopperVjp.why_not(vjpArgs({2, 64, 4, 256}, {2, 64, 2, 256})), Catch::Contains("up to 128"));
  for (const Config &c : hopperVjp.search_space(vjp))
    CHECK_FALSE(hopperVjp.check_config(vjp, c).has_value());
  // The smallest shapes it serves get valid heuristics: one query, one 16-key block.
  BoundArgs tiny = forwardArgs({3, 1, 4, 64}, {3, 16, 2, 64}), tinyVjp = vjpArgs({3, 1, 4, 64}, {3, 16, 2, 64});
  CHECK_FALSE(hopper.check_config(tiny, hopper.heuristic(tiny)).has_value());
  CHECK_FALSE(hopperVjp.check_config(tinyVjp, hopperVjp.heuristic(tinyVjp)).has_value());
  // Auto takes hopper first on sm_90a (measured faster there), tile elsewhere.
  CHECK(attention_op().select(args, std::nullopt, "sm_90a").name() == "hopper");
  CHECK(attention_op().select(args, std::nullopt, "sm_80").name() == "tile");
  CHECK(attention_vjp_op().select(vjp, std::nullopt, "sm_90a").name() == "hopper");
  CHECK(attention_op().select(args, "hopper", "sm_90a").name() == "hopper");
}

TEST_CASE("attention hopper: the interpreter matches the reference with every option, forward and VJP",
          "[attention][hopper]") {
  struct Variant {
    const char *what;
    int64_t t, s, n, kh, h, hv;
    bool causal = false;
    std::optional<LocalWindow> window;
    double softcap = 0;
    bool bias = false, mask = false, lengths = false;
  };
  // T and S not multiples of the blocks (blocks past them read zeros, not the next batch
  // row's: 3-D tensor maps), several key blocks, GQA, Hv != H, each option.
  const std::vector<Variant> variants = {
      {"plain, GQA 4:2", 40, 64, 4, 2, 32, 32},
      {"causal, Hv != H", 70, 64, 2, 1, 32, 64, true},
      {"window", 40, 96, 2, 2, 64, 64, false, LocalWindow{20, 5}},
      {"soft cap, bias", 33, 48, 2, 1, 32, 32, false, std::nullopt, 30.0, true},
      {"mask, lengths", 40, 64, 2, 1, 16, 16, false, std::nullopt, 0, false, true, true},
      {"one query, one key block, causal", 1, 16, 2, 1, 32, 32, true},
      {"S 70, not a multiple of 16, causal", 37, 70, 2, 1, 32, 32, true},
      {"S 5: one partial key block", 9, 5, 2, 2, 32, 32},
      {"S 200, lengths", 50, 200, 2, 1, 64, 64, false, std::nullopt, 0, false, false, true},
  };
  const DType dt = DType::BF16;
  uint64_t seed = 40;
  for (const Variant &v : variants) {
    const int64_t B = 2;
    HostBuffer q(dt, {B, v.t, v.n, v.h}, randomNormal(B * v.t * v.n * v.h, dt, seed++));
    HostBuffer k(dt, {B, v.s, v.kh, v.h}, randomNormal(B * v.s * v.kh * v.h, dt, seed++));
    HostBuffer vv(dt, {B, v.s, v.kh, v.hv}, randomNormal(B * v.s * v.kh * v.hv, dt, seed++));
    HostBuffer bias(DType::F32, {1, v.n, v.t, v.s}, randomNormal(v.n * v.t * v.s, DType::F32, seed++));
    std::vector<double> maskBits(size_t(v.t * v.s));
    for (size_t i = 0; i < maskBits.size(); ++i)
      maskBits[i] = (i * 7 + 3) % 5 != 0;
    HostBuffer mask(DType::Bool, {1, 1, v.t, v.s}, maskBits);
    HostBuffer qLen(DType::I32, {B}, {double(v.t - 5), double(v.t)}), kvLen(DType::I32, {B}, {double(v.s), double(v.s - 13)});
    TensorView biasView = bias.view(), maskView = mask.view(), qLenView = qLen.view(), kvLenView = kvLen.view();
    AttentionOptions o;
    o.is_causal = v.causal;
    o.local_window = v.window;
    if (v.softcap)
      o.logits_soft_cap = v.softcap;
    if (v.bias)
      o.bias = &biasView;
    if (v.mask)
      o.mask = &maskView;
    if (v.lengths)
      o.q_seq_lengths = &qLenView, o.kv_seq_lengths = &kvLenView;
    HostBuffer ref(dt, {B, v.t, v.n, v.hv}), got(dt, {B, v.t, v.n, v.hv});
    HostBuffer refLse(DType::F32, {B, v.n, v.t}), gotLse(DType::F32, {B, v.n, v.t});
    TensorView refLseView = refLse.view(), gotLseView = gotLse.view();
    o.implementation = "reference";
    dot_product_attention_host(q.view(), k.view(), vv.view(), ref.view(), o, &refLseView);
    o.implementation = "hopper";
    // With overlap, each step's Q K^T issued before the previous step's P V.
    for (Config config : {Config{{"block_q", 64}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}},
                          Config{{"block_q", 128}, {"block_kv", 16}, {"num_warps", 8}, {"stages", 3}},
                          Config{{"block_q", 64}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}, {"overlap", 1}},
                          Config{{"block_q", 128}, {"block_kv", 16}, {"num_warps", 8}, {"stages", 3}, {"overlap", 1}},
                          Config{{"block_q", 128}, {"block_kv", 16}, {"num_warps", 8}, {"stages", 2}, {"pingpong", 1}},
                          Config{{"block_q", 64}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}, {"exp2_fma", 3}},
                          Config{{"block_q", 128},
                                 {"block_kv", 16},
                                 {"num_warps", 8},
                                 {"stages", 3},
                                 {"overlap", 1},
                                 {"pingpong", 1}}}) {
      INFO(v.what << " " << config.to_json());
      o.config = config;
      dot_product_attention_host(q.view(), k.view(), vv.view(), got.view(), o, &gotLseView);
      Comparison out = compare("out", got.values(), ref.values(), got.shape, Tolerance{6e-2, 1.5e-2});
      INFO(out.message);
      CHECK(out.ok);
      Comparison lse = compare("lse", gotLse.values(), refLse.values(), gotLse.shape, Tolerance{2e-2, 1e-2});
      INFO(lse.message);
      CHECK(lse.ok);
    }
    // The VJP from the reference forward's out and lse: held rows of 64 and 128 (past S
    // and T here), query and key steps of 16 and 32, GQA heads walked in one program.
    HostBuffer dout(dt, {B, v.t, v.n, v.hv}, randomNormal(B * v.t * v.n * v.hv, dt, seed++));
    struct Grads {
      HostBuffer dq, dk, dv, dbias;
    };
    auto vjp = [&](const char *impl, std::optional<Config> config) {
      Grads g{HostBuffer(dt, q.shape), HostBuffer(dt, k.shape), HostBuffer(dt, vv.shape),
              HostBuffer(DType::F32, bias.shape)};
      TensorView dbiasView = g.dbias.view();
      o.implementation = impl;
      o.config = std::move(config);
      dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), vv.view(), ref.view(), refLseView, g.dq.view(),
                                     g.dk.view(), g.dv.view(), o, v.bias ? &dbiasView : nullptr);
      return g;
    };
    Grads want = vjp("reference", std::nullopt);
    // stats_ahead: each step's lse and delta loaded by the step before (past the last
    // step, rows of the next head or padding, never used).
    for (Config config : {Config{{"block_q", 16}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}},
                          Config{{"block_q", 32}, {"block_kv", 16}, {"num_warps", 8}, {"stages", 3}},
                          Config{{"block_q", 32}, {"block_kv", 16}, {"num_warps", 8}, {"stages", 2}, {"stats_ahead", 1}}}) {
      INFO(v.what << " VJP " << config.to_json());
      Grads got = vjp("hopper", config);
      for (auto [name, a, b] : {std::tuple{"dq", &got.dq, &want.dq}, std::tuple{"dk", &got.dk, &want.dk},
                                std::tuple{"dv", &got.dv, &want.dv}, std::tuple{"dbias", &got.dbias, &want.dbias}}) {
        if (name == std::string("dbias") && !v.bias)
          continue;
        Comparison cmp = compare(name, a->values(), b->values(), a->shape, Tolerance{6e-2, 1.5e-2});
        INFO(cmp.message);
        CHECK(cmp.ok);
      }
    }
  }
}

TEST_CASE("attention hopper: the forward assembles for sm_90a on TMA, warp roles and wgmma", "[attention][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // Causal: the steps branch on whether their block is the diagonal's (masked) or not.
  for (auto [h, causal] : {std::pair{64, false}, std::pair{128, false}, std::pair{128, true}}) {
    BoundArgs args = forwardArgs({4, 2048, 8, h}, {4, 2048, 8, h}, DType::BF16, causal);
    const Implementation &hopper = attention_op().implementation("hopper");
    // The search space, and its 8-warp configs with ping-pong (opt-in, outside it).
    std::vector<Config> configs = hopper.search_space(args);
    for (size_t i = 0, n = configs.size(); i < n; ++i)
      if (configs[i].get("num_warps") == 8)
        configs.push_back(Config(configs[i]).set("pingpong", 1));
    // Exponentials on the FMA pipes (opt-in): a quarter and all of them.
    configs.push_back(Config(hopper.heuristic(args)).set("exp2_fma", 2));
    configs.push_back(Config(hopper.heuristic(args)).set("block_kv", 128).set("exp2_fma", 8));
    // Two programs an SM (opt-in).
    configs.push_back(Config{{"block_q", 64}, {"block_kv", h == 64 ? 128 : 64}, {"num_warps", 4}, {"stages", 2},
                             {"blocks_per_sm", 2}});
    for (const Config &config : configs) {
      std::vector<dsl::Kernel> kernels = hopper.kernels(args, config);
      REQUIRE(kernels.size() == 1u);
      INFO("H " << h << (causal ? " causal " : " ") << config.to_json());
      const int64_t warps = config.get("num_warps");
      CompiledKernel compiled = test::sm90a_ptx(kernels.front());
      // (setmaxnreg with two consumer warpgroups, or one with two programs an SM)
      test::check_hopper_ptx(compiled,
                             {.min_copies = 3,  // q, k, v
                              .producer = warps == 8 || config.get_or("blocks_per_sm", 1) == 2,
                              .tensor_maps = 3,
                              .threads = uint32_t(32 * (warps + 4))},
                             ptxas);
      // Ping-pong: warpgroup 0's first turn given before the loop, then each step's
      // wait for its turn and pass to the other.
      const bool pingPong = config.get_or("pingpong", 0) != 0;
      CHECK(test::count(compiled.ptx, "bar.arrive") == (pingPong ? 2u : 0u));
      CHECK((test::count(compiled.ptx, "bar.sync \t%r") > 0) == pingPong);
      // Two programs an SM: half the register file at launch, 232 for the consumers.
      const bool two = config.get_or("blocks_per_sm", 1) == 2;
      CHECK((test::count(compiled.ptx, ".maxnreg 128") == 1) == two);
      CHECK((test::count(compiled.ptx, "setmaxnreg.inc.sync.aligned.u32 \t232") == 1) == two);
      // The polynomial's floor (add.rm) once per register it takes.
      CHECK((test::count(compiled.ptx, "add.rm.f32") > 0) == (config.get_or("exp2_fma", 0) != 0));
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("attention hopper: the VJP's dk/dv and dq kernels assemble for sm_90a on TMA, warp roles and wgmma",
          "[attention][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const Implementation &hopper = attention_vjp_op().implementation("hopper");
  for (auto [h, causal] : {std::pair{64, false}, std::pair{64, true}, std::pair{128, false}, std::pair{128, true}}) {
    BoundArgs args = vjpArgs({4, 2048, 8, h}, {4, 2048, 8, h}, DType::BF16, causal);
    std::vector<Config> configs = hopper.search_space(args);
    configs.resize(std::min<size_t>(configs.size(), 3));  // the heuristic first; ptxas's time
    for (const Config &config : configs) {
      size_t held = 0;
      for (const dsl::Kernel &kernel : hopper.kernels(args, config)) {
        if (kernel.name().find("_hopper") == std::string::npos || kernel.name().find("delta") != std::string::npos)
          continue;
        ++held;
        INFO("H " << h << (causal ? " causal " : " ") << config.to_json() << " " << kernel.name());
        test::check_hopper_ptx(test::sm90a_ptx(kernel),
                               {.min_copies = 4,  // the held pair, the streamed pair
                                .producer = config.get("num_warps") == 8,
                                .no_ldmatrix = false,
                                .tensor_maps = 4,
                                // stats_ahead at H 64 with 64-query steps: ptxas waits for
                                // the products before dP^T's (C7517), and it is faster all
                                // the same (Hopper.cpp's heuristic)
                                .injected_wait = config.get_or("stats_ahead", 0) != 0},
                               ptxas);
      }
      CHECK(held == 2u);  // dk/dv and dq
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("attention hopper: the VJP's fused dq is opt-in and checked", "[attention][hopper]") {
  const Implementation &hopper = attention_vjp_op().implementation("hopper");
  BoundArgs args = vjpArgs({2, 100, 4, 64}, {2, 192, 2, 64});
  // Not deterministic: neither the heuristic nor the search space takes it.
  CHECK_FALSE(hopper.heuristic(args).get_or("fused_dq", 0));
  for (const Config &c : hopper.search_space(args))
    CHECK_FALSE(c.get_or("fused_dq", 0));
  const Config fused{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 4}, {"stages", 2}, {"fused_dq", 1}};
  CHECK_FALSE(hopper.check_config(args, fused).has_value());
  auto why = [&](const BoundArgs &a, const char *key, int64_t value) {
    return hopper.check_config(a, Config(fused).set(key, value)).value_or("valid");
  };
  CHECK_THAT(why(args, "num_warps", 8), Catch::Contains("one consumer warpgroup with 64-query steps"));
  CHECK_THAT(why(args, "block_q", 32), Catch::Contains("num_warps 4, block_q 64"));
  CHECK_THAT(why(args, "fused_dq", 2), Catch::Contains("fused_dq must be 0 or 1"));
  for (int64_t h : {16, 32, 128})
    CHECK_THAT(why(vjpArgs({2, 100, 4, h}, {2, 192, 2, h}), "fused_dq", 1),
               Catch::Contains(fmt::format("H 64 and Hv up to 64, got H {}", h)));
  // delta, dk/dv adding dS K into the dq sum, dq from the sum; no dq kernel. A
  // deterministic call (the default) orders the adds (the "_ordered" dk/dv kernel);
  // deterministic = false gives the unordered kernel, as it was before the option.
  AttentionOptions loose;
  loose.deterministic = false;
  const ArgSpec qs{{2, 100, 4, 64}, DType::BF16}, ks{{2, 192, 2, 64}, DType::BF16};
  const BoundArgs looseArgs =
      bind_attention_vjp({qs, qs, ks, ks, qs, attention_lse_spec(qs), {}, {}, {}, {}, qs, ks, ks, {}}, loose);
  std::vector<std::string> names, looseNames;
  for (const dsl::Kernel &kernel : hopper.kernels(args, fused))
    names.push_back(kernel.name());
  for (const dsl::Kernel &kernel : hopper.kernels(looseArgs, fused))
    looseNames.push_back(kernel.name());
  REQUIRE(names.size() == 3u);
  CHECK(names[0].find("attention_delta") == 0);
  CHECK(names[1] == "attention_dkdv_dq_hopper_bf16_h64_64x64_ordered");
  CHECK(names[2].find("attention_dq_from_sum") == 0);
  CHECK(looseNames == std::vector<std::string>{names[0], "attention_dkdv_dq_hopper_bf16_h64_64x64", names[2]});
  // deterministic changes nothing else: the heuristic, the search space and the unfused
  // VJP's kernels (deterministic anyway) are the same.
  CHECK(hopper.heuristic(looseArgs) == hopper.heuristic(args));
  CHECK(hopper.search_space(looseArgs) == hopper.search_space(args));
  std::vector<std::string> plain, loosePlain;
  for (const dsl::Kernel &kernel : hopper.kernels(args, hopper.heuristic(args)))
    plain.push_back(kernel.name() + kernel.ir());
  for (const dsl::Kernel &kernel : hopper.kernels(looseArgs, hopper.heuristic(args)))
    loosePlain.push_back(kernel.name() + kernel.ir());
  CHECK(loosePlain == plain);
}

TEST_CASE("attention hopper: stats_ahead carries each dk/dv step's row statistics without shared memory",
          "[attention][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const Implementation &hopper = attention_vjp_op().implementation("hopper");
  const Config plain{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 8}, {"stages", 2}};
  const Config ahead = Config(plain).set("stats_ahead", 1);
  // The heuristic's where the registers allow (head dim 64 on 8 warps), refused past them.
  BoundArgs wide = vjpArgs({4, 2048, 8, 128}, {4, 2048, 8, 128});
  CHECK_FALSE(hopper.heuristic(wide).get_or("stats_ahead", 0));
  CHECK_THAT(hopper.check_config(wide, ahead).value_or("valid"), Catch::Contains("stats_ahead carries"));
  CHECK_FALSE(hopper.heuristic(vjpArgs({4, 64, 8, 64}, {4, 64, 8, 64})).get_or("stats_ahead", 0));  // 4 warps
  for (bool causal : {false, true}) {
    BoundArgs args = vjpArgs({4, 2048, 8, 64}, {4, 2048, 8, 64}, DType::BF16, causal);
    CHECK(hopper.heuristic(args) == ahead);
    REQUIRE_FALSE(hopper.check_config(args, ahead).has_value());
    INFO((causal ? "causal" : "non-causal"));
    std::vector<dsl::Kernel> before = hopper.kernels(args, plain), after = hopper.kernels(args, ahead);
    REQUIRE(after.size() == 3u);
    CHECK(after[1].name().find("_ahead") != std::string::npos);
    CHECK(after[2].name() == before[2].name());  // dq as it was
    const std::string was = test::sm90a_ptx(before[1]).ptx, ptx = test::sm90a_ptx(after[1]).ptx;
    // Carried in the scores' layout (tile-remove-layout-conversions, rule 5), lse and
    // delta never cross shared memory, as today's loads in the step do not: the same
    // barriers and shared reads (the epilogue's). Carried in the layout of their loads,
    // they were converted at every step (9 barriers, 2 more stores and 16 more reads).
    CHECK(test::count(ptx, "bar.sync") == test::count(was, "bar.sync"));
    CHECK(test::count(ptx, "ld.shared") == test::count(was, "ld.shared"));
    CHECK(test::count(ptx, "st.shared.v4.b32") == 0u);
    // The first step's loads in the consumers' branch, after their setmaxnreg.
    CHECK(ptx.find("ld.global") > ptx.find("setmaxnreg.inc"));
    if (ptxas.empty())
      continue;
    auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
    INFO(log);
    CHECK(status == 0);
    CHECK(test::count(log, "0 bytes spill stores") == 1);
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("attention hopper: the fused-dq dk/dv kernel reduce-adds dS K by TMA and assembles without spills",
          "[attention][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const Implementation &hopper = attention_vjp_op().implementation("hopper");
  const Config fused{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 4}, {"stages", 2}, {"fused_dq", 1}};
  for (auto [h, causal] : {std::pair{64, false}, std::pair{64, true}})
    for (bool deterministic : {true, false}) {
      const ArgSpec qs{{4, 2048, 8, h}, DType::BF16};
      AttentionOptions options = causalIf(causal);
      options.deterministic = deterministic;
      BoundArgs args =
          bind_attention_vjp({qs, qs, qs, qs, qs, attention_lse_spec(qs), {}, {}, {}, {}, qs, qs, qs, {}}, options);
      std::vector<dsl::Kernel> kernels = hopper.kernels(args, fused);
      REQUIRE(kernels.size() == 3u);
      INFO("H " << h << (causal ? " causal" : "") << (deterministic ? "" : " deterministic = false"));
      CompiledKernel compiled = test::sm90a_ptx(kernels[1]);
      // q, k, v, dout and the dq sum (the order counters are plain global memory).
      test::check_hopper_ptx(compiled, {.min_copies = 4, .producer = false, .no_ldmatrix = false, .tensor_maps = 5},
                             ptxas);
      // dS K [64, 64] in two strips of 32 f32 columns: one bulk reduce-add a strip, no
      // plain TMA store.
      CHECK(test::count(compiled.ptx, "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group") ==
            2u);
      CHECK(test::count(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 0u);
      CHECK_NOTHROW(test::sm90a_ptx(kernels[2]));
      // A deterministic call's (the default's) dk/dv kernel orders the adds: thread 0 spins
      // on the step's counter before them (ld.acquire.gpu) and, once its bulk groups are
      // complete, counts the program in (red.release.gpu), among the consumers' named
      // barrier; deterministic = false adds in any order, as before the option.
      CHECK((kernels[1].name().find("_ordered") != std::string::npos) == deterministic);
      CHECK(test::count(compiled.ptx, "ld.acquire.gpu.global.b32") == (deterministic ? 1u : 0u));
      CHECK(test::count(compiled.ptx, "red.release.gpu.global.add.s32") == (deterministic ? 1u : 0u));
      // The exit's bulk wait, and the signal's.
      CHECK(test::count(compiled.ptx, "cp.async.bulk.wait_group 0;") == (deterministic ? 2u : 1u));
    }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
