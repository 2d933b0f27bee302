// linear_softmax_cross_entropy_loss on the op framework: binding and bad input (errors
// naming the argument), implementation choice and NotSupported, configs (heuristic,
// search space, checks), BoundArgs round trips, empty calls, bitwise reruns, and the tile
// kernels' PTX for sm_90a / sm_80 through ptxas (no spills at the benchmark shape).
#include <catch2/catch.hpp>

#include "common/HopperPtxChecks.h"
#include "common/PtxasUtil.h"
#include "unit/cross_entropy/XentTestCase.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/runtime/Error.h>

#include <cstring>
#include <string>

using namespace tokamax;
using namespace xent_test;
using Catch::Matchers::Contains;

namespace {

const ArgSpec kX{{17, 40}, DType::BF16}, kW{{40, 100}, DType::BF16}, kLabels{{17}, DType::I32};
const ArgSpec kLse{{17}, DType::F32}, kRows{{17}, DType::F32}, kScalar{{1}, DType::F32};

BoundArgs forwardArgs(DType dtype = DType::BF16, int64_t b = 17, int64_t d = 40, int64_t v = 100,
                      LossReduction r = LossReduction::Mean) {
  ArgSpec x{{b, d}, dtype}, w{{d, v}, dtype};
  return bind_linear_softmax_cross_entropy_loss(x, w, {{b}, DType::I32}, cross_entropy_loss_spec(x, w, r),
                                                cross_entropy_lse_spec(x, w), r, -100);
}

BoundArgs vjpOf(const BoundArgs &f) {
  return bind_linear_softmax_cross_entropy_loss_vjp(f.arg(3), f.arg(0), f.arg(1), f.arg(2), f.arg(4), f.arg(0),
                                                    f.arg(1), parse_loss_reduction(f.attribute("reduction")),
                                                    f.int_attribute("ignore_index"));
}

} // namespace

TEST_CASE("cross_entropy: bad input names the argument", "[cross_entropy]") {
  auto fails = [](auto call, const std::string &what) { CHECK_THROWS_WITH(call(), Contains(what)); };
  const auto mean = LossReduction::Mean, none = LossReduction::None;
  auto bind = [&](ArgSpec x, ArgSpec w, ArgSpec labels, ArgSpec loss, ArgSpec lse, LossReduction r) {
    return bind_linear_softmax_cross_entropy_loss(x, w, labels, loss, lse, r, -100);
  };
  fails([&] { bind({{17, 40, 1}, DType::BF16}, kW, kLabels, kScalar, kLse, mean); }, "x must be [B, D]");
  fails([&] { bind(kX, {{40, 100, 1}, DType::BF16}, kLabels, kScalar, kLse, mean); }, "w must be [D, V]");
  fails([&] { bind(kX, {{41, 100}, DType::BF16}, kLabels, kScalar, kLse, mean); }, "w's D (41)");
  fails([&] { bind(kX, {{40, 100}, DType::F16}, kLabels, kScalar, kLse, mean); }, "w must have x's dtype");
  fails([&] { bind(kX, {{40, 0}, DType::BF16}, kLabels, kScalar, kLse, mean); }, "V >= 1");
  fails([&] { bind({{17, 40}, DType::I32}, {{40, 100}, DType::I32}, kLabels, kScalar, kLse, mean); },
        "x must be bf16, f16, f32 or f64");
  fails([&] { bind(kX, kW, {{17}, DType::I64}, kScalar, kLse, mean); }, "labels must be i32 [17]");
  fails([&] { bind(kX, kW, {{16}, DType::I32}, kScalar, kLse, mean); }, "labels must be i32 [17]");
  fails([&] { bind(kX, kW, kLabels, kRows, kLse, mean); }, "loss must be f32 [1]");
  fails([&] { bind(kX, kW, kLabels, kScalar, kLse, none); }, "loss must be f32 [17]");
  fails([&] { bind(kX, kW, kLabels, kScalar, {{17}, DType::BF16}, mean); }, "lse must be f32 [17]");
  fails([&] { bind_linear_softmax_cross_entropy_loss_vjp(kRows, kX, kW, kLabels, kLse, kX, kW, mean, -100); },
        "dloss must be f32 [1]");
  fails([&] { bind_linear_softmax_cross_entropy_loss_vjp(kScalar, kX, kW, kLabels, kLse, kW, kW, mean, -100); },
        "dx must be bf16 [17, 40]");
  fails([&] {
    bind_linear_softmax_cross_entropy_loss_vjp(kScalar, kX, kW, kLabels, kLse, kX, {{40, 100}, DType::F32}, mean,
                                               -100);
  }, "dw must be bf16 [40, 100]");
  fails([&] { parse_loss_reduction("avg"); }, "unknown reduction \"avg\" (known: none, sum, mean)");
  CHECK(std::string(loss_reduction_name(LossReduction::Sum)) == "sum");

  // A generic caller passing views that do not match the binding.
  HostBuffer x(DType::BF16, {3, 8}), w(DType::BF16, {8, 5}), labels(DType::I32, {3}), loss(DType::F32, {1}),
      lse(DType::F32, {3});
  BoundArgs b = bind_linear_softmax_cross_entropy_loss(ArgSpec::of(x.view()), ArgSpec::of(w.view()),
                                                       ArgSpec::of(labels.view()), ArgSpec::of(loss.view()),
                                                       ArgSpec::of(lse.view()), mean, -100);
  TensorView in[] = {x.view(), w.view(), labels.view()}, wrong[] = {loss.view(), x.view()};
  fails([&] { linear_softmax_cross_entropy_loss_op().interpret(b, in, wrong); }, "lse is bf16 [3, 8]");
}

