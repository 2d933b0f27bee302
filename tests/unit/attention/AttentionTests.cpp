//===- AttentionTests.cpp - dot_product_attention on the interpreter -----===//
//
// Binding (every bad argument named in the Error), the op's argument order and
// attributes, and the numerics of the "tile", "chunked" and "reference" implementations
// on the CPU interpreter (dot_product_attention_host / _vjp_host run the kernels a GPU
// would) against the float64 reference of AttentionReference.h: each dtype, each option
// alone and in combinations, GQA / MQA, Hv != H, many query / key blocks (16 x 16
// configs) with whole blocks skipped, rows that see no key (exact zeros, lse = +inf),
// forward and VJP, and bitwise-identical reruns. Shapes stay small (the interpreter runs
// every thread of every program): B * N * T * S * H of a few million at most; these
// tests take ~20 s on one core.
//
//===----------------------------------------------------------------------===//
#include "common/BadInput.h"
#include "unit/attention/AttentionTestCase.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;
using tokamax::bad_input::NamesArgument;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

/// q [2, 17, 4, 32] attending k / v [2, 40, 2, 32] (GQA 2:1) in `d`.
AttentionSpecs goodSpecs(DType d = DType::BF16) {
  AttentionSpecs s{.q = spec({2, 17, 4, 32}, d), .k = spec({2, 40, 2, 32}, d), .v = spec({2, 40, 2, 32}, d),
                   .out = spec({2, 17, 4, 32}, d), .lse = spec({2, 4, 17}, lseDtype(d))};
  return s;
}

AttentionVjpSpecs goodVjpSpecs(DType d = DType::BF16) {
  AttentionSpecs f = goodSpecs(d);
  AttentionVjpSpecs s{.dout = f.out, .q = f.q, .k = f.k, .v = f.v, .out = f.out, .lse = *f.lse,
                      .dq = f.q, .dk = f.k, .dv = f.v};
  return s;
}

/// Each implementation with the dtypes it serves that these tests cover.
const std::vector<ImplDtype> kImplDtypes = {{"tile", DType::BF16},       {"tile", DType::F16},
                                            {"chunked", DType::BF16},    {"chunked", DType::F16},
                                            {"chunked", DType::F32},     {"chunked", DType::F64},
                                            {"reference", DType::F32},   {"reference", DType::F64}};

Case makeCase(const ImplDtype &id, Dims dims) {
  Case c;
  c.implementation = id.implementation;
  c.dtype = id.dtype;
  c.dims = std::move(dims);
  return c;
}

/// B [2], T 17, S 40, N 3, K 1, H = Hv = 32: the shape the option tests share.
const Dims kOptionDims{.batch = {2}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 32, .hv = 32};

} // namespace

