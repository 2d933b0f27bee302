//===- BenchmarkGpuTests.cpp - Timers, standardize and autotuning on a GPU --===//
#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace tokamax;

namespace {

constexpr TimingMethod kMethods[] = {TimingMethod::CudaEvents, TimingMethod::CudaGraph,
                                     TimingMethod::WallClock, TimingMethod::Cupti};

bool skip_without_cupti() {
  if (cupti_available())
    return false;
  WARN("CUPTI timing not tested: " << cupti_library_error());
  return true;
}

} // namespace

TEST_CASE("every timing method times a 64 MiB copy", "[gpu][benchmark]") {
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  const int64_t n = int64_t(16) << 20;  // 64 MiB of f32
  Tensor x = standardize({{n}, DType::F32}, 1, device);
  Tensor y = Tensor::empty({n}, DType::F32, device);
  auto work = [&] { copy(x, y, stream); };
  for (TimingMethod method : kMethods) {
    CAPTURE(timing_method_name(method));
    if (method == TimingMethod::Cupti && skip_without_cupti())
      continue;
    BenchmarkData d = benchmark(stream, work, method, 20, 3);
    std::printf("copy 64 MiB, %s\n", d.to_string().c_str());
    CHECK(d.method == method);
    REQUIRE(d.times_ms.size() == 20);
    for (double t : d.times_ms)
      CHECK(t > 0);
    CHECK(d.min > 0);
    CHECK(d.min <= d.median);
    CHECK(d.median <= d.max);
    // 128 MiB of traffic: well above 10 us and below 10 ms on any GPU we target.
    CHECK(d.median > 0.01);
    CHECK(d.median < 10.0);
  }
  std::vector<double> out = y.to_host_doubles();
  CHECK(out == x.to_host_doubles());
}

TEST_CASE("auto timing is CUPTI when it loads, else CUDA events", "[gpu][benchmark]") {
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  Tensor x = standardize({{1 << 20}, DType::F32}, 2, device);
  Tensor y = Tensor::empty({1 << 20}, DType::F32, device);
  BenchmarkData d = benchmark(stream, [&] { copy(x, y, stream); }, TimingMethod::Auto, 5, 1);
  CHECK(d.method == (cupti_available() ? TimingMethod::Cupti : TimingMethod::CudaEvents));
  CHECK(d.median > 0);
}

TEST_CASE("graph replay removes launch overhead from many small launches", "[gpu][benchmark]") {
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  Tensor x = standardize({{4096}, DType::F32}, 3, device);
  Tensor y = Tensor::empty({4096}, DType::F32, device);
  auto work = [&] {
    for (int i = 0; i < 100; ++i)
      copy(x, y, stream);
  };
  BenchmarkData events = benchmark(stream, work, TimingMethod::CudaEvents, 20, 3, false);
  BenchmarkData graph = benchmark(stream, work, TimingMethod::CudaGraph, 20, 3, false);
  std::printf("100 small copies: events %.2f us/launch, graph %.2f us/launch\n",
              events.median * 10, graph.median * 10);
  CHECK(graph.median > 0);
  CHECK(graph.median < events.median);
}

TEST_CASE("CUPTI kernel time is at most the event time", "[gpu][benchmark]") {
  if (skip_without_cupti())
    return;
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  const int64_t n = int64_t(16) << 20;
  Tensor x = standardize({{n}, DType::F32}, 4, device);
  Tensor y = Tensor::empty({n}, DType::F32, device);
  auto work = [&] { copy(x, y, stream); };
  BenchmarkData events = benchmark(stream, work, TimingMethod::CudaEvents, 30, 3);
  BenchmarkData cupti = benchmark(stream, work, TimingMethod::Cupti, 30, 3);
  std::printf("copy 64 MiB: events %.4f ms, cupti %.4f ms\n", events.median, cupti.median);
  // Kernel-only time: no event or launch gap; allow run-to-run noise.
  CHECK(cupti.median <= events.median * 1.05 + 0.002);
  CHECK(cupti.median >= events.median * 0.5);

  // Many small launches: CUPTI sums the kernels and leaves out the launch gaps
  // the events' span includes.
  Tensor small = standardize({{4096}, DType::F32}, 5, device);
  Tensor small_out = Tensor::empty({4096}, DType::F32, device);
  auto small_many = [&] {
    for (int i = 0; i < 50; ++i)
      copy(small, small_out, stream);
  };
  BenchmarkData e2 = benchmark(stream, small_many, TimingMethod::CudaEvents, 10, 2, false);
  BenchmarkData c2 = benchmark(stream, small_many, TimingMethod::Cupti, 10, 2, false);
  std::printf("50 small copies: events %.4f ms, cupti %.4f ms\n", e2.median, c2.median);
  CHECK(c2.median <= e2.median);
}

