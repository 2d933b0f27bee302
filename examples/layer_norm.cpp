// layer_norm: the headline example. x of shape (32, 2048, 16, 64) bf16 normalised over
// its last axis with an f32 scale of shape (64,) and no offset, forward and gradient:
// the `tile` and `reference` implementations and auto, checked against a float64 host
// reference; then the loss layer_norm -> layer_norm -> sum and its gradient as a traced
// Function, autotuned, dumped, loaded and rerun inside the loaded result's scope.
// `layer_norm --autotune-compile [sm_90a]` runs only autotuning's phases before timing
// (search spaces, compiling into the kernel cache, pruning), with no GPU.
#include "common/Example.h"
#include "common/Tuning.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>

#include <chrono>
#include <cmath>

using namespace tokamax;

namespace {

/// Float64 layer norm over rows of `cols`, and its VJP for dy.
struct Reference {
  std::vector<double> y, dx, dscale;
  Reference(const std::vector<double> &x, const std::vector<double> &scale, const std::vector<double> &dy,
            int64_t rows, int64_t cols, double eps) : y(x.size()), dx(x.size()), dscale(cols, 0.0) {
    std::vector<double> xhat(cols), g(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const double *xr = &x[r * cols];
      double mean = 0, var = 0;
      for (int64_t c = 0; c < cols; ++c) mean += xr[c];
      mean /= cols;
      for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
      double rstd = 1 / std::sqrt(var / cols + eps);
      double mg = 0, mgx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        xhat[c] = (xr[c] - mean) * rstd;
        y[r * cols + c] = xhat[c] * scale[c];
        g[c] = dy[r * cols + c] * scale[c];
        mg += g[c];
        mgx += g[c] * xhat[c];
        dscale[c] += dy[r * cols + c] * xhat[c];
      }
      mg /= cols;
      mgx /= cols;
      for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = rstd * (g[c] - mg - xhat[c] * mgx);
    }
  }
};

std::vector<double> download(const Tensor &t) { return t.to_host_doubles(); }

/// The loss layer_norm -> layer_norm -> sum of x and scale, and its gradient.
Function headline_grad(const ArgSpec &x, const ArgSpec &scale) {
  Function loss = Function::trace({x, scale}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
  });
  return grad(loss, {0, 1});
}

