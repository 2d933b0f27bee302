//===- Autotune.cpp - Compile, prune, time in rounds, choose --------------===//
//
// autotune(calls):
//   1. enumerate, compile and prune every call's candidates (CompilePhase.cpp: one pool
//      of threads over all calls, so small calls do not leave cores idle);
//   2. timing, call by call: one stream, inputs from standardize (seed + argument index,
//      made in parallel for a group of calls), outputs allocated, benchmark() per
//      candidate in rounds of successive halving
//      (Search.h), warm-up before a candidate's first round, L2 flush per iteration;
//   3. choice: the fastest finalist; every candidate's rounds, error or pruning reason
//      is kept. stats() says how long each phase took and how many candidates it kept.
//
//===----------------------------------------------------------------------===//
#include "Phases.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

namespace tokamax {

void AutotuneStats::add(const AutotuneStats& other) {
  enumerate_s += other.enumerate_s;
  compile_s += other.compile_s;
  timing_s += other.timing_s;
  inputs_s += other.inputs_s;
  calls += other.calls;
  candidates += other.candidates;
  invalid += other.invalid;
  compiled += other.compiled;
  compile_failed += other.compile_failed;
  kernels += other.kernels;
  kernels_cached += other.kernels_cached;
  pruned += other.pruned;
  run_failed += other.run_failed;
  mismatched += other.mismatched;
  if (timed_per_round.size() < other.timed_per_round.size())
    timed_per_round.resize(other.timed_per_round.size());
  for (size_t i = 0; i < other.timed_per_round.size(); ++i)
    timed_per_round[i] += other.timed_per_round[i];
}

std::string AutotuneStats::summary() const {
  std::string text = fmt::format(
      "compile {:.2f} s ({} candidates, {} compiled, {} kernels, {} cached), {} pruned", compile_s,
      candidates - invalid, compiled, kernels, kernels_cached, pruned);
  if (!timed_per_round.empty())
    text += fmt::format(", timing {:.2f} s (inputs {:.2f} s, rounds {})", timing_s, inputs_s,
                        fmt::join(timed_per_round, " -> "));
  if (compile_failed || run_failed)
    text += fmt::format(", {} failed to compile, {} to run", compile_failed, run_failed);
  if (mismatched)
    text += fmt::format(", {} dropped: outputs unlike the others'", mismatched);
  return text;
}

namespace {

using detail::CallSearch;
using detail::Candidate;
using detail::Progress;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A call's device tensors: inputs from standardize (seed + argument index), shared by
// calls that have the same input spec and seed; outputs allocated, not filled (every op
// writes its outputs, and their contents do not change its time).
struct CallTensors {
  std::vector<std::shared_ptr<Tensor>> tensors;  // null for absent arguments
  std::vector<TensorView> views;
};

// Generating random inputs on the host is serial per tensor and takes about a second per
// hundred million elements: the tensors of a group of calls are made in parallel, the
// group bounded by half the free device memory.
std::vector<CallTensors> make_tensors(std::span<CallSearch> calls, Device& device,
                                      const AutotuneOptions& options) {
  struct Job {
    TensorSpec spec;
    uint32_t seed = 0;
    bool input = false;
    std::shared_ptr<Tensor> tensor;
  };
  std::vector<Job> jobs;
  std::vector<std::vector<std::optional<size_t>>> job_of(calls.size());
  std::map<std::tuple<std::vector<int64_t>, DType, uint32_t>, size_t> shared_inputs;
  for (size_t c = 0; c < calls.size(); ++c) {
    const BoundArgs& args = calls[c].args;
    const size_t num_inputs = calls[c].op->num_inputs();
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (!args.args[i]) {
        job_of[c].push_back(std::nullopt);
        continue;
      }
      Job job{TensorSpec{args.args[i]->shape, args.args[i]->dtype}, options.seed + uint32_t(i),
              i < num_inputs, nullptr};
      if (job.input) {
        auto [it, fresh] = shared_inputs.try_emplace({job.spec.shape, job.spec.dtype, job.seed},
                                                     jobs.size());
        if (!fresh) {
          job_of[c].push_back(it->second);
          continue;
        }
      }
      job_of[c].push_back(jobs.size());
      jobs.push_back(std::move(job));
    }
  }
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
      try {
        Job& job = jobs[j];
        job.tensor = std::make_shared<Tensor>(
            job.input ? standardize(job.spec, job.seed, device)
                      : Tensor::empty(std::span<const int64_t>(job.spec.shape), job.spec.dtype,
                                      device));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error)
          error = std::current_exception();
      }
    }
  };
  const unsigned threads =
      unsigned(std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), jobs.size()));
  detail::run_on_threads(threads, worker);
  if (error)
    std::rethrow_exception(error);

  std::vector<CallTensors> out(calls.size());
  for (size_t c = 0; c < calls.size(); ++c)
    for (const std::optional<size_t>& j : job_of[c]) {
      out[c].tensors.push_back(j ? jobs[*j].tensor : nullptr);
      out[c].views.push_back(j ? jobs[*j].tensor->view() : TensorView());
    }
  return out;
}

