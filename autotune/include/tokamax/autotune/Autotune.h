//===- Autotune.h - Search spaces, timing, results, scopes, device cache -*- C++ -*-===//
//
// autotune(op, args) finds the fastest (implementation, config) for one bound call:
//   1. every implementation that runs on the device and can serve the call offers its
//      search_space(args) (invalid configs are recorded with the reason);
//   2. the candidates' kernels are compiled in parallel into the on-disk kernel cache
//      (a std::thread pool bounded by the cores and by available memory; a progress line
//      on a TTY);
//   3. each candidate runs on the device with random, never-zero inputs (standardize),
//      after a warm-up, with an L2 flush per iteration, and is ranked by its median time;
//      a candidate that fails to compile or run is recorded with its error, not fatal.
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
  /// Why it could not be timed ("invalid config: ...", "compile: ...", "run: ..."); empty
  /// when it was.
  std::string error;

  bool ok() const { return error.empty(); }
};

/// The choice for one call and the candidates it was chosen from.
struct TOKAMAX_API TuningEntry {
  BoundArgs args;
  std::string implementation;  ///< chosen
  Config config;               ///< chosen
  std::vector<TuningRecord> candidates;  ///< may be empty (e.g. written by hand)
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
  /// "candidates": [{"implementation", "config", "timing": {...} | null, "error"}]}]}.
  std::string dumps(int indent = 2) const;
  /// Throws Error (naming the problem) on invalid JSON, another format, a version this
  /// build does not read, or a malformed entry.
  static AutotuningResult loads(const std::string& text);

  /// Adds `other`'s entries; on the same arguments `other`'s entry wins. The device is
  /// taken from `other` when this result has none.
  void merge(const AutotuningResult& other);

private:
  DeviceInfo device_;
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
  int iterations = 20;
  int warmup = 3;
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
TOKAMAX_API AutotuningResult autotune(const Op& op, const BoundArgs& args,
                                      const AutotuneOptions& options = {});
/// Tunes several calls (each op found by name through find_op) into one result.
TOKAMAX_API AutotuningResult autotune(const std::vector<BoundArgs>& calls,
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
