//===- BadInputOpsTests.cpp - What users get wrong, at every op entry point -===//
//
// One TEST_CASE per public function (or small group) of ops/: wrong rank, shape or dtype,
// null and non-contiguous views, tensors on different devices, empty and negative sizes,
// unknown implementations, configs with missing or out-of-range keys. Each must be a
// tokamax::Error naming the argument and what was expected, before anything runs.
// Binding errors already covered by the op's own tests are not repeated here.
//
//===----------------------------------------------------------------------===//
#include "common/BadInput.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Softmax.h>

using namespace tokamax;
using namespace tokamax::bad_input;

namespace {

constexpr DType F32 = DType::F32;
ArgSpec spec(std::vector<int64_t> shape, DType dtype = F32) { return ArgSpec{std::move(shape), dtype}; }

NormOptions withConfig(Config config, std::string implementation = "reference") {
  NormOptions o;
  o.implementation = std::move(implementation);
  o.config = std::move(config);
  return o;
}

} // namespace

//===----------------------------------------------------------------------===//
// Norm.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: layer_norm_host / rms_norm_host", "[bad-input][norm]") {
  Arena x, y, p, m;  // x [4, 8] f32 and its companions
  const TensorView xv = x.view(F32, {4, 8}), yv = y.view(F32, {4, 8}), scale = p.view(F32, {8});
  const TensorView mean = m.view(F32, {4});
  NormOptions tile;
  tile.implementation = "tile";
  tile.axis = 0;
  const TensorView x64 = x.view(DType::F64, {4, 8}), y64 = y.view(DType::F64, {4, 8});
  const TensorView f16 = p.view(DType::F16, {8}), mean64 = m.view(DType::F64, {4});
  check_refusals({
      {"null x", [&] { layer_norm_host(null_view(F32, {4, 8}), nullptr, nullptr, yv); }, {"layer_norm: x has no data"}},
      {"strided y", [&] { layer_norm_host(xv, nullptr, nullptr, y.strided(F32, {4, 8})); }, {"y must be contiguous"}},
      {"null mean_out data",
       [&] {
         TensorView none = null_view(F32, {4});
         layer_norm_host(xv, nullptr, nullptr, yv, {}, &none);
       },
       {"mean has no data"}},
      {"scalar x", [&] { layer_norm_host(x.view(F32, {}), nullptr, nullptr, y.view(F32, {})); },
       {"x must have at least one dimension"}},
      {"empty axis", [&] { layer_norm_host(x.view(F32, {4, 0}), nullptr, nullptr, y.view(F32, {4, 0})); },
       {"axis 1 of x [4, 0] is empty"}},
      {"f16 scale for f32 x", [&] { layer_norm_host(xv, &f16, nullptr, yv); }, {"scale must be f32 or x's dtype f32, got f16"}},
      {"mean and rstd of two dtypes",
       [&] { layer_norm_host(x64, nullptr, nullptr, y64, {}, &mean, &mean64); }, {"mean is f32 but rstd is f64"}},
      {"axis out of range", [&] { layer_norm_host(xv, nullptr, nullptr, yv, {.axis = -3}); },
       {"axis -3 is out of range for x of rank 2"}},
      {"infinite epsilon", [&] { rms_norm_host(xv, nullptr, yv, {.epsilon = INFINITY}); }, {"epsilon must be finite"}},
      {"unknown implementation",
       [&] { layer_norm_host(xv, nullptr, nullptr, yv, {.implementation = std::string("cuda")}); },
       {"unknown implementation \"cuda\"", "tile, reference"}},
      {"tile off the last axis", [&] { layer_norm_host(xv, nullptr, nullptr, yv, tile); }, {"last axis"}, true},
      {"null rstd_out data",
       [&] {
         TensorView none = null_view(F32, {4});
         rms_norm_host(xv, nullptr, yv, {}, &none);
       },
       {"rms_norm: rstd has no data"}},
      {"scale of another length", [&] { rms_norm_host(xv, &mean, yv); }, {"scale must have shape [8]"}},
  });
  // Configs: every key the implementation needs, in range, and no stray ones.
  check_refusals({
      {"config without num_warps",
       [&] { layer_norm_host(xv, nullptr, nullptr, yv, withConfig({{"block_rows", 1}, {"block_cols", 8}})); },
       {"config", "is not valid for implementation \"reference\"", "missing \"num_warps\""}},
      {"block_rows not a power of two",
       [&] {
         layer_norm_host(xv, nullptr, nullptr, yv,
                         withConfig({{"block_rows", 3}, {"block_cols", 8}, {"num_warps", 4}}));
       },
       {"block_rows must be a power of two"}},
      {"num_warps over 32",
       [&] { rms_norm_host(xv, nullptr, yv, withConfig({{"block_rows", 1}, {"num_warps", 64}}, "tile")); },
       {"num_warps must be a power of two up to 32, got 64"}},
      {"unknown key",
       [&] { rms_norm_host(xv, nullptr, yv, withConfig({{"block_rows", 1}, {"num_warps", 4}, {"warps", 4}}, "tile")); },
       {"unknown key \"warps\""}},
      {"block too large for a program",
       [&] {
         rms_norm_host(xv, nullptr, yv,
                       withConfig({{"block_rows", 65536}, {"block_cols", 65536}, {"num_warps", 4}}));
       },
       {"too large for one program"}},
  });
  // No rows: nothing to normalise, nothing written.
  CHECK_NOTHROW(layer_norm_host(x.view(F32, {0, 8}), &scale, nullptr, y.view(F32, {0, 8})));
  CHECK(y[0] == 0.5);
}