TuningEntry time_call(CallSearch& call, const CallTensors& tensors, Stream& stream,
                      const AutotuneOptions& options, Progress& progress, AutotuneStats& stats) {
  const BoundArgs& args = call.args;
  const std::vector<TensorView>& views = tensors.views;
  const size_t num_inputs = std::min(call.op->num_inputs(), views.size());
  const std::span<const TensorView> inputs(views.data(), num_inputs);
  const std::span<const TensorView> outputs(views.data() + num_inputs, views.size() - num_inputs);

  std::vector<TuningRecord> records;
  std::vector<size_t> to_time;
  for (const Candidate& c : call.candidates) {
    if (c.record.ok())
      to_time.push_back(records.size());
    records.push_back(c.record);
  }
  const std::vector<size_t> runnable = to_time;
  if (options.check_agreement) {
    progress.update(fmt::format("{}: comparing {} candidates' outputs", call.op->name(), to_time.size()));
    stats.mismatched += detail::drop_disagreeing(call, records, to_time, inputs, outputs, stream);
  }
  int shown_round = -1;
  size_t done = 0;
  std::optional<std::pair<double, size_t>> best;  // of the round being timed
  auto timer = [&](size_t i, int round, int iterations) {
    const Candidate& c = call.candidates[i];
    if (round != shown_round) {
      shown_round = round;
      done = 0;
      best.reset();
    }
    try {
      BenchmarkData data = benchmark(
          stream, [&] { c.impl->run(args, c.record.config, inputs, outputs, stream); },
          options.timing, iterations, round == 0 ? options.warmup : std::min(options.warmup, 1),
          options.flush_l2);
      if (!best || data.median < best->first)
        best = {data.median, i};
      progress.update(fmt::format("{}: round {}, timed {} x {} iterations, best {:.4f} ms ({} {})",
                                  call.op->name(), round + 1, ++done, iterations, best->first,
                                  records[best->second].implementation,
                                  records[best->second].config.to_json()));
      return data;
    } catch (...) {
      try {
        stream.synchronize();  // leave the stream usable for the next candidate
      } catch (...) {
      }
      throw;
    }
  };
  std::vector<size_t> per_round;
  std::optional<size_t> chosen =
      successive_halving(records, to_time, HalvingSchedule::of(options), timer, &per_round);
  AutotuneStats call_stats;
  call_stats.timed_per_round = per_round;
  for (size_t i : runnable)
    call_stats.run_failed += records[i].error.starts_with("run: ");
  stats.add(call_stats);

  TuningEntry entry;
  entry.args = args;
  entry.candidates = std::move(records);
  if (!chosen) {
    std::string errors;
    for (const TuningRecord& r : entry.candidates)
      errors += fmt::format("\n  {} {}: {}", r.implementation, r.config.to_json(), r.error);
    throw Error(fmt::format("autotune {}: no candidate could be timed:{}", call.op->name(), errors));
  }
  entry.implementation = entry.candidates[*chosen].implementation;
  entry.config = entry.candidates[*chosen].config;
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

AutotuningResult tune(std::span<const detail::OpCall> calls, const AutotuneOptions& options) {
  for (const auto& [op, args] : calls)
    detail::check_call(*op, args, options);  // before a device is looked for
  Device& device = Device::get(options.device);
  const AutotuneTarget target = AutotuneTarget::of(device);
  AutotuneStats stats;
  std::vector<CallSearch> searches = detail::enumerate_calls(calls, target.arch, options, stats);
  Progress progress(options.progress);
  detail::compile_and_prune(searches, target, options, progress, stats);

  const auto start = std::chrono::steady_clock::now();
  device.make_current();
  Stream stream = Stream::create(device);
  AutotuningResult result(DeviceInfo::of(device));
  // Groups of calls whose tensors fit in half the free memory get them made together.
  const size_t budget = device.free_memory() / 2;
  for (size_t first = 0; first < searches.size();) {
    size_t last = first, bytes = 0;
    for (; last < searches.size(); ++last) {
      size_t call_bytes = 0;
      for (const std::optional<ArgSpec>& a : searches[last].args.args)
        if (a)
          call_bytes += size_t(TensorSpec{a->shape, a->dtype}.numel()) * dtype_size(a->dtype);
      if (last > first && bytes + call_bytes > budget)
        break;
      bytes += call_bytes;
    }
    progress.update(fmt::format("making the inputs of {} calls", last - first));
    std::span<CallSearch> group(searches.data() + first, last - first);
    const auto inputs_start = std::chrono::steady_clock::now();
    std::vector<CallTensors> tensors = make_tensors(group, device, options);
    stats.inputs_s += seconds_since(inputs_start);
    for (size_t c = 0; c < group.size(); ++c)
      result.add(time_call(group[c], tensors[c], stream, options, progress, stats));
    first = last;
  }
  stats.timing_s = seconds_since(start);
  result.set_stats(std::move(stats));
  persist(result, options);
  return result;
}

} // namespace

AutotuningResult autotune(const Op& op, const BoundArgs& args, const AutotuneOptions& options) {
  const detail::OpCall call{&op, args};
  return tune({&call, 1}, options);
}

AutotuningResult autotune(const std::vector<BoundArgs>& calls, const AutotuneOptions& options) {
  std::vector<detail::OpCall> resolved;
  for (const BoundArgs& args : calls)
    resolved.push_back({&detail::registered_op(args), args});
  return tune(resolved, options);
}

AutotuneCompileReport autotune_compile(const std::vector<BoundArgs>& calls,
                                       const AutotuneTarget& target,
                                       const AutotuneOptions& options) {
  std::vector<detail::OpCall> resolved;
  for (const BoundArgs& args : calls)
    resolved.push_back({&detail::registered_op(args), args});
  AutotuneCompileReport report;
  std::vector<CallSearch> searches =
      detail::enumerate_calls(resolved, target.arch, options, report.stats);
  Progress progress(options.progress);
  detail::compile_and_prune(searches, target, options, progress, report.stats);
  for (CallSearch& call : searches) {
    TuningEntry entry;
    entry.args = call.args;
    for (Candidate& c : call.candidates)
      entry.candidates.push_back(std::move(c.record));
    report.calls.push_back(std::move(entry));
  }
  return report;
}

} // namespace tokamax
