//===- CApiHostTests.cpp - Ops through the C ABI on the interpreter ---------===//
//
// Host tensors (device -1) run on the CPU interpreter through tkx_call_run: each op's
// outputs are bitwise those of its C++ `_host` twin with the same options, and
// layer_norm's also match a float64 reference written from the formula (with
// Tokamax's default epsilon, 1e-6).
//
//===----------------------------------------------------------------------===//
#include "unit/capi/CApiTestUtil.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/PagedAttention.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include <cmath>
#include <cstddef>

using namespace capi_test;
using namespace tokamax;

namespace {

/// Outputs of a call allocated from its inferred specs, with their descriptors.
struct CStatusOutputs {
  std::vector<std::unique_ptr<CTensor>> tensors;
  std::vector<const tkx_tensor *> descs;
  explicit CStatusOutputs(const tkx_call *call) : tensors(outputs_of(call)), descs(capi_test::descs(tensors)) {}
};

/// Runs `call` on `inputs` into outputs it allocates from the inferred specs.
std::vector<std::unique_ptr<CTensor>> runOutputs(const tkx_call *call, const std::vector<const tkx_tensor *> &inputs) {
  auto out = outputs_of(call);
  run_host(call, inputs, descs(out));
  return out;
}

} // namespace

TEST_CASE("capi: layer_norm and its VJP on the interpreter match float64 and the C++ host calls bitwise", "[capi]") {
  const int64_t rows = 3, n = 17;
  CTensor x = CTensor::random(DType::F32, {rows, n}, 1), scale = CTensor::random(DType::F32, {n}, 2, 0.5, 1.5),
         offset = CTensor::random(DType::F32, {n}, 3);
  Call call = make_call("layer_norm", descs({&x, &scale, &offset}));
  CHECK(std::string(tkx_call_json(call.get())).find("\"epsilon\":\"1e-06\"") != std::string::npos);
  REQUIRE(tkx_call_num_outputs(call.get()) == 3);
  auto out = runOutputs(call.get(), descs({&x, &scale, &offset}));
  REQUIRE(out[1]);
  CHECK(out[1]->shape == std::vector<int64_t>{rows});  // mean: x's shape without the axis
  CHECK(out[1]->dtype == DType::F32);

  // float64: y = (x - mean) / sqrt(var + 1e-6) * scale + offset.
  const std::vector<double> xs = x.values(), ss = scale.values(), os = offset.values(), ys = out[0]->values();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j)
      mean += xs[r * n + j] / n;
    for (int64_t j = 0; j < n; ++j)
      var += (xs[r * n + j] - mean) * (xs[r * n + j] - mean) / n;
    for (int64_t j = 0; j < n; ++j) {
      const double want = (xs[r * n + j] - mean) / std::sqrt(var + 1e-6) * ss[j] + os[j];
      CHECK(ys[r * n + j] == Approx(want).epsilon(1e-5).margin(1e-6));
    }
  }

  // The C++ host entry point with its defaults (epsilon 1e-6 too): the same bits.
  CTensor y(DType::F32, {rows, n}), mean(DType::F32, {rows}), rstd(DType::F32, {rows});
  TensorView sv = scale.view(), ov = offset.view(), mv = mean.view(), rv = rstd.view();
  layer_norm_host(x.view(), &sv, &ov, y.view(), {}, &mv, &rv);
  CHECK(out[0]->same_bits(y));
  CHECK(out[1]->same_bits(mean));
  CHECK(out[2]->same_bits(rstd));

  // The VJP from those residuals.
  CTensor dy = CTensor::random(DType::F32, {rows, n}, 4);
  Call vjp = make_call("layer_norm_vjp", descs({&dy, &x, &scale, &mean, &rstd}));
  auto grads = runOutputs(vjp.get(), descs({&dy, &x, &scale, &mean, &rstd}));
  REQUIRE(grads.size() == 3);
  REQUIRE(grads[1]);
  REQUIRE(grads[2]);
  CTensor dx(DType::F32, {rows, n}), dscale(DType::F32, {n}), doffset(DType::F32, {n});
  TensorView dsv = dscale.view(), dov = doffset.view();
  layer_norm_vjp_host(dy.view(), x.view(), &sv, mean.view(), rstd.view(), dx.view(), &dsv, &dov);
  CHECK(grads[0]->same_bits(dx));
  CHECK(grads[1]->same_bits(dscale));
  CHECK(grads[2]->same_bits(doffset));
  // doffset = sum of dy over rows.
  const std::vector<double> dys = dy.values(), dos = grads[2]->values();
  for (int64_t j = 0; j < n; ++j)
    CHECK(dos[j] == Approx(dys[j] + dys[n + j] + dys[2 * n + j]).epsilon(1e-5));
}

