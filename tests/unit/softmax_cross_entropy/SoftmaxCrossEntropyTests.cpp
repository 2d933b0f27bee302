// softmax_cross_entropy (forward and VJP): both implementations on the interpreter against
// float64 on odd shapes (B 1, 3, 77; V 1, 5, 1000, 4099; labels out of range give NaN
// rows), bf16, f16, f32 and f64, every search-space config; the ops (registration, auto
// order, configs and their checks, BoundArgs round trips); bad input naming the
// argument; empty batches; a Function's gradient; the kernels' PTX for sm_90a and sm_80
// through ptxas. The reverse-program-order ctest runs the tag again (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include "common/BadInput.h"
#include "common/GradCheck.h"
#include "common/PtxasUtil.h"
#include "unit/softmax_cross_entropy/SoftmaxCrossEntropyTestCase.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>
#include <tokamax/runtime/Error.h>

#include <cstring>
#include <string>
#include <tuple>

using namespace tokamax;
using namespace sce_test;
using Catch::Matchers::Contains;

namespace {

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

BoundArgs forwardArgs(int64_t b, int64_t v, DType dtype = DType::BF16) {
  ArgSpec logits{{b, v}, dtype}, rows = softmax_cross_entropy_row_spec(logits);
  return bind_softmax_cross_entropy(logits, {{b}, DType::I32}, rows, rows);
}

BoundArgs vjpArgs(int64_t b, int64_t v, DType dtype = DType::BF16) {
  ArgSpec logits{{b, v}, dtype}, rows = softmax_cross_entropy_row_spec(logits);
  return bind_softmax_cross_entropy_vjp(rows, logits, {{b}, DType::I32}, rows, logits);
}

} // namespace

TEST_CASE("softmax_cross_entropy: tile and reference, forward and VJP, odd shapes match float64",
          "[softmax_cross_entropy]") {
  uint64_t seed = 100;
  for (const char *impl : {"tile", "reference"})
    for (DType dtype : {DType::BF16, DType::F32})
      for (int64_t b : {1, 3, 77})
        for (int64_t v : {1, 5, 1000, 4099}) {
          // Every third case has labels out of range (-1 and V: NaN rows).
          Case c{b, v, dtype, seed % 3 == 0, impl, std::nullopt};
          check(checkForward(c, seed++));
          check(checkVjp(c, seed++));
        }
}

TEST_CASE("softmax_cross_entropy: f16 on tile, f64 on reference, a label out of range in a single row",
          "[softmax_cross_entropy]") {
  uint64_t seed = 300;
  for (auto [b, v] : {std::pair<int64_t, int64_t>{3, 1000}, {77, 5}}) {
    check(checkForward({b, v, DType::F16, true, "tile", std::nullopt}, seed++));
    check(checkVjp({b, v, DType::F16, true, "tile", std::nullopt}, seed++));
    check(checkForward({b, v, DType::F64, true, "reference", std::nullopt}, seed++));
    check(checkVjp({b, v, DType::F64, true, "reference", std::nullopt}, seed++));
  }
  // B 1: its one row is the out-of-range one; auto picks tile for bf16.
  check(checkForward({1, 1000, DType::BF16, true, std::nullopt, std::nullopt}, seed++));
  check(checkVjp({1, 1000, DType::BF16, true, std::nullopt, std::nullopt}, seed++));
}

TEST_CASE("softmax_cross_entropy: every search-space config matches float64", "[softmax_cross_entropy]") {
  uint64_t seed = 500;
  for (DType dtype : {DType::BF16, DType::F32})
    for (bool backward : {false, true}) {
      const int64_t b = 77, v = 4099;
      const BoundArgs args = backward ? vjpArgs(b, v, dtype) : forwardArgs(b, v, dtype);
      for (const auto &impl : find_op(args.op)->implementations())
        for (const Config &config : impl->search_space(args)) {
          Case c{b, v, dtype, true, impl->name(), config};
          check(backward ? checkVjp(c, seed++) : checkForward(c, seed++));
        }
    }
  // The reference's column loop in steps of one column and of 16 (V 1000: 63 steps, the
  // last partial).
  for (int64_t step : {1, 16}) {
    Case c{3, 1000, DType::F32, true, "reference", Config{{"block_v", step}}};
    check(checkForward(c, seed++));
    check(checkVjp(c, seed++));
  }
}