TEST_CASE("attention: binding names the argument that does not fit", "[attention]") {
  auto bindWith = [](auto edit, AttentionOptions options = {}) {
    AttentionSpecs s = goodSpecs();
    edit(s);
    return errorOf([&] { bind_attention(s, options); });
  };
  auto none = [](AttentionSpecs &) {};
  CHECK_NOTHROW(bind_attention(goodSpecs()));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.k.shape = {2, 40, 3, 32}, s.v.shape = {2, 40, 3, 32}; }),
             NamesArgument("k") || NamesArgument("q"));  // N % K != 0
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.k.shape = {2, 40, 2, 64}; }), NamesArgument("k"));  // H
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.k.shape = {3, 40, 2, 32}; }), NamesArgument("k"));  // batch
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.k.dtype = DType::F16; }), NamesArgument("k"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.v.shape = {2, 39, 2, 32}; }), NamesArgument("v"));  // S
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.v.shape = {2, 40, 1, 32}; }), NamesArgument("v"));  // K
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.q.shape = {2, 17, 4}; }), NamesArgument("q"));      // rank
  CHECK_THAT(bindWith([](AttentionSpecs &s) {
               s.q.shape = {2, 17, 4, 512}, s.k.shape = {2, 40, 2, 512}, s.out.shape = {2, 17, 4, 32};
             }),
             Catch::Contains("256"));  // H > kAttentionMaxHeadDim
  // bias: broadcastable to [B..., N, T, S] (each dim 1 or full), q's dtype or f32.
  for (std::vector<int64_t> ok : {std::vector<int64_t>{2, 4, 17, 40}, {1, 4, 17, 40}, {2, 1, 1, 40}, {1, 1, 17, 1}})
    CHECK(bindWith([&](AttentionSpecs &s) { s.bias = spec(ok, DType::F32); }) == "<no error>");
  for (std::vector<int64_t> bad : {std::vector<int64_t>{2, 4, 17, 39}, {2, 4, 2, 40}, {2, 3, 17, 40}, {3, 4, 17, 40}})
    CHECK_THAT(bindWith([&](AttentionSpecs &s) { s.bias = spec(bad, DType::BF16); }), NamesArgument("bias"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.bias = spec({2, 4, 17, 40}, DType::F16); }), NamesArgument("bias"));
  // mask: bool, broadcastable.
  CHECK(bindWith([](AttentionSpecs &s) { s.mask = spec({1, 1, 17, 40}, DType::Bool); }) == "<no error>");
  for (DType notBool : {DType::I8, DType::F32, DType::BF16, DType::I32})
    CHECK_THAT(bindWith([&](AttentionSpecs &s) { s.mask = spec({2, 4, 17, 40}, notBool); }), NamesArgument("mask"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.mask = spec({2, 4, 40, 17}, DType::Bool); }), NamesArgument("mask"));
  // Sequence lengths: int32, one per batch row.
  auto lengths = [&](const char *which, std::vector<int64_t> shape, DType d) {
    return bindWith([&](AttentionSpecs &s) {
      (std::string(which) == "q_seq_lengths" ? s.q_seq_lengths : s.kv_seq_lengths) = spec(shape, d);
    });
  };
  CHECK(lengths("q_seq_lengths", {2}, DType::I32) == "<no error>");
  CHECK(lengths("kv_seq_lengths", {2}, DType::I32) == "<no error>");
  CHECK_THAT(lengths("q_seq_lengths", {3}, DType::I32), NamesArgument("q_seq_lengths"));
  CHECK_THAT(lengths("q_seq_lengths", {2}, DType::I64), NamesArgument("q_seq_lengths"));
  CHECK_THAT(lengths("kv_seq_lengths", {1}, DType::I32), NamesArgument("kv_seq_lengths"));
  CHECK_THAT(lengths("kv_seq_lengths", {2}, DType::F32), NamesArgument("kv_seq_lengths"));
  // Window sides >= 0, soft cap > 0.
  CHECK_THAT(bindWith(none, {.local_window = LocalWindow{-1, 3}}), Catch::Contains("window"));
  CHECK_THAT(bindWith(none, {.local_window = LocalWindow{std::nullopt, -2}}), Catch::Contains("window"));
  CHECK(bindWith(none, {.local_window = LocalWindow{0, 0}}) == "<no error>");
  CHECK_THAT(bindWith(none, {.logits_soft_cap = 0.0}), Catch::Contains("cap"));
  // Outputs.
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.out.shape = {2, 17, 4, 16}; }), NamesArgument("out"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.out.shape = {2, 17, 2, 32}; }), NamesArgument("out"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.lse = spec({2, 17, 4}, DType::F32); }), NamesArgument("lse"));
  CHECK_THAT(bindWith([](AttentionSpecs &s) { s.lse = spec({2, 4, 17}, DType::BF16); }), NamesArgument("lse"));

  // The VJP's own arguments.
  auto bindVjpWith = [](auto edit) {
    AttentionVjpSpecs s = goodVjpSpecs();
    edit(s);
    return errorOf([&] { bind_attention_vjp(s); });
  };
  CHECK_NOTHROW(bind_attention_vjp(goodVjpSpecs()));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) { s.dout.shape = {2, 17, 4, 16}; }), NamesArgument("dout"));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) { s.dq.shape = {2, 17, 4, 16}; }), NamesArgument("dq"));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) { s.dk.shape = {2, 40, 4, 32}; }), NamesArgument("dk"));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) { s.dv.shape = {2, 39, 2, 32}; }), NamesArgument("dv"));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) { s.lse = spec({2, 4, 16}, DType::F32); }), NamesArgument("lse"));
  CHECK_THAT(bindVjpWith([](AttentionVjpSpecs &s) {
               s.bias = spec({1, 4, 17, 40}, DType::BF16);
               s.dbias = spec({2, 4, 17, 40}, DType::BF16);
             }),
             NamesArgument("dbias"));
  CHECK(bindVjpWith([](AttentionVjpSpecs &s) { s.bias = s.dbias = spec({1, 4, 1, 40}, DType::F32); }) == "<no error>");
}