TEST_CASE("capi: options reach the op: axis, epsilon, residuals, implementation, config", "[capi]") {
  CTensor x = CTensor::random(DType::BF16, {4, 6, 5}, 5);
  Call call = make_call("rms_norm", descs({&x, nullptr}),
                        R"({"axis": 1, "epsilon": 1e-3, "residuals": false, "implementation": "reference"})");
  CHECK(std::string(tkx_call_json(call.get())).find("\"epsilon\":\"0.001\"") != std::string::npos);
  int32_t dtype = 0, rank = 0;
  REQUIRE(tkx_call_output(call.get(), 1, &dtype, &rank, nullptr) == TKX_OK);
  CHECK(rank == -1);  // no rstd without residuals
  CHECK(dtype == -1);
  auto out = runOutputs(call.get(), descs({&x, nullptr}));
  CTensor y(DType::BF16, {4, 6, 5});
  rms_norm_host(x.view(), nullptr, y.view(), {.axis = 1, .epsilon = 1e-3, .implementation = "reference"});
  CHECK(out[0]->same_bits(y));

  // With residuals: rstd is [4, 5] (x without axis 1); the VJP matches its host twin.
  CTensor scale = CTensor::random(DType::F32, {6}, 6, 0.5, 1.5);
  Call fwd = make_call("rms_norm", descs({&x, &scale}), R"({"axis": 1, "config": null})");
  auto res = runOutputs(fwd.get(), descs({&x, &scale}));
  REQUIRE(res[1]);
  CHECK(res[1]->shape == std::vector<int64_t>{4, 5});
  CTensor dy = CTensor::random(DType::BF16, {4, 6, 5}, 7);
  Call vjp = make_call("rms_norm_vjp", descs({&dy, &x, &scale, res[1].get()}), R"({"axis": 1})");
  auto grads = runOutputs(vjp.get(), descs({&dy, &x, &scale, res[1].get()}));
  CTensor dx(DType::BF16, {4, 6, 5}), dscale(DType::F32, {6});
  TensorView sv = scale.view(), dsv = dscale.view();
  rms_norm_vjp_host(dy.view(), x.view(), &sv, res[1]->view(), dx.view(), &dsv, {.axis = 1});
  CHECK(grads[0]->same_bits(dx));
  CHECK(grads[1]->same_bits(dscale));
}