TEST_CASE("cross_entropy: implementations, NotSupported and configs", "[cross_entropy]") {
  const Op &op = linear_softmax_cross_entropy_loss_op();
  const Op &vjp = linear_softmax_cross_entropy_loss_vjp_op();
  CHECK(find_op("linear_softmax_cross_entropy_loss") == &op);
  CHECK(find_op("linear_softmax_cross_entropy_loss_vjp") == &vjp);
  // hopper first on sm_90a where its TMA rows fit (D and V multiples of 8), else tile.
  CHECK(op.select(forwardArgs(DType::BF16, 64, 40, 104), std::nullopt, "sm_90a").name() == "hopper");
  CHECK(vjp.select(vjpOf(forwardArgs(DType::F16, 64, 40, 104)), std::nullopt, "sm_90a").name() == "hopper");
  CHECK(op.select(forwardArgs(DType::BF16, 64, 40, 104), std::nullopt, "sm_80").name() == "tile");
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(forwardArgs(DType::F32), std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(forwardArgs(), std::nullopt, "sm_75").name() == "reference");
  CHECK_THROWS_AS(op.select(forwardArgs(DType::F64), std::string("tile"), "sm_90a"), NotSupported);
  CHECK_THROWS_WITH(op.select(forwardArgs(DType::F32), std::string("tile"), "sm_90a"),
                    Contains("tile serves bf16 and f16"));
  {
    HostBuffer x(DType::F32, {3, 8}), w(DType::F32, {8, 5}), labels(DType::I32, {3}, {0, 1, 2}),
        loss(DType::F32, {1}), lse(DType::F32, {3});
    CrossEntropyOptions tile{LossReduction::Mean, -100, "tile", std::nullopt};
    CHECK_THROWS_AS(linear_softmax_cross_entropy_loss_host(x.view(), w.view(), labels.view(), loss.view(),
                                                           lse.view(), tile),
                    NotSupported);
  }

  // Every heuristic and search-space config passes the checks.
  for (auto [b, d, v] : {std::tuple<int64_t, int64_t, int64_t>{17, 40, 100}, {1, 37, 3}, {8192, 4096, 131072}})
    for (DType dtype : {DType::BF16, DType::F32})
      for (bool backward : {false, true}) {
        BoundArgs args = forwardArgs(dtype, b, d, v);
        if (backward)
          args = vjpOf(args);
        const Op &o = backward ? vjp : op;
        for (const auto &impl : o.implementations()) {
          if (impl->why_not(args))
            continue;
          for (const Config &c : impl->search_space(args)) {
            INFO(o.name() << " " << impl->name() << " " << c.to_json());
            CHECK_FALSE(impl->check_config(args, c).has_value());
          }
          CHECK(impl->search_space(args).front() == impl->heuristic(args));
        }
      }
  BoundArgs fwd = forwardArgs(), back = vjpOf(fwd);
  const Implementation &tile = op.implementation("tile");
  Config c = tile.heuristic(fwd);
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("block_b", 24)), Contains("block_b must be a power of two"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("block_d", 64)), Contains("(the VJP's)"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("chunk_v", 256)), Contains("(the VJP's)"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("split_v", 33)), Contains("split_v"));
  CHECK(tile.heuristic(forwardArgs(DType::BF16, 8192, 4096, 131072)).get("split_v") > 1);
  Config v = vjp.implementation("tile").heuristic(back);
  CHECK_FALSE(vjp.implementation("tile").check_config(back, Config(v).set("chunk_v", 2 * v.get("block_v"))));
  CHECK_THAT(*vjp.implementation("tile").check_config(back, Config(v).set("chunk_v", v.get("block_v") + 1)),
             Contains("multiple of block_v"));
  // A zero block_v is refused, not divided by.
  CHECK_THAT(*vjp.implementation("tile").check_config(back, Config(v).set("chunk_v", 256).set("block_v", 0)),
             Contains("block_v must be a power of two"));
  CHECK_THAT(*vjp.implementation("tile").check_config(back, c), Contains("missing \"block_d\""));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("bogus", 1)), Contains("unknown key \"bogus\""));
  CHECK_THAT(*tile.check_config(fwd, {{"block_b", 256}, {"block_v", 256}, {"block_k", 32}, {"num_warps", 1}}),
             Contains("registers"));
  CHECK_THAT(*op.implementation("reference").check_config(fwd, c), Contains("exact products"));
}

