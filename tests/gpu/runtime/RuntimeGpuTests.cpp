//===- RuntimeGpuTests.cpp - Runtime tests on a real GPU ------------------===//
#include "tokamax/runtime/DType.h"
#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/Event.h"
#include "tokamax/runtime/Memory.h"
#include "tokamax/runtime/Module.h"
#include "tokamax/runtime/Stream.h"
#include "tokamax/runtime/Tensor.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tokamax;

namespace {

constexpr DType kAllDTypes[] = {DType::BF16, DType::F16,  DType::F32,    DType::F64,
                                DType::I8,   DType::I32,  DType::I64,    DType::Bool,
                                DType::F8E4M3, DType::F8E5M2};

// y[i] += 1.0f for i < n; sm_80 PTX, JIT-compiled by the driver for any newer GPU.
constexpr const char* kAddOnePtx = R"(
.version 7.8
.target sm_80
.address_size 64

.visible .entry add_one(.param .u64 p_data, .param .u32 p_n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_data];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
)";

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out)
    b = static_cast<uint8_t>(rng());
  return out;
}

} // namespace

TEST_CASE("device properties are sane", "[gpu][runtime]") {
  REQUIRE(driver_available());
  CHECK(driver_version() >= 12000);
  REQUIRE(Device::count() > 0);
  Device& dev = Device::get();
  CHECK(&dev == &Device::get(0)); // One instance per process.
  CHECK(dev.ordinal() == 0);
  CHECK_FALSE(dev.name().empty());
  CHECK(dev.sm_count() > 0);
  CHECK(dev.total_memory() > 0);
  CHECK(dev.cc_major() >= 7);
  CHECK(dev.arch().rfind("sm_", 0) == 0);
  if (dev.cc_major() == 9 && dev.cc_minor() == 0)
    CHECK(dev.arch() == "sm_90a");
  CHECK(dev.max_shared_memory_per_block_optin() >= 48 * 1024);
  CHECK(dev.l2_cache_bytes() > 0);
  CHECK(dev.context() != nullptr);
  dev.make_current();
  INFO(describe(dev));
  CHECK(describe(dev).find(dev.name()) != std::string::npos);
  CHECK_THROWS_AS(Device::get(Device::count()), Error);
}

TEST_CASE("host -> device -> host round trip for every dtype", "[gpu][runtime]") {
  const std::vector<int64_t> shape = {33, 65};
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    // Raw bytes survive unchanged.
    Tensor t = Tensor::empty(shape, dtype);
    CHECK(t.nbytes() == 33 * 65 * dtype_size(dtype));
    const auto bytes = random_bytes(t.nbytes(), 7 + static_cast<uint32_t>(dtype));
    t.copy_from_host(bytes.data(), bytes.size());
    std::vector<uint8_t> back(t.nbytes());
    t.copy_to_host(back.data(), back.size());
    CHECK(back == bytes);
    CHECK_THROWS_WITH(t.copy_from_host(bytes.data(), bytes.size() + 1),
                      Catch::Contains("[33, 65]"));

    // Typed values come back as the host conversion gives them.
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
    std::vector<float> values(size_t(33 * 65));
    for (float& v : values)
      v = dist(rng);
    Tensor typed = Tensor::from_host_floats(values, shape, dtype, Device::get());
    const std::vector<double> got = typed.to_host_doubles();
    REQUIRE(got.size() == values.size());
    unsigned char elem[8];
    for (size_t i = 0; i < values.size(); ++i) {
      store_from_double(dtype, elem, values[i]);
      REQUIRE(got[i] == load_as_double(dtype, elem));
    }
  }
}

TEST_CASE("device-to-device copies, memset and streams", "[gpu][runtime]") {
  const std::vector<int64_t> shape = {1 << 20};
  Tensor a = Tensor::empty(shape, DType::I32);
  Tensor b = Tensor::empty(shape, DType::I32);
  const auto bytes = random_bytes(a.nbytes(), 3);
  a.copy_from_host(bytes.data(), bytes.size());
  copy_device_to_device(b.data(), a.data(), a.nbytes());
  std::vector<uint8_t> back(b.nbytes());
  b.copy_to_host(back.data(), back.size());
  CHECK(back == bytes);

  Stream stream = Stream::create(Device::get());
  CHECK(stream.owned());
  memset_d8(b.data(), 0xab, b.nbytes(), stream.handle());
  copy_device_to_host(back.data(), b.data(), back.size(), stream.handle());
  stream.synchronize();
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0xab; }));

  Stream moved = std::move(stream);
  CHECK(moved.handle() != nullptr);
  CHECK(stream.handle() == nullptr);
  Stream borrowed = Stream::wrap(moved.handle());
  CHECK_FALSE(borrowed.owned());
  copy_device_to_device(a.data(), b.data(), a.nbytes(), borrowed.handle());
  borrowed.synchronize();
  const std::vector<double> ints = a.to_host_doubles();
  CHECK(ints[0] == double(int32_t(0xabababab)));

  // Copies work from a thread that never made a context current.
  std::vector<uint8_t> from_thread(16);
  std::thread([&] { copy_device_to_host(from_thread.data(), a.data(), 16); }).join();
  CHECK(from_thread[0] == 0xab);

  Tensor empty = Tensor::empty({0, 5}, DType::F32);
  CHECK(empty.nbytes() == 0);
  CHECK(empty.to_host_doubles().empty());
}

