//===- Autotune.h - Search spaces, timing, results, scopes, device cache -*- C++ -*-===//
//
// autotune(op, args) finds the fastest (implementation, config) for one bound call:
//   1. every implementation that runs on the device and can serve the call offers its
//      search_space(args) (invalid configs are recorded with the reason);
//   2. the candidates' kernels are compiled in parallel into the on-disk kernel cache
//      (a std::thread pool bounded by the cores and by available memory; a progress line
//      on a TTY);
//   3. candidates that cannot launch on the device (shared memory, registers) or whose
//      kernels spill to local memory while another candidate of the same implementation
//      does not are pruned, with the reason recorded (Search.h);
//   4. the rest run once on the device with random, never-zero inputs (standardize);
//      those whose outputs disagree with the others' are dropped (check_agreement), and
//      the others are timed on the same inputs, with an L2 flush per iteration, in
//      rounds of successive halving: every candidate briefly,
//      then the best fraction again with more iterations, until the last few get the
//      full iterations; the fastest median of the final round wins. A candidate that
//      fails to compile or run is recorded with its error, not fatal.
// The result is an AutotuningResult: per BoundArgs, the choice and every candidate's
// numbers. It serialises to versioned JSON, merges, and applies to calls in two ways:
//   - AutotuningScope (RAII) pushes it as a config provider (Op.h) of the thread that
//     opens it, for that thread's calls only (another thread handed the result opens a
//     scope of its own); nested scopes: the innermost that has a config for the call
//     wins; leaving a scope restores the outer.
//   - a per-device autotuning cache, <kernel cache dir>/autotune/<device key>.json,
//     written by autotune() (atomically: temp file + rename) and read by a provider that
//     libtokamax installs at load time beneath every scope.
// Config resolution is therefore: explicit config -> the calling thread's scopes
// (innermost first) -> the per-device cache -> the implementation's heuristic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Export.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tokamax {

class Device;

/// The device a result was tuned on. An empty name means "unknown" (e.g. built by hand).
struct TOKAMAX_API DeviceInfo {
  std::string name;  ///< "NVIDIA H200"
  std::string arch;  ///< "sm_90a"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;

  static DeviceInfo of(const Device& device);
  /// File-name-safe key: name, compute capability and SM count, every character outside
  /// [A-Za-z0-9._-] replaced by '_': "NVIDIA_H200-cc9.0-132sm".
  std::string key() const;
  bool empty() const { return name.empty(); }
  bool operator==(const DeviceInfo&) const = default;
};

/// One timed (or failed) candidate.
struct TOKAMAX_API TuningRecord {
  std::string implementation;
  Config config;
  /// The timing summary. Only the statistics and the method are persisted: times_ms is
  /// empty after loads(); `iterations` keeps their count.
  BenchmarkData timing;
  int iterations = 0;
  /// Why it could not be timed ("invalid config: ...", "compile: ...", "pruned: ...",
  /// "run: ..."); empty when it was.
  std::string error;
  /// Its median in each successive-halving round it was timed in, first round first;
  /// `timing` is the last of them. Empty for candidates never timed and in results
  /// written before rounds were recorded.
  struct Round {
    int iterations = 0;
    double median_ms = 0;
    bool operator==(const Round&) const = default;
  };
  std::vector<Round> rounds;
  /// Timed in the final round (with AutotuneOptions::iterations); false for a candidate
  /// eliminated after rounds.size() rounds. Loaded as true for timed candidates of
  /// results that predate the field (they were all timed in full).
  bool finalist = false;

  bool ok() const { return error.empty(); }
  bool pruned() const { return error.starts_with("pruned: "); }
};

/// The choice for one call and the candidates it was chosen from.
struct TOKAMAX_API TuningEntry {
  BoundArgs args;
  std::string implementation;  ///< chosen
  Config config;               ///< chosen
  std::vector<TuningRecord> candidates;  ///< may be empty (e.g. written by hand)
};