TEST_CASE("attention: entry points check views and implementations", "[attention]") {
  const Dims d{.batch = {1}, .t = 4, .s = 5, .n = 2, .k = 1, .h = 32, .hv = 32};
  Case c = makeCase({"chunked", DType::BF16}, d);
  CaseData data = makeData(c);
  HostBuffer out(DType::BF16, d.outShape()), badOut(DType::BF16, {1, 4, 2, 16}), lse(DType::F32, d.lseShape());
  TensorView q = data.q.view(), k = data.k.view(), v = data.v.view();
  TensorView o = out.view(), bo = badOut.view(), l = lse.view();
  CHECK_THAT(errorOf([&] { dot_product_attention_host(q, k, v, bo); }), NamesArgument("out"));
  // "hopper" asked for a call it cannot serve (f32) is NotSupported with the reason
  // (AttentionHopperTests.cpp covers what it serves).
  CHECK_THROWS_AS(attention_op().select(bind_attention(goodSpecs(DType::F32)), "hopper", "sm_90a"), NotSupported);
  BoundArgs args = bind_attention(goodSpecs());
  // "tile" serves bf16 / f16 only.
  CHECK_THROWS_AS(attention_op().select(bind_attention(goodSpecs(DType::F32)), "tile", "sm_90a"), NotSupported);
  CHECK_THROWS_AS(dot_product_attention_host(q, k, v, o, {.implementation = "no-such-implementation"}), Error);
  // Auto on sm_90a: hopper for 16-bit inputs (any S: S 40 here), chunked for f32 / f64.
  CHECK(attention_op().select(args, std::nullopt, "sm_90a").name() == "hopper");
  CHECK(attention_op().select(bind_attention(goodSpecs(DType::F32)), std::nullopt, "sm_90a").name() == "chunked");
  CHECK(attention_op().select(bind_attention(goodSpecs(DType::F64)), std::nullopt, "sm_90a").name() == "chunked");
  CHECK_NOTHROW(dot_product_attention_host(q, k, v, o, {}, &l));
}

