//===- Timing.h - Device time, and host time per call --------------*- C++ -*-===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <functional>
#include <vector>

namespace tokamax {

class Stream;

/// Per-iteration device times (ms) of a timed region and their summary.
struct TOKAMAX_API Timings {
  std::vector<double> ms;
  double median = 0, min = 0, max = 0, mean = 0;
};

/// Times `work` on `stream` with CUDA events around each iteration after `warmup`
/// untimed runs; when `flush_l2` is set, a 256 MiB buffer is overwritten before each
/// iteration so every run reads from memory, not from L2.
TOKAMAX_API Timings time_on_stream(Stream &stream, const std::function<void()> &work, int warmup,
                                   int iterations, bool flush_l2 = true);

/// Host time (microseconds) per call of `call`, which enqueues work on `stream`: the
/// median over rounds of `per_round` calls, `calls` in all, each round short enough for
/// the driver's launch queue (so the host never waits for the device) and followed by a
/// synchronize that is not timed. What a caller's thread spends per call: dispatch
/// overhead, not device time. Throws Error unless 1 <= per_round <= calls.
TOKAMAX_API double host_us_per_call(Stream &stream, const std::function<void()> &call, int calls = 10000,
                                    int per_round = 250);

} // namespace tokamax