TEST_CASE("softmax_cross_entropy: ops, auto order, configs and their checks", "[softmax_cross_entropy]") {
  const Op &op = softmax_cross_entropy_op(), &vjp = softmax_cross_entropy_vjp_op();
  CHECK(find_op("softmax_cross_entropy") == &op);
  CHECK(find_op("softmax_cross_entropy_vjp") == &vjp);
  CHECK(op.arg_names() == std::vector<std::string>{"logits", "labels", "loss", "lse"});
  CHECK(vjp.arg_names() == std::vector<std::string>{"dloss", "logits", "labels", "lse", "dlogits"});
  for (const Op *o : {&op, &vjp}) {
    REQUIRE(o->implementations().size() == 2);
    CHECK(o->implementations()[0]->name() == "tile");
    CHECK(o->implementations()[1]->name() == "reference");
  }
  CHECK(op.select(forwardArgs(8, 100), std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(forwardArgs(8, 100, DType::F32), std::nullopt, "sm_80").name() == "tile");
  CHECK(op.select(forwardArgs(8, 100, DType::F64), std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(forwardArgs(8, 100), std::nullopt, "sm_75").name() == "reference");
  CHECK_THROWS_AS(vjp.select(vjpArgs(8, 100, DType::F64), std::string("tile"), "sm_90a"), NotSupported);
  CHECK_THROWS_WITH(vjp.select(vjpArgs(8, 100, DType::F64), std::string("tile"), "sm_90a"),
                    Contains("tile serves bf16, f16 and f32, not f64"));

  // Every heuristic and search-space config passes the checks; the heuristic comes first.
  for (auto [b, v] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {77, 4099}, {8192, 131072}, {100000, 32}})
    for (bool backward : {false, true}) {
      const BoundArgs args = backward ? vjpArgs(b, v) : forwardArgs(b, v);
      for (const auto &impl : find_op(args.op)->implementations()) {
        const std::vector<Config> space = impl->search_space(args);
        CHECK(space.front() == impl->heuristic(args));
        for (const Config &c : space) {
          INFO(args.op << " " << impl->name() << " B " << b << " V " << v << " " << c.to_json());
          CHECK_FALSE(impl->check_config(args, c).has_value());
        }
      }
    }
  const BoundArgs args = forwardArgs(77, 4099);
  const Implementation &tile = op.implementation("tile"), &reference = op.implementation("reference");
  CHECK(tile.heuristic(args) == Config{{"block_rows", 4}, {"block_v", 1024}, {"num_warps", 8}});
  CHECK(tile.search_space(args).size() == 6);
  CHECK(reference.heuristic(args) == Config{{"block_v", 256}});
  CHECK(reference.search_space(args).size() == 2);
  const Config good = tile.heuristic(args);
  CHECK_THAT(*tile.check_config(args, Config(good).set("block_rows", 3)), Contains("block_rows must be a power of two"));
  CHECK_THAT(*tile.check_config(args, Config(good).set("block_v", 8)), Contains("block_v must be a power of two in [16"));
  CHECK_THAT(*tile.check_config(args, Config(good).set("num_warps", 3)), Contains("num_warps must be 1, 2, 4 or 8"));
  CHECK_THAT(*tile.check_config(args, Config(good).set("block_rows", 64)), Contains("over the 16384 one program holds"));
  CHECK_THAT(*tile.check_config(args, {{"block_rows", 16}, {"block_v", 1024}, {"num_warps", 1}}),
             Contains("elements a thread"));
  CHECK_THAT(*tile.check_config(args, Config(good).set("split_v", 2)), Contains("unknown key \"split_v\""));
  CHECK_THAT(*tile.check_config(args, {{"block_rows", 4}, {"block_v", 1024}}), Contains("missing \"num_warps\""));
  CHECK_THAT(*reference.check_config(args, {{"block_v", 100}}), Contains("block_v must be a power of two in [1, 4096]"));
  // An explicit config that fails its check is an Error before anything runs.
  HostBuffer logits(DType::BF16, {2, 5}, std::vector<double>(10, 0.0)), labels(DType::I32, {2}, {0, 4}),
      loss(DType::F32, {2}), lse(DType::F32, {2});
  CHECK_THROWS_WITH(softmax_cross_entropy_host(logits.view(), labels.view(), loss.view(), lse.view(),
                                               {"reference", Config{{"block_v", 3}}}),
                    Contains("block_v must be a power of two"));
}

TEST_CASE("softmax_cross_entropy: BoundArgs round-trip JSON and validate", "[softmax_cross_entropy]") {
  for (const BoundArgs &b : {forwardArgs(17, 100), vjpArgs(5, 7, DType::F64)}) {
    const BoundArgs again = BoundArgs::from_json(b.to_json());
    CHECK(again == b);
    find_op(b.op)->validate(again);
    BoundArgs bad = b;
    bad.attributes["axis"] = "1";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown attribute \"axis\""));
    bad = b;
    bad.args.back() = std::nullopt;
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("is required"));
    bad = b;
    bad.args.back()->dtype = DType::F16;
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("must be"));
  }
}

