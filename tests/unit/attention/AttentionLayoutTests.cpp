//===- AttentionLayoutTests.cpp - SDPA's BNTH layout, read in place ---------===//
//
// AttentionOptions::layout = BNTH: q, k, v, out and their gradients as [B..., heads,
// seq, dim]. Binding (shapes read in that layout, each bad one named; the "layout"
// attribute printed only for BNTH, so BTNH calls keep their keys), then every
// implementation on the interpreter (hopper included): the same kernels index the
// tensors through strides, so BNTH's out, lse, dq, dk, dv, dbias and dsinks must equal
// BTNH's bit for bit on the same values, with every option; and grad of a Function.
//
//===----------------------------------------------------------------------===//
#include "unit/attention/AttentionTestCase.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <functional>
#include <span>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType d = DType::BF16) { return ArgSpec{std::move(shape), d}; }

AttentionOptions bnth() {
  AttentionOptions o;
  o.layout = AttentionLayout::BNTH;
  return o;
}

/// q [2, 4, 17, 32] (B N T H) attending k / v [2, 2, 40, 32] (GQA 2:1), BNTH.
AttentionSpecs bnthSpecs() {
  return AttentionSpecs{.q = spec({2, 4, 17, 32}), .k = spec({2, 2, 40, 32}), .v = spec({2, 2, 40, 48}),
                        .out = spec({2, 4, 17, 48}), .lse = spec({2, 4, 17}, DType::F32)};
}

/// Every implementation with a dtype it serves (hopper with small steps, for the
/// interpreter's time).
const std::vector<ImplDtype> kImplDtypes = {{"hopper", DType::BF16}, {"tile", DType::BF16}, {"tile", DType::F16},
                                            {"chunked", DType::F32}, {"reference", DType::F64}};

/// The case run in both layouts: every output the same bits.
void checkSameBits(Case c) {
  CaseData data = makeData(c);
  c.bnth = false;
  InterpreterRun btnh = runOnInterpreter(c, data);
  c.bnth = true;
  InterpreterRun heads = runOnInterpreter(c, data);
  REQUIRE(heads.bits.size() == btnh.bits.size());
  const char *names[] = {"out", "lse", "dq", "dk", "dv", "dbias/dsinks", "dsinks"};
  for (size_t i = 0; i < btnh.bits.size(); ++i) {
    INFO(names[i]);
    CHECK(heads.bits[i] == btnh.bits[i]);
  }
}

} // namespace

TEST_CASE("attention BNTH: binding reads heads before seq and names each bad shape", "[attention][layout]") {
  CHECK_NOTHROW(bind_attention(bnthSpecs(), bnth()));
  CHECK(attention_lse_spec(spec({2, 4, 17, 32}), AttentionLayout::BNTH).shape == std::vector<int64_t>{2, 4, 17});
  CHECK(attention_lse_spec(spec({2, 17, 4, 32})).shape == std::vector<int64_t>{2, 4, 17});
  // The same specs read as BTNH (T 4, N 17 heads against K 40) are refused.
  CHECK_THAT(errorOf([] { bind_attention(bnthSpecs()); }), Catch::Contains("attention:"));
  auto forward = [](auto edit) {
    AttentionSpecs s = bnthSpecs();
    edit(s);
    return errorOf([&] { bind_attention(s, bnth()); });
  };
  CHECK_THAT(forward([](AttentionSpecs &s) { s.out.shape = {2, 17, 4, 48}; }),
             Catch::Contains("out must be bf16 [2, 4, 17, 48]"));
  CHECK_THAT(forward([](AttentionSpecs &s) { s.v.shape = {2, 40, 2, 48}; }),
             Catch::Contains("v must be [2, 2, 40, 48] like k's seq and heads"));
  CHECK_THAT(forward([](AttentionSpecs &s) { s.q.shape = {4, 17}; }),
             Catch::Contains("[batch..., heads, seq, head_dim] (layout BNTH)"));
  CHECK_THAT(forward([](AttentionSpecs &s) { s.lse->shape = {2, 17, 4}; }),
             Catch::Contains("lse must be f32 [2, 4, 17]"));

  // The attribute: "layout": "bnth" on BNTH calls only, forward and VJP; JSON round trip.
  BoundArgs f = bind_attention(bnthSpecs(), bnth());
  CHECK(f.attribute("layout") == "bnth");
  AttentionSpecs plain{.q = spec({2, 17, 4, 32}), .k = spec({2, 40, 2, 32}), .v = spec({2, 40, 2, 48}),
                       .out = spec({2, 17, 4, 48}), .lse = spec({2, 4, 17}, DType::F32)};
  CHECK(bind_attention(plain).attributes.count("layout") == 0);
  CHECK(BoundArgs::from_json(f.to_json()) == f);
  CHECK_NOTHROW(attention_op().validate(f));
  AttentionSpecs s = bnthSpecs();
  BoundArgs b = bind_attention_vjp({.dout = s.out, .q = s.q, .k = s.k, .v = s.v, .out = s.out, .lse = *s.lse,
                                    .dq = s.q, .dk = s.k, .dv = s.v},
                                   bnth());
  CHECK(b.attribute("layout") == "bnth");
  CHECK_NOTHROW(attention_vjp_op().validate(b));
  CHECK_THAT(errorOf([&] {
               bind_attention_vjp({.dout = s.out, .q = s.q, .k = s.k, .v = s.v, .out = s.out, .lse = *s.lse,
                                   .dq = spec({2, 17, 4, 32}), .dk = s.k, .dv = s.v},
                                  bnth());
             }),
             Catch::Contains("dq must be bf16 [2, 4, 17, 32]"));
  // Another value of the attribute (a hand-written JSON) is refused by name.
  std::string text = f.to_json();
  const size_t at = text.find("\"bnth\"");
  REQUIRE(at != std::string::npos);
  text.replace(at, 6, "\"nhtb\"");
  CHECK_THAT(errorOf([&] { attention_op().validate(BoundArgs::from_json(text)); }),
             Catch::Contains("layout must be \"bnth\""));
}

