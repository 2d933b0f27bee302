//===- Cupti.h - INTERNAL: kernel activity records through CUPTI --*- C++ -*-===//
//
// libcupti.so.13 is opened with dlopen at first use (never linked), so
// libtokamax loads where it is missing; only the handful of activity-API entry
// points kernel timing needs are resolved. CUPTI's activity API is process-wide:
// one CuptiKernelTrace exists at a time (its constructor waits for the previous
// one to end).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tokamax::detail {

/// Empty when libcupti loaded and every entry point resolved; otherwise the
/// paths tried and why each failed. Loads on first call; thread-safe.
std::string cupti_load_error();

/// One finished kernel, timestamps in ns on CUPTI's clock.
struct CuptiKernel {
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t context_id = 0, stream_id = 0, device_id = 0;
  double duration_ms() const { return double(end_ns - start_ns) * 1e-6; }
};

/// Records CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL while alive.
class CuptiKernelTrace {
public:
  /// Throws Error when CUPTI cannot be loaded or activity recording cannot be
  /// enabled (e.g. another profiler holds CUPTI).
  CuptiKernelTrace();
  ~CuptiKernelTrace();
  CuptiKernelTrace(const CuptiKernelTrace&) = delete;
  CuptiKernelTrace& operator=(const CuptiKernelTrace&) = delete;

  /// Delivers every buffered record (call after synchronising the work) and
  /// returns the kernels recorded since the previous take(). Kernels whose
  /// timestamps CUPTI could not collect are left out; dropped() counts them and
  /// the records CUPTI dropped for lack of buffer space.
  std::vector<CuptiKernel> take();
  uint64_t dropped() const;

  /// CUPTI's id of `context` (what CuptiKernel::context_id holds).
  uint32_t context_id(CUcontext context) const;

private:
  struct Lock;
  std::unique_ptr<Lock> lock_;
};

} // namespace tokamax::detail