TEST_CASE("capi: attention and its VJP on the interpreter are bitwise the C++ host calls", "[capi][attention]") {
  // [B, T, N, H] with GQA (N 4, K 2), causal, a window and a soft cap.
  const std::vector<int64_t> qs{2, 9, 4, 16}, ks{2, 11, 2, 16};
  CTensor q = CTensor::random(DType::F32, qs, 11, 0.05, 1.0), k = CTensor::random(DType::F32, ks, 12, 0.05, 1.0),
         v = CTensor::random(DType::F32, ks, 13, 0.05, 1.0);
  const char *options = R"({"is_causal": true, "scale": 0.3, "window_left": 5, "logits_soft_cap": 20.0})";
  auto inputs = descs({&q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr});
  Call call = make_call("attention", inputs, options);
  auto out = runOutputs(call.get(), inputs);
  REQUIRE(out[1]);
  CHECK(out[0]->shape == qs);
  CHECK(out[1]->shape == std::vector<int64_t>{2, 4, 9});

  AttentionOptions o{.scale = 0.3, .is_causal = true, .local_window = LocalWindow{5, std::nullopt},
                     .logits_soft_cap = 20.0};
  CTensor ref(DType::F32, qs), lse(DType::F32, {2, 4, 9});
  TensorView lv = lse.view();
  dot_product_attention_host(q.view(), k.view(), v.view(), ref.view(), o, &lv);
  CHECK(out[0]->same_bits(ref));
  CHECK(out[1]->same_bits(lse));

  CTensor dout = CTensor::random(DType::F32, qs, 14, 0.05, 1.0);
  auto vjpInputs = descs({&dout, &q, &k, &v, &ref, &lse, nullptr, nullptr, nullptr, nullptr, nullptr});
  Call vjp = make_call("attention_vjp", vjpInputs, options);
  auto grads = runOutputs(vjp.get(), vjpInputs);
  REQUIRE(grads.size() == 5);
  CHECK_FALSE(grads[3]);  // no dbias without a bias
  CHECK_FALSE(grads[4]);  // no dsinks without sinks
  CTensor dq(DType::F32, qs), dk(DType::F32, ks), dv(DType::F32, ks);
  dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), v.view(), ref.view(), lse.view(), dq.view(),
                                 dk.view(), dv.view(), o);
  CHECK(grads[0]->same_bits(dq));
  CHECK(grads[1]->same_bits(dk));
  CHECK(grads[2]->same_bits(dv));

  // "deterministic" is the VJP's option: its bound call prints it only when false, and a
  // VJP that is deterministic either way gives the same bits.
  CHECK(std::string(tkx_call_json(vjp.get())).find("deterministic") == std::string::npos);
  const char *loose = R"({"is_causal": true, "scale": 0.3, "window_left": 5, "logits_soft_cap": 20.0,
                          "deterministic": false})";
  Call looseVjp = make_call("attention_vjp", vjpInputs, loose);
  CHECK(std::string(tkx_call_json(looseVjp.get())).find(R"("deterministic":"0")") != std::string::npos);
  auto looseGrads = runOutputs(looseVjp.get(), vjpInputs);
  CHECK(looseGrads[0]->same_bits(dq));
  Call strictVjp = make_call("attention_vjp", vjpInputs,
                             R"({"is_causal": true, "scale": 0.3, "window_left": 5, "logits_soft_cap": 20.0,
                                 "deterministic": true})");
  CHECK(std::string(tkx_call_json(strictVjp.get())) == std::string(tkx_call_json(vjp.get())));

  SECTION("with sinks: the VJP gives dsinks") {
    CTensor sinks = CTensor::random(DType::F32, {4}, 15, 0.05, 1.0);
    auto sinkInputs = descs({&q, &k, &v, nullptr, nullptr, nullptr, nullptr, &sinks});
    Call withSinks = make_call("attention", sinkInputs, options);
    auto sinkOut = runOutputs(withSinks.get(), sinkInputs);
    AttentionOptions so = o;
    TensorView sinksView = sinks.view();
    so.sinks = &sinksView;
    CTensor sinkRef(DType::F32, qs), sinkLse(DType::F32, {2, 4, 9});
    TensorView slv = sinkLse.view();
    dot_product_attention_host(q.view(), k.view(), v.view(), sinkRef.view(), so, &slv);
    CHECK(sinkOut[0]->same_bits(sinkRef));
    CHECK(sinkOut[1]->same_bits(sinkLse));
    CHECK_FALSE(sinkOut[0]->same_bits(ref));  // the sinks take a share of every row
    auto sinkVjpInputs = descs({&dout, &q, &k, &v, &sinkRef, &sinkLse, nullptr, nullptr, nullptr, nullptr, &sinks});
    Call sinkVjp = make_call("attention_vjp", sinkVjpInputs, options);
    auto sinkGrads = runOutputs(sinkVjp.get(), sinkVjpInputs);
    REQUIRE(sinkGrads.size() == 5);
    REQUIRE(sinkGrads[4]);
    CHECK(sinkGrads[4]->shape == std::vector<int64_t>{4});
    CTensor sdq(DType::F32, qs), sdk(DType::F32, ks), sdv(DType::F32, ks), dsinks(DType::F32, {4});
    TensorView dsinksView = dsinks.view();
    dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), v.view(), sinkRef.view(), sinkLse.view(),
                                   sdq.view(), sdk.view(), sdv.view(), so, nullptr, &dsinksView);
    CHECK(sinkGrads[0]->same_bits(sdq));
    CHECK(sinkGrads[4]->same_bits(dsinks));
  }
}

