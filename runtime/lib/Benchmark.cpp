//===- Benchmark.cpp - Accelerator-time benchmarking and input data -------===//
//
// Each timing method runs `warmup` untimed iterations, then `iterations` timed
// ones; an L2 flush (a memset of a 256 MiB buffer kept per device) precedes
// every timed iteration outside its timed region. Events and graph replays are
// all enqueued before one synchronisation; wall-clock and CUPTI iterations
// synchronise individually (CUPTI to know which kernels belong to which
// iteration).
//
//===----------------------------------------------------------------------===//
#include "tokamax/runtime/Benchmark.h"

#include "Cupti.h"
#include "TimingArgs.h"

#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/Event.h"
#include "tokamax/runtime/Graph.h"
#include "tokamax/runtime/Memory.h"
#include "tokamax/runtime/Stream.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

namespace tokamax {

namespace {

constexpr std::pair<TimingMethod, std::string_view> kMethodNames[] = {
    {TimingMethod::Auto, "auto"},
    {TimingMethod::CudaEvents, "cuda-events"},
    {TimingMethod::CudaGraph, "cuda-graph"},
    {TimingMethod::WallClock, "wall-clock"},
    {TimingMethod::Cupti, "cupti"},
};

} // namespace

std::string_view timing_method_name(TimingMethod method) {
  for (const auto& [m, name] : kMethodNames)
    if (m == method)
      return name;
  return "unknown";
}

TimingMethod parse_timing_method(std::string_view name) {
  std::string valid;
  for (const auto& [m, n] : kMethodNames) {
    if (n == name)
      return m;
    valid += fmt::format("{}{}", valid.empty() ? "" : ", ", n);
  }
  throw Error(fmt::format("unknown timing method '{}' (valid: {})", name, valid));
}

BenchmarkData summarize(std::vector<double> times_ms, TimingMethod method) {
  BenchmarkData d;
  d.method = method;
  d.times_ms = std::move(times_ms);
  const size_t n = d.times_ms.size();
  if (n == 0)
    return d;
  std::vector<double> sorted = d.times_ms;
  std::sort(sorted.begin(), sorted.end());
  d.min = sorted.front();
  d.max = sorted.back();
  d.median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  d.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / double(n);
  if (n > 1) {
    double ss = 0;
    for (double t : sorted)
      ss += (t - d.mean) * (t - d.mean);
    d.stddev = std::sqrt(ss / double(n - 1));
  }
  return d;
}

std::string BenchmarkData::to_string() const {
  return fmt::format("median {:.4f} ms (min {:.4f}, max {:.4f}, mean {:.4f}, stddev {:.4f}; "
                     "{} iterations, {})",
                     median, min, max, mean, stddev, times_ms.size(),
                     timing_method_name(method));
}

bool cupti_available() {
  try {
    return detail::cupti_load_error().empty();
  } catch (...) {
    return false;
  }
}

std::string cupti_library_error() { return detail::cupti_load_error(); }

KernelTimer::KernelTimer() : trace_(std::make_unique<detail::CuptiKernelTrace>()) {}
KernelTimer::~KernelTimer() = default;

KernelTimer::Taken KernelTimer::take() {
  Taken taken;
  for (const detail::CuptiKernel& k : trace_->take()) {
    ++taken.kernels;
    taken.total_ms += k.duration_ms();
  }
  taken.dropped = trace_->dropped();
  return taken;
}

namespace {

constexpr size_t kFlushBytes = size_t(256) << 20;

// The device whose primary context is current (made current for device 0 when
// none is). Device::get() of a device not yet created makes its context
// current, so the caller's context is restored after the search.
Device& current_device() {
  const detail::DriverApi& api = detail::driver();
  detail::ensure_current_context();
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  Device* found = nullptr;
  for (int i = 0, n = Device::count(); i < n && !found; ++i)
    if (Device::get(i).context() == current)
      found = &Device::get(i);
  check(api.cuCtxSetCurrent(current), "cuCtxSetCurrent");
  if (!found)
    throw Error("benchmark: the current CUDA context is not a device's primary context; "
                "make a tokamax::Device current first");
  return *found;
}

// One flush buffer per device for the whole process (allocating 256 MiB per
// benchmark call would cost more than many kernels being timed). Leaked on
// purpose: freeing during static destruction races with the driver's teardown.
uint64_t flush_buffer(Device& device) {
  static std::mutex mutex;
  static auto* buffers = new std::map<int, DeviceBuffer>;
  std::lock_guard lock(mutex);
  auto it = buffers->find(device.ordinal());
  if (it == buffers->end())
    it = buffers->emplace(device.ordinal(), DeviceBuffer(kFlushBytes, device)).first;
  return it->second.ptr();
}

struct Runner {
  Stream& stream;
  const std::function<void()>& work;
  int iterations, warmup;
  uint64_t flush = 0;  // 0: no L2 flush