TEST_CASE("cross_entropy: BoundArgs round-trip JSON and validate", "[cross_entropy]") {
  for (const BoundArgs &b : {forwardArgs(), vjpOf(forwardArgs(DType::F64, 5, 3, 7, LossReduction::None))}) {
    BoundArgs again = BoundArgs::from_json(b.to_json());
    CHECK(again == b);
    find_op(b.op)->validate(again);
    BoundArgs bad = b;
    bad.attributes["reduction"] = "avg";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown reduction"));
    bad = b;
    bad.attributes["ignore_index"] = "-1x";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("ignore_index must be a decimal integer"));
    bad = b;
    bad.attributes["ignore_index"] = "-0100";  // not the canonical spelling
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("canonical"));
    bad = b;
    bad.attributes["alpha"] = "1";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown attribute"));
  }
}

TEST_CASE("cross_entropy: empty calls", "[cross_entropy]") {
  // B = 0: the sum is 0 and the VJP's dw zero.
  HostBuffer x(DType::F32, {0, 4}), w(DType::F32, {4, 3}), labels(DType::I32, {0}), loss(DType::F32, {1}),
      lse(DType::F32, {0}), dw(DType::F32, {4, 3});
  const CrossEntropyOptions sum{LossReduction::Sum};
  linear_softmax_cross_entropy_loss_host(x.view(), w.view(), labels.view(), loss.view(), lse.view(), sum);
  CHECK(loss.at(0) == 0);
  HostBuffer dloss(DType::F32, {1}, {1.0});
  linear_softmax_cross_entropy_loss_vjp_host(dloss.view(), x.view(), w.view(), labels.view(), lse.view(), x.view(),
                                             dw.view(), sum);
  for (double v : dw.values())
    CHECK(v == 0);
  // D = 0: every logit is 0, so each row's loss is log V.
  HostBuffer x0(DType::F64, {2, 0}), w0(DType::F64, {0, 5}), l0(DType::I32, {2}, {1, 4}), rows(DType::F64, {2}),
      lse0(DType::F64, {2});
  linear_softmax_cross_entropy_loss_host(x0.view(), w0.view(), l0.view(), rows.view(), lse0.view(),
                                         {LossReduction::None});
  CHECK(rows.at(0) == Approx(std::log(5.0)));
  CHECK(rows.at(1) == Approx(std::log(5.0)));
}

