//===- RuntimeTests.cpp - Runtime tests that need no GPU ------------------===//
// DType names and host conversions (against independent references), tensor
// views, and the errors reported when no CUDA driver is present.
#include "tokamax/runtime/DType.h"
#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/Tensor.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace tokamax;

namespace {

constexpr DType kAllDTypes[] = {DType::BF16, DType::F16,  DType::F32,    DType::F64,
                                DType::I8,   DType::I32,  DType::I64,    DType::Bool,
                                DType::F8E4M3, DType::F8E5M2};

// Value of a non-negative code of a 1-E-M format read as if every exponent
// field were a normal binade, so the inf code of an IEEE format stands for
// 2^(emax+1), which is where round-to-nearest sends overflowing values.
double code_value(uint32_t code, int man_bits, int bias) {
  const uint32_t e = code >> man_bits;
  const uint32_t m = code & ((1u << man_bits) - 1);
  if (e == 0)
    return std::ldexp(double(m), 1 - bias - man_bits);
  return std::ldexp(double((1u << man_bits) + m), int(e) - bias - man_bits);
}

// Reference rounding by search: positive codes are ordered like their
// values, so find the neighbours of |x| and take the nearer, ties to the even
// code. Results past max_code clamp to it (inf, or the saturation value).
uint32_t nearest_code(double x, uint32_t max_code, int man_bits, int bias) {
  const double ax = std::fabs(x);
  uint32_t lo = 0, hi = max_code; // Largest code with value <= ax.
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (code_value(mid, man_bits, bias) <= ax)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == max_code)
    return lo;
  const double below = ax - code_value(lo, man_bits, bias);
  const double above = code_value(lo + 1, man_bits, bias) - ax;
  return below < above || (below == above && lo % 2 == 0) ? lo : lo + 1;
}

// Reference fp8 rounding by brute force over all 128 magnitude codes.
uint8_t brute_force_fp8(float x, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x))
    return sign | (e4m3 ? 0x7f : 0x7e);
  const double ax = std::fabs(double(x));
  int best = -1;
  double best_dist = 0;
  for (int c = 0; c < 0x80; ++c) {
    // e4m3: 0x7f is NaN (no inf; out-of-range saturates to 448 = 0x7e).
    // e5m2: 0x7c is inf, standing for 2^16 when rounding; 0x7d-0x7f are NaN.
    if ((e4m3 && c == 0x7f) || (!e4m3 && c > 0x7c))
      continue;
    const double dist = std::isinf(ax) ? (c == (e4m3 ? 0x7e : 0x7c) ? 0.0 : 1.0)
                                       : std::fabs(ax - code_value(uint32_t(c), man_bits, bias));
    if (best < 0 || dist < best_dist || (dist == best_dist && c % 2 == 0)) {
      best = c;
      best_dist = dist;
    }
  }
  return uint8_t(sign | best);
}

// Random float bit patterns (all classes, NaN included) plus values spread
// log-uniformly over [2^lo, 2^hi] of both signs.
std::vector<float> test_floats(int lo, int hi, size_t n) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<double> exponent(lo, hi);
  std::vector<float> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::bit_cast<float>(bits(rng)));
    const double v = std::exp2(exponent(rng));
    out.push_back(float(i % 2 ? -v : v));
  }
  return out;
}

} // namespace

TEST_CASE("dtype names round-trip and bad names are reported", "[runtime][dtype]") {
  for (DType d : kAllDTypes) {
    CHECK(parse_dtype(dtype_name(d)) == d);
    CHECK(dtype_size(d) > 0);
  }
  CHECK((dtype_name(DType::F8E4M3) == "f8e4m3" && dtype_name(DType::Bool) == "bool"));
  CHECK((dtype_size(DType::BF16) == 2 && dtype_size(DType::I64) == 8));
  CHECK((is_floating(DType::F8E5M2) && !is_floating(DType::I32)));
  CHECK((is_integer(DType::I8) && !is_integer(DType::Bool) && !is_integer(DType::F16)));
  try {
    (void)parse_dtype("float32");
    FAIL("parse_dtype accepted 'float32'");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("'float32'") != std::string::npos);
    CHECK(msg.find("bf16, f16, f32, f64, i8, i32, i64, bool, f8e4m3, f8e5m2") !=
          std::string::npos);
  }
}

