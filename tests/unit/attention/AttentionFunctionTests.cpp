// The headline chain through Functions and grad on the interpreter:
//   loss(x, scale) = sum(attention(l2, l2, l2)), l2 = layer_norm(a1, scale),
//   a1 = attention(l1, l1, l1), l1 = layer_norm(x, scale)
// (the same tensor as q, k and v, so grad adds three contributions), against central
// differences of a float64 host version of the chain.
#include "common/AttentionReference.h"

#include <catch2/catch.hpp>

#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Error.h>

#include <cmath>
#include <map>
#include <span>
#include <string>

using namespace tokamax;
using namespace attention_test;

namespace {

constexpr int64_t kB = 1, kT = 6, kN = 2, kH = 16;

/// float64 layer norm over the last axis, scale only.
std::vector<double> layerNorm(const std::vector<double> &x, const std::vector<double> &scale, double epsilon) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / kH; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < kH; ++c)
      mean += x[r * kH + c] / kH;
    for (int64_t c = 0; c < kH; ++c)
      var += (x[r * kH + c] - mean) * (x[r * kH + c] - mean) / kH;
    double rstd = 1 / std::sqrt(var + epsilon);
    for (int64_t c = 0; c < kH; ++c)
      y[r * kH + c] = (x[r * kH + c] - mean) * rstd * scale[c];
  }
  return y;
}

std::vector<double> selfAttention(const std::vector<double> &x) {
  Dims d;
  d.batch = {kB};
  d.t = d.s = kT, d.n = d.k = kN, d.h = d.hv = kH;
  Inputs in;
  in.q = in.k = in.v = x;
  return Reference(d, {}, in).run().out;
}

double hostLoss(const std::vector<double> &x, const std::vector<double> &scale) {
  // The chain's first layer_norm has epsilon 1e-5, the second the default (Tokamax's 1e-6).
  std::vector<double> a2 = selfAttention(layerNorm(selfAttention(layerNorm(x, scale, 1e-5)), scale, 1e-6));
  double sum = 0;
  for (double v : a2)
    sum += v;
  return sum;
}

/// d hostLoss / d (x, scale) by central differences.
std::pair<std::vector<double>, std::vector<double>> hostGradient(std::vector<double> x, std::vector<double> scale) {
  const double h = 1e-5;
  auto diff = [&](std::vector<double> &param) {
    std::vector<double> g(param.size());
    for (size_t i = 0; i < param.size(); ++i) {
      double saved = param[i];
      param[i] = saved + h;
      double up = hostLoss(x, scale);
      param[i] = saved - h;
      double down = hostLoss(x, scale);
      param[i] = saved;
      g[i] = (up - down) / (2 * h);
    }
    return g;
  };
  auto dx = diff(x);
  return {dx, diff(scale)};
}

Function chain(DType dtype, const char *firstAttention, const char *secondAttention, const char *firstNorm) {
  std::vector<ArgSpec> specs{ArgSpec{{kB, kT, kN, kH}, dtype}, ArgSpec{{kH}, DType::F32}};
  return Function::trace(specs, [&](Tracer &t, std::span<const Sym> in) {
    AttentionOptions first, second;
    first.implementation = firstAttention;
    second.implementation = secondAttention;
    Sym l1 = t.layer_norm(in[0], in[1], std::nullopt, -1, 1e-5, firstNorm);
    Sym a1 = t.dot_product_attention(l1, l1, l1, first);
    Sym l2 = t.layer_norm(a1, in[1]);
    Sym a2 = t.dot_product_attention(l2, l2, l2, second);
    return std::vector<Sym>{t.sum(t.cast(a2, DType::F32))};
  });
}

