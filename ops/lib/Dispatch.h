//===- Dispatch.h - From an op call to a launched kernel ----------*- C++ -*-===//
#pragma once

#include <tokamax/compiler/Jit.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/Stream.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace tokamax::ops_detail {

/// The smallest power of two >= v (tile extents are powers of two).
inline int64_t next_power_of_two(int64_t v) {
  int64_t p = 1;
  while (p < v)
    p *= 2;
  return p;
}

/// What the shared-memory estimates of the ring configs (attention, gated_linear_unit,
/// ragged_dot) are held to: sm_90a's 227 KiB a block less 7 KiB of headroom for what the
/// estimates leave out (mbarriers, alignment, the epilogue's and conversions' scratch).
inline constexpr int64_t kHopperSharedBudget = Arch::parse("sm_90a").shared_memory_per_block() - 7 * 1024;

/// Kernels that failed a device run (did not finish, or gave wrong results) serve only where
/// TOKAMAX_EXPERIMENTAL=1 asks for them: elsewhere the reason (`what` and what was seen),
/// so neither auto, nor the autotuner, nor an explicit request launches them.
inline std::optional<std::string> experimental_gate(const std::string &what) {
  if (const char *v = std::getenv("TOKAMAX_EXPERIMENTAL"); v && std::string(v) == "1")
    return std::nullopt;
  return what + " (set TOKAMAX_EXPERIMENTAL=1 to run them anyway)";
}

/// The op name with the fields of a spec and config.
inline KernelKey specializationKey(const char *op, std::initializer_list<int64_t> fields) {
  return KernelKey(op, fields);
}

/// The loaded kernel for `key` (one hash lookup once compiled).
template <class Build>
const LoadedKernel &kernelFor(const KernelKey &key, Device &device, Build &&build) {
  if (const LoadedKernel *k = Jit::instance().find(key, device))
    return *k;
  return Jit::instance().get_ir(key, device, [&] { return build().ir(); });
}

/// Validates that x and out (named `x_name`, `out_name` in errors) agree, are contiguous, have data
/// and sit on one device; returns the element count.
int64_t checkSameTensors(const char *op, const TensorView &x, const TensorView &out, const char *x_name = "x",
                         const char *out_name = "out");

} // namespace tokamax::ops_detail
