//===- KernelTrace.cpp - tkx_kernel_trace: kernel time through CUPTI -------===//
//
// The runtime's KernelTimer (CUPTI activity records, as benchmark()'s Cupti clock), for a
// binding that times a framework's function: every kernel of the process is counted,
// whatever context or stream launched it (XLA's and torch's kernels as well as ours).
//
//===----------------------------------------------------------------------===//
#include "c/lib/CApi.h"

#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Error.h>

#include <memory>

struct tkx_kernel_trace {
  tokamax::KernelTimer timer;
};

using namespace tokamax;

extern "C" tkx_status tkx_kernel_trace_start(tkx_kernel_trace **trace) {
  return capi::guard(__func__, [&] {
    capi::require_pointer(trace, "trace");
    *trace = nullptr;
    if (std::string why = cupti_library_error(); !why.empty())
      throw NotSupported("CUPTI kernel timing is unavailable: " + why);
    try {
      *trace = std::make_unique<tkx_kernel_trace>().release();
    } catch (const Error &e) {  // loaded, but it cannot record here (no driver, a profiler holds it)
      throw NotSupported(std::string("CUPTI kernel timing is unavailable: ") + e.what());
    }
  });
}

extern "C" tkx_status tkx_kernel_trace_take(tkx_kernel_trace *trace, int64_t *kernels, double *total_ms,
                                            uint64_t *dropped) {
  return capi::guard(__func__, [&] {
    capi::require_pointer(trace, "trace");
    const KernelTimer::Taken taken = trace->timer.take();
    if (kernels)
      *kernels = taken.kernels;
    if (total_ms)
      *total_ms = taken.total_ms;
    if (dropped)
      *dropped = taken.dropped;
  });
}

extern "C" void tkx_kernel_trace_stop(tkx_kernel_trace *trace) { delete trace; }
