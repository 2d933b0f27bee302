//===- Autotune.cpp - Enumerate, compile in parallel, time, choose --------===//
//
// For one bound call:
//   1. candidates: every implementation that runs on the device and can serve the call,
//      times each distinct config of its search space (check_config failures become
//      records, not candidates);
//   2. compile: a pool of std::threads builds each candidate's DSL kernels and compiles
//      them into the on-disk kernel cache (precompile), so the timing phase only loads
//      cubins; the pool is bounded by the cores, by available memory (1 GiB per
//      compiling thread) and by the number of candidates. With the disk cache disabled
//      only the DSL kernels are built here, and compilation happens at the first run;
//   3. timing: one stream, inputs and outputs from standardize (seed + argument index),
//      benchmark() per candidate (warm-up, L2 flush, median of N);
//   4. choice: the smallest median; every candidate's numbers or error are kept.
//
//===----------------------------------------------------------------------===//
#include <tokamax/autotune/Autotune.h>

#include <tokamax/compiler/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

namespace tokamax {

namespace {

struct Candidate {
  const Implementation* impl = nullptr;
  TuningRecord record;  // implementation, config; then timing or error
};

// MemAvailable from /proc/meminfo, or 0 when unknown.
uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:")
      return kib * 1024;
  return 0;
}

unsigned compile_threads(unsigned requested, size_t tasks) {
  if (tasks == 0)
    return 0;
  unsigned n = requested;
  if (n == 0) {
    n = std::max(1u, std::thread::hardware_concurrency());
    constexpr uint64_t kBytesPerCompile = uint64_t(1) << 30;
    if (uint64_t avail = available_memory_bytes())
      n = unsigned(std::clamp<uint64_t>(avail / kBytesPerCompile, 1, n));
  }
  return unsigned(std::min<size_t>(n, tasks));
}

// One overwritten status line on stderr, only when stderr is a terminal.
class Progress {
public:
  Progress(bool enabled, std::string label)
      : enabled_(enabled && ::isatty(STDERR_FILENO)), label_(std::move(label)) {}
  ~Progress() {
    if (enabled_ && printed_)
      std::fprintf(stderr, "\r\033[K");
  }
  void update(const std::string& status) {
    if (!enabled_)
      return;
    std::lock_guard lock(mutex_);
    std::fprintf(stderr, "\r\033[Ktokamax autotune %s: %s", label_.c_str(), status.c_str());
    std::fflush(stderr);
    printed_ = true;
  }

private:
  bool enabled_;
  bool printed_ = false;
  std::string label_;
  std::mutex mutex_;
};

std::vector<Candidate> enumerate(const Op& op, const BoundArgs& args, const Device& device,
                                 const AutotuneOptions& options) {
  std::vector<Candidate> candidates;
  std::vector<std::string> reasons;
  for (const auto& impl : op.implementations()) {
    const std::string name = impl->name();
    if (!options.implementations.empty() &&
        std::find(options.implementations.begin(), options.implementations.end(), name) ==
            options.implementations.end())
      continue;
    if (!impl->supported_on(device.arch())) {
      reasons.push_back(fmt::format("{}: does not run on {}", name, device.arch()));
      continue;
    }
    if (auto why = impl->why_not(args)) {
      reasons.push_back(fmt::format("{}: {}", name, *why));
      continue;
    }
    std::vector<Config> space;
    try {
      space = impl->search_space(args);
    } catch (const std::exception& e) {
      Candidate c{impl.get(), {name, Config{}, {}, 0, fmt::format("search space: {}", e.what())}};
      candidates.push_back(std::move(c));
      continue;
    }
    std::vector<Config> seen;
    for (Config& config : space) {
      if (std::find(seen.begin(), seen.end(), config) != seen.end())
        continue;
      seen.push_back(config);
      Candidate c{impl.get(), {name, config, {}, 0, {}}};
      if (auto problem = impl->check_config(args, config))
        c.record.error = "invalid config: " + *problem;
      candidates.push_back(std::move(c));
    }
  }
  if (candidates.empty())
    throw NotSupported(fmt::format("autotune {}: no implementation can serve the call on {} ({})",
                                   op.name(), device.arch(),
                                   reasons.empty() ? "none selected" : fmt::format("{}", fmt::join(reasons, "; "))));
  return candidates;
}

void compile_all(std::vector<Candidate>& candidates, const BoundArgs& args, const Device& device,
                 const AutotuneOptions& options, Progress& progress) {
  std::vector<Candidate*> todo;
  for (Candidate& c : candidates)
    if (c.record.ok())
      todo.push_back(&c);
  const unsigned threads = compile_threads(options.compile_threads, todo.size());
  if (threads == 0)
    return;
  const bool use_disk = !DiskCache::disabled_by_environment();
  const std::string cache_dir = DiskCache::default_directory().string();
  CompileOptions compile_options;
  compile_options.arch = device.arch();

  std::atomic<size_t> next{0}, done{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      Candidate& c = *todo[i];
      try {
        std::vector<dsl::Kernel> kernels = c.impl->kernels(args, c.record.config);
        if (use_disk)
          for (const dsl::Kernel& kernel : kernels)
            precompile(kernel, compile_options, cache_dir);
      } catch (const std::exception& e) {
        c.record.error = fmt::format("compile: {}", e.what());
      }
      progress.update(fmt::format("compiled {}/{} ({} threads)", done.fetch_add(1) + 1,
                                  todo.size(), threads));
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool)
    t.join();
}

void time_all(std::vector<Candidate>& candidates, const BoundArgs& args, const Op& op,
              Device& device, const AutotuneOptions& options, Progress& progress) {
  device.make_current();
  Stream stream = Stream::create(device);
  std::vector<std::optional<Tensor>> tensors;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (args.args[i])
      tensors.push_back(standardize(TensorSpec{args.args[i]->shape, args.args[i]->dtype},
                                    options.seed + uint32_t(i), device));
    else
      tensors.push_back(std::nullopt);
  }
  std::vector<TensorView> views;
  for (const auto& t : tensors)
    views.push_back(t ? t->view() : TensorView());
  const size_t num_inputs = std::min(op.num_inputs(), views.size());
  const std::span<const TensorView> inputs(views.data(), num_inputs);
  const std::span<const TensorView> outputs(views.data() + num_inputs, views.size() - num_inputs);