TEST_CASE("bad input: softmax_cross_entropy_host / _vjp_host name the argument", "[bad-input][softmax_cross_entropy]") {
  using namespace tokamax::bad_input;
  constexpr DType F32 = DType::F32, I32 = DType::I32;
  Arena a, l, o, s, d;
  const TensorView logits = a.view(F32, {4, 8}), labels = l.view(I32, {4}), loss = o.view(F32, {4}),
                   lse = s.view(F32, {4}), dlogits = d.view(F32, {4, 8});
  auto fwd = [&](TensorView lg, TensorView lb, TensorView ls, TensorView ln, SoftmaxCrossEntropyOptions opt = {}) {
    return [=] { softmax_cross_entropy_host(lg, lb, ls, ln, opt); };
  };
  auto back = [&](TensorView dl, TensorView lg, TensorView lb, TensorView ln, TensorView out) {
    return [=] { softmax_cross_entropy_vjp_host(dl, lg, lb, ln, out); };
  };
  check_refusals({
      {"logits of rank 3", fwd(a.view(F32, {4, 8, 1}), labels, loss, lse), {"logits must be [B, V]"}},
      {"int logits", fwd(a.view(I32, {4, 8}), labels, loss, lse), {"logits must be bf16, f16, f32 or f64, got i32"}},
      {"no classes", fwd(a.view(F32, {4, 0}), labels, loss, lse), {"logits must have at least one class (V >= 1)"}},
      {"i64 labels", fwd(logits, l.view(DType::I64, {4}), loss, lse), {"labels must be i32 [4], got i64 [4]"}},
      {"labels of another B", fwd(logits, l.view(I32, {5}), loss, lse), {"labels must be i32 [4], got i32 [5]"}},
      {"bf16 loss", fwd(logits, labels, o.view(DType::BF16, {4}), lse), {"loss must be f32 [4], got bf16 [4]"}},
      {"lse of another B", fwd(logits, labels, loss, s.view(F32, {3})), {"lse must be f32 [4], got f32 [3]"}},
      {"f32 lse for f64 logits", fwd(a.view(DType::F64, {4, 8}), labels, o.view(DType::F64, {4}), lse),
       {"lse must be f64 [4], got f32 [4]"}},
      {"strided logits", fwd(a.strided(F32, {4, 8}), labels, loss, lse), {"logits must be contiguous"}},
      {"null labels", fwd(logits, null_view(I32, {4}), loss, lse), {"labels has no data"}},
      {"negative B",
       [] {
         bind_softmax_cross_entropy({{-1, 8}, F32}, {{-1}, I32}, {{-1}, F32}, {{-1}, F32});
       },
       {"softmax_cross_entropy: logits has a negative size -1"}},
      {"unknown implementation", fwd(logits, labels, loss, lse, {"hopper", std::nullopt}), {"hopper"}},
      {"tile for f64",
       fwd(a.view(DType::F64, {4, 8}), labels, o.view(DType::F64, {4}), s.view(DType::F64, {4}), {"tile", {}}),
       {"tile serves bf16, f16 and f32"}, true},
      {"tile config missing a key", fwd(logits, labels, loss, lse, {"tile", Config{{"block_rows", 1}}}),
       {"missing \"block_v\""}},
      {"dloss of another dtype", back(o.view(DType::BF16, {4}), logits, labels, lse, dlogits),
       {"softmax_cross_entropy_vjp: dloss must be f32 [4]"}},
      {"dlogits of another dtype", back(loss, logits, labels, lse, d.view(DType::BF16, {4, 8})),
       {"dlogits must be f32 [4, 8], got bf16 [4, 8]"}},
      {"dlogits of another shape", back(loss, logits, labels, lse, d.view(F32, {8, 4})), {"dlogits must be f32 [4, 8]"}},
      {"vjp lse missing a row", back(loss, logits, labels, s.view(F32, {3}), dlogits), {"lse must be f32 [4]"}},
      {"strided dlogits", back(loss, logits, labels, lse, d.strided(F32, {4, 8})), {"dlogits must be contiguous"}},
  });
  // The arena is untouched: nothing ran.
  CHECK(o[0] == 0.5);
  CHECK(d[0] == 0.5);
}

