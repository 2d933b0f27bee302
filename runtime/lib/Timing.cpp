//===- Timing.cpp - Device-time measurement ---------------------------------===//
#include <tokamax/runtime/Timing.h>

#include "TimingArgs.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Event.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

#include <algorithm>
#include <chrono>
#include <numeric>

namespace tokamax {

Timings time_on_stream(Stream &stream, const std::function<void()> &work, int warmup, int iterations,
                       bool flush_l2) {
  detail::check_timing_args("time_on_stream", work, iterations, warmup);
  constexpr size_t kFlushBytes = size_t(256) << 20;
  DeviceBuffer flush = flush_l2 ? DeviceBuffer(kFlushBytes, Device::get()) : DeviceBuffer();
  for (int i = 0; i < warmup; ++i)
    work();
  Timings t;
  std::vector<Event> starts(iterations), ends(iterations);
  for (int i = 0; i < iterations; ++i) {
    if (flush_l2)
      memset_d8(flush.ptr(), static_cast<uint8_t>(i), kFlushBytes, stream.handle());
    starts[i].record(stream.handle());
    work();
    ends[i].record(stream.handle());
  }
  stream.synchronize();
  for (int i = 0; i < iterations; ++i)
    t.ms.push_back(Event::elapsed_ms(starts[i], ends[i]));
  std::vector<double> sorted = t.ms;
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty()) {
    t.median = sorted[sorted.size() / 2];
    t.min = sorted.front();
    t.max = sorted.back();
    t.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  }
  return t;
}

double host_us_per_call(Stream &stream, const std::function<void()> &call, int calls, int per_round) {
  if (!call || per_round < 1 || per_round > calls)
    throw Error("host_us_per_call: needs a call and 1 <= per_round <= calls");
  using Clock = std::chrono::steady_clock;
  std::vector<double> us;
  for (int done = 0; done + per_round <= calls; done += per_round) {
    const auto start = Clock::now();
    for (int i = 0; i < per_round; ++i)
      call();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / per_round);
    stream.synchronize();
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

} // namespace tokamax