TEST_CASE("bad input: layer_norm_vjp_host / rms_norm_vjp_host", "[bad-input][norm]") {
  Arena dy, x, m, r, dx, ds, dof;
  const TensorView dyv = dy.view(F32, {4, 8}), xv = x.view(F32, {4, 8}), mean = m.view(F32, {4});
  const TensorView rstd = r.view(F32, {4}), dxv = dx.view(F32, {4, 8}), dscale = ds.view(F32, {8});
  const TensorView shortScale = ds.view(F32, {7}), intOffset = dof.view(DType::I32, {8}), mean5 = m.view(F32, {5});
  const TensorView intRstd = r.view(DType::I32, {4});
  const Config fused{{"block_rows", 1}, {"num_warps", 4}};
  check_refusals({
      {"null dx", [&] { layer_norm_vjp_host(dyv, xv, nullptr, mean, rstd, null_view(F32, {4, 8}), nullptr, nullptr); },
       {"layer_norm_vjp: dx has no data"}},
      {"dscale of another length",
       [&] { layer_norm_vjp_host(dyv, xv, nullptr, mean, rstd, dxv, &shortScale, nullptr); },
       {"dscale must have shape [8]"}},
      {"i32 doffset", [&] { layer_norm_vjp_host(dyv, xv, nullptr, mean, rstd, dxv, nullptr, &intOffset); },
       {"doffset must be f32 or x's dtype f32, got i32"}},
      {"a residual per row missing", [&] { layer_norm_vjp_host(dyv, xv, nullptr, mean5, rstd, dxv, nullptr, nullptr); },
       {"mean must hold one value per row (4 values"}},
      {"config without programs",
       [&] { layer_norm_vjp_host(dyv, xv, nullptr, mean, rstd, dxv, &dscale, nullptr, withConfig(fused, "tile")); },
       {"missing \"programs\""}},
      {"no programs",
       [&] {
         layer_norm_vjp_host(dyv, xv, nullptr, mean, rstd, dxv, &dscale, nullptr,
                             withConfig(Config(fused).set("programs", 0), "tile"));
       },
       {"programs must be positive, got 0"}},
      {"strided dy", [&] { rms_norm_vjp_host(dy.strided(F32, {4, 8}), xv, nullptr, rstd, dxv, nullptr); },
       {"rms_norm_vjp: dy must be contiguous"}},
      {"i32 rstd", [&] { rms_norm_vjp_host(dyv, xv, nullptr, intRstd, dxv, nullptr); }, {"rstd must be f32, got i32"}},
  });
}

