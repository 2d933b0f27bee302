// grad through a Function that uses ragged_dot (a mixture-of-experts layer's grouped
// product after rms_norm), run on the interpreter in float64, against central finite
// differences of a float64 host loss; the bf16 tile implementation's gradients against
// the float64 ones; and the JSON round trip of such a gradient Function.
#include <catch2/catch.hpp>

#include "common/GradCheck.h"
#include "unit/ragged_dot/RaggedDotTestCase.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>

#include <algorithm>

using namespace tokamax;
using namespace ragged_test;

namespace {

constexpr int64_t kRows = 9, kK = 6, kN = 5, kGroups = 3;
const std::vector<int32_t> kSizes{4, 0, 3};  // rows 7 and 8 are past the groups

/// loss = sum(ragged_dot(rms_norm(x, scale), rhs, group_sizes)).
Function moe(DType dtype, std::optional<std::string> impl) {
  std::vector<ArgSpec> specs{{{kRows, kK}, dtype}, {{kK}, DType::F32}, {{kGroups, kK, kN}, dtype},
                             {{kGroups}, DType::I32}};
  return Function::trace(specs, [&](Tracer &t, std::span<const Sym> in) {
    Sym h = t.rms_norm(in[0], in[1], -1, 1e-5, impl ? std::optional<std::string>("reference") : std::nullopt);
    Sym y = t.ragged_dot(h, in[2], in[3], impl);
    return std::vector<Sym>{t.sum(t.cast(y, DType::F32))};
  });
}

struct Point {
  std::vector<double> x, scale, rhs;
};

double hostLoss(const Point &p) {
  const std::vector<double> h = grad_check::rmsNormRows(p.x, p.scale, kRows, kK);
  double sum = 0;
  for (double v : forward(h, p.rhs, kSizes, kRows, kK, kN))
    sum += v;
  return sum;
}

std::vector<double> finiteDifferences(Point p, std::vector<double> Point::*field) {
  return grad_check::centralDifferences(p.*field, [&] { return hostLoss(p); });
}

struct Grads {
  std::vector<double> dx, dscale, drhs;
};

Grads gradients(const Function &f, DType dtype, const Point &p) {
  Function g = grad(f, {0, 1, 2});
  HostBuffer x(dtype, {kRows, kK}, p.x), s(DType::F32, {kK}, p.scale), w(dtype, {kGroups, kK, kN}, p.rhs),
      sizes(DType::I32, {kGroups}, std::vector<double>(kSizes.begin(), kSizes.end()));
  HostBuffer dx(dtype, {kRows, kK}), ds(DType::F32, {kK}), dw(dtype, {kGroups, kK, kN});
  TensorView in[] = {x.view(), s.view(), w.view(), sizes.view()}, outs[] = {dx.view(), ds.view(), dw.view()};
  g.interpret(in, outs);
  return {dx.values(), ds.values(), dw.values()};
}

} // namespace

TEST_CASE("grad through rms_norm and ragged_dot matches float64 finite differences", "[ragged_dot][function]") {
  Point p{attention_test::randomNormal(kRows * kK, DType::F64, 7), attention_test::randomNormal(kK, DType::F32, 8, 0.2),
          attention_test::randomNormal(kGroups * kK * kN, DType::F64, 9, 0.3)};
  for (double &s : p.scale)
    s += 1;
  Function f = moe(DType::F64, "reference");
  Grads g = gradients(f, DType::F64, p);
  int vjps = 0;
  const Function g3 = grad(f, {0, 1, 2});
  for (const auto &call : g3.calls())
    if (call.op->name() == "ragged_dot_vjp") {
      ++vjps;
      CHECK(call.implementation == std::optional<std::string>("reference"));
    }
  CHECK(vjps == 1);
  const attention_test::Tolerance fd{1e-6, 1e-7};
  auto cx = attention_test::compare("dx", g.dx, finiteDifferences(p, &Point::x), {kRows, kK}, fd);
  auto cs = attention_test::compare("dscale", g.dscale, finiteDifferences(p, &Point::scale), {kK}, fd);
  auto cw = attention_test::compare("drhs", g.drhs, finiteDifferences(p, &Point::rhs), {kGroups, kK, kN}, fd);
  INFO(cx.message << "\n" << cs.message << "\n" << cw.message);
  CHECK(cx.ok);
  CHECK(cs.ok);
  CHECK(cw.ok);

  // bf16 on tile (auto) against the float64 gradients at the same (rounded) point.
  Point r{attention_test::roundedTo(DType::BF16, p.x), p.scale, attention_test::roundedTo(DType::BF16, p.rhs)};
  Grads ref = gradients(f, DType::F64, r), got = gradients(moe(DType::BF16, std::nullopt), DType::BF16, r);
  const attention_test::Tolerance bf16{6e-2, 1.2e-2};
  auto bx = attention_test::compare("bf16 dx", got.dx, ref.dx, {kRows, kK}, bf16, 1e-2);
  auto bs = attention_test::compare("bf16 dscale", got.dscale, ref.dscale, {kK}, bf16, 1e-2);
  auto bw = attention_test::compare("bf16 drhs", got.drhs, ref.drhs, {kGroups, kK, kN}, bf16, 1e-2);
  INFO(bx.message << "\n" << bs.message << "\n" << bw.message);
  CHECK(bx.ok);
  CHECK(bs.ok);
  CHECK(bw.ok);
}

TEST_CASE("a gradient Function with ragged_dot round-trips JSON and lists its kernels", "[ragged_dot][function]") {
  Function g = grad(moe(DType::BF16, std::nullopt), {0, 2});
  Function again = Function::from_json(g.to_json());
  CHECK(again.to_json() == g.to_json());
  std::vector<std::string> names;
  for (const dsl::Kernel &k : g.kernels("sm_90a"))
    names.push_back(k.name());
  CHECK(std::count(names.begin(), names.end(), "ragged_dot") == 1);
  CHECK(std::count(names.begin(), names.end(), "ragged_dot_dlhs") == 1);
  CHECK(std::count(names.begin(), names.end(), "ragged_dot_drhs") == 1);
}
