// gated_linear_unit on the op framework: binding and bad input (errors naming the
// argument), implementation choice and NotSupported, configs (heuristic, search space,
// checks), BoundArgs round trips, and the tile kernels' PTX for sm_90a / sm_80 through
// ptxas (no spills at the benchmark shape).
#include <catch2/catch.hpp>

#include "unit/gated_linear_unit/GluTestCase.h"
#include "common/HopperPtxChecks.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/runtime/Error.h>

#include <string>

using namespace tokamax;
using namespace glu_test;
using Catch::Matchers::Contains;

namespace {

const ArgSpec kX{{4, 17, 40}, DType::BF16}, kW{{40, 2, 24}, DType::BF16}, kOut{{4, 17, 24}, DType::BF16};

BoundArgs forwardArgs(DType dtype = DType::BF16, int64_t k = 40, int64_t n = 24) {
  return bind_gated_linear_unit({{68, k}, dtype}, {{k, 2, n}, dtype}, {{68, n}, dtype}, GluActivation::Swish);
}

} // namespace

TEST_CASE("gated_linear_unit: bad input names the argument", "[glu]") {
  auto fails = [](auto call, const std::string &what) { CHECK_THROWS_WITH(call(), Contains(what)); };
  const auto swish = GluActivation::Swish;
  fails([&] { bind_gated_linear_unit(kX, {{40, 24}, DType::BF16}, kOut, swish); }, "weights must be [K, 2, N]");
  fails([&] { bind_gated_linear_unit(kX, {{40, 3, 24}, DType::BF16}, kOut, swish); }, "weights must be [K, 2, N]");
  fails([&] { bind_gated_linear_unit(kX, {{41, 2, 24}, DType::BF16}, kOut, swish); }, "weights's K (41)");
  fails([&] { bind_gated_linear_unit(kX, {{40, 2, 24}, DType::F16}, kOut, swish); }, "weights must have x's dtype");
  fails([&] { bind_gated_linear_unit(kX, kW, {{4, 17, 23}, DType::BF16}, swish); }, "out must be bf16 [4, 17, 24]");
  fails([&] { bind_gated_linear_unit(kX, kW, {{4, 17, 24}, DType::F32}, swish); }, "out must be bf16");
  fails([&] { bind_gated_linear_unit({{}, DType::BF16}, kW, kOut, swish); }, "x must be [..., K]");
  fails([&] { bind_gated_linear_unit({{4, 17, 40}, DType::I32}, {{40, 2, 24}, DType::I32}, kOut, swish); },
        "x must be bf16, f16, f32 or f64");
  fails([&] { bind_gated_linear_unit({{-1, 40}, DType::BF16}, kW, kOut, swish); }, "x");
  fails([&] { bind_gated_linear_unit_vjp({{4, 17, 23}, DType::BF16}, kX, kW, kX, kW, swish); }, "dout must be");
  fails([&] { bind_gated_linear_unit_vjp(kOut, kX, kW, kOut, kW, swish); }, "dx must be bf16 [4, 17, 40]");
  fails([&] { bind_gated_linear_unit_vjp(kOut, kX, kW, kX, {{40, 2, 24}, DType::F32}, swish); }, "dweights must be");
  fails([&] { parse_glu_activation("tanh"); }, "unknown activation \"tanh\" (known: swish, silu");
  // The optional pre-activations: [..., 2, N] in x's dtype.
  const ArgSpec kH{{4, 17, 2, 24}, DType::BF16};
  CHECK(gated_linear_unit_preactivations_spec(kX, kW) == kH);
  CHECK(bind_gated_linear_unit(kX, kW, kOut, swish, kH).has(3));
  CHECK_FALSE(bind_gated_linear_unit(kX, kW, kOut, swish).has(3));
  fails([&] { bind_gated_linear_unit(kX, kW, kOut, swish, ArgSpec{{4, 17, 48}, DType::BF16}); },
        "preactivations must be bf16 [4, 17, 2, 24]");
  fails([&] { bind_gated_linear_unit_vjp(kOut, kX, kW, kX, kW, swish, ArgSpec{{4, 17, 2, 24}, DType::F32}); },
        "preactivations must be bf16 [4, 17, 2, 24]");

  // Through the API: the activation string and the tensors.
  HostBuffer x(DType::BF16, {3, 8}), w(DType::BF16, {8, 2, 4}), out(DType::BF16, {3, 4});
  GluOptions bad;
  bad.activation = "softplus";
  fails([&] { gated_linear_unit_host(x.view(), w.view(), out.view(), bad); }, "unknown activation \"softplus\"");
  CHECK(parse_glu_activation("silu") == GluActivation::Swish);
  CHECK(parse_glu_activation("gelu_exact") == GluActivation::Gelu);
  CHECK(std::string(glu_activation_name(GluActivation::GeluTanh)) == "gelu_tanh");

  // A generic caller passing views that do not match the binding.
  TensorView in[] = {x.view(), w.view()}, wrong[] = {x.view(), TensorView()};
  BoundArgs three = bind_gated_linear_unit(ArgSpec::of(x.view()), ArgSpec::of(w.view()), ArgSpec::of(out.view()),
                                           GluActivation::Swish);
  fails([&] { gated_linear_unit_op().interpret(three, in, wrong); }, "out is bf16 [3, 8]");
}

