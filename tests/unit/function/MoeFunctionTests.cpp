// grad through a Function that chains the three ops of a mixture-of-experts layer and its
// output head: rms_norm -> gated_linear_unit -> ragged_dot -> linear_softmax_cross_entropy
// _loss. On the interpreter in float64 against central finite differences of the float64
// host loss (the three ops' references, GradCheck.h's norm), then the bf16 chain on auto
// against the float64 gradients, and the gradient's kernels for sm_90a.
#include <catch2/catch.hpp>

#include "unit/gated_linear_unit/GluTestCase.h"
#include "common/GradCheck.h"
#include "unit/ragged_dot/RaggedDotTestCase.h"
#include "unit/cross_entropy/XentTestCase.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>

#include <algorithm>

using namespace tokamax;

namespace {

// x [rows, K] -> glu [rows, F] -> ragged_dot [rows, N] over 3 groups -> logits [rows, V].
constexpr int64_t kRows = 9, kK = 6, kF = 8, kN = 5, kV = 11, kGroups = 3;
const std::vector<int32_t> kSizes{4, 0, 3};  // rows 7 and 8 are past the groups: their logits are 0
const std::vector<int64_t> kLabels{3, -100, 0, 10, 7, 3, 5, -100, 1};
constexpr const char *kActivation = "swish";

/// loss = mean cross-entropy of ragged_dot(glu(rms_norm(x, scale), wg), rhs, sizes) @ wo.
Function moeLayer(DType dtype, std::optional<std::string> impl) {
  std::vector<ArgSpec> specs{{{kRows, kK}, dtype},          {{kK}, DType::F32},     {{kK, 2, kF}, dtype},
                             {{kGroups, kF, kN}, dtype},    {{kGroups}, DType::I32}, {{kN, kV}, dtype},
                             {{kRows}, DType::I32}};
  return Function::trace(specs, [&](Tracer &t, std::span<const Sym> in) {
    Sym h = t.rms_norm(in[0], in[1], -1, 1e-5, impl ? std::optional<std::string>("reference") : std::nullopt);
    Sym g = t.gated_linear_unit(h, in[2], kActivation, impl);
    Sym y = t.ragged_dot(g, in[3], in[4], impl);
    CrossEntropyOptions options{LossReduction::Mean, -100, impl, std::nullopt};
    return std::vector<Sym>{t.linear_softmax_cross_entropy_loss(y, in[5], in[6], options)};
  });
}

struct Point {
  std::vector<double> x, scale, wg, rhs, wo;
};

double hostLoss(const Point &p) {
  const std::vector<double> h = grad_check::rmsNormRows(p.x, p.scale, kRows, kK);
  const std::vector<double> g = glu_test::forward(h, p.wg, kRows, kK, kF, parse_glu_activation(kActivation));
  const std::vector<double> y = ragged_test::forward(g, p.rhs, kSizes, kRows, kF, kN);
  return xent_test::forward({kRows, kN, kV, LossReduction::Mean, -100}, y, p.wo, kLabels).loss[0];
}

std::vector<double> finiteDifferences(Point p, std::vector<double> Point::*field) {
  return grad_check::centralDifferences(p.*field, [&] { return hostLoss(p); });
}

/// The differentiated inputs, in the Function's argument order, with their shapes.
struct Field {
  const char *name;
  std::vector<double> Point::*values;
  int argument;
  std::vector<int64_t> shape;
};
const Field kFields[] = {{"dx", &Point::x, 0, {kRows, kK}},
                         {"dscale", &Point::scale, 1, {kK}},
                         {"dglu_weights", &Point::wg, 2, {kK, 2, kF}},
                         {"drhs", &Point::rhs, 3, {kGroups, kF, kN}},
                         {"dw", &Point::wo, 5, {kN, kV}}};

std::vector<std::vector<double>> gradients(const Function &f, DType dtype, const Point &p) {
  using attention_test::HostBuffer;
  Function g = grad(f, {0, 1, 2, 3, 5});
  HostBuffer x(dtype, {kRows, kK}, p.x), s(DType::F32, {kK}, p.scale), wg(dtype, {kK, 2, kF}, p.wg),
      rhs(dtype, {kGroups, kF, kN}, p.rhs),
      sizes(DType::I32, {kGroups}, std::vector<double>(kSizes.begin(), kSizes.end())), wo(dtype, {kN, kV}, p.wo),
      labels(DType::I32, {kRows}, std::vector<double>(kLabels.begin(), kLabels.end()));
  std::vector<HostBuffer> outs;
  for (const Field &field : kFields)
    outs.emplace_back(field.argument == 1 ? DType::F32 : dtype, field.shape);
  TensorView in[] = {x.view(), s.view(), wg.view(), rhs.view(), sizes.view(), wo.view(), labels.view()};
  std::vector<TensorView> outViews;
  for (HostBuffer &b : outs)
    outViews.push_back(b.view());
  g.interpret(in, outViews);
  std::vector<std::vector<double>> values;
  for (HostBuffer &b : outs)
    values.push_back(b.values());
  return values;
}

} // namespace