TEST_CASE("capi: packed attention (attention_varlen) and its VJP are bitwise the C++ host calls",
          "[capi][attention][varlen]") {
  // Three sequences (query lengths 3, 0, 6; key lengths 5, 2, 4) packed, GQA, causal
  // (bottom-right), sinks.
  CTensor q = CTensor::random(DType::F32, {9, 4, 16}, 31, 0.05, 1.0), k = CTensor::random(DType::F32, {11, 2, 16}, 32, 0.05, 1.0),
         v = CTensor::random(DType::F32, {11, 2, 16}, 33, 0.05, 1.0), sinks = CTensor::random(DType::F32, {4}, 34, 0.05, 1.0);
  CTensor cuQ = CTensor::of(DType::I32, {4}, {0, 3, 3, 9}), cuKv = CTensor::of(DType::I32, {4}, {0, 5, 7, 11});
  const char *options = R"({"is_causal": true, "max_seqlen_q": 6, "max_seqlen_kv": 5})";
  auto inputs = descs({&q, &k, &v, &cuQ, &cuKv, &sinks});
  Call call = make_call("attention_varlen", inputs, options);
  auto out = runOutputs(call.get(), inputs);
  REQUIRE(out[1]);
  CHECK(out[0]->shape == std::vector<int64_t>{9, 4, 16});
  CHECK(out[1]->shape == std::vector<int64_t>{4, 9});

  TensorView cuQv = cuQ.view(), cuKvv = cuKv.view(), sinksView = sinks.view();
  AttentionOptions o{.is_causal = true, .sinks = &sinksView, .cu_seqlens_q = &cuQv, .cu_seqlens_kv = &cuKvv,
                     .max_seqlen_q = 6, .max_seqlen_kv = 5};
  CTensor ref(DType::F32, {9, 4, 16}), lse(DType::F32, {4, 9});
  TensorView lv = lse.view();
  dot_product_attention_host(q.view(), k.view(), v.view(), ref.view(), o, &lv);
  CHECK(out[0]->same_bits(ref));
  CHECK(out[1]->same_bits(lse));

  CTensor dout = CTensor::random(DType::F32, {9, 4, 16}, 35, 0.05, 1.0);
  auto vjpInputs = descs({&dout, &q, &k, &v, &ref, &lse, &cuQ, &cuKv, &sinks});
  Call vjp = make_call("attention_varlen_vjp", vjpInputs, options);
  auto grads = runOutputs(vjp.get(), vjpInputs);
  REQUIRE(grads.size() == 4);
  REQUIRE(grads[3]);
  CTensor dq(DType::F32, {9, 4, 16}), dk(DType::F32, {11, 2, 16}), dv(DType::F32, {11, 2, 16}), dsinks(DType::F32, {4});
  TensorView dsv = dsinks.view();
  dot_product_attention_vjp_host(dout.view(), q.view(), k.view(), v.view(), ref.view(), lse.view(), dq.view(), dk.view(),
                                 dv.view(), o, nullptr, &dsv);
  CHECK(grads[0]->same_bits(dq));
  CHECK(grads[1]->same_bits(dk));
  CHECK(grads[2]->same_bits(dv));
  CHECK(grads[3]->same_bits(dsinks));

  // cu_seqlens that do not end at the packed rows, checked before a kernel runs on them.
  CTensor shortCu = CTensor::of(DType::I32, {4}, {0, 3, 3, 8});
  auto badInputs = descs({&q, &k, &v, &shortCu, &cuKv, &sinks});
  CStatusOutputs badOut{call.get()};
  CHECK_STATUS(tkx_call_run(call.get(), badInputs.data(), int32_t(badInputs.size()), badOut.descs.data(),
                            int32_t(badOut.descs.size()), nullptr, nullptr, 0),
               TKX_INVALID_ARGUMENT, "attention_varlen: cu_seqlens_q must start at 0 and end at the packed rows (9)");

  // max_seqlen_q is required; it names the option.
  tkx_call *none = nullptr;
  CHECK(tkx_call_create("attention_varlen", inputs.data(), int32_t(inputs.size()), R"({"max_seqlen_kv": 5})", &none) ==
        TKX_INVALID_ARGUMENT);
  CHECK_THAT(std::string(tkx_last_error()), Catch::Contains("max_seqlen_q"));
}

