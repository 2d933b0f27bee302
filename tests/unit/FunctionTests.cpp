// Functions: tracing, running on the interpreter, and grad against finite differences.
#include <catch2/catch.hpp>

#include <tokamax/ops/Function.h>

#include <cmath>
#include <random>

using namespace tokamax;

namespace {

/// loss(x, scale) = sum(layer_norm(layer_norm(x, scale), scale)) on the interpreter.
double loss(const Function &f, std::vector<double> &x, std::vector<double> &scale, int64_t rows, int64_t cols) {
  double out = 0;
  float out32 = 0;
  TensorView in[] = {host_view(x.data(), DType::F64, {rows, cols}), host_view(scale.data(), DType::F64, {cols})};
  TensorView o[] = {host_view(&out32, DType::F32, {1})};
  f.interpret(in, o);
  out = out32;
  return out;
}

Function headline(int64_t rows, int64_t cols, DType dtype) {
  return Function::trace({ArgSpec{{rows, cols}, dtype}, ArgSpec{{cols}, dtype}}, [](Tracer &t, std::span<const Sym> in) {
    Sym y = t.layer_norm(t.layer_norm(in[0], in[1]), in[1]);
    return std::vector<Sym>{t.sum(t.cast(y, DType::F32))};
  });
}

} // namespace

TEST_CASE("a traced function records its op calls", "[function]") {
  Function f = headline(3, 17, DType::F32);
  REQUIRE(f.calls().size() == 3); // two layer norms, a sum (the cast of f32 is elided)
  CHECK(f.calls()[0].op->name() == "layer_norm");
  CHECK(f.calls()[2].op->name() == "sum");
  CHECK(f.output_specs()[0].numel() == 1);
  CHECK(f.to_json().find("\"layer_norm\"") != std::string::npos);
  Function g = grad(f, {0, 1});
  std::vector<std::string> names;
  for (const auto &c : g.calls())
    names.push_back(c.op->name());
  // forward, seed, sum's VJP (fill), two layer-norm VJPs, fan-out of dscale
  CHECK(std::count(names.begin(), names.end(), "layer_norm_vjp") == 2);
  CHECK(std::count(names.begin(), names.end(), "add") == 1);
  CHECK(g.output_specs().size() == 2);
  CHECK_THROWS_WITH(grad(f, {2}), Catch::Contains("not an input"));
  // Every op a gradient records can be found by name (autotuning a Function needs it).
  for (const auto &c : g.calls())
    CHECK(find_op(c.op->name()) == c.op);
}

TEST_CASE("grad of layer_norm -> layer_norm -> sum matches finite differences in f64", "[function]") {
  const int64_t rows = 3, cols = 17;
  Function f = headline(rows, cols, DType::F64);
  Function g = grad(f, {0, 1});
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(0.1, 2.0);
  std::vector<double> x(rows * cols), scale(cols);
  for (auto &v : x) v = (rng() & 1 ? 1 : -1) * dist(rng);
  for (auto &v : scale) v = dist(rng);
  std::vector<double> dx(rows * cols, NAN), dscale(cols, NAN);
  TensorView in[] = {host_view(x.data(), DType::F64, {rows, cols}), host_view(scale.data(), DType::F64, {cols})};
  TensorView out[] = {host_view(dx.data(), DType::F64, {rows, cols}), host_view(dscale.data(), DType::F64, {cols})};
  g.interpret(in, out);
  // Central differences of an f64 loss (the sum is accumulated in f32, so use a large
  // step and compare loosely against the gradient's scale).
  const double h = 1e-3;
  double maxGrad = 0, maxErr = 0;
  auto check = [&](std::vector<double> &param, const std::vector<double> &grads) {
    for (size_t i = 0; i < param.size(); ++i) {
      double saved = param[i];
      param[i] = saved + h;
      double up = loss(f, x, scale, rows, cols);
      param[i] = saved - h;
      double down = loss(f, x, scale, rows, cols);
      param[i] = saved;
      double numeric = (up - down) / (2 * h);
      maxGrad = std::max(maxGrad, std::fabs(numeric));
      maxErr = std::max(maxErr, std::fabs(numeric - grads[i]));
    }
  };
  check(x, dx);
  check(scale, dscale);
  INFO("max |grad| " << maxGrad << ", max error " << maxErr);
  CHECK(maxGrad > 0.01);
  CHECK(maxErr <= 2e-3 * std::max(1.0, maxGrad));
}
