//===- Dispatch.cpp - tokamax-bench: the host cost of op calls -------------===//
#include "bench/Dispatch.h"

#include <tokamax/c/tokamax.h>

#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Module.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/TensorMap.h>
#include <tokamax/runtime/Timing.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>

using namespace tokamax;

namespace bench {

namespace {

using Clock = std::chrono::steady_clock;

/// A kernel launched by hand: its cubin loaded, a buffer per tensor parameter and the
/// parameters packed once, so launch() is one cuLaunchKernel.
class BareKernel {
public:
  BareKernel(const dsl::Kernel &kernel, Device &device)
      : compiled_(compile(kernel, {.arch = device.arch()})), module_(Module::load_cubin(compiled_.cubin, device)),
        function_(module_.function(compiled_.launch.kernel_name)) {
    const LaunchInfo &info = compiled_.launch;
    if (info.dynamic_shared && info.shared_bytes > 48 * 1024)
      function_.set_max_dynamic_shared(info.shared_bytes);
    words_.resize(info.params.size());
    for (size_t i = 0; i < info.params.size(); ++i) {
      const KernelParam &p = info.params[i];
      if (p.is_tensor) {
        int64_t n = 1;
        for (int64_t d : p.shape)
          n *= d;
        buffers_.emplace_back(std::max<size_t>(16, size_t(n) * dtype_size(p.dtype)), device);
        words_[i] = buffers_.back().ptr();
      } else if (p.dtype == DType::F32) {
        float one = 1;
        std::memcpy(&words_[i], &one, sizeof one);
      } else if (p.dtype == DType::F64) {
        double one = 1;
        std::memcpy(&words_[i], &one, sizeof one);
      } else {
        words_[i] = 1;
      }
    }
    for (const TensorMapParam &m : info.tensor_maps) {
      const KernelParam &p = info.params[m.param];
      maps_.push_back(encode_tensor_map(p, m, words_[m.param]));
    }
    for (uint64_t &w : words_)
      pointers_.push_back(&w);
    for (TensorMap &m : maps_)
      pointers_.push_back(&m);
  }

  void launch(CUstream stream) {
    const LaunchInfo &info = compiled_.launch;
    function_.launch({info.grid[0], info.grid[1], info.grid[2]}, {info.block_threads, 1, 1},
                     info.dynamic_shared ? info.shared_bytes : 0, stream, pointers_.data());
  }

private:
  CompiledKernel compiled_;
  Module module_;
  KernelFunction function_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<uint64_t> words_;
  std::vector<TensorMap> maps_;
  std::vector<void *> pointers_;
};

/// The first kernel the op call of `args` launches on `device` (auto implementation,
/// the config a call would resolve).
dsl::Kernel firstKernel(const Op &op, const BoundArgs &args, Device &device) {
  const Implementation &impl = op.select(args, std::nullopt, device.arch());
  std::vector<dsl::Kernel> kernels = impl.kernels(args, op.resolve_config(impl, args, std::nullopt));
  return std::move(kernels.at(0));
}

Tensor randomTensor(std::vector<int64_t> shape, DType dtype, uint32_t seed, Device &device) {
  return standardize({std::move(shape), dtype}, seed, device);
}

/// The headline layer_norm gradient as a Function (d/dx, d/dscale of
/// sum(layer_norm(layer_norm(x, scale), scale))) with its tensors.
struct GradStep {
  Function f;
  Stream &stream;
  Tensor x, scale, dx, dscale;

  GradStep(Stream &stream, Device &device, const std::vector<int64_t> &shape)
      : f(grad(Function::trace({ArgSpec{shape, DType::BF16}, ArgSpec{{shape.back()}, DType::F32}},
                               [](Tracer &t, std::span<const Sym> in) {
                                 return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
                               }),
               {0, 1})),
        stream(stream), x(randomTensor(shape, DType::BF16, 5, device)),
        scale(randomTensor({shape.back()}, DType::F32, 6, device)), dx(Tensor::empty(shape, DType::BF16, device)),
        dscale(Tensor::empty({shape.back()}, DType::F32, device)) {}

