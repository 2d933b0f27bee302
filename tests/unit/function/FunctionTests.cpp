// Functions: tracing, running on the interpreter, and grad against finite differences.
#include <catch2/catch.hpp>

#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/DType.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

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

TEST_CASE("a function and its gradient round-trip through JSON and compute the same bits", "[function][json]") {
  const int64_t rows = 5, cols = 33;
  Function f = Function::trace({ArgSpec{{rows, cols}, DType::BF16}, ArgSpec{{cols}, DType::F32}},
                               [](Tracer &t, std::span<const Sym> in) {
                                 Sym y = t.layer_norm(in[0], in[1]);
                                 return std::vector<Sym>{t.sum(t.cast(t.layer_norm(y, in[1]), DType::F32))};
                               });
  Function g = grad(f, {0, 1});
  for (const Function *fn : {&f, &g}) {
    const std::string text = fn->to_json();
    Function back = Function::from_json(text);
    CHECK(back.to_json() == text);
    REQUIRE(back.calls().size() == fn->calls().size());
    for (size_t i = 0; i < back.calls().size(); ++i) {
      CHECK(back.calls()[i].op == fn->calls()[i].op);
      CHECK(back.calls()[i].slots == fn->calls()[i].slots);
      CHECK(back.calls()[i].implementation == fn->calls()[i].implementation);
    }
    // Both on the interpreter, same inputs: the same bits out.
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(0.25f, 2.0f);
    std::vector<std::vector<uint8_t>> in, outA, outB;
    std::vector<TensorView> inViews, aViews, bViews;
    for (const ArgSpec &s : fn->input_specs()) {
      in.emplace_back(s.numel() * dtype_size(s.dtype));
      for (int64_t e = 0; e < s.numel(); ++e)
        store_from_double(s.dtype, in.back().data() + e * dtype_size(s.dtype), dist(rng));
    }
    for (const ArgSpec &s : fn->output_specs()) {
      outA.emplace_back(s.numel() * dtype_size(s.dtype));
      outB.emplace_back(s.numel() * dtype_size(s.dtype), 0xA5);
    }
    for (size_t i = 0; i < in.size(); ++i)
      inViews.push_back(host_view(in[i].data(), fn->input_specs()[i].dtype, fn->input_specs()[i].shape));
    for (size_t i = 0; i < outA.size(); ++i) {
      aViews.push_back(host_view(outA[i].data(), fn->output_specs()[i].dtype, fn->output_specs()[i].shape));
      bViews.push_back(host_view(outB[i].data(), fn->output_specs()[i].dtype, fn->output_specs()[i].shape));
    }
    fn->interpret(inViews, aViews);
    back.interpret(inViews, bViews);
    CHECK(outA == outB);
  }
}

TEST_CASE("Function::from_json names what is wrong", "[function][json]") {
  Function f = headline(3, 17, DType::F32);
  const std::string good = f.to_json();
  // Each case edits the good text (first occurrence of `from` -> `to`).
  auto edited = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases{
      {"{", "not valid JSON"},
      {"[]", "not a function"},
      {edited("\"version\":2", "\"version\":3"), "format version 3 comes from a newer library"},
      {edited("\"version\":2", "\"version\":1"), "lists the calls only"},
      {edited("\"version\":2", "\"version\":\"2\""), "\"version\" must be a positive integer"},
      {edited("\"format\":\"tokamax-function\"", "\"format\":\"tokamax-function\",\"extra\":1"), "unknown key \"extra\""},
      {edited("\"inputs\":[0,1]", "\"inputs\":[0,0]"), "inputs[1] = 0 is listed twice"},
      {edited("\"inputs\":[0,1]", "\"inputs\":[0,99]"), "inputs[1] = 99 is not a value id"},
      {edited("\"outputs\":[", "\"outputs\":[\"x\","), "outputs[0] must be a value id"},
      {edited("\"op\":\"layer_norm\"", "\"op\":\"layer_nrom\""), "calls[0]: unknown op \"layer_nrom\""},
      {edited("\"implementation\":null", "\"implementation\":\"fastest\""), "calls[0].implementation"},
      {edited("\"implementation\":null", "\"implementation\":7"), "must be a name or null"},
      {edited("\"slots\":[0,1,", "\"slots\":[2,1,"), "value 2 is read before any call writes it"},
      {edited("\"slots\":[0,1,", "\"slots\":[0,"), "layer_norm takes"},
      {edited("\"slots\":[0,1,", "\"slots\":[1,1,"), "value 1 is"},
      {edited("\"values\":[{\"dtype\":\"f32\"", "\"values\":[{\"dtype\":\"f33\""), "values[0]"},
  };
  for (const Case &c : cases) {
    INFO(c.text);
    CHECK_THROWS_AS(Function::from_json(c.text), Error);
    CHECK_THROWS_WITH(Function::from_json(c.text), Catch::Contains(c.message));
  }
}