TEST_CASE("bf16 conversion matches a search reference", "[runtime][dtype]") {
  const std::pair<float, uint16_t> known[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {INFINITY, 0x7f80}, {-INFINITY, 0xff80},
      {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 3 * 0x1p-8f, 0x3f82}, // ties, to even
      {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, {std::numeric_limits<float>::max(), 0x7f80},
      {std::numeric_limits<float>::denorm_min(), 0x0000}, {0x1p-133f, 0x0001}};
  for (auto [x, bits] : known)
    CHECK(float_to_bf16_bits(x) == bits);
  const uint16_t nan = float_to_bf16_bits(std::nanf(""));
  CHECK(((nan & 0x7f80) == 0x7f80 && (nan & 0x007f) != 0));
  CHECK(float_to_bf16_bits(-std::nanf("")) >> 15 == 1);

  for (float x : test_floats(-140, 130, 200000)) {
    const uint16_t got = float_to_bf16_bits(x);
    if (std::isnan(x)) {
      CHECK(std::isnan(bf16_bits_to_float(got)));
      continue;
    }
    const uint32_t sign = std::signbit(x) ? 0x8000 : 0;
    const uint32_t want = sign | nearest_code(x, 0x7f80, 7, 127);
    if (got != want)
      FAIL_CHECK(x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ") -> 0x"
                << got << ", want 0x" << want);
  }
  // Every non-NaN code decodes to a float that encodes back to itself.
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bf16_bits_to_float(uint16_t(c));
    if (!std::isnan(f))
      REQUIRE(float_to_bf16_bits(f) == c);
  }
}

TEST_CASE("f16 conversion matches a reference", "[runtime][dtype]") {
  const std::pair<float, uint16_t> known[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {65504.0f, 0x7bff}, {65519.99f, 0x7bff},
      {65520.0f, 0x7c00}, // tie with 2^16 rounds to inf
      {-INFINITY, 0xfc00}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, // tie, to even
      {3 * 0x1p-26f, 0x0001}, {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 3 * 0x1p-11f, 0x3c02},
      {0x1p-14f - 0x1p-25f, 0x0400}}; // rounds up to the smallest normal
  for (auto [x, bits] : known)
    CHECK(float_to_f16_bits(x) == bits);
  CHECK(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
  CHECK((f16_bits_to_float(0x7c00) == INFINITY && f16_bits_to_float(0x0001) == 0x1p-24f));
  CHECK(f16_bits_to_float(0x3555) == 0.333251953125f);

  for (float x : test_floats(-30, 20, 200000)) {
    const uint16_t got = float_to_f16_bits(x);
    if (std::isnan(x)) {
      CHECK(std::isnan(f16_bits_to_float(got)));
      continue;
    }
#if defined(__FLT16_MAX__)
    const _Float16 h = static_cast<_Float16>(x);
    const uint16_t want = std::bit_cast<uint16_t>(h);
#else
    const uint16_t want = uint16_t((std::signbit(x) ? 0x8000 : 0) | nearest_code(x, 0x7c00, 10, 15));
#endif
    if (got != want)
      FAIL_CHECK(x << " -> 0x" << std::hex << got << ", want 0x" << want);
  }
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = f16_bits_to_float(uint16_t(c));
    if (std::isnan(f)) {
      REQUIRE(((c & 0x7c00) == 0x7c00 && (c & 0x3ff) != 0));
      continue;
    }
#if defined(__FLT16_MAX__)
    REQUIRE(f == static_cast<float>(std::bit_cast<_Float16>(uint16_t(c))));
#endif
    REQUIRE(float_to_f16_bits(f) == c);
  }
}

