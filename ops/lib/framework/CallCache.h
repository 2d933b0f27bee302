//===- CallCache.h - Eager op calls resolved once, replayed from a key -*- C++ -*-===//
//
// The hot path of an eager op call (tokamax/ops/CallCache.h says what is cached and
// what the key holds): the op's API function builds a CallKey from its tensor views and
// options (fixed inline words, no allocation) and hands run_eager a binder that it calls
// only on a miss.
//
//   CallKey key(layer_norm_op());
//   key.add({&x, scale, offset, &y, mean, rstd}).add(options.axis).add(options.epsilon);
//   run_eager(key, {layer_norm_op(), in, out, stream, options.implementation, options.config},
//             [&] { return bind_layer_norm(...); });
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/CallCache.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Driver.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>

namespace tokamax::ops_detail {

/// A signature of the calling thread's config providers (their push ids in order; 0
/// without any). Op.cpp keeps it as scopes open and close.
uint64_t thread_config_signature();
/// Changes when process-wide providers are added and on notify_config_change().
uint64_t config_epoch();

/// The identity of an eager call: words in fixed inline storage, hashed as they are
/// added and compared whole on a hit. A call whose words do not fit is not cached.
class CallKey {
public:
  static constexpr size_t kCapacity = 160;

  explicit CallKey(const Op &op) : op_(&op) { add(uint64_t(reinterpret_cast<uintptr_t>(&op))); }

  CallKey &add(uint64_t word) {
    if (size_ < kCapacity)
      words_[size_] = word;
    ++size_;
    hash_ = (hash_ ^ word) * 0x9e3779b97f4a7c15ull;
    hash_ ^= hash_ >> 29;
    return *this;
  }
  CallKey &add(int64_t v) { return add(static_cast<uint64_t>(v)); }
  CallKey &add(int v) { return add(static_cast<uint64_t>(static_cast<int64_t>(v))); }
  CallKey &add(bool v) { return add(static_cast<uint64_t>(v)); }
  CallKey &add(double v) { return add(std::bit_cast<uint64_t>(v)); }  ///< by its bits
  CallKey &add(const std::optional<double> &v) { return v ? add(uint64_t(1)).add(*v) : add(uint64_t(0)); }
  CallKey &add(const std::optional<int64_t> &v) { return v ? add(uint64_t(1)).add(*v) : add(uint64_t(0)); }
  /// A tensor argument: presence, dtype, rank, device, whether its address is null or
  /// 16-byte aligned, its shape and strides.
  CallKey &add(const TensorView &t);
  /// An optional tensor argument (null: absent).
  CallKey &add(const TensorView *t) { return t ? add(*t) : add(uint64_t(0)); }
  CallKey &add(std::initializer_list<const TensorView *> tensors) {
    for (const TensorView *t : tensors)
      add(t);
    return *this;
  }

  const Op &op() const { return *op_; }
  bool fits() const { return size_ <= kCapacity; }
  uint64_t hash() const { return hash_; }
  bool operator==(const CallKey &other) const {
    return size_ == other.size_ && hash_ == other.hash_ &&
           std::equal(words_.begin(), words_.begin() + std::min(size_, kCapacity), other.words_.begin());
  }

private:
  const Op *op_;
  std::array<uint64_t, kCapacity> words_;  // only the first size_ are set
  size_t size_ = 0;
  uint64_t hash_ = 0x243f6a8885a308d3ull;
};

/// An eager call on device tensors: the op, its tensors in argument order (absent
/// optional arguments as default TensorViews), the stream and the options every op has.
struct EagerCall {
  const Op &op;
  std::span<const TensorView> inputs, outputs;
  Stream &stream;
  const std::optional<std::string> &implementation;
  const std::optional<Config> &config;
};

/// The device the call runs on (call_device: its tensors', checked against each other and
/// the stream's).
int eager_device(const EagerCall &call);
/// Adds what every eager key holds beyond the op's own words: the implementation asked
/// for, the explicit config's hash, the thread's config providers and the call's device
/// (the per-device autotuning cache answers for it).
void finish_key(CallKey &key, const EagerCall &call, int device);
/// Replays the plan cached under `key`; false when there is none or it is stale.
bool replay_cached(const CallKey &key, const EagerCall &call);
/// Resolves the call bound as `args` for `device`, runs it and caches its plan under `key`.
void run_and_cache(const CallKey &key, const EagerCall &call, const BoundArgs &args, Device &device);
/// Without a driver: throws NoDeviceError saying why.
[[noreturn]] void throw_no_driver();

/// The eager call, with its device's context current: `bind` (which returns the call's
/// BoundArgs, throwing Error on invalid arguments) runs only when the call is not cached.
template <class Bind> void run_eager(CallKey &key, const EagerCall &call, Bind &&bind) {
  if (!driver_available()) {  // binding errors come first, then the missing driver
    (void)bind();
    throw_no_driver();
  }
  const detail::DeviceScope scope(eager_device(call));
  finish_key(key, call, scope.device().ordinal());
  if (!replay_cached(key, call))
    run_and_cache(key, call, bind(), scope.device());
}

} // namespace tokamax::ops_detail
