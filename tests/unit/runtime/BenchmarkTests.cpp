// Tests for the device-free parts of benchmarking: statistics, timing method
// names, argument checks, and the host-side generator behind standardize().

#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

using namespace tokamax;

namespace {

constexpr DType kAllDTypes[] = {DType::BF16, DType::F16, DType::F32,    DType::F64,
                                DType::I8,   DType::I32, DType::I64,    DType::Bool,
                                DType::F8E4M3, DType::F8E5M2};

} // namespace

TEST_CASE("summarize computes the statistics of known samples", "[benchmark]") {
  SECTION("odd count") {
    BenchmarkData d = summarize({3.0, 1.0, 2.0}, TimingMethod::Cupti);
    CHECK(d.times_ms == std::vector<double>{3.0, 1.0, 2.0});  // order kept
    CHECK(d.median == 2.0);
    CHECK(d.min == 1.0);
    CHECK(d.max == 3.0);
    CHECK(d.mean == Approx(2.0));
    CHECK(d.stddev == Approx(1.0));  // sample stddev: sqrt(2 / 2)
    CHECK(d.method == TimingMethod::Cupti);
  }
  SECTION("even count: the median is the mean of the middle two") {
    BenchmarkData d = summarize({4.0, 1.0, 3.0, 2.0});
    CHECK(d.median == 2.5);
    CHECK(d.mean == Approx(2.5));
    CHECK(d.stddev == Approx(std::sqrt(5.0 / 3.0)));
    CHECK(d.method == TimingMethod::CudaEvents);
  }
  SECTION("one sample has no spread") {
    BenchmarkData d = summarize({0.25});
    CHECK(d.median == 0.25);
    CHECK(d.min == 0.25);
    CHECK(d.max == 0.25);
    CHECK(d.mean == 0.25);
    CHECK(d.stddev == 0.0);
  }
  SECTION("an empty sample gives zeros") {
    BenchmarkData d = summarize({});
    CHECK(d.times_ms.empty());
    CHECK(d.median == 0.0);
    CHECK(d.stddev == 0.0);
  }
  SECTION("a larger sample against a direct computation") {
    std::vector<double> xs;
    for (int i = 0; i < 101; ++i)
      xs.push_back(1.0 + 0.01 * ((i * 37) % 101));
    BenchmarkData d = summarize(xs);
    CHECK(d.median == Approx(1.5));
    CHECK(d.min == Approx(1.0));
    CHECK(d.max == Approx(2.0));
    CHECK(d.mean == Approx(1.5));
    double ss = 0;
    for (double x : xs)
      ss += (x - 1.5) * (x - 1.5);
    CHECK(d.stddev == Approx(std::sqrt(ss / 100)));
  }
}

TEST_CASE("BenchmarkData prints its numbers and method", "[benchmark]") {
  const std::string s = summarize({1.0, 2.0, 3.0}, TimingMethod::CudaGraph).to_string();
  CHECK(s.find("median 2.0000 ms") != std::string::npos);
  CHECK(s.find("3 iterations") != std::string::npos);
  CHECK(s.find("cuda-graph") != std::string::npos);
}

TEST_CASE("timing method names round-trip", "[benchmark]") {
  for (TimingMethod m : {TimingMethod::Auto, TimingMethod::CudaEvents, TimingMethod::CudaGraph,
                         TimingMethod::WallClock, TimingMethod::Cupti})
    CHECK(parse_timing_method(timing_method_name(m)) == m);
  CHECK_THROWS_AS(parse_timing_method("nvtx"), Error);
  CHECK_THROWS_WITH(parse_timing_method("nvtx"), Catch::Contains("cuda-events"));
}

TEST_CASE("benchmark rejects bad arguments before touching the device", "[benchmark]") {
  Stream stream = Stream::wrap(nullptr);
  auto work = [] {};
  CHECK_THROWS_AS(benchmark(stream, work, TimingMethod::CudaEvents, 0), Error);
  CHECK_THROWS_AS(benchmark(stream, work, TimingMethod::CudaEvents, 10, -1), Error);
  CHECK_THROWS_AS(benchmark(stream, std::function<void()>(), TimingMethod::CudaEvents), Error);
}

TEST_CASE("CUPTI availability and its error agree", "[benchmark]") {
  const std::string why = cupti_library_error();
  CHECK(cupti_available() == why.empty());
  if (!why.empty())
    CHECK_THAT(why, Catch::Contains("libcupti.so.13"));
}