  void flush_l2(int i) const {
    if (flush)
      memset_d8(flush, static_cast<uint8_t>(i * 37 + 1), kFlushBytes, stream.handle());
  }
  void run_warmup() const {
    for (int i = 0; i < warmup; ++i)
      work();
  }

  // The times of `iterations` runs of `run`, each between two events recorded on the
  // stream (after the L2 flush, if any).
  std::vector<double> between_events(const std::function<void()>& run) const {
    std::vector<Event> starts(iterations), ends(iterations);
    for (int i = 0; i < iterations; ++i) {
      flush_l2(i);
      starts[i].record(stream.handle());
      run();
      ends[i].record(stream.handle());
    }
    stream.synchronize();
    std::vector<double> ms(iterations);
    for (int i = 0; i < iterations; ++i)
      ms[i] = Event::elapsed_ms(starts[i], ends[i]);
    return ms;
  }

  std::vector<double> events() const {
    run_warmup();
    return between_events(work);
  }

  std::vector<double> graph() const {
    // At least one eager run, so JIT compilation and module loading (which
    // capture forbids) happen before capture.
    if (stream.handle()) {
      for (int i = 0; i < std::max(warmup, 1); ++i)
        work();
      stream.synchronize();
    }
    GraphExec exec(Graph::capture(stream, work, "benchmark with TimingMethod::CudaGraph"));
    // One untimed replay uploads the graph to the device.
    exec.launch(stream.handle());
    return between_events([&] { exec.launch(stream.handle()); });
  }

  std::vector<double> wall_clock() const {
    run_warmup();
    stream.synchronize();
    std::vector<double> ms(iterations);
    for (int i = 0; i < iterations; ++i) {
      if (flush) {
        flush_l2(i);
        stream.synchronize();
      }
      const auto t0 = std::chrono::steady_clock::now();
      work();
      stream.synchronize();
      const auto t1 = std::chrono::steady_clock::now();
      ms[i] = std::chrono::duration<double, std::milli>(t1 - t0).count();
    }
    return ms;
  }

  // Empty when `strict` is false and an iteration ran no kernel (Auto then falls
  // back to events: kernel time means nothing for copies and memsets).
  std::vector<double> cupti(detail::CuptiKernelTrace& trace, bool strict) const {
    detail::ensure_current_context();
    CUcontext context = nullptr;
    check(detail::driver().cuCtxGetCurrent(&context), "cuCtxGetCurrent");
    const uint32_t context_id = trace.context_id(context);
    run_warmup();
    stream.synchronize();
    trace.take();
    std::vector<double> ms(iterations);
    for (int i = 0; i < iterations; ++i) {
      flush_l2(i);
      stream.synchronize();
      trace.take();  // whatever ran before this iteration
      const uint64_t dropped_before = trace.dropped();
      work();
      stream.synchronize();
      int kernels = 0;
      double total = 0;
      for (const detail::CuptiKernel& k : trace.take())
        if (k.context_id == context_id) {
          total += k.duration_ms();
          ++kernels;
        }
      if (trace.dropped() != dropped_before)
        throw Error(fmt::format("benchmark: CUPTI lost {} kernel record(s) in iteration {}; "
                                "the kernel time would be understated",
                                trace.dropped() - dropped_before, i));
      if (kernels == 0 && !strict)
        return {};
      if (kernels == 0)
        throw Error(fmt::format("benchmark: CUPTI recorded no kernel in iteration {}: the work "
                                "launched no kernel on this device (use another timing "
                                "method for copies and memsets)",
                                i));
      ms[i] = total;
    }
    return ms;
  }
};

} // namespace

BenchmarkData benchmark(Stream& stream, const std::function<void()>& work, TimingMethod method,
                        int iterations, int warmup, bool flush_l2) {
  detail::check_timing_args("benchmark", work, iterations, warmup);
  Runner runner{stream, work, iterations, warmup};
  if (flush_l2)
    runner.flush = flush_buffer(current_device());

  switch (method) {
  case TimingMethod::Auto:
  case TimingMethod::Cupti: {
    std::unique_ptr<detail::CuptiKernelTrace> trace;
    if (method == TimingMethod::Cupti) {
      trace = std::make_unique<detail::CuptiKernelTrace>();  // throws why it cannot
    } else if (cupti_available()) {
      try {
        trace = std::make_unique<detail::CuptiKernelTrace>();
      } catch (const Error&) {
        // Loaded but not usable (e.g. a profiler holds it): fall back to events.
      }
    }
    if (trace) {
      std::vector<double> ms = runner.cupti(*trace, method == TimingMethod::Cupti);
      if (!ms.empty())
        return summarize(std::move(ms), TimingMethod::Cupti);
      trace.reset();
    }
    return summarize(runner.events(), TimingMethod::CudaEvents);
  }
  case TimingMethod::CudaEvents:
    return summarize(runner.events(), TimingMethod::CudaEvents);
  case TimingMethod::CudaGraph:
    return summarize(runner.graph(), TimingMethod::CudaGraph);
  case TimingMethod::WallClock:
    return summarize(runner.wall_clock(), TimingMethod::WallClock);
  }
  throw Error("benchmark: unknown timing method");
}

//===----------------------------------------------------------------------===//
// standardize
//===----------------------------------------------------------------------===//

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw Error(fmt::format("TensorSpec: negative dimension in shape {}", format_shape(shape)));
    // A wrapped count would size the host buffer wrongly (or throw bad_alloc, not Error).
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error(fmt::format("TensorSpec: shape {} has more than 2^63 elements", format_shape(shape)));
    n *= d;
  }
  return n;
}