/// Autotuning's phases before timing (search spaces, compile into the kernel cache,
/// pruning) for the gradient at the headline shape, with no GPU.
int compileOnly(const std::string &arch) {
  Function dloss = headline_grad(ArgSpec{{32, 2048, 16, 64}, DType::BF16}, ArgSpec{{64}, DType::F32});
  AutotuneOptions options;
  auto t0 = std::chrono::steady_clock::now();
  AutotuneCompileReport report = autotune_compile(example::call_args(dloss), AutotuneTarget::for_arch(arch), options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("autotune compile phase for {}: {} distinct calls of {} in {:.2f} s\n", arch, report.calls.size(),
             dloss.calls().size(), seconds);
  for (const TuningEntry &e : report.calls) {
    size_t ready = 0;
    for (const TuningRecord &r : e.candidates)
      ready += r.ok();
    fmt::print("  {:<16} {} candidates, {} to time\n", e.args.op, e.candidates.size(), ready);
    for (const TuningRecord &r : e.candidates)
      if (!r.ok())
        fmt::print("    {} {}: {}\n", r.implementation, r.config.to_json(), r.error);
  }
  fmt::print("{}\n", report.stats.summary());
  return 0;
}

int runOnGpu() {
  const std::vector<int64_t> shape{32, 2048, 16, 64};
  const int64_t cols = 64, rows = 32 * 2048 * 16;
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  Tensor x = standardize({shape, DType::BF16}, 1, device), scale = standardize({{cols}, DType::F32}, 2, device);
  Tensor dy = standardize({shape, DType::BF16}, 3, device);
  Tensor y = Tensor::empty(shape, DType::BF16), dx = Tensor::empty(shape, DType::BF16);
  Tensor mean = Tensor::empty({rows}, DType::F32), rstd = Tensor::empty({rows}, DType::F32);
  Tensor dscale = Tensor::empty({cols}, DType::F32);
  Reference ref(download(x), download(scale), download(dy), rows, cols, NormOptions{}.epsilon);
  int status = 0;
  double bytesFwd = 2.0 * x.nbytes(), bytesVjp = 3.0 * x.nbytes();
  for (std::optional<std::string> impl : {std::optional<std::string>("tile"), std::optional<std::string>(),
                                          std::optional<std::string>("reference")}) {
    NormOptions options;
    options.implementation = impl;
    BoundArgs b = bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y),
                                  ArgSpec::of(mean), ArgSpec::of(rstd), -1, options.epsilon);
    std::string chosen = layer_norm_op().select(b, impl, device.arch()).name();
    auto fwd = [&] { layer_norm(x, &scale.view(), nullptr, y, stream, options, &mean.view(), &rstd.view()); };
    auto vjp = [&] {
      layer_norm_vjp(dy, x, &scale.view(), mean, rstd, dx, &dscale.view(), nullptr, stream, options);
    };
    fwd();
    vjp();
    stream.synchronize();
    std::string label = impl ? *impl : "auto (" + chosen + ")";
    status |= example::report(("forward " + label).c_str(), example::relative_error(download(y), ref.y), 1e-2);
    status |= example::report(("dx " + label).c_str(), example::relative_error(download(dx), ref.dx), 2e-2);
    status |= example::report(("dscale " + label).c_str(), example::relative_error(download(dscale), ref.dscale), 1e-3);
    example::print_timing(("  forward " + label).c_str(), time_on_stream(stream, fwd, 3, 20), bytesFwd);
    example::print_timing(("  vjp " + label).c_str(), time_on_stream(stream, vjp, 3, 20), bytesVjp);
  }

  // The loss and its gradient as traced Functions.
  Function dloss = headline_grad(ArgSpec::of(x), ArgSpec::of(scale));
  Tensor gx = Tensor::empty(shape, DType::BF16), gscale = Tensor::empty({cols}, DType::F32);
  TensorView in[] = {x, scale}, out[] = {gx, gscale};
  auto step = [&] { dloss.run(in, out, stream); };
  step();
  stream.synchronize();
  example::print_timing("grad(loss) step", time_on_stream(stream, step, 3, 20), 0);
  fmt::print("grad(loss): {} op calls\n", dloss.calls().size());

  // Autotune every op of the gradient step, dump, load, rerun inside the loaded scope.
  AutotuningResult loaded = example::autotune_dump_load(dloss);
  {
    AutotuningScope scope(loaded);
    step();
    stream.synchronize();
    example::print_timing("grad(loss) step, tuned", time_on_stream(stream, step, 3, 20), 0);
  }
  return status;
}

int runOnHost() {
  // The same gradient on the interpreter at a small shape, against the reference.
  const int64_t rows = 8, cols = 64;
  auto x = example::random_values(rows * cols, DType::F32, 1), scale = example::random_values(cols, DType::F32, 2);
  Function loss = Function::trace({ArgSpec{{rows, cols}, DType::F32}, ArgSpec{{cols}, DType::F32}},
                                  [](Tracer &t, std::span<const Sym> in) {
                                    return std::vector<Sym>{t.sum(t.layer_norm(in[0], in[1]))};
                                  });
  Function dloss = grad(loss, {0, 1});
  std::vector<float> xf(x.begin(), x.end()), sf(scale.begin(), scale.end()), gx(rows * cols), gs(cols);
  TensorView in[] = {host_view(xf.data(), DType::F32, {rows, cols}), host_view(sf.data(), DType::F32, {cols})};
  TensorView out[] = {host_view(gx.data(), DType::F32, {rows, cols}), host_view(gs.data(), DType::F32, {cols})};
  dloss.interpret(in, out);
  Reference ref(x, scale, std::vector<double>(rows * cols, 1.0), rows, cols, NormOptions{}.epsilon);
  int status = example::report("dx (interpreter)", example::relative_error({gx.begin(), gx.end()}, ref.dx), 1e-3);
  return status | example::report("dscale (interpreter)", example::relative_error({gs.begin(), gs.end()}, ref.dscale), 1e-4);
}

} // namespace

int main(int argc, char **argv) try {
  // --autotune-compile [ARCH]: only autotuning's compile phase, no GPU needed.
  if (argc >= 2 && std::string(argv[1]) == "--autotune-compile")
    return compileOnly(argc >= 3 ? argv[2] : "sm_90a");
  if (argc >= 2)
    throw Error(fmt::format("unknown argument \"{}\" (the only one is --autotune-compile [ARCH])", argv[1]));
  return example::use_gpu() ? runOnGpu() : runOnHost();
} catch (const std::exception &e) {
  fmt::print(stderr, "layer_norm: error: {}\n", e.what());
  return 1;
}
