// Replays on the GPU, bit for bit against the path that resolves every call afresh:
//   - a Function replayed as a CUDA graph (the layer_norm gradient: the fixture of
//     tests/data at [5, 33], and traced at [512, 1000]) gives the outputs of its eager
//     runs, and of its calls run one by one through Op::run, with fresh random inputs;
//     after the inputs' contents change (same addresses: the graph is replayed, not
//     captured again); and with new input and output tensors (captured again);
//   - eager calls replayed from the call cache (layer_norm, its VJP, matmul) give the
//     outputs of Op::run, also right after an option changes.
#include "unit/export/ExportTestUtil.h"

#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace tokamax;

namespace {

using Bytes = std::vector<std::vector<uint8_t>>;

Function fixtureGrad() {
  std::ifstream in(export_test::fixture_function_path());
  std::stringstream text;
  text << in.rdbuf();
  return Function::from_json(text.str());
}

Function tracedGrad(int64_t rows, int64_t cols) {
  Function loss = Function::trace({ArgSpec{{rows, cols}, DType::BF16}, ArgSpec{{cols}, DType::F32}},
                                  [](Tracer &t, std::span<const Sym> in) {
                                    return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
                                  });
  return grad(loss, {0, 1});
}

std::vector<Tensor> allocate(const std::vector<ArgSpec> &specs) {
  std::vector<Tensor> out;
  for (const ArgSpec &s : specs)
    out.push_back(Tensor::empty(s.shape, s.dtype, Device::get()));
  return out;
}

std::vector<TensorView> views(const std::vector<Tensor> &tensors) {
  return std::vector<TensorView>(tensors.begin(), tensors.end());
}

/// Random, never-zero contents (standardize's generator) written over `tensors`.
void fill(std::vector<Tensor> &tensors, uint32_t seed) {
  for (Tensor &t : tensors) {
    Tensor fresh = standardize({{t.shape().begin(), t.shape().end()}, t.dtype()}, seed++, Device::get());
    std::vector<uint8_t> bytes(t.nbytes());
    fresh.copy_to_host(bytes.data(), bytes.size());
    t.copy_from_host(bytes.data(), bytes.size());
  }
}

Bytes download(const std::vector<Tensor> &tensors) {
  Bytes out;
  for (const Tensor &t : tensors) {
    out.emplace_back(t.nbytes());
    t.copy_to_host(out.back().data(), out.back().size());
  }
  return out;
}

/// The function's calls one by one through Op::run (binding checked, implementation and
/// config resolved, kernels looked up per call): the path plans must reproduce.
Bytes runCallByCall(const Function &f, const std::vector<Tensor> &inputs, Stream &stream) {
  std::vector<Tensor> values;
  std::vector<TensorView> bound(f.values().size());
  for (size_t v = 0; v < f.values().size(); ++v) {
    values.push_back(Tensor::empty(f.values()[v].shape, f.values()[v].dtype, Device::get()));
    bound[v] = values.back().view();
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    bound[f.inputs()[i]] = inputs[i].view();
  for (const Function::Call &call : f.calls()) {
    std::vector<TensorView> in, out;
    for (size_t i = 0; i < call.slots.size(); ++i)
      (i < call.op->num_inputs() ? in : out).push_back(call.slots[i] < 0 ? TensorView() : bound[call.slots[i]]);
    call.op->run(call.args, in, out, stream, call.implementation);
  }
  stream.synchronize();
  Bytes out;
  for (int v : f.outputs()) {
    out.emplace_back(bound[v].nbytes());
    copy_device_to_host(out.back().data(), bound[v].data(), out.back().size());
  }
  return out;
}

void checkGraphReplay(const Function &f) {
  Stream stream = Stream::create(Device::get());
  std::vector<Tensor> inputs = allocate(f.input_specs());
  std::vector<Tensor> eager = allocate(f.output_specs()), graph = allocate(f.output_specs());
  for (uint32_t seed : {11u, 23u, 37u}) {
    fill(inputs, seed);  // same addresses, new contents
    f.run(views(inputs), views(eager), stream);
    f.run(views(inputs), views(graph), stream, {.graph = true});
    stream.synchronize();
    CHECK(download(graph) == download(eager));
    CHECK(download(graph) == runCallByCall(f, inputs, stream));
  }
  CHECK(f.graph_stats().captures == 1);
  CHECK(f.graph_stats().replays == 3);

  // New tensors: captured again for their addresses.
  std::vector<Tensor> inputs2 = allocate(f.input_specs()), graph2 = allocate(f.output_specs());
  fill(inputs2, 51);
  f.run(views(inputs2), views(graph2), stream, {.graph = true});
  f.run(views(inputs2), views(eager), stream);
  stream.synchronize();
  CHECK(f.graph_stats().captures == 2);
  CHECK(download(graph2) == download(eager));
}

} // namespace

TEST_CASE("a Function replayed as a CUDA graph gives its eager outputs bit for bit", "[gpu][graph]") {
  SECTION("the layer_norm gradient fixture, [5, 33]") { checkGraphReplay(fixtureGrad()); }
  SECTION("the layer_norm gradient traced at [512, 1000]") { checkGraphReplay(tracedGrad(512, 1000)); }
}

TEST_CASE("eager calls replayed from the call cache give Op::run's outputs bit for bit", "[gpu][cache]") {
  Stream stream = Stream::create(Device::get());
  Tensor x = standardize({{300, 1000}, DType::BF16}, 1, Device::get());
  Tensor scale = standardize({{1000}, DType::F32}, 2, Device::get());
  Tensor dy = standardize({{300, 1000}, DType::BF16}, 3, Device::get());
  Tensor y = Tensor::empty({300, 1000}, DType::BF16), yRef = Tensor::empty({300, 1000}, DType::BF16);
  Tensor mean = Tensor::empty({300}, DType::F32), rstd = Tensor::empty({300}, DType::F32);
  Tensor dx = Tensor::empty({300, 1000}, DType::BF16), dxRef = Tensor::empty({300, 1000}, DType::BF16);
  Tensor dscale = Tensor::empty({1000}, DType::F32), dscaleRef = Tensor::empty({1000}, DType::F32);
  auto bytes = [](const Tensor &t) {
    std::vector<uint8_t> b(t.nbytes());
    t.copy_to_host(b.data(), b.size());
    return b;
  };
  for (double epsilon : {1e-5, 1e-5, 0.5, 0.5}) {  // a hit after each miss
    layer_norm(x, &scale.view(), nullptr, y, stream, {.epsilon = epsilon}, &mean.view(), &rstd.view());
    BoundArgs b = bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y), ArgSpec::of(mean),
                                  ArgSpec::of(rstd), -1, epsilon);
    TensorView in[] = {x, scale, TensorView()}, out[] = {yRef, mean, rstd};
    layer_norm_op().run(b, in, out, stream);
    stream.synchronize();
    CHECK(bytes(y) == bytes(yRef));