TEST_CASE("attention: argument order / attributes / the residual's spec", "[attention]") {
  CHECK(attention_op().arg_names() == std::vector<std::string>{"q", "k", "v", "bias", "mask", "q_seq_lengths",
                                                               "kv_seq_lengths", "sinks", "out", "lse"});
  CHECK(attention_op().num_inputs() == 8);
  CHECK(attention_vjp_op().arg_names() ==
        std::vector<std::string>{"dout", "q", "k", "v", "out", "lse", "bias", "mask", "q_seq_lengths",
                                 "kv_seq_lengths", "sinks", "dq", "dk", "dv", "dbias", "dsinks"});
  CHECK(attention_vjp_op().num_inputs() == 11);
  const auto &impls = attention_op().implementations();
  REQUIRE(impls.size() >= 3);
  CHECK(impls[impls.size() - 4]->name() == "hopper");
  CHECK(impls[impls.size() - 3]->name() == "tile");
  CHECK(impls[impls.size() - 2]->name() == "chunked");
  CHECK(impls.back()->name() == "reference");
  CHECK(find_op("attention") == &attention_op());
  CHECK(find_op("attention_vjp") == &attention_vjp_op());

  BoundArgs plain = bind_attention(goodSpecs());
  CHECK(plain.attribute("is_causal") == "0");
  CHECK(plain.float_attribute("scale") == Approx(1 / std::sqrt(32.0)));
  for (const char *absent : {"window_left", "window_right", "logits_soft_cap"})
    CHECK(plain.attributes.count(absent) == 0);
  BoundArgs opts = bind_attention(goodSpecs(), {.scale = 0.25, .is_causal = true,
                                                .local_window = LocalWindow{3, std::nullopt}, .logits_soft_cap = 30.0});
  CHECK(opts.attribute("is_causal") == "1");
  CHECK(opts.float_attribute("scale") == 0.25);
  CHECK(opts.int_attribute("window_left") == 3);
  CHECK(opts.attributes.count("window_right") == 0);
  CHECK(opts.float_attribute("logits_soft_cap") == 30.0);
  CHECK(BoundArgs::from_json(opts.to_json()) == opts);
  CHECK_FALSE(plain.has(3));  // no bias
  CHECK_FALSE(plain.has(7));  // no sinks
  CHECK(plain.has(9));        // lse

  CHECK(attention_lse_spec(spec({2, 17, 4, 32}, DType::BF16)) == spec({2, 4, 17}, DType::F32));
  CHECK(attention_lse_spec(spec({2, 3, 17, 4, 32}, DType::F16)) == spec({2, 3, 4, 17}, DType::F32));
  CHECK(attention_lse_spec(spec({17, 4, 32}, DType::F64)) == spec({4, 17}, DType::F64));
}

TEST_CASE("attention: deterministic is the VJP's attribute, printed only when false", "[attention]") {
  // The default prints nothing: every existing call's JSON (and with it cache, autotuning
  // and export keys) stays as it was.
  const BoundArgs vjp = bind_attention_vjp(goodVjpSpecs());
  CHECK(vjp.attributes.count("deterministic") == 0);
  CHECK(vjp.to_json().find("deterministic") == std::string::npos);
  CHECK(bind_attention_vjp(goodVjpSpecs(), {.deterministic = true}) == vjp);
  const BoundArgs loose = bind_attention_vjp(goodVjpSpecs(), {.deterministic = false});
  CHECK(loose.attribute("deterministic") == "0");
  CHECK(loose.to_json().find(R"("deterministic":"0")") != std::string::npos);
  CHECK(BoundArgs::from_json(loose.to_json()) == loose);
  CHECK_NOTHROW(attention_vjp_op().validate(loose));
  // The forward is deterministic either way: it records nothing and takes no such attribute.
  CHECK(bind_attention(goodSpecs(), {.deterministic = false}) == bind_attention(goodSpecs()));
  BoundArgs forward = bind_attention(goodSpecs());
  forward.attributes["deterministic"] = "0";
  CHECK_THAT(errorOf([&] { attention_op().validate(forward); }),
             Catch::Contains("unknown attribute \"deterministic\""));
  // "1" is the default's, never printed: not canonical.
  BoundArgs one = vjp;
  one.attributes["deterministic"] = "1";
  CHECK_THAT(errorOf([&] { attention_vjp_op().validate(one); }), Catch::Contains("canonical"));
}

