//===- AttentionVarlenArgumentTests.cpp - Packed attention's arguments -----===//
//
// Packed variable-length attention's arguments: every bad one (cu_seqlens, max lengths,
// packed shapes, the options packed calls refuse) named before anything runs and nothing
// written; reference's refusal with its reason; the ops' argument lists, binding and JSON
// round trips. The numerics: AttentionVarlenTests.cpp.
//
//===----------------------------------------------------------------------===//
#include "unit/attention/AttentionVarlenTestCase.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <deque>
#include <functional>
#include <string>

using namespace tokamax;
using namespace attention_test;
using namespace varlen_test;

namespace {

/// A valid small packed call (q [10, 2, 16], kv [12, 2, 16], sequences 4 + 6 / 5 + 7)
/// to break one argument of; the outputs start as NaN and stay so when it throws.
struct Setup {
  HostBuffer q{DType::BF16, {10, 2, 16}, randomNormal(320, DType::BF16, 1)};
  HostBuffer k{DType::BF16, {12, 2, 16}, randomNormal(384, DType::BF16, 2)};
  HostBuffer v{DType::BF16, {12, 2, 16}, randomNormal(384, DType::BF16, 3)};
  HostBuffer out{DType::BF16, {10, 2, 16}}, lse{DType::F32, {2, 10}}, dq{DType::BF16, {10, 2, 16}};
  HostBuffer dk{DType::BF16, {12, 2, 16}}, dv{DType::BF16, {12, 2, 16}};
  HostBuffer cu_q = int32s({0, 4, 10}), cu_kv = int32s({0, 5, 12});
  TensorView qv = q.view(), kv = k.view(), vv = v.view(), outv = out.view(), lsev = lse.view();
  TensorView dqv = dq.view(), dkv = dk.view(), dvv = dv.view();
  TensorView cu_qv = cu_q.view(), cu_kvv = cu_kv.view();
  AttentionOptions o{.cu_seqlens_q = &cu_qv, .cu_seqlens_kv = &cu_kvv, .max_seqlen_q = 6, .max_seqlen_kv = 7,
                     .implementation = "chunked"};
  std::deque<HostBuffer> kept;
  std::deque<TensorView> views;

  Setup() = default;
  Setup(const Setup &) = delete;
  /// A view of `b`, kept alive as long as the setup.
  const TensorView *keep(HostBuffer b) {
    kept.push_back(std::move(b));
    views.push_back(kept.back().view());
    return &views.back();
  }
  static bool allNaN(const HostBuffer &b) {
    const std::vector<double> x = b.values();
    return std::all_of(x.begin(), x.end(), [](double e) { return std::isnan(e); });
  }
};

/// The error of the packed forward (vjp: the VJP) with `edit`'s change; checks that
/// nothing was written when it threw.
std::string errorWith(const std::function<void(Setup &)> &edit, bool vjp = false) {
  Setup s;
  edit(s);
  const std::string message = errorOf([&] {
    if (vjp)
      dot_product_attention_vjp_host(s.outv, s.qv, s.kv, s.vv, s.outv, s.lsev, s.dqv, s.dkv, s.dvv, s.o);
    else
      dot_product_attention_host(s.qv, s.kv, s.vv, s.outv, s.o, &s.lsev);
  });
  if (message != "<no error>") {
    INFO(message);
    CHECK((Setup::allNaN(s.out) && Setup::allNaN(s.lse) && Setup::allNaN(s.dq) && Setup::allNaN(s.dk)));
  }
  return message;
}

} // namespace

