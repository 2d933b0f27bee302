//===- Autotune.cpp - Compile, prune, time in rounds, choose --------------===//
//
// autotune(calls):
//   1. enumerate, compile and prune every call's candidates (CompilePhase.cpp: one pool
//      of threads over all calls, so small calls do not leave cores idle);
//   2. timing, call by call: one stream, inputs and outputs from standardize (seed +
//      argument index), benchmark() per candidate in rounds of successive halving
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
#include <chrono>
#include <cstdio>

namespace tokamax {

void AutotuneStats::add(const AutotuneStats& other) {
  enumerate_s += other.enumerate_s;
  compile_s += other.compile_s;
  timing_s += other.timing_s;
  calls += other.calls;
  candidates += other.candidates;
  invalid += other.invalid;
  compiled += other.compiled;
  compile_failed += other.compile_failed;
  kernels += other.kernels;
  kernels_cached += other.kernels_cached;
  pruned += other.pruned;
  run_failed += other.run_failed;
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
    text += fmt::format(", timing {:.2f} s (rounds {})", timing_s,
                        fmt::join(timed_per_round, " -> "));
  if (compile_failed || run_failed)
    text += fmt::format(", {} failed to compile, {} to run", compile_failed, run_failed);
  return text;
}

namespace {

using detail::CallSearch;
using detail::Candidate;
using detail::Progress;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TuningEntry time_call(CallSearch& call, Device& device, Stream& stream,
                      const AutotuneOptions& options, Progress& progress, AutotuneStats& stats) {
  const BoundArgs& args = call.args;
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
  for (size_t i : to_time)
    call_stats.run_failed += !records[i].ok();
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
  for (CallSearch& call : searches) {
    TuningEntry entry = time_call(call, device, stream, options, progress, stats);
    stats.timing_s = seconds_since(start);
    result.add(std::move(entry));
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
