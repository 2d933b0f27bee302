// tokamax-export-bench: what an export costs at run time, against the Function it was
// made from, on the GPU:
//
//   1. fresh process: a layer_norm gradient's export (20 kernels) loaded and run once by
//      tokamax-export-run (libtokamax_runtime alone), in several fresh processes: driver
//      init + context apart, then load + first run (target <= 5 ms), the first run split
//      into the device's preparation (kernel loads, one allocation) and its launches;
//   2. per call: host time of ExportedFunction::run against Function::run of the same
//      Function under the same configs (median of rounds; target: no slower), device time
//      of both, and whether their outputs agree bit for bit.
//
//   tokamax-export-bench [--rows R] [--cols C | --function F.json] [--fresh N] [--calls N]
//                        [--save F.tkx] [--json FILE]
//   tokamax-export-bench --target sm_90a [--device-kind K] --save F.tkx    (no GPU: build only)
//
// The built-in Function (20 kernels): d/dx, d/dscale, d/doffset of
//   sum(f32(rms_norm(layer_norm(rms_norm(layer_norm(layer_norm(x, scale, offset), scale), scale)))))
// with x [R, C] bf16, scale and offset [C] f32.
#include "DeviceBuffers.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/export/ExportFunction.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace tokamax;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Function layerNormGrad(int64_t rows, int64_t cols) {
  ArgSpec x{{rows, cols}, DType::BF16}, param{{cols}, DType::F32};
  Function loss = Function::trace({x, param, param}, [](Tracer &t, std::span<const Sym> in) {
    Sym y = t.layer_norm(in[0], in[1], in[2]);
    y = t.rms_norm(t.layer_norm(y, in[1]), in[1]);
    y = t.rms_norm(t.layer_norm(y));
    return std::vector<Sym>{t.sum(t.cast(y, DType::F32))};
  });
  return grad(loss, {0, 1, 2});
}

Function readFunction(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("--function: cannot read '{}'", path));
  std::ostringstream text;
  text << in.rdbuf();
  return Function::from_json(text.str());
}

struct Report {
  std::string json = "{";
  void add(const std::string &key, double value) {
    json += fmt::format("{}\"{}\": {:.4f}", json.size() > 1 ? ", " : "", key, value);
  }
};

