//===- FunctionPlan.h - A Function's run as one plan, eager or as a CUDA graph -*- C++ -*-===//
//
// A Function's device run is resolved once per (device, config state, JIT generation):
// every call's implementation and config chosen as an eager call would, and its
// launches recorded (LaunchPlan.h) with their buffers renamed to the Function's values;
// the scratch buffer is the Function's own, as large as its largest call asks. A run
// then fills a table of base addresses (inputs, outputs, intermediates, scratch) and
// replays the calls, or launches a CUDA graph captured from that replay.
//
// Graphs (FunctionGraphs) are kept per set of input and output addresses (a graph runs
// on whichever stream launches it; intermediates and scratch are the Function's and do
// not move): a run with the addresses of an earlier one is one cuGraphLaunch; new
// addresses capture the replay again and, once kMaxGraphs are held, update the least
// recently used graph in place (cuGraphExecUpdate) instead of instantiating another.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/LaunchPlan.h"

#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Graph.h>

#include <cstdint>
#include <span>
#include <vector>

namespace tokamax {
class Device;
class Stream;
} // namespace tokamax

namespace tokamax::ops_detail {

struct FunctionPlan {
  /// One call: its launches, or, when its implementation plans none (an ops author's
  /// own Implementation), the implementation and config its run() is called with.
  struct Part {
    size_t call = 0;
    LaunchPlan launches;
    const Implementation *fallback = nullptr;
    Config config;
  };
  std::vector<Part> parts;
  uint64_t scratch_bytes = 0;
  uint64_t id = 0;  ///< unique per plan: graphs captured from another plan are stale

  /// What the plan was resolved under; current() compares them with the caller's.
  int device = -1;
  uint64_t signature = 0, epoch = 0, jit_generation = 0, context = 0;

  bool current(int device) const;
  /// Kernel launches, memsets and copies (a fallback call counts one).
  size_t steps() const;
};

/// Resolves every call of `f` for `device` (the calling thread's config providers).
FunctionPlan plan_function(const Function &f, Device &device);

/// Enqueues the plan on `stream`; bases: one address per value of `f`, then the scratch.
void replay_function(const Function &f, const FunctionPlan &plan, std::span<const uint64_t> bases, Stream &stream);

class FunctionGraphs {
public:
  static constexpr size_t kMaxGraphs = 4;

  /// Launches the plan as a graph on `stream`, capturing it first when no graph was
  /// captured with `bound` (the inputs' and outputs' addresses).
  void launch(const Function &f, const FunctionPlan &plan, std::span<const uint64_t> bases,
              std::span<const uint64_t> bound, Stream &stream);
  void clear() { graphs_.clear(); }
  const FunctionGraphStats &stats() const { return stats_; }

private:
  struct Entry {
    std::vector<uint64_t> bound;
    GraphExec exec;
    uint64_t used = 0;
  };
  std::vector<Entry> graphs_;
  uint64_t plan_ = 0, clock_ = 0;
  FunctionGraphStats stats_;
};

} // namespace tokamax::ops_detail