TEST_CASE("capi: gated_linear_unit, ragged_dot and the cross-entropies are bitwise their host twins", "[capi]") {
  SECTION("gated_linear_unit") {
    CTensor x = CTensor::random(DType::F32, {5, 8}, 21, 0.05, 1.0), w = CTensor::random(DType::F32, {8, 2, 6}, 22, 0.05, 1.0);
    Call call = make_call("gated_linear_unit", descs({&x, &w}), R"({"activation": "gelu_tanh"})");
    auto out = runOutputs(call.get(), descs({&x, &w}));
    CTensor ref(DType::F32, {5, 6});
    gated_linear_unit_host(x.view(), w.view(), ref.view(), {.activation = "gelu_tanh"});
    CHECK(out[0]->same_bits(ref));
    REQUIRE(tkx_call_num_outputs(call.get()) == 2);  // preactivations only with "residuals": true
    CHECK(out[1] == nullptr);
    // With the residual pre-activations, and the VJP that reads them.
    Call withH = make_call("gated_linear_unit", descs({&x, &w}), R"({"activation": "gelu_tanh", "residuals": true})");
    auto outH = runOutputs(withH.get(), descs({&x, &w}));
    REQUIRE(outH[1] != nullptr);
    CHECK(outH[1]->shape == std::vector<int64_t>{5, 2, 6});
    CTensor refOut(DType::F32, {5, 6}), refH(DType::F32, {5, 2, 6});
    gated_linear_unit_host(x.view(), w.view(), refOut.view(), refH.view(), {.activation = "gelu_tanh"});
    CHECK(outH[0]->same_bits(refOut));
    CHECK(outH[1]->same_bits(refH));
    CTensor dout = CTensor::random(DType::F32, {5, 6}, 27);
    Call vjp = make_call("gated_linear_unit_vjp", descs({&dout, &x, &w, outH[1].get()}), R"({"activation": "gelu_tanh"})");
    auto grads = runOutputs(vjp.get(), descs({&dout, &x, &w, outH[1].get()}));
    CTensor dx(DType::F32, {5, 8}), dw(DType::F32, {8, 2, 6});
    gated_linear_unit_vjp_host(dout.view(), x.view(), w.view(), refH.view(), dx.view(), dw.view(),
                               {.activation = "gelu_tanh"});
    CHECK(grads[0]->same_bits(dx));
    CHECK(grads[1]->same_bits(dw));
  }
  SECTION("ragged_dot") {
    CTensor lhs = CTensor::random(DType::F32, {7, 8}, 23, 0.05, 1.0), rhs = CTensor::random(DType::F32, {3, 8, 5}, 24),
           groups = CTensor::of(DType::I32, {3}, {2, 0, 5});
    Call call = make_call("ragged_dot", descs({&lhs, &rhs, &groups}));
    auto out = runOutputs(call.get(), descs({&lhs, &rhs, &groups}));
    CTensor ref(DType::F32, {7, 5});
    ragged_dot_host(lhs.view(), rhs.view(), groups.view(), ref.view());
    CHECK(out[0]->same_bits(ref));
  }
  SECTION("linear_softmax_cross_entropy_loss") {
    CTensor x = CTensor::random(DType::F32, {4, 8}, 25, 0.05, 1.0), w = CTensor::random(DType::F32, {8, 10}, 26, 0.05, 1.0),
           labels = CTensor::of(DType::I32, {4}, {1, 9, -100, 3});
    Call call = make_call("linear_softmax_cross_entropy_loss", descs({&x, &w, &labels}), R"({"reduction": "sum"})");
    auto out = runOutputs(call.get(), descs({&x, &w, &labels}));
    CHECK(out[0]->shape == std::vector<int64_t>{1});
    CTensor loss(DType::F32, {1}), lse(DType::F32, {4});
    linear_softmax_cross_entropy_loss_host(x.view(), w.view(), labels.view(), loss.view(), lse.view(),
                                           {.reduction = LossReduction::Sum});
    CHECK(out[0]->same_bits(loss));
    CHECK(out[1]->same_bits(lse));
  }
  SECTION("softmax_cross_entropy") {
    CTensor logits = CTensor::random(DType::F32, {3, 10}, 27), labels = CTensor::of(DType::I32, {3}, {0, 9, 4});
    Call call = make_call("softmax_cross_entropy", descs({&logits, &labels}));
    auto out = runOutputs(call.get(), descs({&logits, &labels}));
    CTensor loss(DType::F32, {3}), lse(DType::F32, {3});
    softmax_cross_entropy_host(logits.view(), labels.view(), loss.view(), lse.view());
    CHECK(out[0]->same_bits(loss));
    CHECK(out[1]->same_bits(lse));
  }
  SECTION("paged_kv_append, then paged_attention") {
    // 2 sequences of 5 and 12 keys on pages of 8 (pages 2 | 0, 1), 4 query heads on 2 kv
    // heads, one new token each: the append writes it in place, the attention reads it.
    CTensor kPages = CTensor::random(DType::F32, {3, 8, 2, 16}, 28);
    CTensor vPages = CTensor::random(DType::F32, {3, 8, 2, 16}, 29);
    CTensor table = CTensor::of(DType::I32, {2, 2}, {2, 0, 0, 1}), lengths = CTensor::of(DType::I32, {2}, {5, 12});
    CTensor k = CTensor::random(DType::F32, {2, 1, 2, 16}, 30), v = CTensor::random(DType::F32, {2, 1, 2, 16}, 31);
    CTensor q = CTensor::random(DType::F32, {2, 1, 4, 16}, 32);
    Call append = make_call("paged_kv_append", descs({&k, &v, &table, &lengths}), R"({"num_pages": 3, "page_size": 8})");
    REQUIRE(tkx_call_num_outputs(append.get()) == 2);
    CTensor kRef = CTensor::random(DType::F32, {3, 8, 2, 16}, 28), vRef = CTensor::random(DType::F32, {3, 8, 2, 16}, 29);
    CHECK(kRef.same_bits(kPages));
    run_host(append.get(), descs({&k, &v, &table, &lengths}), descs({&kPages, &vPages}));
    paged_kv_append_host(k.view(), v.view(), table.view(), lengths.view(), kRef.view(), vRef.view());
    CHECK(kPages.same_bits(kRef));
    CHECK(vPages.same_bits(vRef));
    Call call = make_call("paged_attention", descs({&q, &kPages, &vPages, &table, &lengths}),
                          R"({"lse": true, "logits_soft_cap": 20.0})");
    auto out = runOutputs(call.get(), descs({&q, &kPages, &vPages, &table, &lengths}));
    REQUIRE(out.size() == 2);
    REQUIRE(out[1]);
    CHECK(out[1]->shape == std::vector<int64_t>{2, 4, 1});
    CTensor ref(DType::F32, {2, 1, 4, 16}), lse(DType::F32, {2, 4, 1});
    const TensorView lseView = lse.view();
    paged_attention_host(q.view(), kPages.view(), vPages.view(), table.view(), lengths.view(), ref.view(),
                         {.logits_soft_cap = 20.0}, &lseView);
    CHECK(out[0]->same_bits(ref));
    CHECK(out[1]->same_bits(lse));
    // Values binding cannot see, checked before a kernel runs on them (Op::check_host_values):
    // a page past k_pages, a length past the sequence's pages.
    CTensor badTable = CTensor::of(DType::I32, {2, 2}, {2, 0, 0, 3}), longLengths = CTensor::of(DType::I32, {2}, {5, 17});
    for (auto [table2, lengths2, what] : {std::tuple{&badTable, &lengths, "page_table[1, 1] = 3 must be a page of k_pages"},
                                          std::tuple{&table, &longLengths, "seq_lengths[1] = 17 must be in [Tq = 1"}}) {
      auto in = descs({&q, &kPages, &vPages, table2, lengths2});
      CStatusOutputs bad{call.get()};
      CHECK_STATUS(tkx_call_run(call.get(), in.data(), 5, bad.descs.data(), int32_t(bad.descs.size()), nullptr, nullptr, 0),
                   TKX_INVALID_ARGUMENT, "paged_attention", what);
    }
    // The append needs the pages' shape.
    tkx_call *bad = nullptr;
    const std::vector<const tkx_tensor *> inputs = descs({&k, &v, &table, &lengths});
    CHECK(tkx_call_create("paged_kv_append", inputs.data(), 4, "{}", &bad) != TKX_OK);
    CHECK_THAT(std::string(tkx_last_error()), Catch::Contains("\"num_pages\" and \"page_size\" are required"));
  }
}

