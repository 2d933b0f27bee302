//===- AttentionSinksTests.cpp - Learnable attention sinks on the interpreter ===//
//
// sinks (f32 [N]: one more logit per query head in each row's softmax sum, its value row
// zero) and dsinks: binding (every bad argument named), calls bound before sinks existed
// read back from JSON, the float64 reference's sink gradient against central differences
// (an independent check of the formula the kernels and the reference implement), then
// every implementation (hopper included: the interpreter runs its kernels) against that
// reference, forward and VJP: T 1, S past the blocks, GQA, causal, windows, lengths,
// bias with a soft cap, rows that see no key (lse = the sink), huge and -inf sinks,
// bitwise reruns, the kernels of calls without sinks unchanged, and grad of a Function.
//
//===----------------------------------------------------------------------===//
#include "unit/attention/AttentionTestCase.h"
#include "common/HopperPtxChecks.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

/// q [2, 17, 4, 32] attending k / v [2, 40, 2, 32] (GQA 2:1), sinks f32 [4].
AttentionSpecs sinkSpecs(DType d = DType::BF16) {
  return AttentionSpecs{.q = spec({2, 17, 4, 32}, d), .k = spec({2, 40, 2, 32}, d), .v = spec({2, 40, 2, 32}, d),
                        .out = spec({2, 17, 4, 32}, d), .lse = spec({2, 4, 17}, lseDtype(d)),
                        .sinks = spec({4}, DType::F32)};
}

AttentionVjpSpecs sinkVjpSpecs(DType d = DType::BF16) {
  AttentionSpecs f = sinkSpecs(d);
  return AttentionVjpSpecs{.dout = f.out, .q = f.q, .k = f.k, .v = f.v, .out = f.out, .lse = *f.lse,
                           .dq = f.q, .dk = f.k, .dv = f.v, .sinks = f.sinks, .dsinks = f.sinks};
}

Case sinkCase(const char *impl, DType dtype, Dims dims) {
  Case c;
  c.implementation = impl;
  c.dtype = dtype;
  c.dims = std::move(dims);
  c.sinks = true;
  return c;
}

/// Every implementation with the dtypes it serves (hopper: small steps, for the
/// interpreter's time; forward and VJP configs).
const std::vector<ImplDtype> kImplDtypes = {{"hopper", DType::BF16},  {"tile", DType::BF16},
                                            {"tile", DType::F16},     {"chunked", DType::BF16},
                                            {"chunked", DType::F32},  {"chunked", DType::F64},
                                            {"reference", DType::F32}, {"reference", DType::F64}};

Case sinkImplCase(const ImplDtype &id, Dims dims) {
  Case c = implCase(id, std::move(dims));
  c.sinks = true;
  return c;
}

} // namespace

