//===- Arch.cpp - GPU architectures: names, devices, the parse error -------===//
#include "tokamax/runtime/Arch.h"

#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Error.h"

#include <fmt/format.h>

namespace tokamax {

Arch Arch::of(const Device& device) {
  const int major = device.cc_major(), minor = device.cc_minor();
  // The "a" variants unlock wgmma/TMA (Hopper) and tcgen05 (Blackwell).
  const bool specific = (major == 9 || major == 10) && minor == 0;
  return Arch(major, minor, specific, device.sm_count());
}

std::string Arch::name() const {
  return fmt::format("sm_{}{}{}", cc_major_, cc_minor_, arch_specific_ ? "a" : "");
}

void Arch::bad_name(std::string_view target, std::string_view context) {
  throw Error(fmt::format("{}{}arch must look like sm_80 or sm_90a, got '{}'", context,
                          context.empty() ? "" : ": ", target));
}

} // namespace tokamax