void checkChain(DType dtype, const char *firstAttention, const char *secondAttention, const char *firstNorm,
                double tolerance) {
  std::vector<double> x = randomNormal(size_t(kB * kT * kN * kH), dtype, 31);
  std::vector<double> scale = randomNormal(size_t(kH), DType::F32, 32, 0.5);
  for (double &s : scale)
    s += 1.0;
  auto [dxRef, dscaleRef] = hostGradient(x, scale);

  Function f = chain(dtype, firstAttention, secondAttention, firstNorm);
  Function g = grad(f, {0, 1});
  int attentionVjps = 0;
  for (const auto &call : g.calls())
    if (call.op->name() == "attention_vjp") {
      ++attentionVjps;
      CHECK(call.implementation.has_value());  // the forward's pinned implementation carries over
    }
  CHECK(attentionVjps == 2);

  HostBuffer xb(dtype, {kB, kT, kN, kH}, x), sb(DType::F32, {kH}, scale);
  HostBuffer dx(dtype, {kB, kT, kN, kH}), dscale(DType::F32, {kH});
  TensorView in[] = {xb.view(), sb.view()}, out[] = {dx.view(), dscale.view()};
  g.interpret(in, out);

  HostBuffer loss(DType::F32, {1});
  TensorView lossOut[] = {loss.view()};
  f.interpret(in, lossOut);
  INFO(std::string(dtype_name(dtype)) << " " << firstAttention << " / " << secondAttention);
  CHECK(std::fabs(loss.at(0) - hostLoss(x, scale)) <= tolerance * (1 + std::fabs(hostLoss(x, scale))));
  Comparison cx = compare("dx", dx.values(), dxRef, dx.shape, {tolerance, tolerance});
  Comparison cs = compare("dscale", dscale.values(), dscaleRef, dscale.shape, {tolerance, tolerance});
  INFO(cx.message << "\n" << cs.message);
  CHECK(cx.ok);
  CHECK(cs.ok);
}

} // namespace

TEST_CASE("headline chain: grad through layer_norm and attention matches float64 finite differences",
          "[attention][function]") {
  SECTION("f64: chunked then reference") { checkChain(DType::F64, "chunked", "reference", "reference", 1e-6); }
  SECTION("bf16: chunked then tile (the headline implementations)") {
    checkChain(DType::BF16, "chunked", "tile", "tile", 6e-2);
  }
}

TEST_CASE("attention in a Function: deterministic reaches the VJP grad records", "[attention][function]") {
  const ArgSpec x{{1, 40, 2, 64}, DType::BF16};
  auto traced = [&](bool deterministic) {
    return Function::trace({x, x}, [&](Tracer &t, std::span<const Sym> in) {
      AttentionOptions o;
      o.deterministic = deterministic;
      return std::vector<Sym>{t.sum(t.cast(t.dot_product_attention(in[0], in[1], in[1], o), DType::F32))};
    });
  };
  auto vjpCall = [](const Function &g) -> const Function::Call & {
    for (const Function::Call &call : g.calls())
      if (call.op->name() == "attention_vjp")
        return call;
    FAIL("no attention_vjp call");
    return g.calls().front();
  };
  // The default: nothing recorded, the VJP's attributes and the JSON as before the option.
  Function plain = traced(true);
  CHECK(plain.calls()[0].vjp_attributes.empty());
  CHECK(plain.to_json().find("vjp_attributes") == std::string::npos);
  CHECK(vjpCall(grad(plain, {0, 1})).args.attributes.count("deterministic") == 0);
  // false: the forward's call keeps it for grad (the forward op takes no such attribute),
  // its VJP gets "deterministic": "0", and the JSON keeps it.
  Function loose = traced(false);
  CHECK(loose.calls()[0].args == plain.calls()[0].args);
  CHECK(loose.calls()[0].vjp_attributes == std::map<std::string, std::string>{{"deterministic", "0"}});
  CHECK(vjpCall(grad(loose, {0, 1})).args.attribute("deterministic") == "0");
  Function back = Function::from_json(loose.to_json());
  CHECK(back.calls()[0].vjp_attributes == loose.calls()[0].vjp_attributes);
  CHECK(vjpCall(grad(back, {0, 1})).args.attribute("deterministic") == "0");
  // What from_json refuses: another value (the default is the key's absence), another key,
  // and VJP attributes on a call whose VJP takes none of its own.
  auto fromJsonError = [&](const std::string &from, const std::string &to) {
    std::string text = loose.to_json();
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    try {
      Function::from_json(text);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  CHECK_THAT(fromJsonError(R"("vjp_attributes":{"deterministic":"0"})", R"("vjp_attributes":{"deterministic":"1"})"),
             Catch::Contains("calls[0].vjp_attributes.deterministic must be \"0\""));
  CHECK_THAT(fromJsonError(R"("vjp_attributes":{"deterministic":"0"})", R"("vjp_attributes":{"fused":"0"})"),
             Catch::Contains("no attribute \"fused\""));
  CHECK_THAT(fromJsonError(R"("vjp_attributes":{"deterministic":"0"})", R"("vjp_attributes":[])"),
             Catch::Contains("must be an object"));
}