TEST_CASE("attention sinks: binding names sinks and dsinks", "[attention][sinks]") {
  CHECK_NOTHROW(bind_attention(sinkSpecs()));
  CHECK_NOTHROW(bind_attention(sinkSpecs(DType::F64)));  // f32 sinks whatever q's dtype
  CHECK_NOTHROW(bind_attention_vjp(sinkVjpSpecs()));
  auto forward = [](auto edit) {
    AttentionSpecs s = sinkSpecs();
    edit(s);
    return errorOf([&] { bind_attention(s); });
  };
  auto vjp = [](auto edit) {
    AttentionVjpSpecs s = sinkVjpSpecs();
    edit(s);
    return errorOf([&] { bind_attention_vjp(s); });
  };
  for (DType d : {DType::BF16, DType::F16, DType::F64, DType::I32})
    CHECK_THAT(forward([&](AttentionSpecs &s) { s.sinks->dtype = d; }), Catch::Contains("sinks must be f32 [4]"));
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2}, {5}, {1, 4}, {2, 4}, {}})
    CHECK_THAT(forward([&](AttentionSpecs &s) { s.sinks->shape = shape; }), Catch::Contains("sinks must be f32 [4]"));
  CHECK_THAT(vjp([](AttentionVjpSpecs &s) { s.sinks->shape = {2}; }), Catch::Contains("sinks must be f32 [4]"));
  CHECK_THAT(vjp([](AttentionVjpSpecs &s) { s.sinks.reset(); }), Catch::Contains("dsinks needs the forward's sinks"));
  CHECK_THAT(vjp([](AttentionVjpSpecs &s) { s.dsinks->dtype = DType::BF16; }),
             Catch::Contains("dsinks must be f32 [4]"));
  CHECK_THAT(vjp([](AttentionVjpSpecs &s) { s.dsinks->shape = {4, 1}; }), Catch::Contains("dsinks must be f32 [4]"));
  CHECK(vjp([](AttentionVjpSpecs &s) { s.dsinks.reset(); }) == "<no error>");  // sinks, no dsinks wanted

  // The arguments' places: sinks after kv_seq_lengths, dsinks last.
  BoundArgs f = bind_attention(sinkSpecs()), b = bind_attention_vjp(sinkVjpSpecs());
  CHECK(attention_op().arg_names()[7] == "sinks");
  CHECK(f.has(7));
  CHECK(attention_vjp_op().arg_names()[10] == "sinks");
  CHECK(attention_vjp_op().arg_names()[15] == "dsinks");
  CHECK((b.has(10) && b.has(15)));
  CHECK_NOTHROW(attention_op().validate(f));
  CHECK_NOTHROW(attention_vjp_op().validate(b));
  CHECK(BoundArgs::from_json(f.to_json()) == f);
  CHECK(BoundArgs::from_json(b.to_json()) == b);

  // The host entry points name a bad view too.
  HostBuffer q(DType::BF16, {1, 3, 2, 16}, std::vector<double>(96, 0.5)), out(DType::BF16, {1, 3, 2, 16});
  HostBuffer wrong(DType::BF16, {2}, {0.0, 0.0});
  TensorView wrongView = wrong.view();
  CHECK_THAT(errorOf([&] {
               dot_product_attention_host(q.view(), q.view(), q.view(), out.view(), {.sinks = &wrongView});
             }),
             Catch::Contains("sinks must be f32 [2]"));
}

TEST_CASE("attention sinks: calls bound before sinks existed read back from JSON without them",
          "[attention][sinks][function]") {
  // An autotuning result or a Function saved before: attention with 9 arguments (no
  // sinks between kv_seq_lengths and out), attention_vjp with 14 (no sinks, no dsinks).
  AttentionSpecs specs = sinkSpecs();
  specs.sinks.reset();
  const BoundArgs now = bind_attention(specs, {.is_causal = true});
  BoundArgs old = now;
  old.args.erase(old.args.begin() + 7);
  REQUIRE(old.args.size() == 9u);
  CHECK(BoundArgs::from_json(old.to_json()) == now);
  AttentionVjpSpecs vspecs = sinkVjpSpecs();
  vspecs.sinks.reset(), vspecs.dsinks.reset();
  const BoundArgs vnow = bind_attention_vjp(vspecs);
  BoundArgs vold = vnow;
  vold.args.erase(vold.args.begin() + 15);
  vold.args.erase(vold.args.begin() + 10);
  REQUIRE(vold.args.size() == 14u);
  CHECK(BoundArgs::from_json(vold.to_json()) == vnow);

  // A Function's JSON with the old slots reads back as the same Function.
  std::vector<ArgSpec> in{spec({1, 6, 2, 16}, DType::F32)};
  Function traced = grad(Function::trace(in,
                                         [](Tracer &t, std::span<const Sym> x) {
                                           return std::vector<Sym>{
                                               t.sum(t.dot_product_attention(x[0], x[0], x[0]))};
                                         }),
                         {0});
  std::string text = traced.to_json();
  nlohmann::json j = nlohmann::json::parse(text);
  for (nlohmann::json &call : j["calls"]) {
    const std::string op = call["args"]["op"];
    auto drop = [&](size_t at) {
      call["args"]["args"].erase(at);
      call["slots"].erase(at);
    };
    if (op == "attention")
      drop(7);
    if (op == "attention_vjp")
      drop(15), drop(10);
  }
  Function back = Function::from_json(j.dump());
  CHECK(back.to_json() == text);
}

