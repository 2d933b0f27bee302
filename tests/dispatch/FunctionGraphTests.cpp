// Function runs from a plan and as CUDA graphs: what is captured, when it is captured
// again, what is refused.
#include <tokamax/ops/CallCache.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

using namespace tokamax;
using Catch::Matchers::Contains;

namespace {

/// d/dx, d/dscale of sum(layer_norm(layer_norm(x, scale), scale)), x [rows, cols] bf16.
Function layerNormGrad(int64_t rows, int64_t cols) {
  Function loss = Function::trace({ArgSpec{{rows, cols}, DType::BF16}, ArgSpec{{cols}, DType::F32}},
                                  [](Tracer &t, std::span<const Sym> in) {
                                    return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
                                  });
  return grad(loss, {0, 1});
}

struct GradCall {
  Function f = layerNormGrad(4, 64);
  Stream stream = Stream::create(Device::get());
  Tensor x = standardize({{4, 64}, DType::BF16}, 1, Device::get());
  Tensor scale = standardize({{64}, DType::F32}, 2, Device::get());

  void run(std::span<const TensorView> out, bool graph) {
    TensorView in[] = {x, scale};
    f.run(in, out, stream, {.graph = graph});
  }
};

struct Outputs {
  Tensor dx = Tensor::empty({4, 64}, DType::BF16), dscale = Tensor::empty({64}, DType::F32);
  std::vector<TensorView> views() const { return {dx.view(), dscale.view()}; }
};

} // namespace

TEST_CASE("a Function's graph is captured once per set of input and output addresses", "[dispatch][graph]") {
  GradCall call;
  Outputs first;
  call.run(first.views(), true);
  FunctionGraphStats s = call.f.graph_stats();
  CHECK(s.captures == 1);
  CHECK(s.instantiations == 1);
  CHECK(s.replays == 1);
  call.run(first.views(), true);
  s = call.f.graph_stats();
  CHECK(s.captures == 1);
  CHECK(s.replays == 2);

  // New addresses: new graphs until four are held, then the oldest is updated in place.
  std::vector<Outputs> others(4);
  for (Outputs &o : others)
    call.run(o.views(), true);
  s = call.f.graph_stats();
  CHECK(s.captures == 5);
  CHECK(s.instantiations == 4);
  CHECK(s.updates == 1);
  CHECK(s.replays == 6);
  call.run(others.back().views(), true);
  CHECK(call.f.graph_stats().captures == 5);

  // Eager runs share the plan and leave the graphs alone.
  call.run(first.views(), false);
  CHECK(call.f.graph_stats().replays == 7);
}

TEST_CASE("a changed config state captures a Function's graph again", "[dispatch][graph]") {
  GradCall call;
  Outputs out;
  call.run(out.views(), true);
  call.run(out.views(), true);
  CHECK(call.f.graph_stats().captures == 1);
  notify_config_change();
  call.run(out.views(), true);
  CHECK(call.f.graph_stats().captures == 2);
}

TEST_CASE("graph runs refuse the legacy default stream with the reason", "[dispatch][graph]") {
  GradCall call;
  Outputs out;
  Stream legacy = Stream::wrap(nullptr);
  TensorView in[] = {call.x, call.scale};
  CHECK_THROWS_WITH(call.f.run(in, out.views(), legacy, {.graph = true}), Contains("legacy default stream"));
  call.f.run(in, out.views(), legacy);  // eager runs take it
}

TEST_CASE("Function runs check their tensors before replaying a plan", "[dispatch][graph]") {
  GradCall call;
  Outputs out;
  call.run(out.views(), false);
  Tensor wide = Tensor::empty({5, 64}, DType::BF16);
  TensorView wrongShape[] = {wide.view(), out.dscale.view()};
  CHECK_THROWS_WITH(call.run(wrongShape, false), Contains("traced for"));
  TensorView misaligned[] = {TensorView(wide.data() + 2, DType::BF16, std::vector<int64_t>{4, 64}), out.dscale.view()};
  CHECK_THROWS_WITH(call.run(misaligned, true), Contains("16-byte aligned"));
  TensorView null[] = {TensorView(0, DType::BF16, std::vector<int64_t>{4, 64}), out.dscale.view()};
  CHECK_THROWS_WITH(call.run(null, false), Contains("no data"));
}
