// Every kernel the library ships (tests/common/KernelCases.h), once each at small odd
// shapes, on the device and on the interpreter: small enough for compute-sanitizer's
// memcheck, racecheck, synccheck and initcheck (scripts/gpu-sanitize.sh runs the
// "[sanitize]" case under each tool). The device must match the interpreter.
#include <catch2/catch.hpp>

#include "common/KernelCases.h"

#include <tokamax/runtime/Device.h>

using namespace tokamax;

TEST_CASE("every kernel at small odd shapes: the device matches the interpreter", "[gpu][sanitize]") {
  Stream stream = Stream::create(Device::get());
  const bool hopper = Device::get().arch() == "sm_90a";
  for (const test::KernelCase &c : test::kernel_cases()) {
    if (!hopper && c.name.find("hopper") != std::string::npos) {
      WARN("skipped " << c.name << ": needs sm_90a, this GPU is " << Device::get().arch());
      continue;
    }
    INFO(c.name);
    test::Io device(&stream), host(nullptr);
    c.call(device);
    c.call(host);
    auto got = device.results(), want = host.results();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i);
      CHECK(test::rel_error(got[i], want[i]) <= c.tolerance);
    }
  }
}