TEST_CASE("attention: every implementation and dtype matches float64", "[attention]") {
  const std::vector<Dims> shapes = {
      {.batch = {2}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 64, .hv = 64},    // MQA 3:1
      {.batch = {1}, .t = 40, .s = 17, .n = 4, .k = 2, .h = 32, .hv = 32},    // GQA 4:2, T > S
      {.batch = {}, .t = 1, .s = 40, .n = 3, .k = 1, .h = 32, .hv = 64},      // no batch dims, Hv != H
      {.batch = {2, 2}, .t = 17, .s = 1, .n = 4, .k = 2, .h = 64, .hv = 32},  // two batch dims, one key
      {.batch = {2}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 20, .hv = 12},    // head dims of no block size
  };
  for (const ImplDtype &id : kImplDtypes)
    for (const Dims &d : shapes) {
      Case c = makeCase(id, d);
      DYNAMIC_SECTION(describe(c)) { check(c); }
    }
  // H = 128, tiny.
  for (const ImplDtype &id : {ImplDtype{"tile", DType::BF16}, {"chunked", DType::F32}, {"reference", DType::F64}}) {
    Case c = makeCase(id, {.batch = {1}, .t = 17, .s = 40, .n = 1, .k = 1, .h = 128, .hv = 128});
    DYNAMIC_SECTION(describe(c)) { check(c); }
  }
}

TEST_CASE("attention: each option alone", "[attention]") {
  std::vector<Case> variants;
  auto add = [&](auto edit) {
    Case c;
    c.dims = kOptionDims;
    edit(c);
    variants.push_back(c);
  };
  add([](Case &c) { c.options.scale = 0.5; });
  add([](Case &c) { c.options.is_causal = true; });
  add([](Case &c) { c.options.is_causal = true, c.dims.t = 40, c.dims.s = 17; });  // T > S
  add([](Case &c) { c.options.window = Window{5, 3}; });
  add([](Case &c) { c.options.window = Window{7, std::nullopt}; });
  add([](Case &c) { c.options.window = Window{std::nullopt, 2}; });
  add([](Case &c) { c.options.window = Window{}; });  // both sides unbounded: no window
  add([](Case &c) { c.options.soft_cap = 2.0, c.options.scale = 1.0; });  // logits ~ N(0, sqrt(32)): the cap bites
  add([](Case &c) { c.bias_dims = "bnts"; });
  add([](Case &c) { c.bias_dims = "nts", c.bias_dtype = DType::F32; });
  add([](Case &c) { c.bias_dims = "bs"; });
  // Constant along S, a bias only matters through the soft cap (else its gradient is 0).
  add([](Case &c) { c.bias_dims = "t", c.options.soft_cap = 2.0, c.options.scale = 1.0; });
  add([](Case &c) { c.mask_dims = "bnts"; });
  add([](Case &c) { c.mask_dims = "ts"; });
  add([](Case &c) { c.q_lengths = {17, 9}; });
  add([](Case &c) { c.kv_lengths = {23, 40}; });
  for (const ImplDtype &id : kImplDtypes)
    for (Case c : variants) {
      c.implementation = id.implementation;
      c.dtype = id.dtype;
      DYNAMIC_SECTION(describe(c)) { check(c); }
    }
}

TEST_CASE("attention: many query and key blocks with whole blocks skipped", "[attention]") {
  // 16 x 16 blocks split T = 40 / S = 17 (and the reverse) into several query blocks and
  // key steps with partial last ones; causal, window and lengths leave whole key blocks
  // out of some query blocks and masks cut others at their edges.
  const tokamax::Config small{{"block_q", 16}, {"block_kv", 16}, {"num_warps", 1}};
  std::vector<Case> variants;
  auto add = [&](Dims dims, auto edit) {
    Case c;
    c.dims = dims;
    c.config = small;
    edit(c);
    variants.push_back(c);
  };
  const Dims tallDims{.batch = {2}, .t = 40, .s = 17, .n = 2, .k = 1, .h = 32, .hv = 32};
  const Dims wideDims{.batch = {2}, .t = 17, .s = 40, .n = 4, .k = 2, .h = 64, .hv = 32};
  add(tallDims, [](Case &) {});
  add(wideDims, [](Case &c) { c.options.is_causal = true; });
  add(tallDims, [](Case &c) { c.options.is_causal = true; });
  add(wideDims, [](Case &c) { c.options.window = Window{3, 4}; });
  add(wideDims, [](Case &c) { c.q_lengths = {17, 5}, c.kv_lengths = {15, 33}; });
  add(tallDims, [](Case &c) { c.mask_dims = "bts", c.bias_dims = "nts", c.options.soft_cap = 4.0; });
  for (const ImplDtype &id : kImplDtypes)
    for (Case c : variants) {
      c.implementation = id.implementation;
      c.dtype = id.dtype;
      DYNAMIC_SECTION(describe(c)) { check(c); }
    }
  // The heuristic's blocks over a longer sequence (several 64-key steps).
  for (const char *impl : {"tile", "chunked"}) {
    Case c = makeCase({impl, DType::BF16}, {.batch = {1}, .t = 130, .s = 200, .n = 2, .k = 1, .h = 64, .hv = 64});
    c.options = {.is_causal = true, .window = Window{90, std::nullopt}}, c.kv_lengths = {190};
    DYNAMIC_SECTION(describe(c)) { check(c); }
    c.options = {}, c.kv_lengths = {}, c.bias_dims = "bnts";
    DYNAMIC_SECTION(describe(c)) { check(c); }
  }
}

