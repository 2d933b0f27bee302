// grad through a Function that uses gated_linear_unit (after rms_norm, as in a
// transformer's MLP block), run on the interpreter in float64, against central finite
// differences of a float64 host loss (the Function's own loss is an f32 sum, too coarse
// to difference); the bf16 tile implementation's gradients against the float64 ones;
// and the JSON round trip of such a gradient Function.
#include <catch2/catch.hpp>

#include "common/GradCheck.h"
#include "unit/gated_linear_unit/GluTestCase.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>

#include <algorithm>

using namespace tokamax;
using namespace glu_test;

namespace {

constexpr int64_t kRows = 5, kK = 12, kN = 7;

/// loss = sum(glu(rms_norm(x, scale), weights)).
Function mlp(DType dtype, const std::string &activation, std::optional<std::string> impl) {
  std::vector<ArgSpec> specs{{{kRows, kK}, dtype}, {{kK}, DType::F32}, {{kK, 2, kN}, dtype}};
  return Function::trace(specs, [&](Tracer &t, std::span<const Sym> in) {
    Sym h = t.rms_norm(in[0], in[1], -1, 1e-5, impl ? std::optional<std::string>("reference") : std::nullopt);
    Sym y = t.gated_linear_unit(h, in[2], activation, impl);
    return std::vector<Sym>{t.sum(t.cast(y, DType::F32))};
  });
}

struct Point {
  std::vector<double> x, scale, w;
};

/// The Function's loss in float64 on the host: rms_norm over rows, then the unit.
double hostLoss(const Point &p, GluActivation act) {
  const std::vector<double> h = grad_check::rmsNormRows(p.x, p.scale, kRows, kK);
  double sum = 0;
  for (double v : forward(h, p.w, kRows, kK, kN, act))
    sum += v;
  return sum;
}

/// d hostLoss / d p.*field by central differences.
std::vector<double> finiteDifferences(Point p, std::vector<double> Point::*field, GluActivation act) {
  return grad_check::centralDifferences(p.*field, [&] { return hostLoss(p, act); });
}

struct Grads {
  std::vector<double> dx, dscale, dw;
};

Grads gradients(const Function &f, DType dtype, const Point &p) {
  Function g = grad(f, {0, 1, 2});
  HostBuffer x(dtype, {kRows, kK}, p.x), s(DType::F32, {kK}, p.scale), w(dtype, {kK, 2, kN}, p.w);
  HostBuffer dx(dtype, {kRows, kK}), ds(DType::F32, {kK}), dw(dtype, {kK, 2, kN});
  TensorView in[] = {x.view(), s.view(), w.view()}, outs[] = {dx.view(), ds.view(), dw.view()};
  g.interpret(in, outs);
  return {dx.values(), ds.values(), dw.values()};
}

} // namespace

TEST_CASE("grad through rms_norm and gated_linear_unit matches float64 finite differences", "[glu][function]") {
  for (const char *activation : {"swish", "gelu_tanh", "gelu", "sigmoid", "relu", "none"}) {
    INFO(activation);
    Point p{attention_test::randomNormal(kRows * kK, DType::F64, 7),
            attention_test::randomNormal(kK, DType::F32, 8, 0.2),
            attention_test::randomNormal(kK * 2 * kN, DType::F64, 9, 0.3)};
    for (double &s : p.scale)
      s += 1;
    Function f = mlp(DType::F64, activation, "reference");
    Grads g = gradients(f, DType::F64, p);
    int vjps = 0;
    const Function g3 = grad(f, {0, 1, 2});
    for (const auto &call : g3.calls())
      if (call.op->name() == "gated_linear_unit_vjp") {
        ++vjps;
        CHECK(call.implementation == std::optional<std::string>("reference"));
      }
    CHECK(vjps == 1);
    // Relu's kink: central differences are off only within h of a zero pre-activation,
    // which these inputs keep away from by far more than h = 1e-5.
    const GluActivation act = parse_glu_activation(activation);
    const attention_test::Tolerance fd{1e-6, 1e-7};
    auto cx = attention_test::compare("dx", g.dx, finiteDifferences(p, &Point::x, act), {kRows, kK}, fd);
    auto cs = attention_test::compare("dscale", g.dscale, finiteDifferences(p, &Point::scale, act), {kK}, fd);
    auto cw = attention_test::compare("dweights", g.dw, finiteDifferences(p, &Point::w, act), {kK, 2, kN}, fd);
    INFO(cx.message << "\n" << cs.message << "\n" << cw.message);
    CHECK(cx.ok);
    CHECK(cs.ok);
    CHECK(cw.ok);

    // bf16 on tile (auto) against the float64 gradients at the same (rounded) point.
    Point r{attention_test::roundedTo(DType::BF16, p.x), p.scale, attention_test::roundedTo(DType::BF16, p.w)};
    Grads ref = gradients(f, DType::F64, r), got = gradients(mlp(DType::BF16, activation, std::nullopt), DType::BF16, r);
    const attention_test::Tolerance bf16{6e-2, 1.2e-2};
    auto bx = attention_test::compare("bf16 dx", got.dx, ref.dx, {kRows, kK}, bf16, 1e-2);
    auto bs = attention_test::compare("bf16 dscale", got.dscale, ref.dscale, {kK}, bf16, 1e-2);
    auto bw = attention_test::compare("bf16 dweights", got.dw, ref.dw, {kK, 2, kN}, bf16, 1e-2);
    INFO(bx.message << "\n" << bs.message << "\n" << bw.message);
    CHECK(bx.ok);
    CHECK(bs.ok);
    CHECK(bw.ok);
  }
}

TEST_CASE("a gradient Function with gated_linear_unit round-trips JSON and lists its kernels", "[glu][function]") {
  Function g = grad(mlp(DType::BF16, "gelu", std::nullopt), {0, 2});
  Function again = Function::from_json(g.to_json());
  CHECK(again.to_json() == g.to_json());
  std::vector<std::string> names;
  for (const dsl::Kernel &k : g.kernels("sm_90a"))
    names.push_back(k.name());
  // The forward writes the pre-activations (x W on the matmul, then the gate over them),
  // and the VJP reads them: no recomputation.
  CHECK(std::count(names.begin(), names.end(), "glu_gate_apply") == 1);
  CHECK(std::count(names.begin(), names.end(), "glu_gate_apply_vjp") == 1);
  CHECK(std::count(names.begin(), names.end(), "matmul") == 3);  // x W, dx and dweights
  CHECK(std::count(names.begin(), names.end(), "glu_gate") == 0);
}