TEST_CASE("bad input: bind_* refuse specs no tensor can have", "[bad-input][norm][matmul]") {
  // ArgSpec is a plain struct: a negative or overflowing shape must not reach the kernels
  // (a [-1, -3] residual has the 3 elements of 3 rows, a [-4, 4] c a "negative" M).
  const int64_t huge = int64_t(1) << 40;
  check_refusals({
      {"negative x dim", [] { bind_layer_norm(spec({3, -17}), std::nullopt, std::nullopt, spec({3, -17}), std::nullopt,
                                              std::nullopt, 0, 1e-5); },
       {"layer_norm: x has a negative size -17 in dim 1 of shape [3, -17]"}},
      {"negative residual dims",
       [] { bind_rms_norm(spec({3, 17}), std::nullopt, spec({3, 17}), spec({-1, -3}), -1, 1e-5); },
       {"rms_norm: rstd has a negative size -1"}},
      {"negative mean dims",
       [] {
         bind_layer_norm_vjp(spec({3, 17}), spec({3, 17}), std::nullopt, spec({-3, -1}), spec({3}), spec({3, 17}),
                             std::nullopt, std::nullopt, -1);
       },
       {"layer_norm_vjp: mean has a negative size"}},
      {"overflowing x", [&] { bind_rms_norm(spec({huge, huge}), std::nullopt, spec({huge, huge}), std::nullopt, -1, 1e-5); },
       {"rms_norm: x of shape", "more than 2^63 elements"}},
      {"negative M", [] { bind_matmul(spec({-4, 8}), spec({8, 4}), std::nullopt, spec({-4, 4}), false, false, 1.0); },
       {"matmul: a has a negative size -4"}},
      {"negative bias", [] { bind_matmul(spec({4, 8}), spec({8, 4}), spec({-4}), spec({4, 4}), false, false, 1.0); },
       {"matmul: bias has a negative size"}},
  });
}

TEST_CASE("bad input: the op objects (select, validate, interpret, resolve_config)", "[bad-input][op]") {
  const Op &op = layer_norm_op();
  const BoundArgs args = bind_layer_norm(spec({4, 8}), std::nullopt, std::nullopt, spec({4, 8}), std::nullopt,
                                         std::nullopt, -1, 1e-5);
  auto edited = [&](auto edit) {
    BoundArgs b = args;
    edit(b);
    return b;
  };
  const BoundArgs noAxis = edited([](BoundArgs &b) { b.attributes.erase("axis"); });
  const BoundArgs wordAxis = edited([](BoundArgs &b) { b.attributes["axis"] = "one"; });
  const BoundArgs stray = edited([](BoundArgs &b) { b.attributes["bogus"] = "1"; });
  const BoundArgs short4 = edited([](BoundArgs &b) { b.args.resize(4); });
  const BoundArgs rms = bind_rms_norm(spec({4, 8}), std::nullopt, spec({4, 8}), std::nullopt, -1, 1e-5);
  Arena x, y;
  const TensorView one[] = {x.view(F32, {4, 8})};
  const TensorView in[] = {x.view(F32, {4, 8}), TensorView(), TensorView()};
  const TensorView out[] = {y.view(F32, {4, 8}), TensorView(), TensorView()};
  const TensorView wrongOut[] = {y.view(F32, {8, 4}), TensorView(), TensorView()};
  const TensorView straySlot[] = {y.view(F32, {4, 8}), y.view(F32, {4}), TensorView()};
  const Implementation &reference = op.implementation("reference");
  check_refusals({
      {"another op's arguments", [&] { op.select(rms, std::nullopt, "sm_90a"); }, {"bound for op \"rms_norm\""}},
      {"missing attribute", [&] { op.validate(noAxis); }, {"missing attribute \"axis\""}},
      {"attribute not an integer", [&] { op.validate(wordAxis); }, {"attribute \"axis\" must be an integer, got \"one\""}},
      {"unknown attribute", [&] { op.validate(stray); }, {"unknown attribute \"bogus\""}},
      {"too few arguments", [&] { op.validate(short4); }, {"expected 6 arguments"}},
      {"unknown implementation", [&] { op.implementation("hopper"); }, {"unknown implementation \"hopper\"", "tile, reference"}},
      {"one view for six arguments", [&] { op.interpret(args, one, {}); }, {"1 tensors for 6 arguments"}},
      {"view of another shape", [&] { op.interpret(args, in, wrongOut); }, {"y is f32 [8, 4] but was bound as f32 [4, 8]"}},
      {"tensor for an absent argument", [&] { op.interpret(args, in, straySlot); }, {"mean is bound as absent"}},
      {"explicit config invalid", [&] { op.resolve_config(reference, args, Config{{"block_rows", 1}}); },
       {"layer_norm: config {\"block_rows\":1} is not valid for implementation \"reference\""}},
      {"matmul without c",
       [] { matmul_op().validate(BoundArgs{"matmul", {spec({4, 8}), spec({8, 4}), std::nullopt}, {}}); },
       {"expected the arguments a, b, bias (optional), c"}},
      {"empty config provider", [] { push_config_provider(nullptr); }, {"push_config_provider: the provider is empty"}},
  });
  // A provider's invalid config is skipped (a stale autotuning file), never an error.
  ConfigProviderScope stale([](const BoundArgs &, const std::string &) { return std::optional<Config>(Config{{"x", 1}}); });
  CHECK(op.resolve_config(reference, args, std::nullopt) == reference.heuristic(args));
}