TEST_CASE("attention sinks: the float64 reference's gradients match central differences", "[attention][sinks]") {
  // The analytic dsinks (-sum exp(sink - lse) delta) and dq with sinks, against central
  // differences of loss = sum(dout * out) through the float64 forward alone. Rows that
  // see no key (kv length 0) and padding rows (q length 3) are in it.
  const Dims d{.batch = {2}, .t = 5, .s = 7, .n = 4, .k = 2, .h = 8, .hv = 8};
  Options options;
  options.is_causal = true;
  Case c = sinkCase("reference", DType::F64, d);
  c.q_lengths = {5, 3}, c.kv_lengths = {7, 0};
  CaseData data = makeData(c);
  Inputs in = data.inputs;
  Outputs ref = Reference(d, options, in).run();
  auto loss = [&](const Inputs &x) {
    Inputs forward = x;
    forward.dout.clear();
    std::vector<double> out = Reference(d, options, forward).run().out;
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i)
      sum += x.dout[i] * out[i];
    return sum;
  };
  const double h = 1e-6;
  auto central = [&](std::vector<double> Inputs::*field, size_t i) {
    Inputs up = in, down = in;
    (up.*field)[i] += h;
    (down.*field)[i] -= h;
    return (loss(up) - loss(down)) / (2 * h);
  };
  REQUIRE(ref.dsinks.size() == 4u);
  for (size_t n = 0; n < 4; ++n) {
    INFO("dsinks[" << n << "] analytic " << ref.dsinks[n]);
    CHECK(ref.dsinks[n] == Approx(central(&Inputs::sinks, n)).margin(1e-8).epsilon(1e-6));
    CHECK(ref.dsinks[n] != 0.0);
  }
  for (size_t i = 0; i < in.q.size(); i += 7) {
    INFO("dq[" << i << "] analytic " << ref.dq[i]);
    CHECK(ref.dq[i] == Approx(central(&Inputs::q, i)).margin(1e-8).epsilon(1e-6));
  }
  for (size_t i = 0; i < in.k.size(); i += 5) {
    INFO("dk[" << i << "] analytic " << ref.dk[i]);
    CHECK(ref.dk[i] == Approx(central(&Inputs::k, i)).margin(1e-8).epsilon(1e-6));
  }
  // The forward's own formula: out = sum_j exp(x_j) v_j / (sum_j exp(x_j) + exp(sink)),
  // lse = log of that denominator; a row that sees no key has lse = the sink, a padding
  // row +inf.
  Inputs noSinks = in;
  noSinks.sinks.clear();
  Outputs plain = Reference(d, options, noSinks).run();
  for (int64_t r = 0; r < int64_t(ref.lse.size()); ++r) {
    const int64_t row = r / (d.n * d.t), n = r / d.t % d.n, t = r % d.t;
    const bool padding = t >= c.q_lengths[row];
    INFO("row " << row << " head " << n << " query " << t);
    if (padding)
      CHECK(ref.lse[r] == kInf);
    else if (plain.lse[r] == kInf)
      CHECK(ref.lse[r] == in.sinks[n]);
    else
      CHECK(ref.lse[r] == Approx(std::log(std::exp(plain.lse[r]) + std::exp(in.sinks[n]))).epsilon(1e-12));
    const double share = padding || plain.lse[r] == kInf ? 0.0 : std::exp(plain.lse[r] - ref.lse[r]);
    const int64_t q = (row * d.t + t) * d.n + n;
    for (int64_t j = 0; j < d.hv; ++j)
      CHECK(ref.out[q * d.hv + j] == Approx(plain.out[q * d.hv + j] * share).margin(1e-14));
  }
}

TEST_CASE("attention sinks: every implementation matches float64, forward and VJP", "[attention][sinks]") {
  const std::vector<Dims> shapes = {
      {.batch = {2}, .t = 17, .s = 40, .n = 4, .k = 2, .h = 32, .hv = 32},  // GQA 2:1, S past the blocks
      {.batch = {}, .t = 1, .s = 40, .n = 3, .k = 1, .h = 32, .hv = 64},    // one query, MQA, Hv != H
      {.batch = {3}, .t = 33, .s = 5, .n = 2, .k = 2, .h = 64, .hv = 64},   // one partial key block
  };
  for (const ImplDtype &id : kImplDtypes)
    for (const Dims &d : shapes) {
      Case c = sinkImplCase(id, d);
      DYNAMIC_SECTION(describe(c)) { check(c); }
    }
}