TEST_CASE("softmax_cross_entropy: no rows is a no-op, reruns are bitwise identical", "[softmax_cross_entropy]") {
  for (const char *impl : {"tile", "reference"}) {
    HostBuffer logits(DType::F32, {0, 7}), labels(DType::I32, {0}), loss(DType::F32, {0}), lse(DType::F32, {0}),
        dlogits(DType::F32, {0, 7});
    const SoftmaxCrossEntropyOptions options{impl, std::nullopt};
    CHECK_NOTHROW(softmax_cross_entropy_host(logits.view(), labels.view(), loss.view(), lse.view(), options));
    CHECK_NOTHROW(
        softmax_cross_entropy_vjp_host(loss.view(), logits.view(), labels.view(), lse.view(), dlogits.view(), options));
    CHECK(softmax_cross_entropy_op().implementation(impl).kernels(forwardArgs(0, 7, DType::F32),
                                                                  softmax_cross_entropy_op()
                                                                      .implementation(impl)
                                                                      .heuristic(forwardArgs(0, 7, DType::F32)))
              .empty());
  }
  Case c{77, 1000, DType::BF16, true, "tile", std::nullopt};
  Inputs in = randomInputs(c, 11);
  HostBuffer logits(c.dtype, {c.b, c.v}, in.logits), labels = labelBuffer(c, in);
  HostBuffer loss1(DType::F32, {c.b}), lse1(DType::F32, {c.b}), loss2(DType::F32, {c.b}), lse2(DType::F32, {c.b});
  interpretForward(c, {&logits, &labels}, {&loss1, &lse1});
  interpretForward(c, {&logits, &labels}, {&loss2, &lse2});
  CHECK(std::memcmp(loss1.bytes(), loss2.bytes(), loss1.nbytes()) == 0);
  CHECK(std::memcmp(lse1.bytes(), lse2.bytes(), lse1.nbytes()) == 0);
}