//===----------------------------------------------------------------------===//
// Matmul.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: matmul_host", "[bad-input][matmul]") {
  Arena a, b, c, bias;
  const TensorView av = a.view(F32, {16, 16}), bv = b.view(F32, {16, 8}), cv = c.view(F32, {16, 8});
  auto withConfig = [](std::string implementation, auto edit) {
    MatmulOptions o;
    o.implementation = std::move(implementation);
    MatmulConfig config = default_config(MatmulSpec{16, 8, 16, F32, F32});
    edit(config);
    o.config = config;
    return o;
  };
  MatmulOptions nullBias;
  nullBias.bias = null_view(F32, {8});
  check_refusals({
      {"null b", [&] { matmul_host(av, null_view(F32, {16, 8}), cv); }, {"matmul: b has no data"}},
      {"strided b", [&] { matmul_host(av, b.strided(F32, {16, 8}), cv); }, {"b must be contiguous"}},
      {"null bias", [&] { matmul_host(av, bv, cv, nullBias); }, {"bias has no data"}},
      {"unknown implementation", [&] { matmul_host(av, bv, cv, {.implementation = "cublas"}); },
       {"unknown implementation \"cublas\"", "hopper, tile, reference"}},
      {"hopper for f32", [&] { matmul_host(av, bv, cv, {.implementation = "hopper"}); }, {"hopper"}, true},
      {"block_m not a power of two", [&] { matmul_host(av, bv, cv, withConfig("tile", [](auto &c) { c.block_m = 48; })); },
       {"block sizes and num_warps must be powers of two"}},
      {"tile block over 256", [&] { matmul_host(av, bv, cv, withConfig("tile", [](auto &c) { c.block_n = 512; })); },
       {"block_m and block_n must be in [16, 256]"}},
      {"a one-slot ring", [&] { matmul_host(av, bv, cv, withConfig("tile", [](auto &c) { c.num_stages = 1; })); },
       {"num_stages must be in [2, 8]"}},
      {"no group", [&] { matmul_host(av, bv, cv, withConfig("tile", [](auto &c) { c.group_m = 0; })); },
       {"group_m must be at least 1, got 0"}},
      {"programs below -1", [&] { matmul_host(av, bv, cv, withConfig("tile", [](auto &c) { c.programs = -5; })); },
       {"programs must be -1 (one per SM), 0 (one per tile) or a count, got -5"}},
  });
  const BoundArgs args = bind_matmul(spec({16, 16}), spec({16, 8}), std::nullopt, spec({16, 8}), false, false, 1.0);
  const Implementation &tile = matmul_op().implementation("tile");
  CHECK_THROWS_WITH(matmul_op().resolve_config(tile, args, Config{{"block_m", 64}}), Catch::Contains("missing \"block_n\""));
}