TEST_CASE("grad through rms_norm, gated_linear_unit, ragged_dot and the cross-entropy loss matches float64 "
          "finite differences",
          "[glu][ragged_dot][cross_entropy][function]") {
  Point p{attention_test::randomNormal(kRows * kK, DType::F64, 31),
          attention_test::randomNormal(kK, DType::F32, 32, 0.2),
          attention_test::randomNormal(kK * 2 * kF, DType::F64, 33, 0.4),
          attention_test::randomNormal(kGroups * kF * kN, DType::F64, 34, 0.5),
          attention_test::randomNormal(kN * kV, DType::F64, 35, 0.5)};
  for (double &s : p.scale)
    s += 1;
  const Function f = moeLayer(DType::F64, "reference");
  // Every op's VJP is in the gradient, pinned to reference as its forward.
  const Function g = grad(f, {0, 1, 2, 3, 5});
  for (const char *vjp : {"rms_norm_vjp", "gated_linear_unit_vjp", "ragged_dot_vjp",
                          "linear_softmax_cross_entropy_loss_vjp"}) {
    INFO(vjp);
    int calls = 0;
    for (const auto &call : g.calls())
      if (call.op->name() == vjp) {
        ++calls;
        CHECK(call.implementation == std::optional<std::string>("reference"));
      }
    CHECK(calls == 1);
  }
  const std::vector<std::vector<double>> got = gradients(f, DType::F64, p);
  const attention_test::Tolerance fd{1e-6, 1e-7};
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const Field &field = kFields[i];
    auto c = attention_test::compare(field.name, got[i], finiteDifferences(p, field.values), field.shape, fd);
    INFO(c.message);
    CHECK(c.ok);
  }
  // The rows past the groups reach the loss only through constant logits: no gradient.
  for (int64_t r = 7; r < kRows; ++r)
    for (int64_t c = 0; c < kK; ++c)
      CHECK(got[0][size_t(r * kK + c)] == 0.0);

  // bf16 on auto (tile kernels) against the float64 gradients at the same (rounded) point.
  Point r{attention_test::roundedTo(DType::BF16, p.x), p.scale, attention_test::roundedTo(DType::BF16, p.wg),
          attention_test::roundedTo(DType::BF16, p.rhs), attention_test::roundedTo(DType::BF16, p.wo)};
  const std::vector<std::vector<double>> ref = gradients(f, DType::F64, r),
                                         bf16 = gradients(moeLayer(DType::BF16, std::nullopt), DType::BF16, r);
  const attention_test::Tolerance loose{8e-2, 1.5e-2};
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const Field &field = kFields[i];
    auto c = attention_test::compare(std::string("bf16 ") + field.name, bf16[i], ref[i], field.shape, loose, 1e-2);
    INFO(c.message);
    CHECK(c.ok);
  }
}

TEST_CASE("the mixture-of-experts gradient Function round-trips JSON and lists each op's kernels once",
          "[glu][ragged_dot][cross_entropy][function]") {
  const Function g = grad(moeLayer(DType::BF16, std::nullopt), {0, 2, 3, 5});
  CHECK(Function::from_json(g.to_json()).to_json() == g.to_json());
  std::vector<std::string> names;
  for (const dsl::Kernel &k : g.kernels("sm_90a"))
    names.push_back(k.name());
  for (const char *name : {"glu_gate_apply", "glu_gate_apply_vjp", "ragged_dot", "ragged_dot_dlhs", "ragged_dot_drhs",
                           "xent_rows", "xent_dlogits", "xent_dx", "xent_dw"}) {
    INFO(name);
    CHECK(std::count(names.begin(), names.end(), name) == 1);
  }
}