TEST_CASE("attention sinks: with each option, and rows that see no key", "[attention][sinks]") {
  std::vector<Case> variants;
  auto add = [&](auto edit) {
    Case c = sinkCase("", DType::BF16, {.batch = {2}, .t = 40, .s = 33, .n = 4, .k = 2, .h = 32, .hv = 32});
    edit(c);
    variants.push_back(c);
  };
  add([](Case &c) { c.options.is_causal = true; });
  add([](Case &c) { c.options.window = Window{4, 0}; });
  // Queries past S see no key, the others one key and the sink: dS = P (1 - P) (dout .
  // v), where delta's rounding (out stored in 16 bits) is amplified by 1 / (1 - P): bf16's
  // dq and dk come out at 0.8% rms relative (f32, f64 and f16 within their bounds).
  add([](Case &c) { c.options.window = Window{0, 0}, c.sink_mean = -1.0, c.tolerance_factor = 2; });
  add([](Case &c) { c.bias_dims = "nts", c.options.soft_cap = 3.0, c.options.scale = 1.0; });
  add([](Case &c) { c.mask_dims = "bnts", c.mask_empty_row = true; });
  add([](Case &c) { c.q_lengths = {40, 7}, c.kv_lengths = {0, 20}; });  // a batch row with no key at all
  add([](Case &c) { c.q_lengths = {0, 40}; });                           // every query padding
  for (const ImplDtype &id : kImplDtypes)
    for (Case c : variants) {
      Case made = sinkImplCase(id, c.dims);
      made.options = c.options, made.bias_dims = c.bias_dims, made.mask_dims = c.mask_dims;
      made.mask_empty_row = c.mask_empty_row, made.q_lengths = c.q_lengths, made.kv_lengths = c.kv_lengths;
      made.sink_mean = c.sink_mean, made.tolerance_factor = c.tolerance_factor;
      DYNAMIC_SECTION(describe(made)) {
        CaseData data = makeData(made);
        Outputs ref = Reference(made.dims, made.options, data.inputs).run();
        InterpreterRun got = runOnInterpreter(made, data);
        for (const std::vector<double> *values : {&got.results.out, &got.results.lse, &got.results.dq,
                                                  &got.results.dk, &got.results.dv, &got.results.dsinks})
          CHECK(std::none_of(values->begin(), values->end(), [](double x) { return std::isnan(x); }));
        checkResults(made, ref, got.results, &data.inputs);
      }
    }
}

TEST_CASE("attention sinks: -inf sinks give the call without sinks bit for bit, huge ones no overflow",
          "[attention][sinks]") {
  const Dims d{.batch = {2}, .t = 17, .s = 40, .n = 2, .k = 1, .h = 32, .hv = 32};
  for (const ImplDtype &id : kImplDtypes) {
    Case base = sinkImplCase(id, d);
    base.options.is_causal = true;
    base.kv_lengths = {40, 0};  // rows that see no key: lse +inf without a sink, as with -inf
    DYNAMIC_SECTION(describe(base)) {
      Case none = base, minusInf = base;
      none.sinks = false;
      minusInf.sink_values = {-INFINITY, -INFINITY};
      InterpreterRun a = runOnInterpreter(none, makeData(none)), b = runOnInterpreter(minusInf, makeData(minusInf));
      REQUIRE(b.bits.size() == a.bits.size() + 1);
      const char *names[] = {"out", "lse", "dq", "dk", "dv"};
      for (size_t i = 0; i < a.bits.size(); ++i) {
        INFO(names[i]);
        CHECK(a.bits[i] == b.bits[i]);
      }
      CHECK(b.results.dsinks == std::vector<double>{0.0, 0.0});

      // A sink 200 above every logit: exp2 of the sink against the rows' max would
      // overflow f32; against a max that includes it, out is ~e^-190 of the values (0
      // in 16 bits) and lse is the sink. -200: the rows as without a sink.
      Case huge = base;
      huge.sink_values = {200.0, -200.0};
      CaseData data = makeData(huge);
      InterpreterRun got = runOnInterpreter(huge, data);
      Outputs ref = Reference(huge.dims, huge.options, data.inputs).run();
      for (int64_t r = 0; r < int64_t(ref.lse.size()); ++r) {
        INFO("lse row " << r);
        CHECK(got.results.lse[r] == Approx(ref.lse[r]).epsilon(1e-4));
      }
      for (size_t i = 0; i < got.results.out.size(); ++i) {
        const int64_t n = int64_t(i) / d.hv % d.n;
        INFO("out " << i);
        if (n == 0)
          CHECK(std::abs(got.results.out[i]) < 1e-30);
        else
          CHECK(got.results.out[i] == a.results.out[i]);
      }
      for (double x : got.results.dsinks)
        CHECK(std::isfinite(x));
    }
  }
}

