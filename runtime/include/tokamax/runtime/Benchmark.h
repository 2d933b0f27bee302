//===- Benchmark.h - Accelerator-time benchmarking and input data -*- C++ -*-===//
//
// benchmark() times a piece of device work on a stream, iteration by iteration,
// with one of four clocks:
//   - CudaEvents: an event pair around each iteration (device time of the whole
//     iteration, including any gaps while the host launches kernels);
//   - CudaGraph:  the work is captured once into a CUDA graph and each iteration
//     replays it between events, so per-kernel launch overhead is gone;
//   - WallClock:  host steady_clock around a synchronised iteration (what a
//     caller waiting on the result sees);
//   - Cupti:      CUPTI kernel activity records; an iteration's time is the sum
//     of its kernels' durations (kernel time only: no launch gaps, no memsets).
// Auto is Cupti when libcupti loads and the work launches kernels, else
// CudaEvents. Every timed iteration is preceded (outside the timed region) by
// an overwrite of a buffer larger than L2, unless flush_l2 is false. The method
// actually used is recorded with the numbers.
//
// standardize() makes a device tensor of random, never-zero data for an
// abstract argument spec, so ops can be benchmarked and autotuned without user
// inputs (the counterpart of Tokamax's standardize_function).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

class Device;
class Stream;

/// How benchmark() measures an iteration.
enum class TimingMethod { Auto, CudaEvents, CudaGraph, WallClock, Cupti };

/// "auto", "cuda-events", "cuda-graph", "wall-clock", "cupti".
TOKAMAX_API std::string_view timing_method_name(TimingMethod method);
/// Inverse of timing_method_name; throws Error naming the valid names.
TOKAMAX_API TimingMethod parse_timing_method(std::string_view name);

/// Per-iteration times (ms) and their summary.
struct TOKAMAX_API BenchmarkData {
  std::vector<double> times_ms;  ///< in iteration order
  double median = 0, min = 0, max = 0, mean = 0;
  double stddev = 0;             ///< sample standard deviation (n - 1); 0 for n < 2
  TimingMethod method = TimingMethod::CudaEvents;  ///< the clock actually used (never Auto)

  /// "median 0.123 ms (min 0.120, max 0.130, mean 0.124, stddev 0.002; 50 iterations, cupti)".
  std::string to_string() const;
};

/// The statistics of `times_ms` (kept in order in the result); the median of an
/// even count is the mean of the two middle values. An empty sample gives zeros.
/// `method` is stored as given.
TOKAMAX_API BenchmarkData summarize(std::vector<double> times_ms,
                                    TimingMethod method = TimingMethod::CudaEvents);

/// True when libcupti.so.13 can be loaded (searched as documented in
/// cupti_library_error()). Never throws.
TOKAMAX_API bool cupti_available();
/// Why CUPTI cannot be used (every path tried and dlerror), or empty when it can.
/// Searched: $TOKAMAX_CUPTI_LIBRARY (a file), the directory of libtokamax, the
/// loader's default path, then $TOKAMAX_CUDA_HOME, $CUDA_HOME, $CUDA_PATH and
/// /usr/local/cuda, each under extras/CUPTI/lib64 and lib64.
TOKAMAX_API std::string cupti_library_error();

namespace detail {
class CuptiKernelTrace;
}

/// Kernel time through CUPTI while alive, for timing work the library does not launch
/// (a framework's whole function): every kernel of the process that finishes, whatever
/// context or stream ran it. One at a time per process: constructing a second waits for
/// the first to be destroyed (never hold two on one thread). Throws Error where CUPTI
/// cannot be loaded or cannot record (another profiler holds it).
class TOKAMAX_API KernelTimer {
public:
  KernelTimer();
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  struct Taken {
    int64_t kernels = 0;    ///< kernels finished since the previous take
    double total_ms = 0;    ///< the sum of their durations
    uint64_t dropped = 0;   ///< records CUPTI could not deliver since construction
  };
  /// The kernels finished since construction or the previous take (synchronise first).
  Taken take();

private:
  std::unique_ptr<detail::CuptiKernelTrace> trace_;
};

/// Times `work`, which must enqueue its device work on `stream` (CudaGraph needs a
/// created, non-default stream: the legacy stream cannot be captured). `warmup`
/// untimed runs come first (they also JIT-compile and load kernels, which graph
/// capture could not do). Throws Error for iterations < 1, a capture that fails
/// (work that synchronises or allocates), and, when Cupti is asked for explicitly,
/// CUPTI that cannot be loaded or an iteration in which it saw no kernel (Auto
/// falls back to CudaEvents in both cases).
/// Cupti attributes to an iteration every kernel that runs on the stream's
/// context during it: do not launch unrelated kernels on other threads meanwhile.
TOKAMAX_API BenchmarkData benchmark(Stream& stream, const std::function<void()>& work,
                                    TimingMethod method = TimingMethod::Auto,
                                    int iterations = 50, int warmup = 5, bool flush_l2 = true);

/// An abstract tensor argument (ArgSpec in the op framework converts to this).
struct TOKAMAX_API TensorSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;

  int64_t numel() const;
};

/// The values standardize() uploads for `spec`, row-major, each exactly
/// representable in spec.dtype (so host references see the device's data):
///   floats: magnitude uniform in [0.05, 3] (after rounding to the dtype), random sign;
///   integers: uniform over {-8, ..., -1, 1, ..., 8};
///   bool: 0 or 1 with equal probability.
/// Deterministic for a given (spec, seed) on every platform (own generator).
TOKAMAX_API std::vector<double> random_host_values(const TensorSpec& spec, uint32_t seed);

/// A new device tensor of `spec` filled with random_host_values(spec, seed).
TOKAMAX_API Tensor standardize(const TensorSpec& spec, uint32_t seed, Device& device);

} // namespace tokamax