  size_t done = 0, total = 0;
  for (const Candidate& c : candidates)
    total += c.record.ok();
  const TuningRecord* best = nullptr;
  for (Candidate& c : candidates) {
    if (!c.record.ok())
      continue;
    try {
      c.record.timing = benchmark(
          stream, [&] { c.impl->run(args, c.record.config, inputs, outputs, stream); },
          options.timing, options.iterations, options.warmup, options.flush_l2);
      c.record.iterations = int(c.record.timing.times_ms.size());
      if (!best || c.record.timing.median < best->timing.median)
        best = &c.record;
    } catch (const std::exception& e) {
      c.record.error = fmt::format("run: {}", e.what());
      try {
        stream.synchronize();
      } catch (...) {
      }
    }
    progress.update(fmt::format("timed {}/{}{}", ++done, total,
                                best ? fmt::format(", best {:.4f} ms ({} {})", best->timing.median,
                                                   best->implementation, best->config.to_json())
                                     : std::string()));
  }
}

/// Everything about a call and the options that can be wrong without a device, so that a
/// bad call is refused before a GPU is touched (or found missing).
void check_call(const Op& op, const BoundArgs& args, const AutotuneOptions& options) {
  if (args.op != op.name())
    throw Error(fmt::format("autotune {}: the arguments are bound for op \"{}\"", op.name(),
                            args.op));
  if (options.iterations < 1)
    throw Error(fmt::format("autotune: iterations must be >= 1 (got {})", options.iterations));
  if (options.warmup < 0)
    throw Error(fmt::format("autotune: warmup must be >= 0 (got {})", options.warmup));
  op.validate(args);
  for (const std::string& name : options.implementations)
    (void)op.implementation(name);  // throws listing the known names
}

const Op& registered_op(const BoundArgs& args) {
  const Op* op = find_op(args.op);
  if (!op)
    throw Error(fmt::format("autotune: no registered op named \"{}\"", args.op));
  return *op;
}

TuningEntry tune_one(const Op& op, const BoundArgs& args, Device& device,
                     const AutotuneOptions& options) {
  check_call(op, args, options);
  std::vector<Candidate> candidates = enumerate(op, args, device, options);
  Progress progress(options.progress, op.name());
  compile_all(candidates, args, device, options, progress);
  time_all(candidates, args, op, device, options, progress);

  TuningEntry entry;
  entry.args = args;
  const TuningRecord* best = nullptr;
  for (const Candidate& c : candidates) {
    entry.candidates.push_back(c.record);
    if (c.record.ok() && (!best || c.record.timing.median < best->timing.median))
      best = &c.record;
  }
  if (!best) {
    std::string errors;
    for (const TuningRecord& r : entry.candidates)
      errors += fmt::format("\n  {} {}: {}", r.implementation, r.config.to_json(), r.error);
    throw Error(fmt::format("autotune {}: no candidate could be timed:{}", op.name(), errors));
  }
  entry.implementation = best->implementation;
  entry.config = best->config;
  return entry;
}

void persist(const AutotuningResult& result, const AutotuneOptions& options) {
  if (!options.update_cache)
    return;
  try {
    update_autotuning_cache(result);
  } catch (const Error& e) {
    // The result is still returned; only its persistence failed.
    std::fprintf(stderr, "tokamax: warning: the autotuning cache was not updated: %s\n",
                 e.what());
  }
}

} // namespace

AutotuningResult autotune(const Op& op, const BoundArgs& args, const AutotuneOptions& options) {
  check_call(op, args, options);
  Device& device = Device::get(options.device);
  AutotuningResult result(DeviceInfo::of(device));
  result.add(tune_one(op, args, device, options));
  persist(result, options);
  return result;
}

AutotuningResult autotune(const std::vector<BoundArgs>& calls, const AutotuneOptions& options) {
  for (const BoundArgs& args : calls)
    check_call(registered_op(args), args, options);
  Device& device = Device::get(options.device);
  AutotuningResult result(DeviceInfo::of(device));
  for (const BoundArgs& args : calls) {
    if (result.find(args))
      continue;
    result.add(tune_one(registered_op(args), args, device, options));
  }
  persist(result, options);
  return result;
}

} // namespace tokamax
