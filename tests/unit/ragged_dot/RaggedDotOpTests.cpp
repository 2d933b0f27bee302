// ragged_dot on the op framework: binding and bad input (errors naming the argument),
// implementation choice and NotSupported, configs (heuristic, search space, checks),
// BoundArgs round trips, empty calls, and the tile kernels' PTX for sm_90a / sm_80
// through ptxas (no spills at the benchmark shape).
#include <catch2/catch.hpp>

#include "common/PtxasUtil.h"
#include "unit/ragged_dot/RaggedDotTestCase.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/runtime/Error.h>

#include <algorithm>
#include <string>

using namespace tokamax;
using namespace ragged_test;
using Catch::Matchers::Contains;

namespace {

const ArgSpec kLhs{{68, 40}, DType::BF16}, kRhs{{4, 40, 24}, DType::BF16}, kSizes{{4}, DType::I32},
    kOut{{68, 24}, DType::BF16};

BoundArgs forwardArgs(DType dtype = DType::BF16, int64_t m = 68, int64_t k = 40, int64_t n = 24, int64_t g = 4) {
  return bind_ragged_dot({{m, k}, dtype}, {{g, k, n}, dtype}, {{g}, DType::I32}, {{m, n}, dtype});
}

BoundArgs vjpArgs(const BoundArgs &f) {
  return bind_ragged_dot_vjp(f.arg(3), f.arg(0), f.arg(1), f.arg(2), f.arg(0), f.arg(1));
}

} // namespace

TEST_CASE("ragged_dot: bad input names the argument", "[ragged_dot]") {
  auto fails = [](auto call, const std::string &what) { CHECK_THROWS_WITH(call(), Contains(what)); };
  fails([&] { bind_ragged_dot({{68, 40, 1}, DType::BF16}, kRhs, kSizes, kOut); }, "lhs must be [M, K]");
  fails([&] { bind_ragged_dot(kLhs, {{40, 24}, DType::BF16}, kSizes, kOut); }, "rhs must be [G, K, N]");
  fails([&] { bind_ragged_dot(kLhs, {{4, 41, 24}, DType::BF16}, kSizes, kOut); }, "rhs's K (41)");
  fails([&] { bind_ragged_dot(kLhs, {{4, 40, 24}, DType::F16}, kSizes, kOut); }, "rhs must have lhs's dtype");
  fails([&] { bind_ragged_dot(kLhs, kRhs, {{4}, DType::I64}, kOut); }, "group_sizes must be i32 [4]");
  fails([&] { bind_ragged_dot(kLhs, kRhs, {{5}, DType::I32}, kOut); }, "group_sizes must be i32 [4]");
  fails([&] { bind_ragged_dot(kLhs, kRhs, kSizes, {{68, 23}, DType::BF16}); }, "out must be bf16 [68, 24]");
  fails([&] { bind_ragged_dot({{68, 40}, DType::I32}, {{4, 40, 24}, DType::I32}, kSizes, kOut); },
        "lhs must be bf16, f16, f32 or f64");
  fails([&] { bind_ragged_dot({{-1, 40}, DType::BF16}, kRhs, kSizes, kOut); }, "lhs");
  fails([&] { bind_ragged_dot_vjp({{68, 23}, DType::BF16}, kLhs, kRhs, kSizes, kLhs, kRhs); }, "dout must be");
  fails([&] { bind_ragged_dot_vjp(kOut, kLhs, kRhs, kSizes, kOut, kRhs); }, "dlhs must be bf16 [68, 40]");
  fails([&] { bind_ragged_dot_vjp(kOut, kLhs, kRhs, kSizes, kLhs, {{4, 40, 24}, DType::F32}); }, "drhs must be");

  // A generic caller passing views that do not match the binding.
  HostBuffer lhs(DType::BF16, {3, 8}), rhs(DType::BF16, {2, 8, 4}), sizes(DType::I32, {2}, {1, 2}),
      out(DType::BF16, {3, 4});
  TensorView in[] = {lhs.view(), rhs.view(), sizes.view()}, wrong[] = {lhs.view()};
  BoundArgs b = bind_ragged_dot(ArgSpec::of(lhs.view()), ArgSpec::of(rhs.view()), ArgSpec::of(sizes.view()),
                                ArgSpec::of(out.view()));
  fails([&] { ragged_dot_op().interpret(b, in, wrong); }, "out is bf16 [3, 8]");
}