TEST_CASE("gated_linear_unit: implementations, NotSupported and configs", "[glu]") {
  const Op &op = gated_linear_unit_op();
  const Op &vjp = gated_linear_unit_vjp_op();
  CHECK(find_op("gated_linear_unit") == &op);
  CHECK(find_op("gated_linear_unit_vjp") == &vjp);
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_90a").name() == "hopper");  // first where it serves
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_80").name() == "tile");
  CHECK(op.select(forwardArgs(DType::BF16, 36, 20), std::nullopt, "sm_90a").name() == "tile");  // K, N not x 8
  CHECK(op.select(forwardArgs(DType::F32), std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_75").name() == "reference");
  CHECK_THROWS_AS(op.select(forwardArgs(DType::F64), std::string("tile"), "sm_90a"), NotSupported);
  CHECK_THROWS_WITH(op.select(forwardArgs(DType::F32), std::string("tile"), "sm_90a"),
                    Contains("tile serves bf16 and f16"));
  {
    HostBuffer x(DType::F32, {3, 8}), w(DType::F32, {8, 2, 4}), out(DType::F32, {3, 4});
    CHECK_THROWS_AS(gated_linear_unit_host(x.view(), w.view(), out.view(), {"swish", "tile", std::nullopt}),
                    NotSupported);
  }

  // Every heuristic and search-space config passes the checks, for odd and ring shapes.
  for (const Op *o : {&op, &vjp})
    for (auto [k, n] : {std::pair<int64_t, int64_t>{40, 24}, {37, 23}, {4096, 14336}}) {
      for (DType dtype : {DType::BF16, DType::F32}) {
        BoundArgs b = forwardArgs(dtype, k, n);
        if (o == &vjp)
          b = bind_gated_linear_unit_vjp(b.arg(2), b.arg(0), b.arg(1), b.arg(0), b.arg(1), GluActivation::Swish);
        for (const auto &impl : o->implementations()) {
          if (impl->why_not(b))
            continue;
          for (const Config &c : impl->search_space(b)) {
            INFO(o->name() << " " << impl->name() << " " << c.to_json());
            CHECK_FALSE(impl->check_config(b, c).has_value());
          }
          CHECK(impl->search_space(b).front() == impl->heuristic(b));
        }
      }
    }
  BoundArgs ring = forwardArgs(DType::BF16, 40, 24), odd = forwardArgs(DType::BF16, 37, 23);
  const Implementation &tile = op.implementation("tile");
  CHECK(tile.heuristic(ring).get("async_copy") == 1);
  CHECK_FALSE(tile.heuristic(odd).has("async_copy"));
  Config c = tile.heuristic(ring);
  CHECK_THAT(*tile.check_config(odd, c), Contains("async_copy needs"));
  CHECK_THAT(*tile.check_config(ring, Config(c).set("block_m", 24)), Contains("block_m must be a power of two"));
  CHECK_THAT(*tile.check_config(ring, Config(c).set("stages", 7)), Contains("stages"));
  CHECK_THAT(*tile.check_config(ring, Config(c).set("bogus", 1)), Contains("unknown key \"bogus\""));
  CHECK_THAT(*tile.check_config(ring, {{"block_m", 256}, {"block_n", 256}, {"block_k", 32}, {"num_warps", 4}}),
             Contains("registers"));
  CHECK_THAT(*op.implementation("reference").check_config(ring, c), Contains("unknown key"));
  HostBuffer x(DType::BF16, {3, 8}), w(DType::BF16, {8, 2, 4}), out(DType::BF16, {3, 4});
  CHECK_THROWS_AS(gated_linear_unit_host(x.view(), w.view(), out.view(), {"swish", "tile", Config{{"block_m", 16}}}),
                  Error);
}

TEST_CASE("gated_linear_unit: BoundArgs round-trip JSON and validate", "[glu]") {
  for (const BoundArgs &b :
       {forwardArgs(), bind_gated_linear_unit_vjp(kOut, kX, kW, kX, kW, GluActivation::GeluTanh)}) {
    BoundArgs again = BoundArgs::from_json(b.to_json());
    CHECK(again == b);
    find_op(b.op)->validate(again);
    BoundArgs bad = b;
    bad.attributes["activation"] = "silu";  // an alias is not the canonical form
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("canonical"));
    bad.attributes["activation"] = "cube";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown activation"));
    bad = b;
    bad.attributes["alpha"] = "1";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown attribute"));
  }
}

TEST_CASE("gated_linear_unit: empty calls", "[glu]") {
  // K = 0: out = 0; the VJP's dweights is empty and dx zero.
  HostBuffer x(DType::BF16, {5, 0}), w(DType::BF16, {0, 2, 3}), out(DType::BF16, {5, 3});
  gated_linear_unit_host(x.view(), w.view(), out.view());
  for (double v : out.values())
    CHECK(v == 0);
  // M = 0: nothing to write; the VJP's dweights is zero.
  HostBuffer x0(DType::F32, {0, 4}), w0(DType::F32, {4, 2, 3}), out0(DType::F32, {0, 3}), dw(DType::F32, {4, 2, 3});
  gated_linear_unit_host(x0.view(), w0.view(), out0.view());
  gated_linear_unit_vjp_host(out0.view(), x0.view(), w0.view(), x0.view(), dw.view());
  for (double v : dw.values())
    CHECK(v == 0);
}

TEST_CASE("gated_linear_unit: tile kernels lower for sm_90a and sm_80 and assemble without spills", "[glu][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // The benchmark shape (the cp.async ring) and an odd one (masked register loads).
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{8192, 4096, 14336}, {1000, 37, 23}}) {
    BoundArgs fwd = bind_gated_linear_unit({{m, k}, DType::BF16}, {{k, 2, n}, DType::BF16}, {{m, n}, DType::BF16},
                                           GluActivation::Swish);
    BoundArgs vjp = bind_gated_linear_unit_vjp(fwd.arg(2), fwd.arg(0), fwd.arg(1), fwd.arg(0), fwd.arg(1),
                                               GluActivation::GeluTanh);
    for (const BoundArgs &b : {fwd, vjp}) {
      const Implementation &tile = find_op(b.op)->implementation("tile");
      std::vector<dsl::Kernel> kernels = tile.kernels(b, tile.heuristic(b));
      CHECK(kernels.size() == (b.op == "gated_linear_unit" ? 1u : 3u));  // the VJP: gate, dx, dweights
      const dsl::Kernel &gate = kernels.front();
      for (const char *arch : {"sm_90a", "sm_80"}) {
        CompileOptions options;
        options.assemble = false;
        options.arch = arch;
        const std::string ptx = compile(gate, options).ptx;
        INFO(b.op << " " << m << "x" << k << "x" << n << " " << arch);
        CHECK(test::count(ptx, "mma.sync.aligned.m16n8k16") > 0);
        CHECK(test::contains(ptx, "cp.async") == (k % 8 == 0));
        if (ptxas.empty())
          continue;
        auto [status, log] = test::run_ptxas(ptxas, ptx, arch);
        INFO(log);
        CHECK(status == 0);
        CHECK(test::contains(log, " 0 bytes spill stores"));
      }
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("gated_linear_unit: the tma config runs on TMA rings and a producer warpgroup and assembles",
          "[glu][ptx]") {
  const std::string ptxas = test::ptxas_path();
  BoundArgs fwd = bind_gated_linear_unit({{8192, 4096}, DType::BF16}, {{4096, 2, 14336}, DType::BF16},
                                         {{8192, 14336}, DType::BF16}, GluActivation::Swish);
  const Implementation &tile = gated_linear_unit_op().implementation("tile");
  Config c{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_warps", 8},
           {"async_copy", 1}, {"stages", 3}, {"tma", 1}};
  REQUIRE_FALSE(tile.check_config(fwd, c).has_value());
  auto why = [&](const char *key, int64_t value) {
    Config changed = c;
    changed.set(key, value);
    return tile.check_config(fwd, changed).value_or("valid");
  };
  CHECK_THAT(why("num_warps", 4), Contains("block_m = 16 * num_warps"));
  CHECK_THAT(why("block_k", 128), Contains("32, 64 or 128 bytes"));
  CHECK_THAT(why("block_n", 32), Contains("whole 128-byte rows"));
  CHECK_THAT(why("tma", 2), Contains("tma must be 0 or 1"));
  for (bool vjp : {false, true}) {
    BoundArgs args = vjp ? bind_gated_linear_unit_vjp({{8192, 14336}, DType::BF16}, {{8192, 4096}, DType::BF16},
                                                      {{4096, 2, 14336}, DType::BF16}, {{8192, 4096}, DType::BF16},
                                                      {{4096, 2, 14336}, DType::BF16}, GluActivation::Swish)
                         : fwd;
    Config config = c;
    if (vjp)
      config.set("block_n", 64);
    const Implementation &impl = (vjp ? gated_linear_unit_vjp_op() : gated_linear_unit_op()).implementation("tile");
    REQUIRE_FALSE(impl.check_config(args, config).has_value());
    std::vector<dsl::Kernel> kernels = impl.kernels(args, config);
    INFO((vjp ? "VJP" : "forward"));
    // x and the weights as [K, 2N]. The first step starts both products from zero
    // (fresh): ptxas injects no wait (the two zero accumulators used to share registers
    // that the first product overwrote while in flight).
    test::check_hopper_ptx(test::sm90a_ptx(kernels.front()),
                           {.min_copies = 3, .tensor_maps = 2, .threads = 384u}, ptxas);
  }
}

TEST_CASE("gated_linear_unit: hopper's kernels assemble for sm_90a, its VJP's products run on the hopper matmul",
          "[glu][ptx][hopper]") {
  const std::string ptxas = test::ptxas_path();
  const ArgSpec x{{8192, 4096}, DType::BF16}, w{{4096, 2, 14336}, DType::BF16}, out{{8192, 14336}, DType::BF16};
  const BoundArgs fwd = bind_gated_linear_unit(x, w, out, GluActivation::Swish);
  const BoundArgs back = bind_gated_linear_unit_vjp(out, x, w, x, w, GluActivation::Swish);
  for (const BoundArgs &args : {fwd, back}) {
    const Implementation &hopper = find_op(args.op)->implementation("hopper");
    CHECK(hopper.supported_on("sm_90a"));
    CHECK_FALSE(hopper.supported_on("sm_80"));
    const Config heuristic = hopper.heuristic(args);
    const std::vector<Config> space = hopper.search_space(args);
    for (const Config &candidate : space)
      CHECK_FALSE(hopper.check_config(args, candidate).has_value());
    const bool forward = args.op == fwd.op;
    // The forward's heuristic: the gate kernel on a persistent grid storing its tiles by
    // TMA, the unfused plan next in the search space; the VJP's: unfused (the products on
    // the hopper matmul, then the gate).
    const Config unfusedPlan = forward ? space.at(1) : heuristic;
    REQUIRE(unfusedPlan.get("unfused") == 1);
    if (forward) {
      REQUIRE_FALSE(heuristic.has("unfused"));
      CHECK(heuristic.get("tma_store") == 1);
      CHECK(heuristic.get("programs") == -1);
    }
    // The gate kernel's config (fused: one kernel, or the VJP's gate kernel and two
    // products), then the unfused plan (x W on the matmul, the gate kernel over it, and
    // in the VJP the two products).
    for (const Config &c : {forward ? heuristic : Config(heuristic).set("unfused", 0), unfusedPlan}) {
      INFO(c.to_json());
      REQUIRE_FALSE(hopper.check_config(args, c).has_value());
      std::vector<dsl::Kernel> kernels = hopper.kernels(args, c);
      const bool unfused = c.has("unfused") && c.get("unfused") == 1;
      REQUIRE(kernels.size() == (forward ? 1u : 3u) + (unfused ? 1u : 0u));
      for (const dsl::Kernel &kernel : kernels) {
        INFO(kernel.name());
        CompileOptions options;
        options.assemble = false;
        options.arch = "sm_90a";
        const CompiledKernel compiled = compile(kernel, options);
        if (kernel.name() == "glu_gate" || kernel.name() == "glu_gate_vjp") {
          CHECK_FALSE(unfused);
          const bool storesByTma = c.has("tma_store") && c.get("tma_store") == 1;  // (out's tensor map too)
          test::check_hopper_ptx(compiled, {.min_copies = 3, .tensor_maps = storesByTma ? 3u : 2u, .threads = 384u},
                                 ptxas);
          continue;
        }
        if (kernel.name() == "matmul_hopper") {
          CHECK(compiled.launch.shared_bytes <= 227u * 1024u);
          CHECK(test::contains(compiled.ptx, "wgmma.mma_async"));
        } else {
          CHECK(unfused);
          CHECK(kernel.name() == (forward ? "glu_gate_apply" : "glu_gate_apply_vjp"));
        }
        if (!ptxas.empty())
          test::check_assembles_without_spills(ptxas, compiled.ptx);
      }
    }
  }
  const Implementation &hopper = gated_linear_unit_op().implementation("hopper");
  CHECK_THAT(*hopper.check_config(fwd, Config(hopper.heuristic(fwd)).set("tma", 1)), Contains("always on TMA"));
  CHECK_THAT(*hopper.why_not(bind_gated_linear_unit({{8, 36}, DType::BF16}, {{36, 2, 20}, DType::BF16},
                                                    {{8, 20}, DType::BF16}, GluActivation::Swish)),
             Contains("multiples of 8"));
}

TEST_CASE("gated_linear_unit: wgmma configs put the ring's products on wgmma for sm_90a and assemble",
          "[glu][ptx]") {
  const std::string ptxas = test::ptxas_path();
  BoundArgs fwd = bind_gated_linear_unit({{8192, 4096}, DType::BF16}, {{4096, 2, 14336}, DType::BF16},
                                         {{8192, 14336}, DType::BF16}, GluActivation::Swish);
  const Implementation &tile = gated_linear_unit_op().implementation("tile");
  Config c = tile.heuristic(fwd);
  c.set("wgmma", 1);
  REQUIRE_FALSE(tile.check_config(fwd, c).has_value());
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("num_warps", 4)), Contains("block_m = 16 * num_warps"));
  CHECK_THAT(*tile.check_config(forwardArgs(DType::BF16, 37, 23), Config(c).set("async_copy", 0)),
             Contains("async_copy"));
  std::vector<dsl::Kernel> kernels = tile.kernels(fwd, c);
  const dsl::Kernel &gate = kernels.front();
  CompileOptions options;
  options.assemble = false;
  options.arch = "sm_90a";
  const std::string ptx = compile(gate, options).ptx;
  CHECK(test::count(ptx, "wgmma.mma_async.sync.aligned.m64n") > 0);
  CHECK(test::count(ptx, "mma.sync.aligned.m16n8k16") == 0);
  options.arch = "sm_80";
  CHECK(test::count(compile(gate, options).ptx, "wgmma") == 0);
  if (ptxas.empty()) {
    WARN("ptxas not found: the kernel was lowered but not assembled");
    return;
  }
  auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
  INFO(log);
  CHECK(status == 0);
}