TEST_CASE("capi: version, struct sizes, op names and arguments", "[capi]") {
  CHECK(tkx_api_version() == TOKAMAX_C_API_VERSION);
  CHECK(tkx_struct_size("tkx_tensor") == sizeof(tkx_tensor));
  CHECK(tkx_struct_size("tkx_nothing") == 0);
  CHECK(tkx_struct_size(nullptr) == 0);
  // The layout this header compiles to is the library's (offsets of version 1).
  CHECK(offsetof(tkx_tensor, dtype) == 4);
  CHECK(offsetof(tkx_tensor, shape) == 16);
  CHECK(offsetof(tkx_tensor, data) == 32);
  CHECK(sizeof(tkx_tensor) == 40);
  // Frozen numbering: tokamax::DType's.
  CHECK(int(TKX_BF16) == int(DType::BF16));
  CHECK(int(TKX_F64) == int(DType::F64));
  CHECK(int(TKX_BOOL) == int(DType::Bool));
  CHECK(int(TKX_F8E5M2) == int(DType::F8E5M2));

  const std::string names = tkx_op_names();
  for (const char *op : {"layer_norm\n", "layer_norm_vjp\n", "rms_norm\n", "rms_norm_vjp", "attention\n",
                         "attention_vjp\n", "attention_varlen\n", "attention_varlen_vjp\n", "gated_linear_unit\n", "ragged_dot_vjp\n",
                         "linear_softmax_cross_entropy_loss_vjp\n", "softmax_cross_entropy\n", "paged_attention\n",
                         "paged_kv_append\n"})
    CHECK_THAT(names, Catch::Contains(op));
  CHECK_THAT(names, !Catch::Contains("fill"));  // a Function's glue op: no C binding

  const char *args = nullptr;
  int32_t inputs = 0;
  REQUIRE(tkx_op_args("layer_norm", &args, &inputs) == TKX_OK);
  CHECK(std::string(args) == "x\nscale\noffset\ny\nmean\nrstd");
  CHECK(inputs == 3);
  REQUIRE(tkx_op_args("attention_vjp", &args, &inputs) == TKX_OK);
  CHECK(inputs == 11);
  CHECK(tkx_op_args("layer_norm", nullptr, nullptr) == TKX_OK);
}
