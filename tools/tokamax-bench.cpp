// tokamax-bench: the foundation's benchmark, in one run on the GPU.
//
//   copy bandwidth of cuMemcpyDtoD | our copy kernel | row softmax (bf16, two shapes)
//   dispatch overhead (10,000 cached launches, CPU us per call, against bare launches)
//   host dispatch of op calls: layer_norm [1, 64], matmul 64^3, a Function's op call
//   the layer_norm gradient step eager vs replayed as a CUDA graph (per step, per kernel)
//   cold compile time per pipeline stage | first call in a fresh process, warm disk cache
//
// Usage: tokamax-bench [--json FILE]      (tokamax-bench --first-call is the child run)
//        tokamax-bench --dispatch          host dispatch figures only; with no GPU, run it
//                                          under the null driver: TOKAMAX_CUDA_DRIVER=
//                                          <build>/tests/libtokamax-null-cuda.so
//        tokamax-bench --graph             the gradient step eager vs graph replay only (GPU)
#include "bench/Dispatch.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Module.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

using namespace tokamax;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Report {
  std::string json = "{";
  void add(const std::string &key, double value) {
    json += fmt::format("{}\"{}\": {:.4f}", json.size() > 1 ? ", " : "", key, value);
  }
};

Tensor randomTensor(std::initializer_list<int64_t> shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::vector<float> host(t.numel());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (float &v : host)
    v = dist(rng) + 0.01f;
  std::vector<int64_t> dims(shape);
  return Tensor::from_host_floats(host, dims, dtype, Device::get());
}

int firstCall() {
  // Fresh process: the driver's start-up is timed apart from our first call.
  auto t0 = Clock::now();
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  double init = msSince(t0);
  Tensor x = Tensor::empty({16384, 4096}, DType::BF16), y = Tensor::empty({16384, 4096}, DType::BF16);
  memset_d8(x.data(), 0x3c, x.nbytes());
  auto t1 = Clock::now();
  softmax(x, y, stream);
  stream.synchronize();
  double first = msSince(t1);
  JitStats stats = Jit::instance().stats();
  fmt::print("{:.3f} {:.3f} {} {}\n", init, first, stats.disk_hits, stats.compiles);
  return 0;
}

} // namespace

/// GB/s of explicit configurations (what the autotuner will search).
void sweep(Stream &stream, Device &device) {
  auto run = [&](const std::string &label, int64_t key, const std::function<dsl::Kernel()> &build,
                 const Tensor &x, const Tensor &y) {
    const LoadedKernel &k = Jit::instance().get_ir(KernelKey("bench.sweep", {key}), device, [&] { return build().ir(); });
    auto t = time_on_stream(stream, [&] { k.launch({x.view(), y.view()}, stream.handle()); }, 3, 20);
    fmt::print("  {:<48} {:8.3f} ms {:6.0f} GB/s\n", label, t.median, 2.0 * x.nbytes() / t.median / 1e6);
  };
  int64_t key = 1000;
  fmt::print("\nsweep:\n");
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16384, 4096}, {1048576, 64}}) {
    Tensor x = randomTensor({rows, cols}, DType::BF16, 7), y = Tensor::empty({rows, cols}, DType::BF16);
    Tensor xf = randomTensor({rows * cols}, DType::BF16, 7), yf = Tensor::empty({rows * cols}, DType::BF16);
    for (int64_t block : {2048, 4096, 8192, 16384})
      for (int warps : {4, 8, 16}) {
        ElementwiseSpec spec{rows * cols, DType::BF16};
        ElementwiseConfig config{block, warps};
        run(fmt::format("copy {} block={} warps={}", rows * cols, block, warps), ++key,
            [=] { return copy_kernel(spec, config); }, xf, yf);
      }
    for (int64_t br : {1, 2, 4, 8, 16, 32, 64})
      for (int warps : {2, 4, 8, 16}) {
        if (br * std::max<int64_t>(cols, 64) > 16384 || br * cols / (32 * warps) < 8)
          continue;
        SoftmaxSpec spec{rows, cols, DType::BF16};
        SoftmaxConfig config{br, warps};
        run(fmt::format("softmax {}x{} rows={} warps={}", rows, cols, br, warps), ++key,
            [=] { return softmax_kernel(spec, config); }, x, y);
      }
  }
}

