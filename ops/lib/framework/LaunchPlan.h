//===- LaunchPlan.h - An op call's launches, recorded once, replayed cheaply -*- C++ -*-===//
//
// An op call resolved for a device (implementation, config, kernels) always launches the
// same kernels with the same scalars; only its tensors' addresses change from call to
// call. record_call_plan runs the implementation's planning once with stand-in
// addresses (argument i at (i + 1) << 40, the call's scratch at 1 << 62), loading each
// kernel through the JIT and checking its arguments as a launch would, and keeps every
// launch as packed parameter words plus, per tensor parameter, the buffer (an argument
// or the scratch) and byte offset it points into. Replaying it with the real base
// addresses is then a copy of the words, one add per tensor and cuLaunchKernel: no
// binding, config resolution, kernel key, lookup or allocation.
//
// A Function's plan is its calls' plans with their buffers renamed to the Function's
// values (remap), so one replay (or one CUDA graph capture) runs the whole function.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/ops/Op.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tokamax {
class Device;
}

namespace tokamax::ops_detail {

class PlannedImplementation;

/// A byte range's base: buffer `buffer` of the replay's table of base addresses.
struct BufferRef {
  uint32_t buffer = 0;
  uint64_t offset = 0;
};

struct PlanStep {
  enum class Kind : uint8_t { Launch, Zero, Copy };
  Kind kind = Kind::Launch;
  const LoadedKernel *kernel = nullptr;  ///< Launch
  std::vector<uint64_t> words;           ///< Launch: packed parameters (tensor words set at replay)
  std::vector<std::pair<uint32_t, BufferRef>> tensors;  ///< Launch: parameter index -> its buffer
  BufferRef dst, src;  ///< Zero: dst; Copy: dst <- src
  uint64_t bytes = 0;  ///< Zero, Copy
};

struct LaunchPlan {
  std::vector<PlanStep> steps;
  uint32_t buffers = 0;        ///< entries of the base table replay() reads (scratch included)
  uint64_t scratch_bytes = 0;  ///< what the scratch buffer must hold (0: none)
  uint32_t scratch = 0;        ///< the scratch buffer's index

  /// Sets marks[i] for every buffer i a kernel parameter points into: those must be
  /// 16-byte aligned (the kernels' vector accesses and TMA need it), the rest need not.
  void mark_kernel_buffers(std::vector<bool> &marks) const;
  /// Enqueues every step on `stream`; bases[i] is buffer i's address. Unchecked: the
  /// bases must be 16-byte aligned addresses of buffers of the recorded sizes.
  void replay(std::span<const uint64_t> bases, CUstream stream) const;
  /// Renames the buffers: buffer i becomes map[i] of a table of `buffers` entries.
  void remap(std::span<const uint32_t> map, uint32_t buffers);
};

/// The address an argument stands in with while a plan is recorded (16-byte aligned).
uint64_t stand_in_address(size_t argument);
/// The scratch buffer's stand-in address.
inline constexpr uint64_t kStandInScratch = uint64_t(1) << 62;
/// The largest buffer a stand-in address can reach into.
inline constexpr uint64_t kStandInMaxBytes = (uint64_t(1) << 40) - 1;
/// The buffer and offset of stand-in `address` spanning `bytes`, checked against the
/// arguments' sizes (`sizes`) and the scratch's (index sizes.size()); throws Error
/// naming `what` for an address that is no argument's or a range past its end.
BufferRef resolve_stand_in(uint64_t address, uint64_t bytes, std::span<const uint64_t> sizes,
                           uint64_t scratch_bytes, std::string_view what);

/// Records the call's launches on `device` (kernels compiled or loaded now). The call's
/// arguments are buffers 0..n-1 in the op's argument order, the scratch buffer n.
LaunchPlan record_call_plan(const PlannedImplementation &impl, const BoundArgs &args, const Config &config,
                            Device &device);

} // namespace tokamax::ops_detail
