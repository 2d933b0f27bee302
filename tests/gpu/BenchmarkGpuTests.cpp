//===- BenchmarkGpuTests.cpp - Benchmark timers and standardize on a GPU --===//
#include <tokamax/ops/Elementwise.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <catch2/catch.hpp>

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

TEST_CASE("CUPTI timing of work without kernels is an error", "[gpu][benchmark]") {
  if (skip_without_cupti())
    return;
  Device& device = Device::get();
  Stream stream = Stream::create(device);
  DeviceBuffer buffer(1 << 20, device);
  auto memset_only = [&] { memset_d8(buffer.ptr(), 1, 1 << 20, stream.handle()); };
  CHECK_THROWS_WITH(benchmark(stream, memset_only, TimingMethod::Cupti, 3, 1, false),
                    Catch::Contains("no kernel"));
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
