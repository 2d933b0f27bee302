//===- Phases.h - The phases of autotune() before timing ---------*- C++ -*-===//
#pragma once

#include <tokamax/autotune/Search.h>

#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <vector>

namespace tokamax {
class Stream;
}

namespace tokamax::detail {

struct Candidate {
  const Implementation* impl = nullptr;
  TuningRecord record;  // implementation, config; then an error, or rounds of timing
  /// What its kernels demand (from their cubins); nullopt when unknown.
  std::optional<std::vector<KernelResources>> kernels;
};

/// One distinct call and its candidates.
struct CallSearch {
  const Op* op = nullptr;
  BoundArgs args;
  std::vector<Candidate> candidates;
};

/// One overwritten status line on stderr, only when stderr is a terminal.
class Progress {
public:
  Progress(bool enabled);
  ~Progress();
  void update(const std::string& status);

private:
  bool enabled_;
  bool printed_ = false;
  std::mutex mutex_;
};

/// Runs `worker` on `threads` threads (this one among them) and joins them; each worker
/// takes jobs from a shared counter until none is left.
void run_on_threads(unsigned threads, const std::function<void()>& worker);

/// Everything about a call and the options that can be wrong without a device, so a bad
/// call is refused before a GPU is touched (or found missing).
void check_call(const Op& op, const BoundArgs& args, const AutotuneOptions& options);
const Op& registered_op(const BoundArgs& args);

using OpCall = std::pair<const Op*, BoundArgs>;

/// Checks every call, drops repeated ones and enumerates each one's candidates for
/// `arch` (throws NotSupported when a call has none).
std::vector<CallSearch> enumerate_calls(std::span<const OpCall> calls, const std::string& arch,
                                        const AutotuneOptions& options, AutotuneStats& stats);

/// Builds and compiles (or finds in the disk cache) every valid candidate's kernels in
/// one pool over all calls, each distinct kernel once, then prunes (options.prune).
void compile_and_prune(std::vector<CallSearch>& calls, const AutotuneTarget& target,
                       const AutotuneOptions& options, Progress& progress, AutotuneStats& stats);

/// Runs each candidate of `to_time` (indices into call.candidates and `records`) once on
/// the call's tensors, its outputs filled with NaN bytes first, and removes from
/// `to_time` those that throw ("run: ...") or whose outputs disagree with the baseline's
/// ("mismatch: ..."): the first candidate's, or, when a majority disagrees with it, the
/// one most others agree with (Agreement.cpp). Returns how many disagreed.
size_t drop_disagreeing(const CallSearch& call, std::vector<TuningRecord>& records, std::vector<size_t>& to_time,
                        std::span<const TensorView> inputs, std::span<const TensorView> outputs, Stream& stream);

} // namespace tokamax::detail