TEST_CASE("attention: options combined", "[attention]") {
  std::vector<Case> combos;
  Case a = makeCase({"tile", DType::BF16}, {.batch = {2}, .t = 40, .s = 17, .n = 4, .k = 2, .h = 64, .hv = 64});
  a.options = {.scale = 0.3, .is_causal = true, .window = Window{6, std::nullopt}, .soft_cap = 5.0};
  a.bias_dims = "nts", a.bias_dtype = DType::F32;
  combos.push_back(a);
  Case b = makeCase({"chunked", DType::F32}, {.batch = {2}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 32, .hv = 64});
  b.mask_dims = "bts", b.bias_dims = "bnts", b.q_lengths = {12, 17}, b.kv_lengths = {40, 30};
  combos.push_back(b);
  Case c = makeCase({"chunked", DType::F16}, {.batch = {3}, .t = 17, .s = 40, .n = 2, .k = 2, .h = 32, .hv = 32});
  c.options = {.window = Window{2, 9}, .soft_cap = 1.5}, c.kv_lengths = {40, 20, 5}, c.bias_dims = "s";
  combos.push_back(c);
  Case e = makeCase({"reference", DType::F64}, {.batch = {1, 2}, .t = 17, .s = 40, .n = 4, .k = 1, .h = 32, .hv = 32});
  e.options = {.scale = 0.2, .is_causal = true, .soft_cap = 3.0};
  e.mask_dims = "nts", e.bias_dims = "bn", e.q_lengths = {16, 3};
  combos.push_back(e);
  Case f = makeCase({"tile", DType::F16}, {.batch = {2}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 64, .hv = 32});
  f.options = {.window = Window{0, 4}}, f.mask_dims = "bnts", f.bias_dims = "bnts", f.kv_lengths = {11, 40};
  combos.push_back(f);
  for (const Case &combo : combos)
    DYNAMIC_SECTION(describe(combo)) { check(combo); }
}

TEST_CASE("attention: rows that see no key give zeros / +inf lse / no NaN", "[attention]") {
  std::vector<Case> variants;
  for (const char *impl : {"tile", "chunked", "reference"}) {
    const DType d = std::string(impl) == "reference" ? DType::F32 : DType::BF16;
    Case lengths = makeCase({impl, d}, {.batch = {3}, .t = 17, .s = 40, .n = 3, .k = 1, .h = 32, .hv = 32});
    lengths.q_lengths = {5, 0, 17}, lengths.kv_lengths = {40, 40, 0};  // padded rows, an empty batch row, no keys
    variants.push_back(lengths);
    Case maskRow = makeCase({impl, d}, kOptionDims);
    maskRow.mask_dims = "bnts", maskRow.mask_empty_row = true, maskRow.bias_dims = "nts";
    variants.push_back(maskRow);
    Case window = makeCase({impl, d}, {.batch = {1}, .t = 40, .s = 17, .n = 4, .k = 2, .h = 32, .hv = 32});
    window.options.window = Window{0, 0};  // queries 17..39 have no key j = i
    variants.push_back(window);
    Case oneKey = makeCase({impl, d}, {.batch = {2}, .t = 17, .s = 1, .n = 3, .k = 1, .h = 32, .hv = 32});
    oneKey.mask_dims = "bnts";  // a quarter of the rows hide their only key
    variants.push_back(oneKey);
  }
  for (const Case &c : variants)
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      Outputs ref = Reference(c.dims, c.options, data.inputs).run();
      Results got = runOnInterpreter(c, data).results;
      REQUIRE(std::count(ref.row_attends.begin(), ref.row_attends.end(), 0) > 0);
      for (const std::vector<double> *values : {&got.out, &got.lse, &got.dq, &got.dk, &got.dv, &got.dbias})
        CHECK(std::none_of(values->begin(), values->end(), [](double x) { return std::isnan(x); }));
      checkResults(c, ref, got);
    }
}