TEST_CASE("random_host_values never gives zeros and stays in range", "[benchmark]") {
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype_name(dtype));
    const TensorSpec spec{{7, 300}, dtype};
    const std::vector<double> v = random_host_values(spec, 1234);
    REQUIRE(v.size() == 2100);
    std::set<double> distinct(v.begin(), v.end());
    const bool has_negative = std::any_of(v.begin(), v.end(), [](double x) { return x < 0; });
    if (dtype == DType::Bool) {
      CHECK(distinct == std::set<double>{0.0, 1.0});  // a true/false mix
      continue;
    }
    CHECK(has_negative);
    for (double x : v) {
      REQUIRE(x != 0.0);
      REQUIRE(std::isfinite(x));
      if (is_floating(dtype)) {
        REQUIRE(std::fabs(x) >= 0.05);
        REQUIRE(std::fabs(x) <= 3.0);
      } else {
        REQUIRE(std::fabs(x) >= 1.0);
        REQUIRE(std::fabs(x) <= 8.0);
        REQUIRE(x == std::round(x));
      }
      // Exactly representable: what the device holds is what the host sees.
      alignas(8) unsigned char element[8];
      store_from_double(dtype, element, x);
      REQUIRE(load_as_double(dtype, element) == x);
    }
    CHECK(distinct.size() >= (is_floating(dtype) && dtype_size(dtype) == 1 ? 20u : 16u));
  }
}

TEST_CASE("random_host_values is deterministic per seed", "[benchmark]") {
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype_name(dtype));
    const TensorSpec spec{{5, 4, 3}, dtype};
    CHECK(random_host_values(spec, 7) == random_host_values(spec, 7));
    CHECK(random_host_values(spec, 7) != random_host_values(spec, 8));
  }
  // Pinned values: the generator is ours, so they must not change across platforms or
  // standard libraries (a changed generator changes every benchmark's inputs: update
  // these on purpose only).
  const std::vector<double> f64 = random_host_values({{4}, DType::F64}, 0);
  REQUIRE(f64.size() == 4);
  CHECK(f64[0] == Approx(1.3230075912931045).epsilon(1e-15));
  CHECK(f64[1] == Approx(-0.12797962619816333).epsilon(1e-15));
  CHECK(f64[2] == Approx(2.9141018355537942).epsilon(1e-15));
  CHECK(f64[3] == Approx(-0.36372274012327671).epsilon(1e-15));
  CHECK(random_host_values({{4}, DType::BF16}, 0) ==
        std::vector<double>{1.3203125, -0.1279296875, 2.921875, -0.36328125});
  CHECK(random_host_values({{4}, DType::I32}, 0) == std::vector<double>{3, -8, 7, -6});
  // A shorter tensor gets a prefix of a longer one's values.
  const std::vector<double> prefix = random_host_values({{2}, DType::F64}, 0);
  CHECK(std::equal(prefix.begin(), prefix.end(), f64.begin()));
  // Large tensors are generated in chunks on several threads: the same values, and the
  // prefix property, across chunk boundaries.
  const std::vector<double> longer = random_host_values({{300001}, DType::BF16}, 5);
  const std::vector<double> shorter = random_host_values({{200003}, DType::BF16}, 5);
  CHECK(longer == random_host_values({{300001}, DType::BF16}, 5));
  CHECK(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  CHECK(std::set<double>(longer.begin() + 65536, longer.begin() + 131072).size() > 100);  // chunks differ
  CHECK(!std::equal(longer.begin(), longer.begin() + 1000, longer.begin() + 65536));
}

TEST_CASE("TensorSpec counts elements and rejects negative dims", "[benchmark]") {
  CHECK(TensorSpec{{}, DType::F32}.numel() == 1);
  CHECK(TensorSpec{{3, 0, 5}, DType::F32}.numel() == 0);
  CHECK(TensorSpec{{3, 4, 5}, DType::F32}.numel() == 60);
  CHECK(random_host_values({{3, 0}, DType::F32}, 1).empty());
  CHECK(random_host_values({{}, DType::F16}, 1).size() == 1);
  CHECK_THROWS_AS(TensorSpec({{3, -1}, DType::F32}).numel(), Error);
}
