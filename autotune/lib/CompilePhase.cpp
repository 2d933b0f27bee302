//===- CompilePhase.cpp - Enumerate, compile in parallel, prune ----------===//
//
// Before anything runs on a device:
//   1. candidates: every implementation that runs on the arch and can serve the call,
//      times each distinct config of its search space (check_config failures become
//      records, not candidates);
//   2. compile: one pool of std::threads over the candidates of every call builds each
//      candidate's DSL kernels and compiles them into the on-disk kernel cache
//      (precompile), each distinct kernel (name and tile IR) once, so the timing phase
//      only loads cubins. The pool is bounded by the cores, by available memory (1 GiB
//      per compiling thread) and by the number of candidates. With the disk cache
//      disabled only the DSL kernels are built here, and compilation happens at the
//      first run;
//   3. pruning: the cubins' register counts and stack frames with the launch metadata
//      (Search.h's prune_reasons).
//
//===----------------------------------------------------------------------===//
#include "Phases.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include <unistd.h>

namespace tokamax::detail {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

std::vector<Candidate> enumerate(const Op& op, const BoundArgs& args, const std::string& arch,
                                 const AutotuneOptions& options) {
  std::vector<Candidate> candidates;
  std::vector<std::string> reasons;
  for (const auto& impl : op.implementations()) {
    const std::string name = impl->name();
    if (!options.implementations.empty() &&
        std::find(options.implementations.begin(), options.implementations.end(), name) ==
            options.implementations.end())
      continue;
    if (!impl->supported_on(arch)) {
      reasons.push_back(fmt::format("{}: does not run on {}", name, arch));
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
      Candidate c{impl.get(), {}, std::nullopt};
      c.record.implementation = name;
      c.record.error = fmt::format("search space: {}", e.what());
      candidates.push_back(std::move(c));
      continue;
    }
    std::vector<Config> seen;
    for (Config& config : space) {
      if (std::find(seen.begin(), seen.end(), config) != seen.end())
        continue;
      seen.push_back(config);
      Candidate c{impl.get(), {}, std::nullopt};
      c.record.implementation = name;
      c.record.config = config;
      if (auto problem = impl->check_config(args, config))
        c.record.error = "invalid config: " + *problem;
      candidates.push_back(std::move(c));
    }
  }
  if (candidates.empty())
    throw NotSupported(fmt::format("autotune {}: no implementation can serve the call on {} ({})",
                                   op.name(), arch,
                                   reasons.empty() ? "none selected" : fmt::format("{}", fmt::join(reasons, "; "))));
  return candidates;
}

// One distinct kernel's compile: its resources when its cubin could be read.
struct KernelOutcome {
  std::optional<KernelResources> resources;
  bool cached = false;
};

std::optional<KernelResources> resources_of(const CompiledKernel& kernel) {
  if (kernel.cubin.empty())
    return std::nullopt;
  std::vector<KernelResources> found;
  try {
    found = kernel_resources(kernel.cubin);
  } catch (const Error&) {
    return std::nullopt;  // an unreadable record only means the candidate is not pruned
  }
  auto it = std::find_if(found.begin(), found.end(), [&](const KernelResources& k) {
    return k.name == kernel.launch.kernel_name;
  });
  if (it == found.end()) {
    if (found.size() != 1)
      return std::nullopt;
    it = found.begin();
  }
  KernelResources r = *it;
  r.shared_bytes = kernel.launch.shared_bytes;
  r.threads = kernel.launch.block_threads;
  return r;
}

} // namespace

Progress::Progress(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)) {}

Progress::~Progress() {
  if (enabled_ && printed_)
    std::fprintf(stderr, "\r\033[K");
}

void Progress::update(const std::string& status) {
  if (!enabled_)
    return;
  std::lock_guard lock(mutex_);
  std::fprintf(stderr, "\r\033[Ktokamax autotune %s", status.c_str());
  std::fflush(stderr);
  printed_ = true;
}

