//===- Search.cpp - Pruning and the successive-halving schedule -----------===//
#include <tokamax/autotune/Search.h>

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tokamax {

//===----------------------------------------------------------------------===//
// Targets
//===----------------------------------------------------------------------===//

AutotuneTarget AutotuneTarget::of(const Device& device) {
  AutotuneTarget t;
  t.arch = device.arch();
  t.max_shared_bytes = device.max_shared_memory_per_block_optin();
  return t;
}

AutotuneTarget AutotuneTarget::for_arch(const std::string& arch) {
  const Arch target = Arch::parse(arch, "AutotuneTarget::for_arch");
  AutotuneTarget t;
  t.arch = target.name();
  t.max_shared_bytes = uint64_t(target.shared_memory_per_block());  // 0: unknown, not checked
  return t;
}

//===----------------------------------------------------------------------===//
// Pruning
//===----------------------------------------------------------------------===//

namespace {

std::optional<std::string> cannot_launch(const std::vector<KernelResources>& kernels,
                                         const AutotuneTarget& target) {
  for (const KernelResources& k : kernels) {
    if (target.max_shared_bytes && k.shared_bytes > target.max_shared_bytes)
      return fmt::format("kernel {} needs {} bytes of shared memory per block, the device allows {}",
                         k.name, k.shared_bytes, target.max_shared_bytes);
    if (k.threads > target.max_threads_per_block)
      return fmt::format("kernel {} needs {} threads per block, the device allows {}", k.name,
                         k.threads, target.max_threads_per_block);
    if (uint64_t(k.registers) * k.threads > target.registers_per_block)
      return fmt::format("kernel {} needs {} registers x {} threads per block, the device has {}",
                         k.name, k.registers, k.threads, target.registers_per_block);
  }
  return std::nullopt;
}

const KernelResources* worst_spill(const std::vector<KernelResources>& kernels) {
  const KernelResources* worst = nullptr;
  for (const KernelResources& k : kernels)
    if (k.local_bytes > 0 && (!worst || k.local_bytes > worst->local_bytes))
      worst = &k;
  return worst;
}

} // namespace

std::vector<std::optional<std::string>> prune_reasons(std::span<const PruneInput> inputs,
                                                      const AutotuneTarget& target) {
  std::vector<std::optional<std::string>> reasons(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].kernels)
      reasons[i] = cannot_launch(*inputs[i].kernels, target);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (reasons[i] || !inputs[i].kernels)
      continue;
    const KernelResources* spill = worst_spill(*inputs[i].kernels);
    if (!spill)
      continue;
    // Spilling is only worth avoiding when the implementation has a way around it.
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (j == i || reasons[j] || !inputs[j].kernels ||
          inputs[j].implementation != inputs[i].implementation || worst_spill(*inputs[j].kernels))
        continue;
      reasons[i] = fmt::format(
          "spills: kernel {} has a {}-byte stack frame (local memory) while {} {} has none",
          spill->name, spill->local_bytes, inputs[j].implementation, inputs[j].config.to_json());
      break;
    }
  }
  return reasons;
}

//===----------------------------------------------------------------------===//
// Successive halving
//===----------------------------------------------------------------------===//

HalvingSchedule HalvingSchedule::of(const AutotuneOptions& options) {
  return HalvingSchedule{options.iterations, options.first_round_iterations, options.keep_fraction,
                         options.finalists};
}

void HalvingSchedule::validate() const {
  if (iterations < 1)
    throw Error(fmt::format("autotune: iterations must be >= 1 (got {})", iterations));
  if (first_round_iterations < 0)
    throw Error(fmt::format("autotune: first_round_iterations must be >= 0 (got {})",
                            first_round_iterations));
  if (!(keep_fraction > 0 && keep_fraction < 1))
    throw Error(fmt::format("autotune: keep_fraction must be in (0, 1) (got {})", keep_fraction));
  if (finalists < 1)
    throw Error(fmt::format("autotune: finalists must be >= 1 (got {})", finalists));
}

std::optional<size_t> successive_halving(std::vector<TuningRecord>& records,
                                         std::span<const size_t> to_time,
                                         const HalvingSchedule& schedule,
                                         const CandidateTimer& timer,
                                         std::vector<size_t>* timed_per_round) {
  schedule.validate();
  std::vector<size_t> alive;
  for (size_t i : to_time) {
    if (i >= records.size())
      throw Error(fmt::format("successive_halving: index {} is past the {} records", i,
                              records.size()));
    if (records[i].ok())
      alive.push_back(i);
  }
  const size_t finalists = size_t(schedule.finalists);
  const bool halve = schedule.first_round_iterations > 0 &&
                     schedule.first_round_iterations < schedule.iterations;
  int iterations = halve ? schedule.first_round_iterations : schedule.iterations;
  for (int round = 0; !alive.empty(); ++round) {
    const bool final_round = !halve || alive.size() <= finalists || iterations >= schedule.iterations;
    if (final_round)
      iterations = schedule.iterations;
    if (timed_per_round)
      timed_per_round->push_back(alive.size());
    std::vector<size_t> timed;
    for (size_t i : alive) {
      TuningRecord& r = records[i];
      try {
        BenchmarkData data = timer(i, round, iterations);
        r.iterations = data.times_ms.empty() ? iterations : int(data.times_ms.size());
        r.rounds.push_back({r.iterations, data.median});
        r.timing = std::move(data);
        timed.push_back(i);
      } catch (const std::exception& e) {
        r.error = fmt::format("run: {}", e.what());
      }
    }
    // Stable: equal medians keep the earlier record first.
    std::stable_sort(timed.begin(), timed.end(), [&](size_t a, size_t b) {
      return records[a].timing.median < records[b].timing.median;
    });
    if (final_round) {
      for (size_t i : timed)
        records[i].finalist = true;
      break;
    }
    const size_t keep = std::max(
        finalists, size_t(std::ceil(double(timed.size()) * schedule.keep_fraction - 1e-9)));
    if (timed.size() > keep)
      timed.resize(keep);
    alive = std::move(timed);
    iterations = int(std::min<double>(schedule.iterations,
                                      std::ceil(iterations / schedule.keep_fraction - 1e-9)));
  }

  // The fastest finalist; failing that, whoever got furthest.
  std::optional<size_t> best;
  for (size_t i : to_time) {
    const TuningRecord& r = records[i];
    if (!r.ok() || r.rounds.empty())
      continue;
    if (!best)
      best = i;
    const TuningRecord& b = records[*best];
    if (r.finalist != b.finalist ? r.finalist
        : r.rounds.size() != b.rounds.size() ? r.rounds.size() > b.rounds.size()
                                             : r.timing.median < b.timing.median)
      best = i;
  }
  return best;
}

} // namespace tokamax