TEST_CASE("events measure a positive time", "[gpu][runtime]") {
  Tensor a = Tensor::empty({64 << 20}, DType::F32);
  Tensor b = Tensor::empty({64 << 20}, DType::F32);
  Stream stream = Stream::create(Device::get());
  Event start, end;
  start.record(stream.handle());
  for (int i = 0; i < 4; ++i)
    copy_device_to_device(b.data(), a.data(), a.nbytes(), stream.handle());
  end.record(stream.handle());
  const float ms = Event::elapsed_ms(start, end);
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);
}

TEST_CASE("PTX modules load and kernels launch", "[gpu][runtime]") {
  Device& dev = Device::get();
  Module module = Module::load_ptx(kAddOnePtx, dev);
  KernelFunction fn = module.function("add_one");
  CHECK(fn.name() == "add_one");
  CHECK(fn.num_registers() > 0);
  fn.set_max_dynamic_shared(64 * 1024);

  const uint32_t n = 1000;
  std::vector<float> values(n);
  for (uint32_t i = 0; i < n; ++i)
    values[i] = float(i);
  const std::vector<int64_t> shape = {n};
  Tensor t = Tensor::from_host_floats(values, shape, DType::F32, dev);
  uint64_t data = t.data();
  uint32_t count = n;
  void* params[] = {&data, &count};
  Stream stream = Stream::create(dev);
  fn.launch({(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, stream.handle(), params);
  stream.synchronize();
  const std::vector<double> out = t.to_host_doubles();
  for (uint32_t i = 0; i < n; ++i)
    REQUIRE(out[i] == double(i) + 1.0);

  // A bad launch configuration is a DriverError naming the kernel.
  try {
    fn.launch({1, 1, 1}, {4096, 1, 1}, 0, stream.handle(), params);
    FAIL("a 4096-thread block launched");
  } catch (const DriverError& e) {
    CHECK(e.name() == "CUDA_ERROR_INVALID_VALUE");
    CHECK(std::string(e.what()).find("add_one") != std::string::npos);
  }
  CHECK_THROWS_WITH(module.function("no_such_kernel"), Catch::Contains("no_such_kernel"));

  Module moved = std::move(module);
  CHECK(moved.handle() != nullptr);
}

TEST_CASE("driver errors carry the driver's error name", "[gpu][runtime]") {
  Device& dev = Device::get();
  try {
    (void)Module::load_ptx("this is not PTX", dev);
    FAIL("garbage PTX loaded");
  } catch (const DriverError& e) {
    INFO(e.what());
    CHECK(e.code() != 0);
    CHECK(e.name().rfind("CUDA_ERROR_", 0) == 0);
    CHECK(std::string(e.what()).rfind("cuModuleLoadDataEx: " + e.name() + ": ", 0) == 0);
    CHECK(std::string(e.what()).find("JIT log") != std::string::npos);
  }
  // An ELF magic followed by nothing valid: rejected as an image.
  std::vector<uint8_t> garbage(256, 0);
  std::memcpy(garbage.data(), "\x7f" "ELF", 4);
  CHECK_THROWS_AS(Module::load_cubin(garbage, dev), DriverError);
  CHECK_THROWS_AS(Module::load_cubin({}, dev), Error);
  try {
    check(1, "cuFake");
    FAIL("check(1) did not throw");
  } catch (const DriverError& e) {
    CHECK(e.code() == 1);
    CHECK(e.name() == "CUDA_ERROR_INVALID_VALUE");
    CHECK(std::string(e.what()).rfind("cuFake: CUDA_ERROR_INVALID_VALUE: ", 0) == 0);
  }
  CHECK_THROWS_AS(DeviceBuffer(size_t(1) << 50, dev), DriverError); // 1 PiB.
}