void check_call(const Op& op, const BoundArgs& args, const AutotuneOptions& options) {
  if (args.op != op.name())
    throw Error(fmt::format("autotune {}: the arguments are bound for op \"{}\"", op.name(),
                            args.op));
  if (options.warmup < 0)
    throw Error(fmt::format("autotune: warmup must be >= 0 (got {})", options.warmup));
  HalvingSchedule::of(options).validate();
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

std::vector<CallSearch> enumerate_calls(std::span<const OpCall> calls, const std::string& arch,
                                        const AutotuneOptions& options, AutotuneStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [op, args] : calls)
    check_call(*op, args, options);
  std::vector<CallSearch> out;
  for (const auto& [op, args] : calls) {
    if (std::any_of(out.begin(), out.end(), [&](const CallSearch& c) { return c.args == args; }))
      continue;
    out.push_back(CallSearch{op, args, enumerate(*op, args, arch, options)});
    for (const Candidate& c : out.back().candidates)
      stats.invalid += !c.record.ok();
    stats.candidates += out.back().candidates.size();
  }
  stats.calls += out.size();
  stats.enumerate_s += seconds_since(start);
  return out;
}

void compile_and_prune(std::vector<CallSearch>& calls, const AutotuneTarget& target,
                       const AutotuneOptions& options, Progress& progress, AutotuneStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<const CallSearch*, Candidate*>> todo;
  for (CallSearch& call : calls)
    for (Candidate& c : call.candidates)
      if (c.record.ok())
        todo.push_back({&call, &c});
  const unsigned threads = compile_threads(options.compile_threads, todo.size());
  const bool use_disk = !DiskCache::disabled_by_environment();
  const std::string cache_dir = DiskCache::default_directory().string();
  CompileOptions compile_options;
  compile_options.arch = target.arch;

  // Candidates of one op often share kernels (a config that only changes another
  // kernel): each distinct kernel is compiled by the first thread that needs it.
  std::mutex kernels_mutex;
  std::map<std::string, std::shared_future<KernelOutcome>> kernels;
  std::atomic<size_t> next{0}, done{0}, cached{0};
  auto compile_kernel = [&](const dsl::Kernel& kernel) -> KernelOutcome {
    std::string ir = kernel.ir();
    std::string key = kernel.name() + '\n' + ir;
    std::promise<KernelOutcome> promise;
    std::shared_future<KernelOutcome> future;
    {
      std::lock_guard lock(kernels_mutex);
      auto [it, inserted] = kernels.try_emplace(std::move(key));
      if (!inserted) {
        future = it->second;
      } else {
        it->second = promise.get_future().share();
      }
    }
    if (future.valid())
      return future.get();  // rethrows the compiling thread's error
    try {
      PrecompileResult r = precompile_ir(kernel.name(), ir, compile_options, cache_dir);
      KernelOutcome outcome{resources_of(r.kernel), r.cache_hit};
      cached += r.cache_hit;
      promise.set_value(outcome);
      return outcome;
    } catch (...) {
      promise.set_exception(std::current_exception());
      throw;
    }
  };
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      const CallSearch& call = *todo[i].first;
      Candidate& c = *todo[i].second;
      try {
        std::vector<dsl::Kernel> built = c.impl->kernels(call.args, c.record.config);
        if (use_disk) {
          std::vector<KernelResources> resources;
          bool known = true;
          for (const dsl::Kernel& kernel : built) {
            KernelOutcome outcome = compile_kernel(kernel);
            known = known && outcome.resources.has_value();
            if (outcome.resources)
              resources.push_back(*outcome.resources);
          }
          if (known)
            c.kernels = std::move(resources);
        }
      } catch (const std::exception& e) {
        c.record.error = fmt::format("compile: {}", e.what());
      }
      progress.update(fmt::format("compiled {}/{} candidates of {} calls ({} threads)",
                                  done.fetch_add(1) + 1, todo.size(), calls.size(), threads));
    }
  };
  if (threads > 0)
    run_on_threads(threads, worker);
  for (const auto& [call, c] : todo)
    (c->record.ok() ? stats.compiled : stats.compile_failed) += 1;
  stats.kernels += kernels.size();
  stats.kernels_cached += cached.load();
  stats.compile_s += seconds_since(start);

  if (!options.prune)
    return;
  for (CallSearch& call : calls) {
    std::vector<Candidate*> compiled;
    std::vector<PruneInput> inputs;
    for (Candidate& c : call.candidates) {
      if (!c.record.ok())
        continue;
      compiled.push_back(&c);
      inputs.push_back(PruneInput{c.record.implementation, c.record.config, c.kernels});
    }
    std::vector<std::optional<std::string>> reasons = prune_reasons(inputs, target);
    for (size_t i = 0; i < compiled.size(); ++i) {
      if (!reasons[i])
        continue;
      compiled[i]->record.error = "pruned: " + *reasons[i];
      ++stats.pruned;
    }
  }
}

void run_on_threads(unsigned threads, const std::function<void()>& worker) {
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool)
    t.join();
}

} // namespace tokamax::detail
