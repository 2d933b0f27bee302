// grad through a Function that uses linear_softmax_cross_entropy_loss (after rms_norm, as
// in a transformer's output layer), run on the interpreter in float64, against central
// finite differences of the float64 host loss; the bf16 tile implementation's gradients
// against the float64 ones; and the JSON round trip of such a gradient Function.
#include <catch2/catch.hpp>

#include "common/GradCheck.h"
#include "unit/cross_entropy/XentTestCase.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>

#include <algorithm>

using namespace tokamax;
using namespace xent_test;

namespace {

constexpr int64_t kRows = 6, kD = 10, kV = 37;
const std::vector<int64_t> kLabels{3, -100, 0, 36, 17, 3};

/// loss = xent(rms_norm(x, scale) @ w, labels).
Function head(DType dtype, LossReduction reduction, std::optional<std::string> impl) {
  std::vector<ArgSpec> specs{{{kRows, kD}, dtype}, {{kD}, DType::F32}, {{kD, kV}, dtype}, {{kRows}, DType::I32}};
  return Function::trace(specs, [&](Tracer &t, std::span<const Sym> in) {
    Sym h = t.rms_norm(in[0], in[1], -1, 1e-5, impl ? std::optional<std::string>("reference") : std::nullopt);
    CrossEntropyOptions options{reduction, -100, impl, std::nullopt};
    return std::vector<Sym>{t.linear_softmax_cross_entropy_loss(h, in[2], in[3], options)};
  });
}

struct Point {
  std::vector<double> x, scale, w;
};

double hostLoss(const Point &p, LossReduction reduction) {
  const std::vector<double> h = grad_check::rmsNormRows(p.x, p.scale, kRows, kD);
  return forward({kRows, kD, kV, reduction, -100}, h, p.w, kLabels).loss[0];
}

std::vector<double> finiteDifferences(Point p, std::vector<double> Point::*field, LossReduction reduction) {
  return grad_check::centralDifferences(p.*field, [&] { return hostLoss(p, reduction); });
}

struct Grads {
  std::vector<double> dx, dscale, dw;
};

Grads gradients(const Function &f, DType dtype, const Point &p) {
  Function g = grad(f, {0, 1, 2});
  HostBuffer x(dtype, {kRows, kD}, p.x), s(DType::F32, {kD}, p.scale), w(dtype, {kD, kV}, p.w),
      labels(DType::I32, {kRows}, std::vector<double>(kLabels.begin(), kLabels.end()));
  HostBuffer dx(dtype, {kRows, kD}), ds(DType::F32, {kD}), dw(dtype, {kD, kV});
  TensorView in[] = {x.view(), s.view(), w.view(), labels.view()}, outs[] = {dx.view(), ds.view(), dw.view()};
  g.interpret(in, outs);
  return {dx.values(), ds.values(), dw.values()};
}

} // namespace

TEST_CASE("grad through rms_norm and linear_softmax_cross_entropy_loss matches float64 finite differences",
          "[cross_entropy][function]") {
  for (LossReduction reduction : {LossReduction::Mean, LossReduction::Sum}) {
    INFO(loss_reduction_name(reduction));
    Point p{attention_test::randomNormal(kRows * kD, DType::F64, 7),
            attention_test::randomNormal(kD, DType::F32, 8, 0.2),
            attention_test::randomNormal(kD * kV, DType::F64, 9, 0.5)};
    for (double &s : p.scale)
      s += 1;
    Function f = head(DType::F64, reduction, "reference");
    Grads g = gradients(f, DType::F64, p);
    int vjps = 0;
    const Function g3 = grad(f, {0, 1, 2});
    for (const auto &call : g3.calls())
      if (call.op->name() == "linear_softmax_cross_entropy_loss_vjp") {
        ++vjps;
        CHECK(call.implementation == std::optional<std::string>("reference"));
      }
    CHECK(vjps == 1);
    const attention_test::Tolerance fd{1e-6, 1e-7};
    auto cx = attention_test::compare("dx", g.dx, finiteDifferences(p, &Point::x, reduction), {kRows, kD}, fd);
    auto cs = attention_test::compare("dscale", g.dscale, finiteDifferences(p, &Point::scale, reduction), {kD}, fd);
    auto cw = attention_test::compare("dw", g.dw, finiteDifferences(p, &Point::w, reduction), {kD, kV}, fd);
    INFO(cx.message << "\n" << cs.message << "\n" << cw.message);
    CHECK(cx.ok);
    CHECK(cs.ok);
    CHECK(cw.ok);

    // bf16 on tile (auto) against the float64 gradients at the same (rounded) point.
    Point r{attention_test::roundedTo(DType::BF16, p.x), p.scale, attention_test::roundedTo(DType::BF16, p.w)};
    Grads ref = gradients(f, DType::F64, r), got = gradients(head(DType::BF16, reduction, std::nullopt), DType::BF16, r);
    const attention_test::Tolerance bf16{6e-2, 1.2e-2};
    auto bx = attention_test::compare("bf16 dx", got.dx, ref.dx, {kRows, kD}, bf16, 1e-2);
    auto bs = attention_test::compare("bf16 dscale", got.dscale, ref.dscale, {kD}, bf16, 1e-2);
    auto bw = attention_test::compare("bf16 dw", got.dw, ref.dw, {kD, kV}, bf16, 1e-2);
    INFO(bx.message << "\n" << bs.message << "\n" << bw.message);
    CHECK(bx.ok);
    CHECK(bs.ok);
    CHECK(bw.ok);
  }
}

TEST_CASE("a gradient Function with linear_softmax_cross_entropy_loss round-trips JSON and lists its kernels",
          "[cross_entropy][function]") {
  Function g = grad(head(DType::BF16, LossReduction::Mean, std::nullopt), {0, 2});
  Function again = Function::from_json(g.to_json());
  CHECK(again.to_json() == g.to_json());
  std::vector<std::string> names;
  for (const dsl::Kernel &k : g.kernels("sm_90a"))
    names.push_back(k.name());
  for (const char *name : {"xent_rows", "xent_reduce", "xent_row_scale", "xent_dlogits", "xent_dx", "xent_dw"})
    CHECK(std::count(names.begin(), names.end(), name) == 1);
}