TEST_CASE("softmax_cross_entropy: grad of a Function matches float64 finite differences and the VJP",
          "[softmax_cross_entropy][function]") {
  constexpr int64_t kB = 5, kV = 13;
  const std::vector<int64_t> labelValues{3, 0, 12, 7, 3};
  auto traced = [&](DType dtype, std::optional<std::string> impl) {
    return Function::trace({{{kB, kV}, dtype}, {{kB}, DType::I32}}, [&](Tracer &t, std::span<const Sym> in) {
      return std::vector<Sym>{t.sum(t.softmax_cross_entropy(in[0], in[1], impl))};
    });
  };
  HostBuffer labels(DType::I32, {kB}, std::vector<double>(labelValues.begin(), labelValues.end()));
  std::vector<double> point = attention_test::randomNormal(kB * kV, DType::F64, 21, 2.0);
  auto gradient = [&](DType dtype, std::optional<std::string> impl) {
    const Function g = grad(traced(dtype, impl), {0});
    int vjps = 0;
    for (const auto &call : g.calls())
      vjps += call.op->name() == "softmax_cross_entropy_vjp" && call.implementation == impl;
    CHECK(vjps == 1);
    HostBuffer logits(dtype, {kB, kV}, point), dlogits(dtype, {kB, kV});
    TensorView in[] = {logits.view(), labels.view()}, out[] = {dlogits.view()};
    g.interpret(in, out);
    return dlogits.values();
  };
  // float64 on reference against central differences of the float64 host loss.
  auto hostLoss = [&] {
    double total = 0;
    for (double l : forward(kB, kV, point, labelValues).loss)
      total += l;
    return total;
  };
  std::vector<double> probe = point;
  const std::vector<double> numeric = grad_check::centralDifferences(point, hostLoss);
  CHECK(point == probe);
  const std::vector<double> exact = gradient(DType::F64, "reference");
  check({attention_test::compare("dlogits", exact, numeric, {kB, kV}, {1e-6, 1e-7}).ok, "f64 vs finite differences"});
  // f32 on tile against the float64 VJP.
  const std::vector<double> ones(kB, 1.0);
  const Comparison c = attention_test::compare("dlogits", gradient(DType::F32, "tile"),
                                               vjp(kB, kV, ones, point, labelValues), {kB, kV},
                                               attention_test::tolerance(DType::F32));
  INFO(c.message);
  CHECK(c.ok);
  // The gradient Function survives its JSON round trip.
  const Function g = grad(traced(DType::BF16, std::nullopt), {0});
  CHECK(Function::from_json(g.to_json()).to_json() == g.to_json());
}

TEST_CASE("softmax_cross_entropy: the kernels lower for sm_90a and sm_80 and assemble without spills",
          "[softmax_cross_entropy][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // The benchmark's vocabulary, odd V, and short rows (the heuristic's tallest tiles).
  for (auto [b, v] : {std::pair<int64_t, int64_t>{8192, 131072}, {77, 4099}, {4096, 128}, {100000, 32}})
    for (const BoundArgs &args : {forwardArgs(b, v), vjpArgs(b, v)})
      for (const auto &impl : find_op(args.op)->implementations()) {
        // The tile kernels at every search-space config, the reference at its heuristic.
        std::vector<Config> configs = impl->search_space(args);
        if (impl->name() == "reference")
          configs.resize(1);
        for (const Config &config : configs) {
          std::vector<dsl::Kernel> kernels = impl->kernels(args, config);
          REQUIRE(kernels.size() == 1);
          for (const char *arch : {"sm_90a", "sm_80"}) {
            CompileOptions options;
            options.assemble = false;
            options.arch = arch;
            const std::string ptx = compile(kernels[0], options).ptx;
            INFO(args.op << " " << impl->name() << " " << config.to_json() << " B " << b << " V " << v << " "
                         << arch);
            CHECK(test::contains(ptx, ".visible .entry " + kernels[0].name() + "("));
            CHECK_FALSE(test::contains(ptx, "atom.global"));
            if (!ptxas.empty())
              test::check_assembles_without_spills(ptxas, ptx, arch);
          }
        }
      }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