TEST_CASE("attention BNTH: every implementation gives BTNH's bits, forward and VJP", "[attention][layout]") {
  const std::vector<Dims> shapes = {
      {.batch = {2}, .t = 17, .s = 40, .n = 4, .k = 2, .h = 32, .hv = 32},  // GQA 2:1, S past the blocks
      {.batch = {}, .t = 1, .s = 33, .n = 3, .k = 1, .h = 32, .hv = 64},    // one query, MQA, Hv != H
      {.batch = {2, 1}, .t = 40, .s = 24, .n = 2, .k = 2, .h = 64, .hv = 64},  // two batch dims
  };
  for (const ImplDtype &id : kImplDtypes)
    for (const Dims &d : shapes) {
      Case c = implCase(id, d);
      DYNAMIC_SECTION(describe(c)) { checkSameBits(c); }
    }
}

TEST_CASE("attention BNTH: with each option", "[attention][layout]") {
  const Dims d{.batch = {2}, .t = 40, .s = 33, .n = 4, .k = 2, .h = 32, .hv = 32};
  std::vector<std::function<void(Case &)>> edits = {
      [](Case &c) { c.options.is_causal = true; },
      [](Case &c) { c.options.window = Window{4, 0}; },
      [](Case &c) { c.bias_dims = "nts", c.options.soft_cap = 3.0; },
      [](Case &c) { c.mask_dims = "bnts", c.mask_empty_row = true; },
      [](Case &c) { c.q_lengths = {40, 7}, c.kv_lengths = {0, 20}; },
      [](Case &c) { c.sinks = true; },
  };
  for (const ImplDtype &id : kImplDtypes)
    for (const auto &edit : edits) {
      Case c = implCase(id, d);
      edit(c);
      DYNAMIC_SECTION(describe(c)) { checkSameBits(c); }
    }
}

TEST_CASE("attention BNTH: a Function's grad keeps the layout", "[attention][layout][function]") {
  const ArgSpec x{{1, 2, 24, 32}, DType::F32};  // B N T H
  Function f = Function::trace({x, x}, [&](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(t.dot_product_attention(in[0], in[1], in[1], bnth()))};
  });
  Function g = grad(f, {0, 1});
  int vjps = 0;
  for (const Function::Call &call : g.calls())
    if (call.op->name() == "attention_vjp") {
      ++vjps;
      CHECK(call.args.attribute("layout") == "bnth");
    }
  CHECK(vjps == 1);
  CHECK(Function::from_json(g.to_json()).to_json() == g.to_json());
}