TEST_CASE("cross_entropy: reruns are bitwise identical", "[cross_entropy]") {
  Case c{100, 24, 70, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "tile", std::nullopt};
  Inputs in = randomInputs(c, 11);
  HostBuffer x(c.dtype, {c.b, c.d}, in.x), w(c.dtype, {c.d, c.v}, in.w), labels = labelBuffer(c, in);
  HostBuffer loss1(DType::F32, {1}), lse1(DType::F32, {c.b}), loss2(DType::F32, {1}), lse2(DType::F32, {c.b});
  interpretForward(c, {&x, &w, &labels}, {&loss1, &lse1});
  interpretForward(c, {&x, &w, &labels}, {&loss2, &lse2});
  CHECK(std::memcmp(loss1.bytes(), loss2.bytes(), loss1.nbytes()) == 0);
  CHECK(std::memcmp(lse1.bytes(), lse2.bytes(), lse1.nbytes()) == 0);
}

TEST_CASE("cross_entropy: tile kernels lower for sm_90a and sm_80 and assemble without spills",
          "[cross_entropy][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (auto [b, d, v] : {std::tuple<int64_t, int64_t, int64_t>{8192, 4096, 131072}, {1000, 37, 23}}) {
    BoundArgs fwd = forwardArgs(DType::BF16, b, d, v);
    for (const BoundArgs &args : {fwd, vjpOf(fwd)}) {
      const Implementation &tile = find_op(args.op)->implementation("tile");
      std::vector<dsl::Kernel> kernels = tile.kernels(args, tile.heuristic(args));
      // forward: rows, combine (V in splits at the benchmark shape), reduce; VJP: row
      // scale, then dlogits, dx and dw (each launched once per chunk of V, listed once).
      const size_t forwardKernels = tile.heuristic(args).has("split_v") ? 3u : 2u;
      CHECK(kernels.size() == (args.op == "linear_softmax_cross_entropy_loss" ? forwardKernels : 4u));
      for (const dsl::Kernel &kernel : kernels)
        for (const char *arch : {"sm_90a", "sm_80"}) {
          CompileOptions options;
          options.assemble = false;
          options.arch = arch;
          const std::string ptx = compile(kernel, options).ptx;
          INFO(args.op << " " << kernel.name() << " " << b << "x" << d << "x" << v << " " << arch);
          const bool products = kernel.name() != "xent_reduce" && kernel.name() != "xent_row_scale" &&
                                kernel.name() != "xent_combine";
          CHECK((test::count(ptx, "mma.sync.aligned.m16n8k16") > 0) == products);
          CHECK_FALSE(test::contains(ptx, "atom.global.add.f32"));
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

TEST_CASE("cross_entropy: hopper's kernels assemble for sm_90a without spills, its VJP runs dx and dw on the "
          "hopper matmul",
          "[cross_entropy][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const BoundArgs fwd = forwardArgs(DType::BF16, 8192, 4096, 131072);
  for (const BoundArgs &args : {fwd, vjpOf(fwd)}) {
    const Implementation &hopper = find_op(args.op)->implementation("hopper");
    CHECK(hopper.supported_on("sm_90a"));
    CHECK_FALSE(hopper.supported_on("sm_80"));
    std::vector<std::string> names;
    for (const dsl::Kernel &kernel : hopper.kernels(args, hopper.heuristic(args))) {
      names.push_back(kernel.name());
      CompileOptions options;
      options.assemble = false;
      options.arch = "sm_90a";
      const CompiledKernel compiled = compile(kernel, options);
      const std::string &ptx = compiled.ptx;
      INFO(args.op << " " << kernel.name());
      CHECK(compiled.launch.shared_bytes <= 227u * 1024u);  // what one program may use on an H100 / H200
      CHECK_FALSE(test::contains(ptx, "mma.sync"));
      // dx's accumulating chunks add into the f32 sum by TMA reduce-adds (no load of it):
      // 128 x 256 tiles like the other products.
      if (names.size() == 5)
        CHECK(test::contains(ptx, "cp.reduce.async.bulk.tensor"));
      if (!ptxas.empty())
        test::check_assembles_without_spills(ptxas, ptx);
    }
    const std::vector<std::string> expected =
        args.op == fwd.op ? std::vector<std::string>{"xent_rows", "xent_combine", "xent_reduce"}
                          : std::vector<std::string>{"xent_row_scale", "xent_dlogits", "matmul_hopper",
                                                     "matmul_hopper", "matmul_hopper",
                                                     "xent_dx_round"};  // dx's first chunk, then dw, then dx's accumulating chunks (w and dw read and written in place)
    CHECK(names == expected);
    // The search space's 256-column logit tiles: the rows / dlogits kernel fits a program's
    // shared memory and assembles without spills too.
    size_t wide = 0;
    for (const Config &c : hopper.search_space(args)) {
      if (c.get("block_v") != 256)
        continue;
      ++wide;
      for (const dsl::Kernel &kernel : hopper.kernels(args, c)) {
        if (kernel.name() != "xent_rows" && kernel.name() != "xent_dlogits")
          continue;
        INFO(args.op << " " << kernel.name() << " " << c.to_json());
        const CompiledKernel compiled = test::sm90a_ptx(kernel);
        CHECK(compiled.launch.shared_bytes <= 227u * 1024u);
        if (!ptxas.empty())
          test::check_assembles_without_spills(ptxas, compiled.ptx);
      }
    }
    CHECK(wide >= 2u);  // the heuristic's (four slots) and the search's three
  }
  CHECK_THAT(*find_op(fwd.op)->implementation("hopper").why_not(forwardArgs(DType::BF16, 64, 40, 100)),
             Contains("multiples of 8"));
  CHECK_THAT(*find_op(fwd.op)->implementation("hopper").why_not(forwardArgs(DType::F32)), Contains("bf16 and f16"));
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("cross_entropy: the tma config's rows and dlogits kernels assemble for sm_90a on TMA and wgmma",
          "[cross_entropy][hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const BoundArgs fwd = forwardArgs(DType::BF16, 8192, 4096, 131072);
  for (const BoundArgs &args : {fwd, vjpOf(fwd)}) {
    const Implementation &tile = find_op(args.op)->implementation("tile");
    for (int64_t warps : {4, 8}) {
      Config c = tile.heuristic(args);
      c.set("block_b", 16 * warps).set("block_v", 128).set("block_k", 64).set("num_warps", warps).set("tma", 1);
      REQUIRE_FALSE(tile.check_config(args, c).has_value());
      size_t onTma = 0;
      for (const dsl::Kernel &kernel : tile.kernels(args, c)) {
        if (kernel.name() != "xent_rows" && kernel.name() != "xent_dlogits")
          continue;
        ++onTma;
        INFO(args.op << " " << kernel.name() << " " << c.to_json());
        const CompiledKernel compiled = test::sm90a_ptx(kernel);
        // x's and w's maps; the dlogits kernel's tiles leave by TMA stores (a third).
        const bool rows = kernel.name() == "xent_rows";
        if (!rows)
          CHECK(test::contains(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared"));
        test::check_hopper_ptx(compiled,
                               {.min_copies = 2, .producer = warps == 8, .tensor_maps = rows ? 2u : 3u,
                                .threads = uint32_t(32 * (warps + 4))},
                               ptxas);
        // The rows kernel's producer keeps 56 registers (its nested loops' coordinates
        // spilled at 24 and 40), its consumers 224; the dlogits kernel's 40 (its one
        // producer thread spilled at 24) and 232.
        // Neither gets a wait injected by ptxas (check_hopper_ptx). No barrier of the
        // whole block after the split: the producer would wait there alone.
        if (warps == 8) {
          CHECK(test::contains(compiled.ptx, rows ? "setmaxnreg.dec.sync.aligned.u32 \t56;"
                                                  : "setmaxnreg.dec.sync.aligned.u32 \t40;"));
          CHECK(test::contains(compiled.ptx, rows ? "setmaxnreg.inc.sync.aligned.u32 \t224;"
                                                  : "setmaxnreg.inc.sync.aligned.u32 \t232;"));
        }
      }
      CHECK(onTma == 1u);
    }
  }
  // What the tma config needs is named.
  const Implementation &tile = find_op(fwd.op)->implementation("tile");
  Config c{{"block_b", 128}, {"block_v", 128}, {"block_k", 64}, {"num_warps", 8}, {"tma", 1}};
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("block_b", 64)), Contains("block_b = 16 * num_warps"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("block_k", 128)), Contains("swizzle row"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("stages", 5)), Contains("2, 3 or 4"));
  CHECK_THAT(*tile.check_config(fwd, Config(c).set("tma", 0).set("stages", 3)), Contains("needs \"tma\": 1"));
  CHECK_THAT(*tile.check_config(forwardArgs(DType::BF16, 64, 40, 100), c), Contains("multiples of 8"));
  CHECK_THAT(*find_op(fwd.op)->implementation("reference").check_config(fwd, c), Contains("unknown key"));
}