    layer_norm_vjp(dy, x, &scale.view(), mean, rstd, dx, &dscale.view(), nullptr, stream);
    BoundArgs bv = bind_layer_norm_vjp(ArgSpec::of(dy), ArgSpec::of(x), ArgSpec::of(scale), ArgSpec::of(mean),
                                       ArgSpec::of(rstd), ArgSpec::of(dx), ArgSpec::of(dscale), std::nullopt, -1);
    TensorView vin[] = {dy, x, scale, mean, rstd}, vout[] = {dxRef, dscaleRef, TensorView()};
    layer_norm_vjp_op().run(bv, vin, vout, stream);
    stream.synchronize();
    CHECK(bytes(dx) == bytes(dxRef));
    CHECK(bytes(dscale) == bytes(dscaleRef));
  }

  Tensor a = standardize({{64, 64}, DType::BF16}, 4, Device::get()), bm = standardize({{64, 64}, DType::BF16}, 5, Device::get());
  Tensor c = Tensor::empty({64, 64}, DType::BF16), cRef = Tensor::empty({64, 64}, DType::BF16);
  for (double alpha : {1.0, 1.0, 0.5, 0.5}) {
    matmul(a, bm, c, stream, {.alpha = alpha});
    BoundArgs b = bind_matmul(ArgSpec::of(a), ArgSpec::of(bm), std::nullopt, ArgSpec::of(c), false, false, alpha);
    TensorView in[] = {a, bm, TensorView()}, out[] = {cRef};
    matmul_op().run(b, in, out, stream);
    stream.synchronize();
    CHECK(bytes(c) == bytes(cRef));
  }
}