namespace {

// splitmix64: tiny, fast, and the same numbers on every platform.
struct Rng {
  uint64_t state;
  explicit Rng(uint32_t seed) : state(0x9e3779b97f4a7c15ull * (uint64_t(seed) + 1)) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

constexpr double kMinMagnitude = 0.05, kMaxMagnitude = 3.0;

// Elements come in chunks of kChunk, each from a generator of its own (chunk 0's is
// Rng(seed), so short tensors and the first values of long ones keep the sequence they
// always had), so large tensors are generated on all cores: about 10 ns an element on
// one, a second per hundred million.
constexpr int64_t kChunk = int64_t(1) << 16;

Rng chunkRng(uint32_t seed, int64_t chunk) {
  Rng rng(seed);
  if (chunk) {
    uint64_t z = uint64_t(chunk) * 0xd1b54a32d192ed03ull;
    z = (z ^ (z >> 32)) * 0x9e3779b97f4a7c15ull;
    rng.state ^= z ^ (z >> 29);
  }
  return rng;
}

void generateChunk(const TensorSpec& spec, uint32_t seed, int64_t chunk, int64_t n, uint8_t* bytes) {
  const size_t size = dtype_size(spec.dtype);
  Rng rng = chunkRng(seed, chunk);
  for (int64_t i = chunk * kChunk, end = std::min(n, (chunk + 1) * kChunk); i < end; ++i) {
    void* element = bytes + size_t(i) * size;
    if (is_floating(spec.dtype)) {
      // Resample the rare magnitudes that round out of range (fp8 near 0.05).
      for (;;) {
        const uint64_t bits = rng.next();
        const double magnitude =
            kMinMagnitude + (kMaxMagnitude - kMinMagnitude) * (double(bits >> 11) * 0x1.0p-53);
        store_from_double(spec.dtype, element, (bits & 1) ? -magnitude : magnitude);
        const double stored = std::fabs(load_as_double(spec.dtype, element));
        if (stored >= kMinMagnitude && stored <= kMaxMagnitude)
          break;
      }
    } else if (spec.dtype == DType::Bool) {
      store_from_double(spec.dtype, element, double(rng.next() & 1));
    } else {
      const uint64_t bits = rng.next();
      const double value = double(1 + (bits >> 1) % 8);
      store_from_double(spec.dtype, element, (bits & 1) ? -value : value);
    }
  }
}

// Writes numel elements of spec.dtype into `bytes`.
std::vector<uint8_t> generate(const TensorSpec& spec, uint32_t seed) {
  const int64_t n = spec.numel();
  std::vector<uint8_t> bytes(size_t(n) * dtype_size(spec.dtype));
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;)
      generateChunk(spec, seed, c, n, bytes.data());
  };
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), chunks / 4);
  {
    std::vector<std::jthread> helpers;
    for (int64_t t = 1; t < threads; ++t)
      helpers.emplace_back(worker);
    worker();
  }
  return bytes;
}

} // namespace

std::vector<double> random_host_values(const TensorSpec& spec, uint32_t seed) {
  const std::vector<uint8_t> bytes = generate(spec, seed);
  const size_t size = dtype_size(spec.dtype);
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = load_as_double(spec.dtype, bytes.data() + i * size);
  return values;
}

Tensor standardize(const TensorSpec& spec, uint32_t seed, Device& device) {
  std::vector<uint8_t> bytes = generate(spec, seed);
  Tensor t = Tensor::empty(std::span<const int64_t>(spec.shape), spec.dtype, device);
  if (!bytes.empty())
    t.copy_from_host(bytes.data(), bytes.size());
  return t;
}

} // namespace tokamax