TEST_CASE("fp8 conversions match a brute-force nearest search", "[runtime][dtype]") {
  const std::pair<uint8_t, float> e4m3_values[] = {
      {0x7e, 448.0f}, {0x01, 0x1p-9f}, {0x08, 0x1p-6f}, {0x78, 256.0f}, {0xb8, -1.0f}};
  for (auto [bits, x] : e4m3_values)
    CHECK(f8e4m3_bits_to_float(bits) == x);
  CHECK((std::isnan(f8e4m3_bits_to_float(0x7f)) && std::isnan(f8e4m3_bits_to_float(0xff))));
  const std::pair<float, uint8_t> e4m3_codes[] = {
      {1e6f, 0x7e}, {-INFINITY, 0xfe}, // saturate
      {464.0f, 0x7e}, {std::nanf(""), 0x7f}}; // tie, to even
  for (auto [x, bits] : e4m3_codes)
    CHECK(float_to_f8e4m3_bits(x) == bits);
  const std::pair<uint8_t, float> e5m2_values[] = {
      {0x7b, 57344.0f}, {0x7c, INFINITY}, {0xfc, -INFINITY}, {0x01, 0x1p-16f}};
  for (auto [bits, x] : e5m2_values)
    CHECK(f8e5m2_bits_to_float(bits) == x);
  CHECK(std::isnan(f8e5m2_bits_to_float(0x7d)));
  const std::pair<float, uint8_t> e5m2_codes[] = {
      {61439.0f, 0x7b}, {61440.0f, 0x7c}, // tie with 2^16 rounds to inf
      {-1e9f, 0xfc}, {-0.0f, 0x80}};
  for (auto [x, bits] : e5m2_codes)
    CHECK(float_to_f8e5m2_bits(x) == bits);

  // Inputs: every representable value, every midpoint and its neighbours,
  // and random floats of all magnitudes.
  std::vector<float> xs = test_floats(-20, 18, 50000);
  for (auto decode : {&f8e4m3_bits_to_float, &f8e5m2_bits_to_float}) {
    for (int c = 0; c < 255; ++c) {
      const float v = decode(uint8_t(c)), mid = (v + decode(uint8_t(c + 1))) / 2;
      xs.insert(xs.end(), {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                           std::nextafter(mid, -INFINITY)});
    }
  }
  xs.insert(xs.end(), {INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e30f});
  for (float x : xs) {
    INFO(x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")");
    CHECK(int(float_to_f8e4m3_bits(x)) == int(brute_force_fp8(x, true)));
    CHECK(int(float_to_f8e5m2_bits(x)) == int(brute_force_fp8(x, false)));
  }
  for (int c = 0; c < 256; ++c) {
    const float f4 = f8e4m3_bits_to_float(uint8_t(c)), f5 = f8e5m2_bits_to_float(uint8_t(c));
    if (!std::isnan(f4))
      REQUIRE(float_to_f8e4m3_bits(f4) == c);
    if (!std::isnan(f5))
      REQUIRE(float_to_f8e5m2_bits(f5) == c);
  }
}

TEST_CASE("load_as_double/store_from_double", "[runtime][dtype]") {
  unsigned char buf[8];
  auto roundtrip = [&](DType d, double v) {
    store_from_double(d, buf, v);
    return load_as_double(d, buf);
  };
  struct Case {
    DType dtype;
    double in, out;
  };
  const Case cases[] = {
      {DType::I32, 1e20, 2147483647.0}, {DType::I32, -1e20, -2147483648.0},
      {DType::I32, 3.7, 3.0},           {DType::I32, -3.7, -3.0},
      {DType::I32, NAN, 0.0},           {DType::I8, 300.0, 127.0},
      {DType::I8, -128.9, -128.0},      {DType::I64, -0x1p63, -0x1p63},
      {DType::I64, -12345678901.9, -12345678901.0},
      {DType::Bool, 0.25, 1.0},         {DType::Bool, 0.0, 0.0},
      {DType::F64, 0.1, 0.1},           {DType::F32, 0.1, double(0.1f)},
      {DType::BF16, 3.0, 3.0},          {DType::F8E4M3, 1000.0, 448.0},
      {DType::F8E5M2, -0.75, -0.75},
      // One rounding step from double: through float these are ties and give 1.
      {DType::F16, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-10},
      {DType::BF16, 1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-7}};
  for (const Case& c : cases) {
    INFO(dtype_name(c.dtype) << " " << c.in);
    CHECK(roundtrip(c.dtype, c.in) == c.out);
  }
  store_from_double(DType::I64, buf, 0x1p63); // Clamps to INT64_MAX exactly.
  CHECK(std::bit_cast<int64_t>(buf) == std::numeric_limits<int64_t>::max());
  // Floats agree with the float entry points.
  for (float x : test_floats(-20, 20, 2000)) {
    if (std::isnan(x))
      continue;
    store_from_double(DType::F16, buf, x);
    CHECK(std::bit_cast<uint16_t>(std::array{buf[0], buf[1]}) == float_to_f16_bits(x));
    store_from_double(DType::BF16, buf, x);
    CHECK(std::bit_cast<uint16_t>(std::array{buf[0], buf[1]}) == float_to_bf16_bits(x));
    store_from_double(DType::F8E4M3, buf, x);
    CHECK(buf[0] == float_to_f8e4m3_bits(x));
  }
}