//===----------------------------------------------------------------------===//
// Softmax.h, Elementwise.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: softmax_host", "[bad-input][softmax]") {
  Arena x(40000), y(40000);
  const TensorView xv = x.view(F32, {4, 8}), yv = y.view(F32, {4, 8});
  auto config = [](int64_t blockRows, int warps) { return SoftmaxOptions{SoftmaxConfig{blockRows, warps}}; };
  check_refusals({
      {"y of another dtype", [&] { softmax_host(xv, y.view(DType::F16, {4, 8})); }, {"softmax: x is f32 but y is f16"}},
      {"y of another shape", [&] { softmax_host(xv, y.view(F32, {8, 4})); }, {"x has shape [4, 8] but y has [8, 4]"}},
      {"strided y", [&] { softmax_host(xv, y.strided(F32, {4, 8})); }, {"y must be contiguous"}},
      {"null y", [&] { softmax_host(xv, null_view(F32, {4, 8})); }, {"y has no data"}},
      {"y on another device", [&] { softmax_host(xv, on_device(yv, 1)); }, {"x is on device 0 but y is on device 1"}},
      {"scalar x", [&] { softmax_host(x.view(F32, {}), y.view(F32, {})); }, {"x must have at least one dimension"}},
      {"i32 x", [&] { softmax_host(x.view(DType::I32, {4, 8}), y.view(DType::I32, {4, 8})); },
       {"x must be bf16, f16, f32 or f64, got i32"}},
      {"rows longer than a program holds", [&] { softmax_host(x.view(F32, {1, 32769}), y.view(F32, {1, 32769})); },
       {"32769", "32768"}, true},
      {"32 warps", [&] { softmax_host(xv, yv, config(1, 32)); }, {"num_warps 32"}},
      {"no rows per program", [&] { softmax_host(xv, yv, config(0, 4)); }, {"block_rows 0 must be a power of two"}},
      {"absurd rows per program", [&] { softmax_host(xv, yv, config(int64_t(1) << 40, 4)); },
       {"block_rows 1099511627776", "65536 elements"}},
  });
}

TEST_CASE("bad input: copy_host / vector_add_host / gelu_host", "[bad-input][elementwise]") {
  Arena x, y, out;
  const TensorView xv = x.view(F32, {8}), ov = out.view(F32, {8});
  check_refusals({
      {"i32 gelu", [&] { gelu_host(x.view(DType::I32, {8}), out.view(DType::I32, {8})); },
       {"gelu: x must be bf16, f16, f32 or f64, got i32"}},
      {"y of another shape", [&] { vector_add_host(xv, y.view(F32, {4}), ov); }, {"vector_add: y has shape [4] but out has [8]"}},
      {"y of another dtype", [&] { vector_add_host(xv, y.view(DType::F16, {8}), ov); }, {"vector_add: y is f16 but out is f32"}},
      {"strided out", [&] { copy_host(x.view(F32, {2, 4}), out.strided(F32, {2, 4})); }, {"copy: out must be contiguous"}},
      {"null x", [&] { copy_host(null_view(F32, {8}), ov); }, {"copy: x has no data"}},
      {"out on another device", [&] { gelu_host(xv, on_device(ov, 1)); }, {"gelu: x is on device 0 but out is on device 1"}},
  });
  CHECK_NOTHROW(vector_add_host(null_view(F32, {0, 3}), null_view(F32, {0, 3}), null_view(F32, {0, 3})));
}