TEST_CASE("CUPTI timing of work without kernels: an error, or events under Auto", "[gpu][benchmark]") {
  if (skip_without_cupti())
    return;
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  DeviceBuffer buffer(1 << 20, device);
  auto memset_only = [&] { memset_d8(buffer.ptr(), 1, 1 << 20, stream.handle()); };
  CHECK_THROWS_WITH(benchmark(stream, memset_only, TimingMethod::Cupti, 3, 1, false),
                    Catch::Contains("no kernel"));
  // Auto falls back to events instead.
  BenchmarkData d = benchmark(stream, memset_only, TimingMethod::Auto, 3, 1, false);
  CHECK(d.method == TimingMethod::CudaEvents);
  CHECK(d.median > 0);
}

TEST_CASE("graph capture needs a created stream and capturable work", "[gpu][benchmark]") {
  Device& device = Device::get();
  Tensor x = standardize({{4096}, DType::F32}, 6, device);
  Tensor y = Tensor::empty({4096}, DType::F32, device);
  Stream legacy = Stream::wrap(nullptr);
  CHECK_THROWS_WITH(benchmark(legacy, [&] { copy(x, y, legacy); }, TimingMethod::CudaGraph, 3),
                    Catch::Contains("created stream"));

  Stream stream = Stream::create(device);
  auto synchronising = [&] {
    copy(x, y, stream);
    stream.synchronize();  // not allowed while capturing
  };
  CHECK_THROWS_WITH(benchmark(stream, synchronising, TimingMethod::CudaGraph, 3, 1, false),
                    Catch::Contains("CUDA graph"));
  // The failed capture was ended: the stream still works.
  BenchmarkData d =
      benchmark(stream, [&] { copy(x, y, stream); }, TimingMethod::CudaEvents, 3, 1, false);
  CHECK(d.median > 0);
}

TEST_CASE("standardize uploads the host generator's non-zero values", "[gpu][benchmark]") {
  Device& device = Device::get();
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64, DType::I8, DType::I32,
                      DType::I64, DType::Bool, DType::F8E4M3, DType::F8E5M2}) {
    CAPTURE(dtype_name(dtype));
    const TensorSpec spec{{33, 65}, dtype};
    Tensor t = standardize(spec, 42, device);
    CHECK(t.dtype() == dtype);
    CHECK(t.numel() == 33 * 65);
    const std::vector<double> on_device = t.to_host_doubles();
    CHECK(on_device == random_host_values(spec, 42));
    if (dtype != DType::Bool)
      for (double v : on_device)
        REQUIRE(v != 0.0);
  }
}

//===----------------------------------------------------------------------===//
// Autotuning
//===----------------------------------------------------------------------===//

namespace {

// copy(x, y) with a search space holding good configs, one that fails to compile and
// one that fails to run: the bad ones must be recorded, not fatal.
class FlakyCopy : public Implementation {
public:
  std::string name() const override { return "reference"; }
  std::optional<std::string> why_not(const BoundArgs&) const override { return std::nullopt; }
  Config heuristic(const BoundArgs&) const override { return {{"repeat", 1}}; }
  std::vector<Config> search_space(const BoundArgs&) const override {
    return {{{"repeat", 1}}, {{"repeat", 4}}, {{"repeat", 1}, {"fail_compile", 1}},
            {{"repeat", 1}, {"fail_run", 1}}, {{"repeat", 0}}, {{"repeat", 1}}};
  }
  std::optional<std::string> check_config(const BoundArgs&, const Config& c) const override {
    if (c.get_or("repeat", 0) < 1)
      return std::string("repeat must be >= 1");
    return std::nullopt;
  }
  std::vector<dsl::Kernel> kernels(const BoundArgs&, const Config& c) const override {
    if (c.has("fail_compile"))
      throw Error("deliberate compile failure");
    return {};
  }
  void run(const BoundArgs&, const Config& c, std::span<const TensorView> in,
           std::span<const TensorView> out, Stream& stream) const override {
    if (c.has("fail_run"))
      throw Error("deliberate run failure");
    for (int64_t i = 0; i < c.get("repeat"); ++i)
      copy(in[0], out[0], stream);
  }
  void interpret(const BoundArgs&, const Config&, std::span<const TensorView>,
                 std::span<const TensorView>) const override {}
};

class FlakyCopyOp : public Op {
public:
  FlakyCopyOp() : Op("autotune_gpu_flaky_copy", {"x", "y"}, 1, {std::make_shared<FlakyCopy>()}) {}
  void validate(const BoundArgs&) const override {}
};

} // namespace