TEST_CASE("ragged_dot: implementations, NotSupported and configs", "[ragged_dot]") {
  const Op &op = ragged_dot_op();
  const Op &vjp = ragged_dot_vjp_op();
  CHECK(find_op("ragged_dot") == &op);
  CHECK(find_op("ragged_dot_vjp") == &vjp);
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(forwardArgs(DType::F32), std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_75").name() == "reference");
  CHECK_THROWS_AS(op.select(forwardArgs(DType::F64), std::string("tile"), "sm_90a"), NotSupported);
  CHECK_THROWS_WITH(op.select(forwardArgs(DType::F32), std::string("tile"), "sm_90a"),
                    Contains("tile serves bf16 and f16"));
  CHECK_THROWS_WITH(op.select(forwardArgs(DType::BF16, 1 << 20, 4096, 4096, 8), std::string("tile"), "sm_90a"),
                    Contains("2^31"));
  {
    HostBuffer lhs(DType::F32, {3, 8}), rhs(DType::F32, {2, 8, 4}), sizes(DType::I32, {2}, {1, 2}),
        out(DType::F32, {3, 4});
    CHECK_THROWS_AS(ragged_dot_host(lhs.view(), rhs.view(), sizes.view(), out.view(), {"tile", std::nullopt}),
                    NotSupported);
  }

  // Every heuristic and search-space config passes the checks.
  for (auto [m, k, n, g] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{68, 40, 24, 4}, {17, 37, 23, 3},
                            {32768, 4096, 4096, 8}})
    for (DType dtype : {DType::BF16, DType::F32})
      for (const BoundArgs &b : {forwardArgs(dtype, m, k, n, g), vjpArgs(forwardArgs(dtype, m, k, n, g))})
        for (const auto &impl : find_op(b.op)->implementations()) {
          if (impl->why_not(b))
            continue;
          for (const Config &c : impl->search_space(b)) {
            INFO(b.op << " " << impl->name() << " " << c.to_json());
            CHECK_FALSE(impl->check_config(b, c).has_value());
          }
          CHECK(impl->search_space(b).front() == impl->heuristic(b));
        }
  const Implementation &tile = op.implementation("tile");
  BoundArgs b = forwardArgs();
  Config c = tile.heuristic(b);
  CHECK_THAT(*tile.check_config(b, Config(c).set("block_m", 24)), Contains("block_m must be a power of two"));
  CHECK_THAT(*tile.check_config(b, Config(c).set("bogus", 1)), Contains("unknown key \"bogus\""));
  CHECK(c.get("async_copy") == 1);
  BoundArgs odd = forwardArgs(DType::BF16, 68, 37, 23);
  CHECK_FALSE(tile.heuristic(odd).has("async_copy"));
  CHECK_THAT(*tile.check_config(odd, c), Contains("async_copy needs"));
  CHECK_THAT(*tile.check_config(b, Config(c).set("stages", 7)), Contains("stages"));
  CHECK_THAT(*tile.check_config(odd, {{"block_m", 256}, {"block_n", 256}, {"block_k", 32}, {"num_warps", 4}}),
             Contains("registers"));
  CHECK_THAT(*op.implementation("reference").check_config(b, {{"block_m", 64}, {"block_n", 64}, {"block_k", 8},
                                                               {"num_warps", 4}}),
             Contains("at most 8192"));
}

TEST_CASE("ragged_dot: BoundArgs round-trip JSON and validate", "[ragged_dot]") {
  for (const BoundArgs &b : {forwardArgs(), vjpArgs(forwardArgs())}) {
    BoundArgs again = BoundArgs::from_json(b.to_json());
    CHECK(again == b);
    find_op(b.op)->validate(again);
    BoundArgs bad = b;
    bad.attributes["alpha"] = "1";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown attribute"));
  }
}