//===----------------------------------------------------------------------===//
// Attention.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: dot_product_attention_host / _vjp_host", "[bad-input][attention]") {
  // q [1, 4, 2, 32], k and v [1, 5, 1, 32] (GQA), out like q, lse [1, 2, 4].
  Arena q, k, v, o, l, d, dq, dk, dv, mask;
  const TensorView qv = q.view(F32, {1, 4, 2, 32}), kv = k.view(F32, {1, 5, 1, 32}), vv = v.view(F32, {1, 5, 1, 32});
  const TensorView ov = o.view(F32, {1, 4, 2, 32}), lse = l.view(F32, {1, 2, 4}), dout = d.view(F32, {1, 4, 2, 32});
  const TensorView dqv = dq.view(F32, {1, 4, 2, 32}), dkv = dk.view(F32, {1, 5, 1, 32}), dvv = dv.view(F32, {1, 5, 1, 32});
  const TensorView intMask = mask.view(DType::I8, {1, 1, 4, 5}), dbias = mask.view(F32, {1, 2, 4, 5});
  AttentionOptions badConfig{.implementation = "chunked", .config = Config{{"block_q", 16}}};
  check_refusals({
      {"null q", [&] { dot_product_attention_host(null_view(F32, {1, 4, 2, 32}), kv, vv, ov); }, {"q has no data"}},
      {"strided k", [&] { dot_product_attention_host(qv, k.strided(F32, {1, 5, 1, 32}), vv, ov); }, {"k must be contiguous"}},
      {"out of another dtype", [&] { dot_product_attention_host(qv, kv, vv, o.view(DType::BF16, {1, 4, 2, 32})); }, {"out"}},
      {"lse of another shape",
       [&] {
         TensorView wrong = l.view(F32, {1, 4, 2});
         dot_product_attention_host(qv, kv, vv, ov, {}, &wrong);
       },
       {"lse"}},
      {"i8 mask", [&] { dot_product_attention_host(qv, kv, vv, ov, {.mask = &intMask}); }, {"mask must be bool"}},
      {"NaN scale", [&] { dot_product_attention_host(qv, kv, vv, ov, {.scale = NAN}); }, {"scale must be finite"}},
      {"infinite soft cap", [&] { dot_product_attention_host(qv, kv, vv, ov, {.logits_soft_cap = INFINITY}); },
       {"logits_soft_cap must be positive and finite"}},
      {"config missing keys", [&] { dot_product_attention_host(qv, kv, vv, ov, badConfig); },
       {"is not valid for implementation \"chunked\"", "missing \"block_kv\""}},
      {"null dq", [&] { dot_product_attention_vjp_host(dout, qv, kv, vv, ov, lse, null_view(F32, {1, 4, 2, 32}), dkv, dvv); },
       {"dq has no data"}},
      {"dbias without bias", [&] { dot_product_attention_vjp_host(dout, qv, kv, vv, ov, lse, dqv, dkv, dvv, {}, &dbias); },
       {"dbias needs the forward's bias"}},
      // Hand-built specs (tools, JSON): negative dims and overflowing counts.
      {"negative query length in a spec", [&] {
         const ArgSpec q{{1, -4, 2, 32}, F32}, k{{1, 5, 2, 32}, F32};
         bind_attention({q, k, k, {}, {}, {}, {}, q, attention_lse_spec(k)});
       }, {"q has a negative size -4 in dim 1"}},
      {"overflowing batch in a spec", [&] {
         const ArgSpec q{{int64_t(1) << 40, int64_t(1) << 30, 1, 4, 2, 32}, F32};
         bind_attention_vjp({q, q, q, q, q, attention_lse_spec(q), {}, {}, {}, {}, q, q, q, {}});
       }, {"more than 2^63 elements"}},
  });
}

//===----------------------------------------------------------------------===//
// Function.h (Tracer, Function, grad, the glue ops)
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: Function::trace and the Tracer", "[bad-input][function]") {
  auto traceOne = [](ArgSpec input, std::function<Sym(Tracer &, Sym)> body) {
    return Function::trace({std::move(input)}, [&](Tracer &t, std::span<const Sym> in) {
      return std::vector<Sym>{body(t, in[0])};
    });
  };
  check_refusals({
      {"a Sym of no function", [&] { traceOne(spec({4}), [](Tracer &t, Sym) { return t.sum(Sym{99}); }); },
       {"Sym 99 is not a value of this function"}},
      {"returning a stranger", [&] { traceOne(spec({4}), [](Tracer &, Sym) { return Sym{-1}; }); },
       {"returned a value that is not of this function"}},
      {"norm axis out of range", [&] { traceOne(spec({4, 8}), [](Tracer &t, Sym x) { return t.rms_norm(x, {}, 5); }); },
       {"axis 5 is out of range"}},
      {"unknown implementation",
       [&] { traceOne(spec({4, 8}), [](Tracer &t, Sym x) { return t.layer_norm(x, {}, {}, -1, 1e-5, "cuda"); }); },
       {"unknown implementation \"cuda\""}},
      // Regression: a rank-0 q or v read shape.back() of an empty shape.
      {"scalar q", [&] { traceOne(spec({}), [](Tracer &t, Sym x) { return t.dot_product_attention(x, x, x); }); },
       {"q must be [batch..., seq, heads, head_dim]"}},
      {"add of two shapes",
       [&] { traceOne(spec({4, 8}), [](Tracer &t, Sym x) { return t.add(x, t.sum(x)); }); },
       {"add: a, b and out must have one shape and dtype"}},
      {"sum of integers", [&] { traceOne(spec({4}, DType::I32), [](Tracer &t, Sym x) { return t.sum(x); }); },
       {"sum: x must be a floating-point tensor, got i32"}},
      {"fill from a tensor", [&] { traceOne(spec({4}), [](Tracer &t, Sym x) { return t.fill(x, spec({2})); }); },
       {"fill: g must be an f32 tensor of one element"}},
      {"negative input dim", [&] { traceOne(spec({4, -8}), [](Tracer &t, Sym x) { return t.rms_norm(x); }); },
       {"rms_norm: x has a negative size -8"}},
  });
}