/// Where the time of an autotune() run went and how many candidates each phase kept
/// (not persisted: a result read back from JSON has zeros).
struct TOKAMAX_API AutotuneStats {
  double enumerate_s = 0;  ///< search spaces and config checks
  double compile_s = 0;    ///< building DSL kernels, compiling or finding them on disk
  double timing_s = 0;     ///< inputs, loading kernels, every timing round
  double inputs_s = 0;     ///< of timing_s: making the random inputs
  size_t calls = 0;        ///< distinct calls tuned
  size_t candidates = 0;   ///< distinct configs enumerated
  size_t invalid = 0;      ///< refused by check_config or the search space
  size_t compiled = 0;     ///< candidates whose kernels all compiled or were cached
  size_t compile_failed = 0;
  size_t kernels = 0;         ///< distinct kernels the compiled candidates need
  size_t kernels_cached = 0;  ///< of which the disk cache already held
  size_t pruned = 0;
  size_t run_failed = 0;
  /// Not timed: their outputs disagreed with the others' (check_agreement).
  size_t mismatched = 0;
  /// Candidates timed in each successive-halving round (the last is the final round),
  /// summed over the calls by round index.
  std::vector<size_t> timed_per_round;

  /// Adds `other`'s times and counts (rounds by index).
  void add(const AutotuneStats& other);
  /// "compile 4.10 s (96 candidates, 96 compiled, 120 kernels, 0 cached), 12 pruned,
  /// timing 2.30 s (inputs 0.40 s, rounds 84 -> 28 -> 9)".
  std::string summary() const;
};

class TOKAMAX_API AutotuningResult {
public:
  static constexpr const char* kFormat = "tokamax-autotuning";
  static constexpr int kVersion = 1;

  AutotuningResult() = default;
  explicit AutotuningResult(DeviceInfo device) : device_(std::move(device)) {}

  const DeviceInfo& device() const { return device_; }
  void set_device(DeviceInfo device) { device_ = std::move(device); }

  /// Adds or replaces the entry for entry.args.
  void add(TuningEntry entry);
  /// The entry for `args`, or null.
  const TuningEntry* find(const BoundArgs& args) const;
  /// The config for `args` run by `implementation`: the chosen config when that
  /// implementation was chosen, else the fastest successful candidate of it, else nullopt.
  std::optional<Config> lookup(const BoundArgs& args, const std::string& implementation) const;
  /// Every entry, ordered by the arguments' JSON.
  std::vector<const TuningEntry*> entries() const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  /// Versioned JSON: {"format": "tokamax-autotuning", "version": 1, "device": {...},
  /// "entries": [{"args": {...}, "implementation": "...", "config": {...},
  /// "candidates": [{"implementation", "config", "timing": {...} | null, "error",
  /// "rounds": [{"iterations", "median_ms"}] (optional), "finalist": bool (optional)}]}]}.
  /// Files without the optional fields load as fully timed candidates.
  std::string dumps(int indent = 2) const;
  /// Throws Error (naming the problem) on invalid JSON, another format, a version this
  /// build does not read, or a malformed entry.
  static AutotuningResult loads(const std::string& text);

  /// Adds `other`'s entries; on the same arguments `other`'s entry wins. The device is
  /// taken from `other` when this result has none.
  void merge(const AutotuningResult& other);

  /// The phases of the autotune() run that made this result (zeros otherwise).
  const AutotuneStats& stats() const { return stats_; }
  void set_stats(AutotuneStats stats) { stats_ = std::move(stats); }

private:
  DeviceInfo device_;
  AutotuneStats stats_;
  std::map<std::string, TuningEntry> entries_;  // by args.to_json()
  std::multimap<uint64_t, std::string> by_hash_;  // BoundArgs::hash() -> key, for lookups
};

/// Makes `result` a config provider of the calling thread for the scope's lifetime (see
/// the file comment); open and close it on one thread.
class TOKAMAX_API AutotuningScope {
public:
  explicit AutotuningScope(AutotuningResult result);
  explicit AutotuningScope(std::shared_ptr<const AutotuningResult> result);
  ~AutotuningScope();
  AutotuningScope(const AutotuningScope&) = delete;
  AutotuningScope& operator=(const AutotuningScope&) = delete;

  const AutotuningResult& result() const { return *result_; }

private:
  std::shared_ptr<const AutotuningResult> result_;
  uint64_t id_ = 0;
};