TEST_CASE("gated_linear_unit: hopper's gate kernel stores its tiles by TMA on a persistent grid and assembles",
          "[glu][ptx][hopper]") {
  const std::string ptxas = test::ptxas_path();
  const ArgSpec x{{8192, 4096}, DType::BF16}, w{{4096, 2, 14336}, DType::BF16}, out{{8192, 14336}, DType::BF16};
  const BoundArgs fwd = bind_gated_linear_unit(x, w, out, GluActivation::Swish);
  const Implementation &hopper = gated_linear_unit_op().implementation("hopper");
  // [128, 128] tiles of both products with 64-wide K slices through four slots, one
  // program an SM: the matmul's [128, 256] ring (229,440 bytes with the store strips).
  const Config stored{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"group_m", 8}, {"num_warps", 8},
                      {"stages", 4},   {"programs", -1},  {"tma_store", 1}};
  REQUIRE_FALSE(hopper.check_config(fwd, stored).has_value());
  for (int64_t tmaStore : {0, 1}) {
    const std::vector<dsl::Kernel> kernels = hopper.kernels(fwd, Config(stored).set("tma_store", tmaStore));
    REQUIRE(kernels.size() == 1u);
    INFO("tma_store " << tmaStore);
    const CompiledKernel compiled = test::sm90a_ptx(kernels.front());
    CHECK(test::contains(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared") == (tmaStore == 1));
    CHECK(compiled.launch.shared_bytes <= 227u * 1024u);
    test::check_hopper_ptx(compiled, {.min_copies = 3, .tensor_maps = tmaStore ? 3 : 2, .threads = 384u}, ptxas);
  }
  // The VJP's dh has no TMA stores; a value other than 0 or 1 is refused.
  const BoundArgs back = bind_gated_linear_unit_vjp(out, x, w, x, w, GluActivation::Swish);
  const Config vjp = Config(stored).set("block_n", 64).set("stages", 2);
  CHECK_THAT(*find_op(back.op)->implementation("hopper").check_config(back, vjp), Contains("the forward"));
  CHECK_THAT(*hopper.check_config(fwd, Config(stored).set("tma_store", 2)), Contains("must be 0 or 1"));
}