TEST_CASE("attention varlen: bad arguments are named before anything runs", "[attention][varlen]") {
  using S = Setup &;
  // The setup itself is valid (the VJP of NaN out / lse only runs).
  CHECK(errorWith([](S) {}) == "<no error>");
  // cu_seqlens: int32 [B + 1], both of one length, both or neither.
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(HostBuffer(DType::F32, {3}, {0, 4, 10})); }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(HostBuffer(DType::I64, {3}, {0, 5, 12})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 12, 12}, {1, 4})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({0, 4, 10, 10})); }),
             NamesArgument("cu_seqlens_q") || NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = nullptr; }), NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = nullptr; }), NamesArgument("cu_seqlens_q"));
  // max_seqlen_*: required, >= 1, and (on host tensors) >= every sequence's length.
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q.reset(); }), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv.reset(); }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 0; }), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv = -1; }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 5; }), NamesArgument("max_seqlen_q"));    // a sequence of 6
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv = 6; }), NamesArgument("max_seqlen_kv"));  // one of 7
  // cu_seqlens that decrease, do not start at 0 or do not end at the total.
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({0, 11, 10})), s.o.max_seqlen_q = 20; }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = s.keep(int32s({2, 4, 10})); }), NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 11})); }),
             NamesArgument("cu_seqlens_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_kv = s.keep(int32s({0, 5, 13})), s.o.max_seqlen_kv = 8; }),
             NamesArgument("cu_seqlens_kv"));
  // Not with bias, mask, sequence lengths or the BNTH layout.
  CHECK_THAT(errorWith([](S s) { s.o.bias = s.keep(HostBuffer(DType::F32, {2, 10, 12}, std::vector<double>(240))); }),
             Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.mask = s.keep(HostBuffer(DType::Bool, {10, 12}, std::vector<double>(120, 1))); }),
             Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.q_seq_lengths = s.keep(int32s({4, 6})); }), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.kv_seq_lengths = s.keep(int32s({5, 7})); }), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.layout = AttentionLayout::BNTH; }),
             Catch::Contains("layout") || Catch::Contains("bnth", Catch::CaseSensitive::No));
  // Shapes: q rank 3, out [total_q, N, Hv], lse [N, total_q] f32.
  CHECK_THAT(errorWith([](S s) {
               s.qv = *s.keep(HostBuffer(DType::BF16, {1, 10, 2, 16}, std::vector<double>(320, 0.5)));
             }),
             NamesArgument("q"));
  CHECK_THAT(errorWith([](S s) { s.outv = *s.keep(HostBuffer(DType::BF16, {10, 2, 8})); }), NamesArgument("out"));
  CHECK_THAT(errorWith([](S s) { s.outv = *s.keep(HostBuffer(DType::BF16, {9, 2, 16})); }), NamesArgument("out"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::F32, {10, 2})); }), NamesArgument("lse"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::BF16, {2, 10})); }), NamesArgument("lse"));
  // The VJP checks the same, and its gradients' shapes.
  CHECK(errorWith([](S) {}, true) == "<no error>");
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_kv.reset(); }, true), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorWith([](S s) { s.o.cu_seqlens_q = nullptr; }, true), NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorWith([](S s) { s.o.kv_seq_lengths = s.keep(int32s({5, 7})); }, true), Catch::Contains("packed"));
  CHECK_THAT(errorWith([](S s) { s.o.max_seqlen_q = 5; }, true), NamesArgument("max_seqlen_q"));
  CHECK_THAT(errorWith([](S s) { s.lsev = *s.keep(HostBuffer(DType::F32, {10, 2})); }, true), NamesArgument("lse"));
  CHECK_THAT(errorWith([](S s) { s.dqv = *s.keep(HostBuffer(DType::BF16, {10, 2, 8})); }, true),
             NamesArgument("dq"));
  CHECK_THAT(errorWith([](S s) { s.dkv = *s.keep(HostBuffer(DType::BF16, {10, 2, 16})); }, true),
             NamesArgument("dk"));
  CHECK_THAT(errorWith([](S s) { s.dvv = *s.keep(HostBuffer(DType::BF16, {12, 1, 16})); }, true),
             NamesArgument("dv"));
}

TEST_CASE("attention varlen: reference refuses packed calls", "[attention][varlen]") {
  for (const char *impl : {"reference"})
    for (bool vjp : {false, true}) {
      INFO(impl << (vjp ? " VJP" : " forward"));
      CHECK_THAT(errorWith([&](Setup &s) { s.o.implementation = impl; }, vjp), Catch::Contains("packed"));
    }
  // f32 on "reference" as well (the dtype it would otherwise serve).
  CHECK_THAT(errorWith([](Setup &s) {
               s.qv = *s.keep(HostBuffer(DType::F32, {10, 2, 16}, std::vector<double>(320, 0.5)));
               s.kv = s.vv = *s.keep(HostBuffer(DType::F32, {12, 2, 16}, std::vector<double>(384, 0.5)));
               s.outv = *s.keep(HostBuffer(DType::F32, {10, 2, 16}));
               s.o.implementation = "reference";
             }),
             Catch::Contains("packed"));
}