TEST_CASE("a function's kernels for an arch: each once, configs from the calling thread's autotuning scope",
          "[function]") {
  Function f = headline(3, 17, DType::F32);
  Function g = grad(f, {0, 1});
  std::vector<dsl::Kernel> forward = f.kernels("sm_90a"), gradient = g.kernels("sm_90a");
  CHECK_FALSE(forward.empty());
  CHECK(gradient.size() > forward.size());
  for (const char *bad : {"", "90a", "sm_", "sm_x0", "compute_90"})
    CHECK_THROWS_WITH(f.kernels(bad), Catch::Contains("arch must look like sm_80 or sm_90a"));
  std::set<std::string> irs;
  for (const dsl::Kernel &k : gradient)
    CHECK(irs.insert(k.ir()).second);
  // The two forward layer norms share their arguments: one set of kernels.
  std::set<std::string> forwardIrs;
  for (const dsl::Kernel &k : forward)
    forwardIrs.insert(k.ir());
  std::set<std::string> firstCall;
  const Function::Call &ln = f.calls()[0];
  const Implementation &tile = ln.op->implementation("tile");
  for (const dsl::Kernel &k : tile.kernels(ln.args, tile.heuristic(ln.args)))
    firstCall.insert(k.ir());
  for (const std::string &ir : firstCall)
    CHECK(forwardIrs.count(ir) == 1);

  // A scope naming another config for the layer norms changes their kernels.
  Config other{{"block_rows", 1}, {"num_warps", 1}};
  REQUIRE_FALSE(tile.check_config(ln.args, other).has_value());
  REQUIRE(other != tile.heuristic(ln.args));
  AutotuningResult tuned;
  tuned.add(TuningEntry{ln.args, "tile", other, {}});
  AutotuningScope scope(tuned);
  std::set<std::string> scoped;
  for (const dsl::Kernel &k : f.kernels("sm_90a"))
    scoped.insert(k.ir());
  CHECK(scoped != forwardIrs);
  for (const dsl::Kernel &k : tile.kernels(ln.args, other))
    CHECK(scoped.count(k.ir()) == 1);
}

TEST_CASE("the function JSON of format version 2 kept in tests/data still loads and prints the same", "[function][json]") {
  // The headline gradient (layer_norm tile -> attention chunked -> layer_norm -> attention
  // tile -> sum, wrt x and scale) as this format version wrote it; later versions must
  // keep reading it. It predates attention's sinks: its attention calls print with them
  // absent (sinks the forward's argument 7, the VJP's 10, dsinks the VJP's 15).
  std::ifstream in(std::string(TOKAMAX_TEST_DATA) + "/headline-grad-function.json");
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  Function g = Function::from_json(text);
  nlohmann::json expected = nlohmann::json::parse(text);
  int attentionCalls = 0;
  for (nlohmann::json &call : expected["calls"]) {
    const std::string op = call["args"]["op"];
    for (size_t at : op == "attention" ? std::vector<size_t>{7}
                     : op == "attention_vjp" ? std::vector<size_t>{10, 15}
                                             : std::vector<size_t>{}) {
      call["args"]["args"].insert(call["args"]["args"].begin() + at, nullptr);
      call["slots"].insert(call["slots"].begin() + at, -1);
      ++attentionCalls;
    }
  }
  CHECK(attentionCalls == 6);  // two forwards, two VJPs
  CHECK(g.to_json() == expected.dump());
  CHECK(Function::from_json(g.to_json()).to_json() == g.to_json());
  CHECK(g.inputs().size() == 2);
  CHECK(g.outputs().size() == 2);
  std::set<std::string> ops;
  for (const Function::Call &c : g.calls())
    ops.insert(c.op->name());
  for (const char *name : {"layer_norm", "layer_norm_vjp", "attention", "attention_vjp", "sum"})
    CHECK(ops.count(name) == 1);
}
