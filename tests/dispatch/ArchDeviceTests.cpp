// Arch::of a device: its name is Device::arch(), its compute capability and SM count the
// device's (under the null driver, an H200's: sm_90a, 132 SMs).
#include <catch2/catch.hpp>

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>

using namespace tokamax;

TEST_CASE("a device's Arch: its name, compute capability and SM count", "[runtime][arch]") {
  const Device &device = Device::get();
  const Arch arch = Arch::of(device);
  CHECK(arch == device.target());
  CHECK(arch.name() == device.arch());
  CHECK(Arch::parse(device.arch()).number() == arch.number());
  CHECK(arch.cc_major() == device.cc_major());
  CHECK(arch.cc_minor() == device.cc_minor());
  CHECK(arch.sm_count() == device.sm_count());
  CHECK(arch.arch_specific() == (arch.number() == 90 || arch.number() == 100));
  // The table's opt-in maximum is the device's where the table knows the arch.
  if (arch.shared_memory_per_block())
    CHECK(size_t(arch.shared_memory_per_block()) == device.max_shared_memory_per_block_optin());
}