  void run(bool graph) {
    TensorView in[] = {x, scale}, out[] = {dx, dscale};
    f.run(in, out, stream, {.graph = graph});
  }
};

void line(const std::string &what, double us, double bare) {
  fmt::print("  {:<44} {:7.3f} us per call  (bare launch {:.3f} us, {:+.3f} us)\n", what, us, bare, us - bare);
}

} // namespace

std::vector<Figure> dispatch_figures(Stream &stream, Device &device) {
  std::vector<Figure> figures;
  fmt::print("\nhost dispatch, cached calls (CPU time per call, median of rounds of 250):\n");

  // layer_norm [1, 64] bf16 with an f32 scale.
  {
    Tensor x = randomTensor({1, 64}, DType::BF16, 1, device), scale = randomTensor({64}, DType::F32, 2, device);
    Tensor y = Tensor::empty({1, 64}, DType::BF16, device);
    BoundArgs args = bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y), std::nullopt,
                                     std::nullopt, -1, 1e-5);
    BareKernel bare(firstKernel(layer_norm_op(), args, device), device);
    auto call = [&] { layer_norm(x, &scale.view(), nullptr, y, stream); };
    call();
    stream.synchronize();
    double ours = host_us_per_call(stream, call), bareUs = host_us_per_call(stream, [&] { bare.launch(stream.handle()); });
    line("layer_norm [1, 64] bf16", ours, bareUs);
    figures.push_back({"dispatch_layer_norm_us", ours});
    figures.push_back({"bare_launch_layer_norm_us", bareUs});
  }

  // The same layer_norm through the C ABI (what the Python and JAX adapters call):
  // tkx_call_run with the caller's (empty) workspace, the call bound once.
  {
    Tensor x = randomTensor({1, 64}, DType::BF16, 1, device), scale = randomTensor({64}, DType::F32, 2, device);
    Tensor y = Tensor::empty({1, 64}, DType::BF16, device);
    const int64_t shape[] = {1, 64}, cols[] = {64};
    auto desc = [&](const Tensor &t, int32_t dtype, const int64_t *dims, int32_t rank) {
      return tkx_tensor{uint32_t(sizeof(tkx_tensor)), dtype, rank, device.ordinal(), dims, nullptr,
                        reinterpret_cast<void *>(t.data())};
    };
    const tkx_tensor cx = desc(x, TKX_BF16, shape, 2), cscale = desc(scale, TKX_F32, cols, 1), cy = desc(y, TKX_BF16, shape, 2);
    const tkx_tensor *in[] = {&cx, &cscale, nullptr}, *out[] = {&cy, nullptr, nullptr};
    tkx_call *call = nullptr;
    if (tkx_call_create("layer_norm", in, 3, "{\"epsilon\": 1e-5, \"residuals\": false}", &call) != TKX_OK)
      throw Error(fmt::format("tkx_call_create: {}", tkx_last_error()));
    auto run = [&] {
      if (tkx_call_run(call, in, 3, out, 3, stream.handle(), nullptr, 0) != TKX_OK) [[unlikely]]
        throw Error(fmt::format("tkx_call_run: {}", tkx_last_error()));
    };
    run();
    stream.synchronize();
    const double us = host_us_per_call(stream, run);
    tkx_call_destroy(call);
    fmt::print("  {:<44} {:7.3f} us per call\n", "tkx_call_run layer_norm [1, 64] bf16 (C ABI)", us);
    figures.push_back({"dispatch_capi_layer_norm_us", us});
  }

  // matmul 64 x 64 x 64 bf16.
  {
    Tensor a = randomTensor({64, 64}, DType::BF16, 3, device), b = randomTensor({64, 64}, DType::BF16, 4, device);
    Tensor c = Tensor::empty({64, 64}, DType::BF16, device);
    BoundArgs args = bind_matmul(ArgSpec::of(a), ArgSpec::of(b), std::nullopt, ArgSpec::of(c), false, false, 1.0);
    BareKernel bare(firstKernel(matmul_op(), args, device), device);
    auto call = [&] { matmul(a, b, c, stream); };
    call();
    stream.synchronize();
    double ours = host_us_per_call(stream, call), bareUs = host_us_per_call(stream, [&] { bare.launch(stream.handle()); });
    line("matmul 64x64x64 bf16", ours, bareUs);
    figures.push_back({"dispatch_matmul_us", ours});
    figures.push_back({"bare_launch_matmul_us", bareUs});
  }

  // The op calls of a traced Function: the layer_norm gradient at [1, 64], eager, then
  // its step replayed as a CUDA graph (host time of the cuGraphLaunch path).
  {
    GradStep step(stream, device, {1, 64});
    step.run(false);
    step.run(true);
    stream.synchronize();
    const double calls = double(step.f.calls().size());
    double perCall = host_us_per_call(stream, [&] { step.run(false); }, 2000) / calls;
    double graphStep = host_us_per_call(stream, [&] { step.run(true); }, 2000);
    fmt::print("  {:<44} {:7.3f} us per call  ({:.0f} op calls per step)\n", "Function op call (layer_norm grad [1, 64])",
               perCall, calls);
    fmt::print("  {:<44} {:7.3f} us per step  ({} kernels, memsets and copies)\n",
               "Function step replayed as a CUDA graph", graphStep, step.f.graph_stats().nodes);
    figures.push_back({"dispatch_function_op_call_us", perCall});
    figures.push_back({"dispatch_function_graph_step_us", graphStep});
  }
  return figures;
}