TEST_CASE("attention: reruns give the same bits", "[attention]") {
  for (const ImplDtype &id : {ImplDtype{"tile", DType::BF16}, {"chunked", DType::BF16}, {"chunked", DType::F32},
                              {"reference", DType::F32}}) {
    // GQA and a bias summed over batch rows and queries: reductions whose order must not vary.
    Case c = makeCase(id, {.batch = {2}, .t = 40, .s = 17, .n = 4, .k = 2, .h = 32, .hv = 32});
    c.bias_dims = "ns", c.bias_dtype = DType::F32, c.options.is_causal = true;
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      InterpreterRun first = runOnInterpreter(c, data), second = runOnInterpreter(c, data);
      REQUIRE(first.bits.size() == 6);
      const char *names[] = {"out", "lse", "dq", "dk", "dv", "dbias"};
      for (size_t i = 0; i < first.bits.size(); ++i) {
        INFO(names[i]);
        CHECK(first.bits[i] == second.bits[i]);
      }
    }
  }
}

TEST_CASE("attention: the hopper VJP's opt-in fused dq (TMA reduce-adds) matches float64 on the interpreter",
          "[attention][hopper]") {
  // dk/dv programs add each step's dS K into an f32 sum (the dq kernel does not run):
  // odd T and S (steps past T and S), GQA (a program walks every head of its group), Hv
  // != H, causal, lengths (an empty batch row, no keys).
  const Config fused{{"block_q", 64}, {"block_kv", 16}, {"num_warps", 4}, {"stages", 2}, {"fused_dq", 1}};
  std::vector<Case> variants;
  auto add = [&](Dims dims, bool causal) {
    Case c = makeCase({"hopper", DType::BF16}, std::move(dims));
    c.options.is_causal = causal;
    c.vjp_config = fused;
    variants.push_back(c);
  };
  add({.batch = {2}, .t = 70, .s = 50, .n = 4, .k = 2, .h = 64, .hv = 64}, false);
  add({.batch = {2}, .t = 70, .s = 50, .n = 4, .k = 2, .h = 64, .hv = 64}, true);
  add({.batch = {2}, .t = 37, .s = 70, .n = 2, .k = 1, .h = 64, .hv = 32}, true);
  add({.batch = {1}, .t = 1, .s = 16, .n = 2, .k = 2, .h = 64, .hv = 64}, false);
  add({.batch = {3}, .t = 40, .s = 33, .n = 2, .k = 1, .h = 64, .hv = 32}, false);
  variants.back().q_lengths = {35, 0, 40}, variants.back().kv_lengths = {33, 20, 0};
  for (const Case &c : variants)
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      Outputs ref = Reference(c.dims, c.options, data.inputs).run();
      InterpreterRun got = runOnInterpreter(c, data);
      checkResults(c, ref, got.results);
      // dk and dv are the unfused kernel's, bit for bit (the step's products unchanged).
      Case unfused = c;
      unfused.vjp_config->set("fused_dq", 0);
      InterpreterRun plain = runOnInterpreter(unfused, data);
      CHECK(got.bits[3] == plain.bits[3]);
      CHECK(got.bits[4] == plain.bits[4]);
    }
}