TEST_CASE("attention sinks: reruns give the same bits (dsinks in a fixed order)", "[attention][sinks]") {
  for (const ImplDtype &id : kImplDtypes) {
    // 3 batch rows of 70 queries: dsinks sums 6 partial sums a head.
    Case c = sinkImplCase(id, {.batch = {3}, .t = 70, .s = 17, .n = 2, .k = 1, .h = 32, .hv = 32});
    c.options.is_causal = true;
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      InterpreterRun first = runOnInterpreter(c, data), second = runOnInterpreter(c, data);
      REQUIRE(first.bits.size() == 6u);
      for (size_t i = 0; i < first.bits.size(); ++i) {
        INFO(i);
        CHECK(first.bits[i] == second.bits[i]);
      }
      checkResults(c, Reference(c.dims, c.options, data.inputs).run(), first.results, &data.inputs);
    }
  }
}

TEST_CASE("attention sinks: a kernel variant of the forward and delta only", "[attention][sinks]") {
  // With sinks the forward's kernel (the reference's row statistics) and the VJP's delta
  // are variants named "_sink", and the VJP adds dsinks' reduction; dq, dk, dv and every
  // other kernel are the call's without sinks, IR for IR.
  for (const char *impl : {"hopper", "tile", "chunked", "reference"}) {
    const DType d = std::string(impl) == "reference" ? DType::F32 : DType::BF16;
    AttentionSpecs withSinks = sinkSpecs(d), without = withSinks;
    without.sinks.reset();
    AttentionVjpSpecs vjpWith = sinkVjpSpecs(d), vjpWithout = vjpWith;
    vjpWithout.sinks.reset(), vjpWithout.dsinks.reset();
    for (bool vjp : {false, true}) {
      INFO(impl << (vjp ? " VJP" : " forward"));
      const Op &op = vjp ? attention_vjp_op() : attention_op();
      BoundArgs a = vjp ? bind_attention_vjp(vjpWith) : bind_attention(withSinks);
      BoundArgs b = vjp ? bind_attention_vjp(vjpWithout) : bind_attention(without);
      const Implementation &im = op.implementation(impl);
      // The same configs: sinks change no heuristic or search space.
      REQUIRE(im.heuristic(a) == im.heuristic(b));
      CHECK(im.search_space(a) == im.search_space(b));
      std::vector<dsl::Kernel> ka = im.kernels(a, im.heuristic(a)), kb = im.kernels(b, im.heuristic(b));
      if (vjp) {  // dsinks' reduction, launched after delta
        auto reduce = std::find_if(ka.begin(), ka.end(), [](const dsl::Kernel &k) {
          return k.name().find("attention_dsinks_reduce") == 0;
        });
        REQUIRE(reduce != ka.end());
        CHECK(reduce->name().find("_sink") != std::string::npos);
        ka.erase(reduce);
      }
      REQUIRE(ka.size() == kb.size());
      size_t variants = 0;
      for (size_t i = 0; i < kb.size(); ++i) {
        INFO(kb[i].name());
        const bool variant = ka[i].name() == kb[i].name() + "_sink";
        variants += variant;
        CHECK((variant || ka[i].ir() == kb[i].ir()));
        CHECK((!variant || ka[i].ir() != kb[i].ir()));
      }
      CHECK(variants == 1u);
    }
  }
}

