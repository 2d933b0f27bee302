//===- DispatchTestUtil.h - Counting what an op call did to the call cache -*- C++ -*-===//
#pragma once

#include <tokamax/ops/CallCache.h>

#include <cstdint>

namespace test {

/// What `call` did to the eager call cache.
struct CacheOutcome {
  uint64_t hits = 0, misses = 0;
  bool hit() const { return hits == 1 && misses == 0; }
  bool miss() const { return hits == 0 && misses == 1; }
};

template <class Call> CacheOutcome cache_outcome(Call &&call) {
  const tokamax::CallCacheStats before = tokamax::call_cache_stats();
  call();
  const tokamax::CallCacheStats after = tokamax::call_cache_stats();
  return {after.hits - before.hits, after.misses - before.misses};
}

} // namespace test