TEST_CASE("ragged_dot: empty calls", "[ragged_dot]") {
  // K = 0: out = 0.
  HostBuffer lhs(DType::BF16, {5, 0}), rhs(DType::BF16, {2, 0, 3}), sizes(DType::I32, {2}, {2, 3}),
      out(DType::BF16, {5, 3});
  ragged_dot_host(lhs.view(), rhs.view(), sizes.view(), out.view());
  for (double v : out.values())
    CHECK(v == 0);
  // G = 0: every row is zero.
  HostBuffer l1(DType::F32, {4, 3}, std::vector<double>(12, 1.0)), r1(DType::F32, {0, 3, 2}),
      s1(DType::I32, {0}), o1(DType::F32, {4, 2}), dl1(DType::F32, {4, 3}), dr1(DType::F32, {0, 3, 2});
  ragged_dot_host(l1.view(), r1.view(), s1.view(), o1.view());
  for (double v : o1.values())
    CHECK(v == 0);
  ragged_dot_vjp_host(o1.view(), l1.view(), r1.view(), s1.view(), dl1.view(), dr1.view());
  for (double v : dl1.values())
    CHECK(v == 0);
  // M = 0: nothing to write; the VJP's drhs is zero.
  HostBuffer l0(DType::F32, {0, 4}), r0(DType::F32, {2, 4, 3}), s0(DType::I32, {2}, {0, 0}), o0(DType::F32, {0, 3}),
      dr(DType::F32, {2, 4, 3});
  ragged_dot_host(l0.view(), r0.view(), s0.view(), o0.view());
  ragged_dot_vjp_host(o0.view(), l0.view(), r0.view(), s0.view(), l0.view(), dr.view());
  for (double v : dr.values())
    CHECK(v == 0);
}