std::vector<Figure> graph_figures(Stream &stream, Device &device) {
  std::vector<Figure> figures;
  fmt::print("\nlayer_norm gradient step (8 op calls), eager vs CUDA graph replay (device time per step):\n");
  for (const std::vector<int64_t> &shape : {std::vector<int64_t>{32, 2048, 16, 64}, std::vector<int64_t>{1, 64}}) {
    GradStep step(stream, device, shape);
    Timings eager = time_on_stream(stream, [&] { step.run(false); }, 3, 50, false);
    Timings graph = time_on_stream(stream, [&] { step.run(true); }, 3, 50, false);
    const double nodes = double(step.f.graph_stats().nodes);
    std::string name = fmt::format("{}", fmt::join(shape, "x"));
    fmt::print("  {:<20} eager {:8.4f} ms, graph {:8.4f} ms per step", name, eager.median, graph.median);
    // Kernel time alone (CUPTI): what is left of a step is launch overhead and gaps.
    try {
      BenchmarkData kernels = benchmark(stream, [&] { step.run(true); }, TimingMethod::Cupti, 50, 3, false);
      auto perKernelUs = [&](double stepMs) { return (stepMs - kernels.median) * 1000 / nodes; };
      fmt::print("; kernels {:.4f} ms; overhead per kernel: eager {:.2f} us, graph {:.2f} us ({:.0f} kernels)\n",
                 kernels.median, perKernelUs(eager.median), perKernelUs(graph.median), nodes);
      figures.push_back({"grad_step_overhead_per_kernel_eager_us_" + name, perKernelUs(eager.median)});
      figures.push_back({"grad_step_overhead_per_kernel_graph_us_" + name, perKernelUs(graph.median)});
    } catch (const Error &e) {
      fmt::print(" (no kernel times: {})\n", e.what());
    }
    figures.push_back({"grad_step_eager_ms_" + name, eager.median});
    figures.push_back({"grad_step_graph_ms_" + name, graph.median});
  }
  return figures;
}

} // namespace bench