/// `path`, or a temporary file (removed at the end) when it is empty.
struct ScratchFile {
  fs::path path;
  bool temporary;
  explicit ScratchFile(const std::string &given)
      : path(given.empty() ? fs::temp_directory_path() / fmt::format("tokamax-export-bench-{}.tkx", ::getpid())
                           : fs::path(given)),
        temporary(given.empty()) {}
  ~ScratchFile() {
    std::error_code ignored;
    if (temporary)
      fs::remove(path, ignored);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Section 1: `processes` fresh runs of tokamax-export-run (beside this binary) on `file`.
void freshProcesses(const fs::path &file, int processes, Report &report) {
  const fs::path runner = fs::read_symlink("/proc/self/exe").parent_path() / "tokamax-export-run";
  if (!fs::exists(runner))
    throw Error(fmt::format("{} is missing (it is built and installed beside tokamax-export-bench)", runner.string()));
  fmt::print("\n1. fresh process ({} runs of {} --porcelain; first run = prepare + launches):\n", processes,
             runner.filename().string());
  fmt::print("   {:>8} {:>9} {:>11} {:>12} {:>16}\n", "init ms", "load ms", "prepare ms", "launches ms",
             "load+first ms");
  // Per column: driver init + context, load, prepare, the first run's launches, load + first run.
  std::vector<std::vector<double>> figures(5);
  for (int p = 0; p < processes; ++p) {
    const std::string command = fmt::format("'{}' '{}' --porcelain", runner.string(), file.string());
    FILE *child = popen(command.c_str(), "r");
    double init = 0, load = 0, prepare = 0, launches = 0;
    const bool read = child && std::fscanf(child, "%lf %lf %lf %lf", &init, &load, &prepare, &launches) == 4;
    const int status = child ? pclose(child) : -1;
    if (!read || status != 0)
      throw Error(fmt::format("the fresh process failed (run `{} {}` to see why)", runner.string(), file.string()));
    const double row[5] = {init, load, prepare, launches, load + prepare + launches};
    fmt::print("   {:>8.1f} {:>9.3f} {:>11.3f} {:>12.3f} {:>16.3f}\n", row[0], row[1], row[2], row[3], row[4]);
    for (int c = 0; c < 5; ++c)
      figures[c].push_back(row[c]);
  }
  const double total = median(figures[4]);
  fmt::print("   median: driver init + context {:.1f} ms; load {:.3f} + prepare {:.3f} + launches {:.3f} = {:.3f} ms "
             "(target <= 5 ms: {})\n",
             median(figures[0]), median(figures[1]), median(figures[2]), median(figures[3]), total,
             total <= 5 ? "met" : "MISSED");
  const char *keys[5] = {"fresh_driver_init_ms", "fresh_load_ms", "fresh_prepare_ms", "fresh_first_launches_ms",
                         "fresh_load_plus_first_run_ms"};
  for (int c = 0; c < 5; ++c)
    report.add(keys[c], median(figures[c]));
}

std::vector<TensorSpec> specs(const std::vector<ArgSpec> &list) {
  std::vector<TensorSpec> out;
  for (const ArgSpec &s : list)
    out.push_back({s.shape, s.dtype});
  return out;
}

/// Section 2: ExportedFunction::run against Function::run, same inputs, same configs.
void perCall(const Function &g, const ExportedFunction &e, Device &device, int calls, Report &report) {
  AutotuningScope scope(recorded_configs(e));  // the direct run resolves the export's configs
  Stream stream = Stream::create(device);
  // The same seeds: the same inputs for both.
  tools::DeviceBuffers direct(specs(g.input_specs()), specs(g.output_specs()), device);
  tools::DeviceBuffers exported(specs(g.input_specs()), specs(g.output_specs()), device);
  const auto runDirect = [&] { g.run(direct.inViews, direct.outViews, stream); };
  const auto runExport = [&] { e.run(exported.inViews, exported.outViews, stream); };
  runDirect();  // compiles (or reads the kernel cache) and allocates; untimed
  runExport();
  stream.synchronize();
  const bool same = direct.output_bytes() == exported.output_bytes();

  const int perRound = std::min(calls, 20);
  const double hostExport = host_us_per_call(stream, runExport, calls, perRound);
  const double hostDirect = host_us_per_call(stream, runDirect, calls, perRound);
  const int iterations = std::max(calls / 100, 10);
  const double deviceExport = time_on_stream(stream, runExport, 3, iterations, false).median;
  const double deviceDirect = time_on_stream(stream, runDirect, 3, iterations, false).median;
  fmt::print("\n2. per call ({} launches; host time: median of rounds of {} calls, {} calls each):\n",
             e.launch_count(), perRound, calls);
  fmt::print("   {:<24} {:>12} {:>16}\n", "", "host us/call", "device ms/call");
  fmt::print("   {:<24} {:>12.2f} {:>16.4f}\n", "ExportedFunction::run", hostExport, deviceExport);
  fmt::print("   {:<24} {:>12.2f} {:>16.4f}\n", "Function::run", hostDirect, deviceDirect);
  fmt::print("   export overhead against the Function: {:+.2f} us per call, {:.2f}x (target: no slower: {})\n",
             hostExport - hostDirect, hostExport / hostDirect, hostExport <= hostDirect ? "met" : "MISSED");
  fmt::print("   outputs: {}\n", same ? "bitwise equal" : "DIFFER");
  report.add("export_run_host_us", hostExport);
  report.add("function_run_host_us", hostDirect);
  report.add("export_run_device_ms", deviceExport);
  report.add("function_run_device_ms", deviceDirect);
  report.add("outputs_bitwise_equal", same);
  if (!same)
    throw Error("the export's outputs differ from the Function's under the same configs");
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"tokamax-export-bench: load, first run and per-call overhead of an export against its Function"};
  int64_t rows = 8192, cols = 1024;
  int fresh = 5, calls = 2000;
  std::string functionPath, savePath, jsonPath, arch, deviceKind;
  app.add_option("--rows", rows, "rows of x in the built-in layer_norm gradient")->capture_default_str();
  app.add_option("--cols", cols, "columns of x (and of scale, offset)")->capture_default_str();
  app.add_option("--function", functionPath, "a traced Function (Function::to_json) instead of the built-in one");
  app.add_option("--fresh", fresh, "fresh processes to time")->capture_default_str();
  app.add_option("--calls", calls, "calls per timed per-call loop")->capture_default_str();
  app.add_option("--save", savePath, "keep the export here (default: a temporary file)");
  app.add_option("--json", jsonPath, "also write the figures as JSON here");
  app.add_option("--target", arch, "build the export for this arch with no GPU, save it (--save) and stop");
  app.add_option("--device-kind", deviceKind, "with --target: \"NAME:MAJOR.MINOR\" (e.g. \"NVIDIA H200:9.0\")");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!arch.empty() && savePath.empty())
      throw Error("--target builds an export with no GPU and needs --save");
    if (fresh < 1 || calls < 1)
      throw Error("--fresh and --calls must be at least 1");
    const Function g = functionPath.empty() ? layerNormGrad(rows, cols) : readFunction(functionPath);
    Report report;
    Device *device = nullptr;
    ExportOptions options;
    if (arch.empty()) {
      auto t0 = Clock::now();
      device = &Device::get();
      Stream warm = Stream::create(*device);
      const double init = msSince(t0);
      fmt::print("{} ({}): driver init + context {:.1f} ms\n", device->name(), device->arch(), init);
      options.target = ExportTarget::of(*device);
    } else {
      options.target = ExportTarget::parse(arch, deviceKind);
    }
    auto t1 = Clock::now();
    ExportedFunction e = export_function(g, options);
    const ScratchFile file(savePath);
    e.save(file.path);
    fmt::print("export: {} calls, {} kernels, {} launches for {}, {:.1f} KB, built in {:.0f} ms: {}\n",
               e.calls().size(), e.kernels().size(), e.launch_count(), e.target().to_string(),
               fs::file_size(file.path) / 1e3, msSince(t1), file.path.string());
    if (device) {
      freshProcesses(file.path, fresh, report);
      perCall(g, e, *device, calls, report);
    }
    if (!jsonPath.empty())
      std::ofstream(jsonPath) << report.json << "}\n";
    return 0;
  } catch (const std::exception &e) {
    fmt::print(stderr, "tokamax-export-bench: error: {}\n", e.what());
    return 1;
  }
}