TEST_CASE("bad input: Function::interpret and grad", "[bad-input][function]") {
  const Function loss = Function::trace({spec({4, 8})}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(in[0])};
  });
  Arena x, out;
  const TensorView xv = x.view(F32, {4, 8}), ov = out.view(F32, {1});
  const TensorView twoInputs[] = {xv, xv}, oneInput[] = {xv}, nullInput[] = {null_view(F32, {4, 8})};
  const TensorView wrongInput[] = {x.view(F32, {8, 4})}, outputs[] = {ov};
  const Function vector = Function::trace({spec({4, 8})}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.rms_norm(in[0])};
  });
  check_refusals({
      {"two inputs for one", [&] { loss.interpret(twoInputs, outputs); }, {"expected 1 inputs and 1 outputs, got 2 and 1"}},
      {"input of another shape", [&] { loss.interpret(wrongInput, outputs); },
       {"input 0 has shape/dtype {\"dtype\":\"f32\",\"shape\":[8,4]}"}},
      {"null input", [&] { loss.interpret(nullInput, outputs); }, {"sum: x has no data"}},
      {"no outputs", [&] { loss.interpret(oneInput, {}); }, {"expected 1 inputs and 1 outputs, got 1 and 0"}},
      {"grad of a vector", [&] { grad(vector, {0}); }, {"one output of one element"}},
      {"grad wrt a stranger", [&] { grad(loss, {3}); }, {"wrt index 3 is not an input (the function has 1)"}},
  });
}

TEST_CASE("bad input: the glue ops (sum, add, cast, fill)", "[bad-input][function]") {
  const BoundArgs sum{"sum", {spec({4}), spec({1})}, {}};
  Arena x, out;
  const TensorView one[] = {x.view(F32, {4})}, wrong[] = {x.view(F32, {3})}, none[] = {null_view(F32, {4})};
  const TensorView total[] = {out.view(F32, {1})}, absent[] = {TensorView()};
  check_refusals({
      // Regression: the glue ops ran on whatever views they were given (out of bounds).
      {"one view for two arguments", [&] { sum_op().interpret(sum, one, {}); }, {"sum: 1 tensors for 2 arguments"}},
      {"view of another shape", [&] { sum_op().interpret(sum, wrong, total); }, {"sum: x is f32 [3] but was bound as f32 [4]"}},
      {"null x", [&] { sum_op().interpret(sum, none, total); }, {"sum: x has no data"}},
      {"negative dim", [] { sum_op().validate(BoundArgs{"sum", {spec({-4}), spec({1})}, {}}); },
       {"sum: x has a negative size -4"}},
      {"fill without out", [] { fill_op().validate(BoundArgs{"fill", {std::nullopt, std::nullopt}, {}}); },
       {"fill: out is required"}},
      {"cast of two shapes", [] { cast_op().validate(BoundArgs{"cast", {spec({4}), spec({5})}, {}}); },
       {"cast: x and out must have one shape"}},
      {"fill value not a number",
       [&] { fill_op().interpret(BoundArgs{"fill", {std::nullopt, spec({1})}, {{"value", "one"}}}, absent, total); },
       {"attribute \"value\" must be a number, got \"one\""}},
  });
  // Empty tensors: the sum of nothing is 0 (regression: one element was read from the
  // empty x); add, cast and fill have nothing to write.
  float result = 7;
  const TensorView empty[] = {null_view(F32, {0, 4})}, resultView[] = {host_view(&result, F32, {1})};
  CHECK_NOTHROW(sum_op().interpret(BoundArgs{"sum", {spec({0, 4}), spec({1})}, {}}, empty, resultView));
  CHECK(result == 0.0f);
  const TensorView twoEmpty[] = {null_view(F32, {0, 4}), null_view(F32, {0, 4})};
  CHECK_NOTHROW(add_op().interpret(BoundArgs{"add", {spec({0, 4}), spec({0, 4}), spec({0, 4})}, {}}, twoEmpty, empty));
  CHECK_NOTHROW(cast_op().interpret(BoundArgs{"cast", {spec({0, 4}), spec({0, 4}, DType::BF16)}, {}}, empty,
                                    std::vector<TensorView>{null_view(DType::BF16, {0, 4})}));
}
