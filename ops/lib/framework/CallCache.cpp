//===- CallCache.cpp - Eager op calls resolved once, replayed from a key ----===//
#include "ops/lib/framework/CallCache.h"

#include "ops/lib/framework/LaunchPlan.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DriverApi.h>

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace tokamax {

namespace ops_detail {

namespace {

/// More distinct calls than a program plausibly makes: past it the cache starts over
/// rather than grow without bound (say, under a new AutotuningScope every step).
constexpr size_t kMaxEntries = 4096;
/// Arguments (and the scratch buffer) a cached call may have.
constexpr size_t kMaxBuffers = 32;

struct CallEntry {
  CallKey key;
  std::optional<Config> explicit_config;  // the key holds only its hash
  uint64_t epoch = 0, jit_generation = 0;  // what the plan was resolved under
  int device = 0;
  LaunchPlan plan;
};

struct CallCacheState {
  std::shared_mutex mutex;  // readers replay under it, so entries outlive every replay
  std::unordered_map<uint64_t, std::unique_ptr<CallEntry>> entries;  // by key hash
  std::atomic<uint64_t> hits{0}, misses{0};
};

CallCacheState &state() {
  static CallCacheState *s = new CallCacheState;  // leaked: calls may run during exit
  return *s;
}

std::atomic<uint64_t> epoch{1};

/// Implementation names map to their index in the op (no string kept in the key); an
/// unknown name gets its own value, so the call misses and select() reports it.
uint64_t implementationWord(const Op &op, const std::optional<std::string> &name) {
  if (!name)
    return 0;
  const auto &impls = op.implementations();
  for (size_t i = 0; i < impls.size(); ++i)
    if (impls[i]->name() == *name)
      return i + 1;
  return ~uint64_t(0);
}

void replay(const CallEntry &e, const EagerCall &call) {
  uint64_t bases[kMaxBuffers];
  size_t n = 0;
  for (auto views : {call.inputs, call.outputs})
    for (const TensorView &t : views)
      bases[n++] = t.data();
  bases[e.plan.scratch] =
      e.plan.scratch_bytes ? stream_workspace(Device::get(e.device), call.stream, e.plan.scratch_bytes) : 0;
  e.plan.replay(std::span<const uint64_t>(bases, e.plan.buffers), call.stream.handle());
}

} // namespace

uint64_t config_epoch() { return epoch.load(std::memory_order_acquire); }

CallKey &CallKey::add(const TensorView &t) {
  const uint64_t data = t.data();
  add(uint64_t(1) | uint64_t(static_cast<uint8_t>(t.dtype())) << 8 | uint64_t(static_cast<uint8_t>(t.rank())) << 16 |
      uint64_t(data == 0) << 24 | uint64_t(data % 16 == 0) << 25 | uint64_t(static_cast<uint32_t>(t.device())) << 32);
  for (int64_t d : t.shape())
    add(d);
  for (int64_t s : t.strides())
    add(s);
  return *this;
}

int eager_device(const EagerCall &call) {
  return call_device(call.op.name(), call.op.arg_names(), call.inputs, call.outputs, call.stream);
}

void finish_key(CallKey &key, const EagerCall &call, int device) {
  key.add(implementationWord(call.op, call.implementation));
  key.add(call.config ? call.config->hash() : uint64_t(0));
  key.add(thread_config_signature());
  // Its tensors' words hold it too, but a call whose tensors are all empty runs on the
  // stream's device.
  key.add(device);
}

void throw_no_driver() {
  (void)detail::driver();  // throws NoDeviceError saying why the driver is unusable
  throw NoDeviceError("the CUDA driver is not usable");
}

bool replay_cached(const CallKey &key, const EagerCall &call) {
  if (!key.fits())
    return false;
  CallCacheState &s = state();
  std::shared_lock lock(s.mutex);
  auto it = s.entries.find(key.hash());
  if (it == s.entries.end())
    return false;
  const CallEntry &e = *it->second;
  if (!(e.key == key) || e.epoch != config_epoch() || e.jit_generation != Jit::instance().generation() ||
      e.explicit_config != call.config)
    return false;
  replay(e, call);
  s.hits.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void run_and_cache(const CallKey &key, const EagerCall &call, const BoundArgs &args, Device &device) {
  CallCacheState &s = state();
  s.misses.fetch_add(1, std::memory_order_relaxed);
  // Read before resolving: a change while this call resolves leaves its entry stale.
  const uint64_t resolvedEpoch = config_epoch(), generation = Jit::instance().generation();
  const int ordinal = device.ordinal();
  const Implementation &impl = call.op.select(args, call.implementation, device.arch());
  Config config = call.op.resolve_config(impl, args, call.config);
  const auto *planned = dynamic_cast<const PlannedImplementation *>(&impl);
  if (!planned || !key.fits() || args.args.size() + 1 > kMaxBuffers) {
    impl.run(args, config, call.inputs, call.outputs, call.stream);
    return;
  }
  planned->check_views(args, call.inputs, call.outputs, false);
  planned->check_device(args, device);
  auto entry = std::make_unique<CallEntry>(
      CallEntry{key, call.config, resolvedEpoch, generation, ordinal, record_call_plan(*planned, args, config, device)});
  // The plan was checked against aligned stand-ins; the real tensors are checked here
  // (the key records alignment, so a hit never needs this again).
  std::vector<bool> kernelBuffers(entry->plan.buffers, false);
  entry->plan.mark_kernel_buffers(kernelBuffers);
  size_t i = 0;
  for (auto views : {call.inputs, call.outputs})
    for (const TensorView &t : views) {
      if (kernelBuffers[i] && t.data() % 16 != 0)
        throw Error(fmt::format("{}: argument '{}' must be 16-byte aligned (address {:#x})", args.op, planned->arg_names()[i],
                                t.data()));
      ++i;
    }
  replay(*entry, call);
  std::unique_lock lock(s.mutex);
  if (s.entries.size() >= kMaxEntries)
    s.entries.clear();
  s.entries[key.hash()] = std::move(entry);
}

} // namespace ops_detail

CallCacheStats call_cache_stats() {
  ops_detail::CallCacheState &s = ops_detail::state();
  CallCacheStats stats;
  stats.hits = s.hits.load();
  stats.misses = s.misses.load();
  std::shared_lock lock(s.mutex);
  stats.entries = s.entries.size();
  return stats;
}

void clear_call_cache() {
  ops_detail::CallCacheState &s = ops_detail::state();
  std::unique_lock lock(s.mutex);
  s.entries.clear();
  s.hits = 0;
  s.misses = 0;
}

void notify_config_change() { ops_detail::epoch.fetch_add(1, std::memory_order_acq_rel); }

} // namespace tokamax
