//===- Timing.h - Device-time measurement -------------------------*- C++ -*-===//
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

} // namespace tokamax