TEST_CASE("attention varlen: the ops' arguments and binding round-trip through JSON", "[attention][varlen]") {
  CHECK(attention_varlen_op().arg_names() ==
        std::vector<std::string>{"q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "sinks", "out", "lse"});
  CHECK(attention_varlen_op().num_inputs() == 6);
  CHECK(attention_varlen_vjp_op().arg_names() ==
        std::vector<std::string>{"dout", "q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_kv", "sinks",
                                 "dq", "dk", "dv", "dsinks"});
  CHECK(attention_varlen_vjp_op().num_inputs() == 9);
  CHECK(find_op("attention_varlen") == &attention_varlen_op());
  CHECK(find_op("attention_varlen_vjp") == &attention_varlen_vjp_op());

  const ArgSpec q = spec({10, 4, 32}, DType::BF16), kv = spec({12, 2, 32}, DType::BF16),
                cu = spec({3}, DType::I32), sinks = spec({4}, DType::F32), lse = attention_varlen_lse_spec(q);
  CHECK(lse == spec({4, 10}, DType::F32));
  CHECK(attention_varlen_lse_spec(spec({10, 4, 32}, DType::F64)) == spec({4, 10}, DType::F64));
  AttentionOptions o{.is_causal = true, .local_window = LocalWindow{4, std::nullopt}, .logits_soft_cap = 20.0,
                     .max_seqlen_q = 6, .max_seqlen_kv = 7};
  const BoundArgs f = bind_attention_varlen({q, kv, kv, cu, cu, sinks, q, lse}, o);
  const BoundArgs b = bind_attention_varlen_vjp({q, q, kv, kv, q, lse, cu, cu, sinks, q, kv, kv, sinks}, o);
  CHECK(f.op == "attention_varlen");
  CHECK(b.op == "attention_varlen_vjp");
  for (const BoundArgs *bound : {&f, &b}) {
    INFO(bound->to_json());
    CHECK(bound->attributes.at("max_seqlen_q") == "6");
    CHECK(bound->attributes.at("max_seqlen_kv") == "7");
    CHECK(bound->attribute("is_causal") == "1");
    CHECK(bound->attribute("window_left") == "4");
    CHECK(bound->attributes.count("window_right") == 0);
    CHECK(bound->attributes.count("layout") == 0);
    CHECK(bound->attributes.count("logits_soft_cap") == 1);
    CHECK(BoundArgs::from_json(bound->to_json()) == *bound);
  }
  CHECK_NOTHROW(attention_varlen_op().validate(BoundArgs::from_json(f.to_json())));
  CHECK_NOTHROW(attention_varlen_vjp_op().validate(BoundArgs::from_json(b.to_json())));
  BoundArgs missing = f;
  missing.attributes.erase("max_seqlen_q");
  CHECK_THAT(errorOf([&] { attention_varlen_op().validate(missing); }), NamesArgument("max_seqlen_q"));
  // Binding needs max_seqlen_q / _kv, and the specs' cu_seqlens int32 [B + 1].
  AttentionOptions noMax = o;
  noMax.max_seqlen_q.reset();
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, cu, cu, sinks, q, lse}, noMax); }),
             NamesArgument("max_seqlen_q"));
  noMax = o, noMax.max_seqlen_kv.reset();
  const AttentionVarlenVjpSpecs vjpSpecs{q, q, kv, kv, q, lse, cu, cu, sinks, q, kv, kv, sinks};
  CHECK_THAT(errorOf([&] { bind_attention_varlen_vjp(vjpSpecs, noMax); }), NamesArgument("max_seqlen_kv"));
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, spec({3}, DType::I64), cu, sinks, q, lse}, o); }),
             NamesArgument("cu_seqlens_q"));
  CHECK_THAT(errorOf([&] { bind_attention_varlen({q, kv, kv, cu, spec({4}, DType::I32), sinks, q, lse}, o); }),
             NamesArgument("cu_seqlens_kv") || NamesArgument("cu_seqlens_q"));

  // The op run on the interpreter gives the host entry point's bits.
  Packed p = makePacked({"chunked", DType::BF16}, kGqa, Lengths{{4, 6}, {5, 7}});
  p.c.options.is_causal = true, p.c.sinks = true, p.c.vjp = false;
  PackedData pd(p);
  const InterpreterRun host = runPacked(p, pd);
  const Dims &d = p.c.dims;
  HostBuffer out(DType::BF16, d.outShape()), lseOut(DType::F32, d.lseShape());
  const AttentionOptions po = pd.options(p);
  const BoundArgs call = bind_attention_varlen(
      {spec(d.qShape(), DType::BF16), spec(d.kShape(), DType::BF16), spec(d.vShape(), DType::BF16), cu, cu, sinks,
       spec(d.outShape(), DType::BF16), spec(d.lseShape(), DType::F32)},
      po);
  const TensorView in[] = {pd.data.q.view(), pd.data.k.view(), pd.data.v.view(), pd.cu_q_view, pd.cu_kv_view,
                           pd.sinks_view};
  const TensorView outs[] = {out.view(), lseOut.view()};
  attention_varlen_op().interpret(call, in, outs, "chunked");
  CHECK(out.storage == host.bits[0]);
  CHECK(lseOut.storage == host.bits[1]);
}