TEST_CASE("TensorView shapes, strides and errors", "[runtime][tensor]") {
  auto vec = [](std::span<const int64_t> s) { return std::vector<int64_t>(s.begin(), s.end()); };
  const std::vector<int64_t> shape = {2, 3, 4};
  TensorView v(0x1000, DType::F16, shape);
  CHECK(v.rank() == 3);
  CHECK(vec(v.shape()) == shape);
  CHECK(vec(v.strides()) == std::vector<int64_t>{12, 4, 1});
  CHECK((v.dim(0) == 2 && v.dim(-1) == 4 && v.stride(1) == 4 && v.stride(-1) == 1));
  CHECK((v.numel() == 24 && v.nbytes() == 48 && v.is_contiguous()));
  CHECK((v.data() == 0x1000 && v.dtype() == DType::F16));
  CHECK_THROWS_AS(v.dim(3), Error);
  CHECK_THROWS_AS(v.stride(-4), Error);

  const std::vector<int64_t> t_shape = {4, 3}, t_strides = {1, 4};
  TensorView t(0, DType::F32, t_shape, t_strides);
  CHECK((!t.is_contiguous() && t.numel() == 12 && t.stride(0) == 1));
  const std::vector<int64_t> b_shape = {1, 5}, b_strides = {99, 1};
  CHECK(TensorView(0, DType::F32, b_shape, b_strides).is_contiguous());

  TensorView scalar(0, DType::I64, std::span<const int64_t>{});
  CHECK((scalar.rank() == 0 && scalar.numel() == 1 && scalar.nbytes() == 8));
  const std::vector<int64_t> empty = {3, 0, 2};
  CHECK(TensorView(0, DType::F32, empty).numel() == 0);

  CHECK(format_shape(std::vector<int64_t>{16384, 4096}) == "[16384, 4096]");
  CHECK(format_shape(std::span<const int64_t>{}) == "[]");

  const std::vector<int64_t> bad = {2, -3};
  CHECK_THROWS_WITH(TensorView(0, DType::F32, bad),
                    Catch::Contains("dim 1") && Catch::Contains("[2, -3]"));
  const std::vector<int64_t> too_deep(9, 1);
  CHECK_THROWS_WITH(TensorView(0, DType::F32, too_deep), Catch::Contains("rank 9"));
  const std::vector<int64_t> two = {1, 2};
  CHECK_THROWS_AS(TensorView(0, DType::F32, shape, two), Error);
}

namespace {

constexpr const char* kBogusDriver = "/nonexistent/tokamax-test/libcuda.so.1";
constexpr const char* kProbeEnv = "TOKAMAX_TEST_NO_DRIVER_PROBE";
constexpr int kProbeOk = 42;

// Exit code of the no-driver probe: kProbeOk when everything is as expected.
// 10: driver_available() was true, 11: no throw, 12: wrong message, 13: wrong
// exception type.
int run_no_driver_probe() {
  if (driver_available())
    return 10;
  try {
    (void)Device::count();
    return 11;
  } catch (const NoDeviceError& e) {
    const std::string msg = e.what();
    return msg.find(kBogusDriver) != std::string::npos &&
                   msg.find("CUDA driver not available") != std::string::npos
               ? kProbeOk
               : 12;
  } catch (...) {
    return 13;
  }
}

} // namespace

// The driver loads once per process, so the forced-missing-driver check runs
// in a fresh process: this test binary re-executed with only the hidden probe
// below selected and TOKAMAX_CUDA_DRIVER pointing nowhere.
TEST_CASE("a missing driver library gives NoDeviceError (child process)", "[runtime][driver]") {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("TOKAMAX_CUDA_DRIVER", kBogusDriver, 1);
    setenv(kProbeEnv, "1", 1);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0)
      dup2(devnull, STDOUT_FILENO);
    char exe[] = "/proc/self/exe";
    char filter[] = "[no-driver-probe]";
    char* argv[] = {exe, filter, nullptr};
    execv(exe, argv);
    _exit(run_no_driver_probe()); // exec failed: probe this forked copy instead.
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  INFO("probe exit code " << WEXITSTATUS(status) << " (see run_no_driver_probe)");
  CHECK(WEXITSTATUS(status) == kProbeOk);
}

TEST_CASE("no-driver probe (run by the test above)", "[.][no-driver-probe]") {
  if (!std::getenv(kProbeEnv))
    return;
  std::_Exit(run_no_driver_probe());
}

TEST_CASE("without a driver, device use throws NoDeviceError", "[runtime][driver]") {
  if (driver_available()) {
    SUCCEED("a CUDA driver is present: covered by the GPU tests");
    return;
  }
  const char* env = std::getenv("TOKAMAX_CUDA_DRIVER");
  const std::string path = env && *env ? env : "libcuda.so.1";
  CHECK_THROWS_AS(Device::count(), NoDeviceError); // Also a tokamax::Error.
  CHECK_THROWS_WITH(Device::count(), Catch::Contains(path) &&
                                         Catch::Contains("TOKAMAX_INTERPRET=1"));
  CHECK_THROWS_AS(Device::get(0), NoDeviceError);
  CHECK_THROWS_AS(driver_version(), NoDeviceError);
  CHECK_THROWS_AS(Tensor::empty({4, 4}, DType::F32), NoDeviceError);
}
