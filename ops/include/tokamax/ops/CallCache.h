//===- CallCache.h - The eager op call cache ----------------------*- C++ -*-===//
//
// An eager op call on device tensors (layer_norm, matmul, dot_product_attention, ...) is
// resolved once per distinct call: binding, implementation choice, config resolution,
// kernels, and the launches they make (a launch plan). The result is kept under a key of
// everything it depends on:
//   - the op, and per tensor argument its presence, dtype, shape, strides, device, and
//     whether its address is null or 16-byte aligned;
//   - the call's options (attributes such as axis and epsilon, the implementation asked
//     for, an explicit config);
//   - the calling thread's config providers (each AutotuningScope push counts as new) and
//     the CUDA context current on the thread (the per-device autotuning cache answers
//     for it).
// A repeated call finds its plan with one hash lookup and replays it: the tensors'
// addresses go into the recorded parameters and the kernels are launched, with no
// allocation. A process-wide config epoch and the JIT's generation (Jit::clear) are
// checked on every hit: a stale entry is resolved again.
//
// Config providers whose answers change while they are installed must call
// notify_config_change() (AutotuningResult and the autotuning cache do), or cached calls
// keep the configs they resolved before.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <cstddef>
#include <cstdint>

namespace tokamax {

struct TOKAMAX_API CallCacheStats {
  uint64_t hits = 0;    ///< calls replayed from the cache
  uint64_t misses = 0;  ///< calls resolved (first calls, changed calls, stale entries)
  size_t entries = 0;
};

/// Counts since the process started (or since clear_call_cache()).
TOKAMAX_API CallCacheStats call_cache_stats();
/// Drops every entry and zeroes the counts (tests, benchmarks of first calls).
TOKAMAX_API void clear_call_cache();
/// Marks every resolved config stale: the next call of each entry resolves again.
TOKAMAX_API void notify_config_change();

} // namespace tokamax