int main(int argc, char **argv) try {
  if (argc > 1 && std::string(argv[1]) == "--first-call")
    return firstCall();
  if (argc > 1 && (std::string(argv[1]) == "--dispatch" || std::string(argv[1]) == "--graph")) {
    Device &device = Device::get();
    Stream stream = Stream::create(device);
    fmt::print("{}\n", describe(device));
    if (std::string(argv[1]) == "--dispatch")
      bench::dispatch_figures(stream, device);
    else
      bench::graph_figures(stream, device);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--sweep") {
    Device &device = Device::get();
    Stream stream = Stream::create(device);
    sweep(stream, device);
    return 0;
  }
  std::string jsonPath = argc > 2 && std::string(argv[1]) == "--json" ? argv[2] : "";
  // A private, empty kernel cache so that the cold compile is cold.
  char cacheDir[] = "/tmp/tokamax-bench-cache-XXXXXX";
  if (!mkdtemp(cacheDir))
    throw Error("cannot create a temporary cache directory");
  setenv("TOKAMAX_CACHE_DIR", cacheDir, 1);
  Report report;

  auto t0 = Clock::now();
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  double init = msSince(t0);
  fmt::print("{}\ndriver init + context: {:.1f} ms\n\n", describe(device), init);
  report.add("driver_init_ms", init);

  // 1. Copy bandwidth: bytes read + written per second.
  size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes, device), b(bytes, device);
  memset_d8(a.ptr(), 1, bytes);
  auto dtod = time_on_stream(stream, [&] { copy_device_to_device(b.ptr(), a.ptr(), bytes, stream.handle()); }, 3, 20, false);
  double copyGbs = 2.0 * bytes / dtod.median / 1e6;
  fmt::print("{:<36} {:>9.3f} ms {:>8.0f} GB/s\n", "cuMemcpyDtoD 2 GiB", dtod.median, copyGbs);
  report.add("memcpy_dtod_gbs", copyGbs);

  // 2. Our kernels at the two shapes.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16384, 4096}, {1048576, 64}}) {
    Tensor x = randomTensor({rows, cols}, DType::BF16, 7), y = Tensor::empty({rows, cols}, DType::BF16);
    double moved = 2.0 * x.nbytes();
    auto tc = time_on_stream(stream, [&] { copy(x, y, stream); }, 3, 30);
    auto ts = time_on_stream(stream, [&] { softmax(x, y, stream); }, 3, 30);
    std::string shape = fmt::format("{}x{} bf16", rows, cols);
    double cg = moved / tc.median / 1e6, sg = moved / ts.median / 1e6;
    fmt::print("{:<36} {:>9.3f} ms {:>8.0f} GB/s  {:5.1f}% of copy\n", "copy kernel " + shape, tc.median, cg, 100 * cg / copyGbs);
    fmt::print("{:<36} {:>9.3f} ms {:>8.0f} GB/s  {:5.1f}% of copy\n", "softmax " + shape, ts.median, sg, 100 * sg / copyGbs);
    report.add("copy_kernel_gbs_" + std::to_string(rows) + "x" + std::to_string(cols), cg);
    report.add("softmax_gbs_" + std::to_string(rows) + "x" + std::to_string(cols), sg);
  }

  // 2b. layer_norm and rms_norm, forward and VJP, bf16 x with an f32 scale.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1048576, 64}, {16384, 4096}, {16384, 8192}, {4096, 16384}}) {
    Tensor x = randomTensor({rows, cols}, DType::BF16, 7), dy = randomTensor({rows, cols}, DType::BF16, 8);
    Tensor scale = randomTensor({cols}, DType::F32, 9), offset = randomTensor({cols}, DType::F32, 10);
    Tensor y = Tensor::empty({rows, cols}, DType::BF16), dx = Tensor::empty({rows, cols}, DType::BF16);
    Tensor mean = Tensor::empty({rows}, DType::F32), rstd = Tensor::empty({rows}, DType::F32);
    Tensor dscale = Tensor::empty({cols}, DType::F32), doffset = Tensor::empty({cols}, DType::F32);
    std::string shape = fmt::format("{}x{}", rows, cols);
    auto line = [&](const std::string &what, const Timings &t, double bytes) {
      double gbs = bytes / t.median / 1e6;
      fmt::print("{:<36} {:>9.3f} ms {:>8.0f} GB/s  {:5.1f}% of copy\n", what + " " + shape, t.median, gbs, 100 * gbs / copyGbs);
      report.add(what + "_gbs_" + shape, gbs);
    };
    double n = double(x.nbytes());
    line("layer_norm fwd", time_on_stream(stream, [&] { layer_norm(x, &scale.view(), &offset.view(), y, stream, {}, &mean.view(), &rstd.view()); }, 3, 20), 2 * n);
    line("layer_norm vjp", time_on_stream(stream, [&] { layer_norm_vjp(dy, x, &scale.view(), mean, rstd, dx, &dscale.view(), &doffset.view(), stream); }, 3, 20), 3 * n);
    line("rms_norm fwd", time_on_stream(stream, [&] { rms_norm(x, &scale.view(), y, stream, {}, &rstd.view()); }, 3, 20), 2 * n);
    line("rms_norm vjp", time_on_stream(stream, [&] { rms_norm_vjp(dy, x, &scale.view(), rstd, dx, &dscale.view(), stream); }, 3, 20), 3 * n);
  }

  // 3. Dispatch: a cached tiny kernel, 10,000 calls; CPU time per call.
  {
    const int calls = 10000;
    Tensor x = randomTensor({1024}, DType::F32, 1), y = randomTensor({1024}, DType::F32, 2), o = Tensor::empty({1024}, DType::F32);
    vector_add(x, y, o, stream);
    stream.synchronize();
    // CPU time per call (rounds shorter than the driver's launch queue, median).
    double ours = host_us_per_call(stream, [&] { vector_add(x, y, o, stream); }, calls);
    // The same kernel through a bare cuLaunchKernel.
    ElementwiseSpec spec{1024, DType::F32};
    CompiledKernel k = compile(vector_add_kernel(spec, default_config(spec)), {.arch = device.arch()});
    Module module = Module::load_cubin(k.cubin, device);
    KernelFunction fn = module.function(k.launch.kernel_name);
    uint64_t px = x.data(), py = y.data(), po = o.data();
    void *params[] = {&px, &py, &po};
    double bare = host_us_per_call(stream, [&] {
      fn.launch({k.launch.grid[0], 1, 1}, {k.launch.block_threads, 1, 1}, 0, stream.handle(), params);
    }, calls);
    fmt::print("\ndispatch: {:.2f} us per op call, {:.2f} us per bare cuLaunchKernel ({:+.2f} us ours)\n", ours, bare, ours - bare);
    report.add("dispatch_us", ours);
    report.add("bare_launch_us", bare);
    for (const bench::Figure &f : bench::dispatch_figures(stream, device))
      report.add(f.key, f.value);
    for (const bench::Figure &f : bench::graph_figures(stream, device))
      report.add(f.key, f.value);
  }

  // 4. Cold compile, per stage (nothing cached in memory or on disk for these).
  fmt::print("\ncold compile (ms):\n");
  auto stageLine = [&](const char *name, const CompiledKernel &k) {
    double total = 0;
    std::string line;
    for (const StageTime &s : k.stages) {
      line += fmt::format(" {}={:.1f}", s.stage, s.ms);
      total += s.ms;
    }
    fmt::print("  {:<28} total {:6.1f}:{}\n", name, total, line);
    report.add(std::string("compile_ms_") + name, total);
  };
  for (int64_t cols : {4096, 64}) {
    SoftmaxSpec spec{cols == 4096 ? 16384 : 1048576, cols, DType::BF16};
    auto b0 = Clock::now();
    dsl::Kernel kernel = softmax_kernel(spec, default_config(spec));
    double build = msSince(b0);
    CompiledKernel k = compile(kernel, {.arch = device.arch()});
    fmt::print("  (DSL build {:.2f} ms)\n", build);
    stageLine(cols == 4096 ? "softmax_16384x4096" : "softmax_1048576x64", k);
  }
  {
    ElementwiseSpec spec{int64_t(16384) * 4096, DType::BF16};
    stageLine("copy_67108864", compile(copy_kernel(spec, default_config(spec)), {.arch = device.arch()}));
  }

  // 5. First call in a fresh process with the warm disk cache filled above.
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  FILE *child = popen(("'" + self + "' --first-call").c_str(), "r");
  double childInit = 0, first = 0;
  int diskHits = 0, compiles = 0;
  if (!child || fscanf(child, "%lf %lf %d %d", &childInit, &first, &diskHits, &compiles) != 4)
    throw Error("the fresh-process run failed");
  pclose(child);
  fmt::print("\nfresh process: driver init {:.1f} ms, first softmax call {:.2f} ms ({} disk hits, {} compiles)\n",
             childInit, first, diskHits, compiles);
  report.add("fresh_process_first_call_ms", first);
  report.json += "}";
  if (!jsonPath.empty())
    std::ofstream(jsonPath) << report.json << "\n";
  std::filesystem::remove_all(cacheDir);
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-bench: error: {}\n", e.what());
  return 1;
}