TEST_CASE("autotune records failing configs and picks the fastest good one", "[gpu][autotune]") {
  FlakyCopyOp op;
  const ArgSpec spec{{int64_t(4) << 20}, DType::F32};
  const BoundArgs args{op.name(), {spec, spec}, {}};
  AutotuneOptions options;
  options.iterations = 10;
  options.warmup = 2;
  options.update_cache = false;
  AutotuningResult result = autotune(op, args, options);
  CHECK(result.device() == DeviceInfo::of(Device::get()));
  const TuningEntry* e = result.find(args);
  REQUIRE(e != nullptr);
  REQUIRE(e->candidates.size() == 5);  // the duplicate {"repeat": 1} is timed once
  for (const TuningRecord& r : e->candidates)
    std::printf("  %s %s: %s\n", r.implementation.c_str(), r.config.to_json().c_str(),
                r.ok() ? r.timing.to_string().c_str() : r.error.c_str());
  CHECK(e->candidates[0].ok());
  CHECK(e->candidates[1].ok());
  CHECK_THAT(e->candidates[2].error, Catch::StartsWith("compile: ") &&
                                         Catch::Contains("deliberate compile failure"));
  CHECK_THAT(e->candidates[3].error,
             Catch::StartsWith("run: ") && Catch::Contains("deliberate run failure"));
  CHECK_THAT(e->candidates[4].error, Catch::StartsWith("invalid config: "));
  // One copy beats four.
  CHECK(e->config == Config{{"repeat", 1}});
  CHECK(e->candidates[0].timing.median < e->candidates[1].timing.median);
  // Errors survive the JSON round trip.
  AutotuningResult back = AutotuningResult::loads(result.dumps());
  CHECK(back.find(args)->candidates[3].error == e->candidates[3].error);
}

TEST_CASE("autotuning layer_norm chooses one of its candidates and reloads",
          "[gpu][autotune]") {
  Device& device = Device::get();
  const ArgSpec x{{512, 1024}, DType::BF16}, param{{1024}, DType::F32};
  const BoundArgs args =
      bind_layer_norm(x, param, param, x, std::nullopt, std::nullopt, 1, 1e-5);
  AutotuneOptions options;
  options.iterations = 10;
  options.warmup = 2;
  AutotuningResult result = autotune(layer_norm_op(), args, options);
  const TuningEntry* e = result.find(args);
  REQUIRE(e != nullptr);
  std::printf("layer_norm [512, 1024] bf16: chose %s %s out of %zu\n", e->implementation.c_str(),
              e->config.to_json().c_str(), e->candidates.size());
  CHECK(e->candidates.size() >= 2);
  const TuningRecord* chosen = nullptr;
  double best = 1e30;
  for (const TuningRecord& r : e->candidates) {
    std::printf("  %s %s: %s\n", r.implementation.c_str(), r.config.to_json().c_str(),
                r.ok() ? r.timing.to_string().c_str() : r.error.c_str());
    if (r.ok())
      best = std::min(best, r.timing.median);
    if (r.ok() && r.implementation == e->implementation && r.config == e->config)
      chosen = &r;
  }
  REQUIRE(chosen != nullptr);
  CHECK(chosen->timing.median == best);
  CHECK(chosen->timing.median > 0);

  // The result reloads, and applies through a scope and through the per-device cache.
  const AutotuningResult back = AutotuningResult::loads(result.dumps());
  CHECK(back.lookup(args, e->implementation) == e->config);
  CHECK(back.device() == DeviceInfo::of(device));
  const Implementation& impl = layer_norm_op().implementation(e->implementation);
  if (!DiskCache::disabled_by_environment()) {
    CHECK(autotuning_cache(DeviceInfo::of(device))->lookup(args, e->implementation) == e->config);
    CHECK(layer_norm_op().resolve_config(impl, args, std::nullopt) == e->config);
  }
  // A scope overrides the cache with another candidate of the same implementation.
  for (const TuningRecord& r : e->candidates)
    if (r.ok() && r.implementation == e->implementation && !(r.config == e->config)) {
      AutotuningResult other;
      other.add(TuningEntry{args, r.implementation, r.config, {}});
      AutotuningScope scope(other);
      CHECK(layer_norm_op().resolve_config(impl, args, std::nullopt) == r.config);
      break;
    }

  // The tuned config runs and gives the same numbers as the heuristic's.
  Stream stream = Stream::create(device);
  Tensor xt = standardize({x.shape, x.dtype}, 1, device);
  Tensor s = standardize({param.shape, param.dtype}, 2, device);
  Tensor o = standardize({param.shape, param.dtype}, 3, device);
  Tensor y1 = Tensor::empty({512, 1024}, DType::BF16, device);
  Tensor y2 = Tensor::empty({512, 1024}, DType::BF16, device);
  NormOptions tuned;
  tuned.config = e->config;
  tuned.implementation = e->implementation;
  layer_norm(xt, &s.view(), &o.view(), y1, stream, tuned);
  NormOptions heuristic;
  heuristic.implementation = e->implementation;
  heuristic.config = impl.heuristic(args);
  layer_norm(xt, &s.view(), &o.view(), y2, stream, heuristic);
  stream.synchronize();
  const std::vector<double> a = y1.to_host_doubles(), b = y2.to_host_doubles();
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  CHECK(max_diff <= 0.0625);  // bf16 outputs of |y| <~ 10; summation order may differ
}
