//===- SharedMemory.h - The shared memory of a config's kernels, as compiled -*- C++ -*-===//
//
// Whether a config's kernels fit a block's shared memory is the compiler's call: each
// kernel the config's plan launches is built (its tile IR, no PTX) and the compiler plans
// its shared memory as compile_ir will (planned_shared_bytes). Hand formulas for it
// drifted from that plan: the hopper attention forward at head dim 256 (128 x 64 blocks)
// was estimated at 192 KiB and takes 256 KiB (its epilogue stages the output through
// shared memory), past the 227 KiB of sm_90a. A kernel's figure is remembered under its
// key: checks, heuristics and search spaces ask for the same kernels again.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/runtime/Arch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tokamax::ops_detail {

/// The shared memory one block may use on sm_90a (227 KiB), which the ops' configs are
/// held to.
inline constexpr int64_t kSharedMemoryPerBlock = Arch::parse("sm_90a").shared_memory_per_block();

/// A call's plan: its launches (and fills and copies) go to the executor.
using Plan = std::function<void(KernelExecutor &)>;

/// A kernel a plan launches, the shared memory one block of it takes and the blocks of
/// it meant to share an SM.
struct KernelSharedMemory {
  std::string kernel;  ///< its name
  int64_t bytes = 0;
  int blocks_per_sm = 1;
};

/// What one of `blocks` blocks sharing an SM may use of `limit` bytes a block: an equal
/// share of the SM's memory, less the 1 KiB the driver reserves for each block.
int64_t shared_memory_share(int64_t limit, int blocks);

/// Each distinct kernel `plan` launches (in launch order), with its shared memory as the
/// compiler plans it. The plan reads no tensor and launches nothing: give it views
/// without data.
std::vector<KernelSharedMemory> planned_shared_memory(const Plan &plan);

/// Null where every kernel of `plan` fits `limit` bytes of shared memory a block (its
/// shared_memory_share where the kernel's blocks share an SM); else names the first that
/// does not, the bytes it needs and its limit (or the compiler's error, where it rejects
/// a kernel).
std::optional<std::string> check_shared_memory(const Plan &plan, int64_t limit = kSharedMemoryPerBlock);

} // namespace tokamax::ops_detail
