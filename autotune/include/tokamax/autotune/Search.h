//===- Search.h - The decisions of autotuning, apart from devices -*- C++ -*-===//
//
// The pieces of autotune() that decide, as pure functions over what they are given, so
// they can be driven with fake timers and fake kernel records:
//   - kernel_resources: what a cubin records about each kernel (registers, local memory);
//   - prune_reasons: which compiled candidates are not worth timing, and why;
//   - successive_halving: the timing schedule over a timing callback.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/autotune/Autotune.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax {

/// One compiled kernel's demands on a streaming multiprocessor.
struct TOKAMAX_API KernelResources {
  std::string name;
  uint32_t registers = 0;     ///< per thread
  uint32_t local_bytes = 0;   ///< per thread: the stack frame (register spills, local arrays)
  uint32_t shared_bytes = 0;  ///< per block (launch metadata)
  uint32_t threads = 0;       ///< per block (launch metadata)
};

/// The register count and stack frame of every kernel in `cubin`, from the ELF's
/// .nv.info attributes (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE) that
/// the assembler writes; shared_bytes and threads are left 0 for the caller to fill from
/// the launch metadata. Throws Error naming the problem when `cubin` is not a 64-bit ELF
/// or is truncated.
TOKAMAX_API std::vector<KernelResources> kernel_resources(std::span<const uint8_t> cubin);

/// A compiled candidate as pruning sees it.
struct TOKAMAX_API PruneInput {
  std::string implementation;
  Config config;
  /// Every kernel the candidate launches; nullopt when unknown (no cubin to inspect):
  /// such a candidate is never pruned and never serves as the spill-free example.
  std::optional<std::vector<KernelResources>> kernels;
};

/// For each input, why it should not be timed (without the "pruned: " prefix), or
/// nullopt:
///   - a kernel that cannot launch on `target`: shared memory above max_shared_bytes,
///     registers x threads above registers_per_block, threads above the maximum;
///   - a kernel that spills (local_bytes > 0) when another launchable candidate of the
///     same implementation has no kernel that does ("spills: kernel k has a 280-byte
///     stack frame (local memory) while tile {...} has none"). The stack frame also
///     holds local arrays, which the tile compiler does not make: it is the spills.
TOKAMAX_API std::vector<std::optional<std::string>> prune_reasons(std::span<const PruneInput> inputs,
                                                                 const AutotuneTarget& target);

/// The successive-halving schedule (AutotuneOptions documents the fields).
struct TOKAMAX_API HalvingSchedule {
  int iterations = 20;
  int first_round_iterations = 3;
  double keep_fraction = 1.0 / 3;
  int finalists = 3;

  static HalvingSchedule of(const AutotuneOptions& options);
  /// Throws Error naming the field when a value is out of range.
  void validate() const;
};

/// Times candidate `index` with `iterations` in round `round` (0 first); throws when it
/// cannot run.
using CandidateTimer = std::function<BenchmarkData(size_t index, int round, int iterations)>;

/// Runs the schedule over records[i] for every i in `to_time` (records that are not ok()
/// are skipped). Each timed record gets `rounds`, `timing` (its last round), `iterations`
/// and `finalist`; one that throws gets error "run: <what>" and leaves the schedule.
/// Ranking within a round is by median, ties to the earlier record. Returns the index of
/// the chosen record (the fastest finalist; if every finalist failed, the record that got
/// furthest, then the fastest), or nullopt when none was timed; `timed_per_round` (when
/// given) receives how many records each round timed.
TOKAMAX_API std::optional<size_t> successive_halving(std::vector<TuningRecord>& records,
                                                     std::span<const size_t> to_time,
                                                     const HalvingSchedule& schedule,
                                                     const CandidateTimer& timer,
                                                     std::vector<size_t>* timed_per_round = nullptr);

} // namespace tokamax
