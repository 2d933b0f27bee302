// tokamax-export-run: loads an export and runs it on random inputs with libtokamax_runtime
// alone (it links tokamax::runtime: no compiler, no MLIR), timing what a production
// process pays from its start:
//
//   tokamax-export-run FILE [--device N] [--runs N]   driver start-up, load, first run
//   tokamax-export-run FILE --describe                what the file holds (no GPU needed)
//
// Printed: driver init + context; the load (read, validate, device-kind check); the
// device's preparation (kernel loads, one allocation for intermediates and scratch); the
// first run (every launch, synchronize); then, with --runs N, the host time per later run
// (median of rounds) and the device time per run. --porcelain prints only
// "INIT_MS LOAD_MS PREPARE_MS FIRST_RUN_MS" (what tokamax-export-bench reads).
#include "DeviceBuffers.h"

#include <tokamax/export/ExportedFunction.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

using namespace tokamax;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

/// An export's input and output specs.
std::vector<TensorSpec> specs(const std::vector<std::pair<std::vector<int64_t>, DType>> &list) {
  std::vector<TensorSpec> out;
  for (const auto &[shape, dtype] : list)
    out.push_back({shape, dtype});
  return out;
}

int run(const std::filesystem::path &path, int ordinal, int runs, bool porcelain) {
  auto t0 = Clock::now();
  Device &device = Device::get(ordinal);
  Stream stream = Stream::create(device);
  const double init = msSince(t0);

  auto t1 = Clock::now();
  ExportedFunction e = ExportedFunction::load(path, ExportTarget::of(device));
  const double load = msSince(t1);

  auto t2 = Clock::now();
  e.prepare(device);
  const double prepare = msSince(t2);

  tools::DeviceBuffers buffers(specs(e.input_specs()), specs(e.output_specs()), device);
  stream.synchronize();
  auto t3 = Clock::now();
  e.run(buffers.inViews, buffers.outViews, stream);
  stream.synchronize();
  const double first = msSince(t3);

  if (porcelain) {
    fmt::print("{:.4f} {:.4f} {:.4f} {:.4f}\n", init, load, prepare, first);
    return 0;
  }
  const size_t bytes = std::filesystem::file_size(path);
  fmt::print("{} ({}): driver init + context {:.1f} ms\n", device.name(), device.arch(), init);
  fmt::print("load: {:.3f} ms ({:.1f} KB, {} kernels; read, validate, device check)\n", load, bytes / 1e3,
             e.kernels().size());
  fmt::print("prepare: {:.3f} ms ({} kernels loaded, intermediates and scratch allocated)\n", prepare,
             e.kernels().size());
  fmt::print("first run: {:.3f} ms ({} launches, synchronized)\n", first, e.launch_count());
  fmt::print("load + prepare + first run: {:.3f} ms (target <= 5 ms)\n", load + prepare + first);
  const size_t bad = buffers.non_finite_outputs();
  fmt::print("outputs: {}\n", bad ? fmt::format("{} elements not finite", bad) : std::string("all finite"));
  if (runs > 0) {
    const auto call = [&] { e.run(buffers.inViews, buffers.outViews, stream); };
    const double host = host_us_per_call(stream, call, runs, std::min(runs, 20));
    const Timings deviceTime = time_on_stream(stream, call, 3, std::max(runs / 20, 5), false);
    fmt::print("later runs: {:.2f} us host per run (median of rounds of {}), {:.4f} ms device per run\n", host,
               std::min(runs, 20), deviceTime.median);
  }
  return bad ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"tokamax-export-run: load and run an export with the runtime library alone"};
  std::string path;
  int ordinal = 0, runs = 0;
  bool describe = false, porcelain = false;
  app.add_option("file", path, "the export file (.tkx)")->required();
  app.add_option("--device", ordinal, "the GPU to run on")->capture_default_str();
  app.add_option("--runs", runs, "also time this many later runs (host and device time per run)");
  app.add_flag("--describe", describe, "print what the file holds and stop (no GPU needed)");
  app.add_flag("--porcelain", porcelain, "print only: INIT_MS LOAD_MS PREPARE_MS FIRST_RUN_MS");
  CLI11_PARSE(app, argc, argv);
  try {
    if (describe) {
      fmt::print("{}", ExportedFunction::load(path).describe());
      return 0;
    }
    return run(path, ordinal, runs, porcelain);
  } catch (const std::exception &e) {
    fmt::print(stderr, "tokamax-export-run: error: {}\n", e.what());
    return 1;
  }
}