TEST_CASE("ragged_dot: the tma config's rows kernels run on TMA rings and warp roles and assemble",
          "[ragged_dot][ptx]") {
  const std::string ptxas = test::ptxas_path();
  BoundArgs fwd = forwardArgs(DType::BF16, 32768, 4096, 4096, 8);
  const Implementation &tile = ragged_dot_op().implementation("tile");
  Config c{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_warps", 8},
           {"async_copy", 1}, {"stages", 4}, {"tma", 1}};
  REQUIRE_FALSE(tile.check_config(fwd, c).has_value());
  auto why = [&](const BoundArgs &b, const char *key, int64_t value) {
    Config changed = c;
    changed.set(key, value);
    return tile.check_config(b, changed).value_or("valid");
  };
  CHECK_THAT(why(fwd, "num_warps", 4), Contains("block_m = 16 * num_warps"));
  CHECK_THAT(why(fwd, "block_n", 32), Contains("whole 128-byte rows"));
  CHECK_THAT(why(forwardArgs(DType::BF16, 1000, 4000, 4096, 8), "block_k", 64), Contains("K a multiple of block_k"));
  // hopper: the same kernels at its heuristic (this config without the TMA keys).
  const Implementation &hopper = ragged_dot_op().implementation("hopper");
  CHECK(hopper.supported_on("sm_90a"));
  CHECK_FALSE(hopper.supported_on("sm_80"));
  // Persistent [128, 256] tiles stored by TMA (the fastest at R1 on an H100 and an H200);
  // [128, 128] where N is under 256; one program a tile past 16 groups.
  CHECK(hopper.heuristic(fwd) == Config{{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"num_warps", 8},
                                        {"stages", 3}, {"programs", -1}, {"tma_store", 1}});
  CHECK(hopper.heuristic(forwardArgs(DType::BF16, 1000, 4096, 128, 8)) ==
        Config{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_warps", 8}, {"stages", 4}, {"programs", -1},
               {"tma_store", 1}});
  // The search space holds the heuristic's blocks through registers too, persistent and
  // one program a tile.
  const std::vector<Config> space = hopper.search_space(fwd);
  auto inSpace = [&](Config c) { return std::find(space.begin(), space.end(), c) != space.end(); };
  const Config throughRegisters{{"block_m", 128}, {"block_n", 256}, {"block_k", 64},
                                {"num_warps", 8}, {"stages", 3}};
  Config persistentThroughRegisters = throughRegisters;
  persistentThroughRegisters.set("programs", -1);
  CHECK(space.front() == hopper.heuristic(fwd));
  CHECK(inSpace(throughRegisters));
  CHECK(inSpace(persistentThroughRegisters));
  CHECK_FALSE(hopper.heuristic(forwardArgs(DType::BF16, 1000, 4096, 4096, 17)).has("programs"));
  // The heuristic passes hopper's own check wherever hopper serves the call: narrow and
  // wide K and N (the VJP's dlhs runs over K), K steps of 16 and 32, one group, 16, 17.
  struct Shape {
    int64_t m, k, n, g;
  };
  int served = 0;
  for (Shape sh : {Shape{1000, 64, 4096, 8}, Shape{1000, 4096, 64, 8}, Shape{300, 16, 256, 1}, Shape{300, 48, 512, 16},
                   Shape{4096, 256, 8192, 17}, Shape{8, 128, 128, 3}})
    for (const BoundArgs &b : {forwardArgs(DType::BF16, sh.m, sh.k, sh.n, sh.g),
                               vjpArgs(forwardArgs(DType::F16, sh.m, sh.k, sh.n, sh.g))}) {
      const Implementation &impl = find_op(b.op)->implementation("hopper");
      if (impl.why_not(b))
        continue;
      INFO(b.op << " m " << sh.m << " k " << sh.k << " n " << sh.n << " g " << sh.g);
      const std::optional<std::string> refused = impl.check_config(b, impl.heuristic(b));
      CHECK_FALSE(refused.has_value());
      ++served;
    }
  CHECK(served >= 10);
  CHECK(hopper.heuristic(forwardArgs(DType::BF16, 1000, 4000, 4096, 8)).get("block_k") == 32);
  CHECK_THAT(*hopper.check_config(fwd, c), Contains("always on TMA rings"));
  // First in auto's order on sm_90a, tile elsewhere and where hopper does not serve the call.
  CHECK_FALSE(hopper.why_not(fwd).has_value());
  CHECK(ragged_dot_op().select(fwd, "hopper", "sm_90a").name() == "hopper");
  CHECK(ragged_dot_op().select(fwd, std::nullopt, "sm_90a").name() == "hopper");
  CHECK(ragged_dot_op().select(fwd, std::nullopt, "sm_80").name() == "tile");
  CHECK(ragged_dot_op().select(forwardArgs(DType::BF16, 1000, 4004, 4096, 8), std::nullopt, "sm_90a").name() ==
        "tile");
  CHECK_THAT(*hopper.why_not(forwardArgs(DType::BF16, 1000, 4004, 4096, 8)), Contains("multiples of 8"));
  CHECK_THAT(*hopper.why_not(forwardArgs(DType::BF16, 1000, 4008, 4096, 8)), Contains("divide K"));
  for (const BoundArgs &b : {fwd, vjpArgs(fwd)})
    for (const Config &candidate : find_op(b.op)->implementation("hopper").search_space(b))
      CHECK_FALSE(find_op(b.op)->implementation("hopper").check_config(b, candidate).has_value());
  // A persistent grid (programs): at most 16 groups, programs from -1; the VJP's drhs on wgmma.
  Config persistent = hopper.heuristic(fwd);
  persistent.set("programs", -1);
  CHECK_FALSE(hopper.check_config(fwd, persistent).has_value());
  {
    const BoundArgs vjp = vjpArgs(fwd);
    const Implementation &hopperVjp = find_op(vjp.op)->implementation("hopper");
    const std::vector<dsl::Kernel> kernels = hopperVjp.kernels(vjp, hopperVjp.heuristic(vjp));
    REQUIRE(kernels.size() == 2);
    CompileOptions options;
    options.assemble = false;
    options.arch = "sm_90a";
    const std::string drhs = compile(kernels[1], options).ptx;
    CHECK(test::count(drhs, "wgmma") > 0);
  }
  CHECK_THAT(*hopper.check_config(forwardArgs(DType::BF16, 1000, 4096, 4096, 17), persistent),
             Contains("at most 16 groups"));
  persistent.set("programs", -2);
  CHECK_THAT(*hopper.check_config(fwd, persistent), Contains("must be >= -1"));
  // The rows kernels persistent at [128, 128] and [128, 256] tiles (8 groups, and the 16
  // whose starts the producer holds at most), and the VJP's drhs on wgmma from its
  // cp.async ring, assemble without spills.
  // With tma_store the rows kernels' whole tiles leave by TMA stores (a third tensor map).
  const BoundArgs sixteen = forwardArgs(DType::BF16, 32768, 4096, 4096, 16);
  for (int64_t bn : {128, 256})
    for (const BoundArgs &b : {fwd, vjpArgs(fwd), sixteen, vjpArgs(sixteen)})
      for (int64_t tmaStore : {0, 1}) {
      const Implementation &impl = find_op(b.op)->implementation("hopper");
      Config c2 = impl.heuristic(b);
      c2.set("block_n", bn);
      c2.set("programs", -1);
      c2.set("tma_store", tmaStore);
      if (bn == 256 && b.op == "ragged_dot_vjp")
        c2.set("stages", 3);  // drhs's cp.async ring: four [64, 128 + 256] slots exceed the shared memory
      INFO(b.op << " block_n " << bn << ": " << impl.check_config(b, c2).value_or("valid"));
      REQUIRE_FALSE(impl.check_config(b, c2).has_value());
      std::vector<dsl::Kernel> kernels = impl.kernels(b, c2);
      for (const dsl::Kernel &kernel : kernels) {
        CompileOptions options;
        options.assemble = false;
        options.arch = "sm_90a";
        CompiledKernel compiled = compile(kernel, options);
        INFO(kernel.name() << " block_n " << bn << " tma_store " << tmaStore);
        CHECK(test::count(compiled.ptx, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16") > 0);
        if (kernel.name() != "ragged_dot_drhs")
          CHECK(test::contains(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared") == (tmaStore == 1));
        CHECK(compiled.launch.shared_bytes <= 227u * 1024u);
        if (ptxas.empty())
          continue;
        auto [status, log] = test::run_ptxas(ptxas, compiled.ptx, "sm_90a");
        INFO(log);
        CHECK(status == 0);
        CHECK(test::contains(log, " 0 bytes spill stores"));
        CHECK_FALSE(test::contains(log, "serialized"));
      }
    }
  for (const BoundArgs &b : {fwd, vjpArgs(fwd)}) {
    const Implementation &impl = find_op(b.op)->implementation("tile");
    std::vector<dsl::Kernel> kernels = impl.kernels(b, c);
    CompileOptions options;
    options.assemble = false;
    options.arch = "sm_90a";
    CompiledKernel compiled = compile(kernels.front(), options);  // forward, or the VJP's dlhs
    const std::string &ptx = compiled.ptx;
    INFO(kernels.front().name());
    CHECK(test::count(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global") >= 2);
    CHECK(test::count(ptx, "setmaxnreg.dec.sync.aligned.u32") == 1);
    CHECK(test::count(ptx, "ldmatrix") == 0);
    CHECK(test::count(ptx, "wgmma.mma_async.sync.aligned.m64n128k16") > 0);
    CHECK(compiled.launch.block_threads == 384u);
    if (ptxas.empty())
      continue;
    auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
    INFO(log);
    CHECK(status == 0);
    CHECK(test::contains(log, " 0 bytes spill stores"));
    CHECK_FALSE(test::contains(log, "serialized"));
  }
}

TEST_CASE("ragged_dot: tile kernels lower for sm_90a and sm_80 and assemble without spills",
          "[ragged_dot][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // The benchmark shape and an odd one.
  for (auto [m, k, n, g] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{32768, 4096, 4096, 8}, {1000, 37, 23, 5}}) {
    BoundArgs fwd = forwardArgs(DType::BF16, m, k, n, g);
    for (const BoundArgs &b : {fwd, vjpArgs(fwd)}) {
      const Implementation &tile = find_op(b.op)->implementation("tile");
      std::vector<dsl::Kernel> kernels = tile.kernels(b, tile.heuristic(b));
      CHECK(kernels.size() == (b.op == "ragged_dot" ? 1u : 2u));  // the VJP: dlhs, drhs
      for (const dsl::Kernel &kernel : kernels)
        for (const char *arch : {"sm_90a", "sm_80"}) {
          CompileOptions options;
          options.assemble = false;
          options.arch = arch;
          const std::string ptx = compile(kernel, options).ptx;
          INFO(kernel.name() << " " << m << "x" << k << "x" << n << " " << arch);
          CHECK(test::count(ptx, "mma.sync.aligned.m16n8k16") > 0);
          CHECK(test::contains(ptx, "cp.async") == (k % 8 == 0 && n % 8 == 0));
          if (ptxas.empty())
            continue;
          auto [status, log] = test::run_ptxas(ptxas, ptx, arch);
          INFO(log);
          CHECK(status == 0);
          // The dlhs epilogue builds its [128, 128] store-pointer grid in the accumulator's
          // layout (no shared-memory round trip); ptxas keeps up to 5 of those registers
          // on the stack there. Anything more is a kernel that does not fit.
          CHECK(test::spill_store_bytes(log) <= (kernel.name() == "ragged_dot_dlhs" ? 20 : 0));
        }
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