TEST_CASE("attention sinks: grad of a Function carries sinks and gives dsinks", "[attention][sinks][function]") {
  // loss = sum(attention(q, k, v, sinks)), grad wrt q, k, v and sinks against the float64
  // reference's VJP of a cotangent of ones.
  const Dims d{.batch = {2}, .t = 9, .s = 12, .n = 4, .k = 2, .h = 16, .hv = 16};
  for (const char *impl : {"chunked", "reference"}) {
    Case c = sinkCase(impl, DType::F32, d);
    c.options.is_causal = true;
    CaseData data = makeData(c);
    data.inputs.dout.assign(data.inputs.dout.size(), 1.0);
    std::vector<ArgSpec> in{spec(d.qShape(), DType::F32), spec(d.kShape(), DType::F32), spec(d.vShape(), DType::F32),
                            spec({d.n}, DType::F32)};
    Function f = Function::trace(in, [&](Tracer &t, std::span<const Sym> x) {
      AttentionOptions o;
      o.is_causal = true;
      o.implementation = impl;
      return std::vector<Sym>{t.sum(t.dot_product_attention(x[0], x[1], x[2], o, std::nullopt, std::nullopt,
                                                            std::nullopt, std::nullopt, x[3]))};
    });
    Function g = grad(f, {0, 1, 2, 3});
    bool vjpWithSinks = false;
    for (const auto &call : g.calls())
      vjpWithSinks |= call.op->name() == "attention_vjp" && call.args.has(10) && call.args.has(15);
    CHECK(vjpWithSinks);
    HostBuffer dq(DType::F32, d.qShape()), dk(DType::F32, d.kShape()), dv(DType::F32, d.vShape()),
        dsinks(DType::F32, {d.n});
    TensorView args[] = {data.q.view(), data.k.view(), data.v.view(), data.sinks->view()};
    TensorView outs[] = {dq.view(), dk.view(), dv.view(), dsinks.view()};
    g.interpret(args, outs);
    Outputs ref = Reference(d, c.options, data.inputs).run();
    INFO(impl);
    for (auto [name, got, want] : {std::tuple{"dq", dq.values(), ref.dq}, std::tuple{"dk", dk.values(), ref.dk},
                                   std::tuple{"dv", dv.values(), ref.dv},
                                   std::tuple{"dsinks", dsinks.values(), ref.dsinks}}) {
      Comparison cmp = compare(name, got, want, {int64_t(want.size())}, Tolerance{1e-3, 1e-4});
      INFO(cmp.message);
      CHECK(cmp.ok);
    }
  }
}

TEST_CASE("attention sinks: the hopper forward and the VJP's delta and reduction assemble without spills",
          "[attention][sinks][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (auto [h, causal] : {std::pair{64, false}, std::pair{64, true}, std::pair{128, false}, std::pair{128, true}}) {
    const ArgSpec q{{4, 2048, 16, h}, DType::BF16}, sinks{{16}, DType::F32};
    AttentionOptions o;
    o.is_causal = causal;
    BoundArgs f = bind_attention({q, q, q, {}, {}, {}, {}, q, attention_lse_spec(q), sinks}, o);
    const Implementation &hopper = attention_op().implementation("hopper");
    const Config c = hopper.heuristic(f);
    std::vector<dsl::Kernel> kernels = hopper.kernels(f, c);
    REQUIRE(kernels.size() == 1u);
    INFO("H " << h << (causal ? " causal " : " ") << c.to_json() << " " << kernels[0].name());
    const int64_t warps = c.get("num_warps");
    // setmaxnreg where the launch's registers are the consumers' limit: 8 warps, or two
    // programs an SM (the causal head-dim-64 heuristic).
    const bool twoPrograms = c.has("blocks_per_sm") && c.get("blocks_per_sm") == 2;
    test::check_hopper_ptx(test::sm90a_ptx(kernels[0]),
                           {.min_copies = 3, .producer = warps == 8 || twoPrograms, .tensor_maps = 3,
                            .threads = uint32_t(32 * (warps + 4))},
                           ptxas);
  }
  // The VJP's delta with the dsinks partial sums, and their reduction, on both targets.
  const ArgSpec q{{4, 2048, 16, 64}, DType::BF16}, sinks{{16}, DType::F32};
  AttentionVjpSpecs v{q, q, q, q, q, attention_lse_spec(q), {}, {}, {}, {}, q, q, q, {}, sinks, sinks};
  BoundArgs b = bind_attention_vjp(v);
  for (const char *impl : {"hopper", "tile"}) {
    const Implementation &im = attention_vjp_op().implementation(impl);
    for (const dsl::Kernel &kernel : im.kernels(b, im.heuristic(b))) {
      if (kernel.name().find("_sink") == std::string::npos)
        continue;
      for (const char *arch : {"sm_90a", "sm_80"}) {
        INFO(kernel.name() << " " << arch);
        CompileOptions options;
        options.assemble = false;
        options.arch = arch;
        const std::string ptx = compile(kernel, options).ptx;
        CHECK(test::count(ptx, "atom.global") == 0);  // a fixed order: no atomics
        CHECK(test::count(ptx, "red.global") == 0);
        if (!ptxas.empty())
          test::check_assembles_without_spills(ptxas, ptx, arch);
      }
    }
  }
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}