struct TOKAMAX_API AutotuneOptions {
  int device = 0;                        ///< ordinal of the device to tune on
  /// Only these implementations (names); empty: every one that can serve the call.
  std::vector<std::string> implementations;
  TimingMethod timing = TimingMethod::Auto;
  int iterations = 20;  ///< of the final round
  int warmup = 3;       ///< untimed runs before a candidate's first round (1 before later ones)
  /// Successive halving. The first round times every candidate with
  /// `first_round_iterations`; each round then keeps the best `keep_fraction` of its
  /// candidates (at least `finalists`) and times them again with 1 / keep_fraction
  /// times the iterations, until at most `finalists` remain or the iterations reach
  /// `iterations`: that final round uses `iterations`, and its fastest median wins. With
  /// first_round_iterations 0 (or >= iterations), or at most `finalists` candidates,
  /// there is one round. The defaults keep the best third and the last three, so the
  /// true best is eliminated only when it measures slower than two thirds of the field
  /// in a brief round.
  int first_round_iterations = 3;
  double keep_fraction = 1.0 / 3;
  int finalists = 3;
  /// Drop candidates that cannot launch on the device or whose kernels spill to local
  /// memory while another candidate of the same implementation does not (recorded as
  /// "pruned: ..."). Needs the kernel cache (the cubins are inspected).
  bool prune = true;
  /// Before timing, run every candidate once and drop those whose outputs disagree with
  /// the baseline's (the first candidate's, unless most disagree with it) beyond a
  /// coarse tolerance per dtype: a config that writes nothing, garbage or NaNs is
  /// recorded as "mismatch: ..." and never chosen, however fast.
  bool check_agreement = true;
  bool flush_l2 = true;
  uint32_t seed = 0;                     ///< inputs: standardize(spec, seed + argument index)
  /// Parallel compile threads; 0: min(cores, candidates, available memory / 1 GiB).
  unsigned compile_threads = 0;
  /// Merge the result into the per-device autotuning cache (skipped when
  /// TOKAMAX_CACHE_DISABLE is set).
  bool update_cache = true;
  /// A progress line on stderr when it is a terminal.
  bool progress = true;
};

/// Tunes one call of `op` (see the file comment). Throws Error when no implementation can
/// serve the call or when no candidate could be timed (the message lists every error).
/// The result's stats() tell where the time went.
TOKAMAX_API AutotuningResult autotune(const Op& op, const BoundArgs& args,
                                      const AutotuneOptions& options = {});
/// Tunes several calls (each op found by name through find_op) into one result.
TOKAMAX_API AutotuningResult autotune(const std::vector<BoundArgs>& calls,
                                      const AutotuneOptions& options = {});

/// What the compile and pruning phases need of a device.
struct TOKAMAX_API AutotuneTarget {
  std::string arch;                ///< "sm_90a"
  uint64_t max_shared_bytes = 0;   ///< per block, opted in; 0: unknown (not checked)
  uint32_t registers_per_block = 65536;
  uint32_t max_threads_per_block = 1024;

  static AutotuneTarget of(const Device& device);
  /// The limits of the GPUs of `arch` (sm_80, sm_86, sm_89, sm_90a, ...) with no device
  /// (Arch::shared_memory_per_block). Throws Error when Arch::parse does.
  static AutotuneTarget for_arch(const std::string& arch);
};

/// What the phases before timing made of some calls: per distinct call, every candidate
/// with its error, compile failure or pruning reason (no timings, no choice).
struct TOKAMAX_API AutotuneCompileReport {
  std::vector<TuningEntry> calls;
  AutotuneStats stats;
};

/// autotune(calls)'s enumeration, compile and pruning phases for `target`, without a
/// device (kernels go into the kernel cache, so a later autotune() on such a device only
/// loads them). Throws Error as autotune() does for a bad call.
TOKAMAX_API AutotuneCompileReport autotune_compile(const std::vector<BoundArgs>& calls,
                                                   const AutotuneTarget& target,
                                                   const AutotuneOptions& options = {});

/// <DiskCache::default_directory()>/autotune/<device.key()>.json
TOKAMAX_API std::filesystem::path autotuning_cache_path(const DeviceInfo& device);
/// The per-device cache's content (read from disk once per process per device, then kept
/// in memory); empty when there is no file, when TOKAMAX_CACHE_DISABLE is set, or when the
/// file is unreadable or for another device (reported once on stderr, then ignored).
TOKAMAX_API std::shared_ptr<const AutotuningResult> autotuning_cache(const DeviceInfo& device);
/// Merges `result` into the cache file of result.device() (entries of `result` win),
/// re-reading the file first so concurrent processes' entries are kept, and writes it
/// atomically. Throws Error when the result has no device or on I/O failure.
TOKAMAX_API void update_autotuning_cache(const AutotuningResult& result);
/// Forgets the in-memory copies of the cache files (tests, or after another process
/// updated them).
TOKAMAX_API void reset_autotuning_cache();

} // namespace tokamax
