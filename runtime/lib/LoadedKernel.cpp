//===- LoadedKernel.cpp - Argument checks, parameter packing, launches ------===//
#include <tokamax/runtime/LoadedKernel.h>

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/TensorMap.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <vector>

namespace tokamax {

/// Encoded tensor maps per tensor-map parameter, a few recent addresses each: the shape
/// and dtype are the kernel's own, so the address alone decides the map, and encoding
/// (a driver call) leaves the launch path of a repeated call.
struct LoadedKernel::TensorMapCache {
  static constexpr size_t kWays = 4;
  struct Entry {
    uint64_t address = 0;
    TensorMap map{};
  };
  /// One tensor-map parameter's recent maps, replaced round-robin.
  struct Slot {
    std::array<Entry, kWays> entries;
    size_t next = 0;
  };
  std::mutex mutex;
  std::vector<Slot> slots;

  template <class Encode> const TensorMap &get(size_t slot, uint64_t address, Encode &&encode) {
    Slot &s = slots[slot];
    for (const Entry &e : s.entries)
      if (e.address == address && address != 0)
        return e.map;
    Entry &victim = s.entries[s.next++ % kWays];
    victim.map = encode();  // throws before the entry claims the address
    victim.address = address;
    return victim.map;
  }
};

LoadedKernel::LoadedKernel(Module module, LaunchInfo info, std::string digest)
    : module_(std::move(module)), info_(std::move(info)), digest_(std::move(digest)) {
  function_ = module_.function(info_.kernel_name);
  if (info_.dynamic_shared && info_.shared_bytes > 48 * 1024)
    function_.set_max_dynamic_shared(info_.shared_bytes);
  if (!info_.tensor_maps.empty()) {
    maps_ = std::make_unique<TensorMapCache>();
    maps_->slots.resize(info_.tensor_maps.size());
  }
}

LoadedKernel::~LoadedKernel() = default;

void LoadedKernel::launch(std::span<const KernelArg> args, CUstream stream) const {
  // Scalars and pointers are packed into fixed storage: no allocation on this path.
  alignas(8) uint64_t words[kMaxParams];
  pack(args, words);
  launch_packed(words, stream);
}

void LoadedKernel::pack(std::span<const KernelArg> args, uint64_t *storage) const {
  const auto &params = info_.params;
  if (args.size() != params.size())
    throw Error(fmt::format("{}: expected {} arguments, got {}", info_.kernel_name, params.size(),
                            args.size()));
  if (params.size() + info_.tensor_maps.size() > kMaxParams)
    throw Error(fmt::format("{}: more than {} parameters", info_.kernel_name, kMaxParams));
  for (size_t i = 0; i < params.size(); ++i) {
    const KernelParam &p = params[i];
    const KernelArg &a = args[i];
    if (p.is_tensor) {
      if (!a.tensor)
        throw Error(fmt::format("{}: argument '{}' must be a tensor", info_.kernel_name, p.name));
      const TensorView &t = *a.tensor;
      if (t.dtype() != p.dtype)
        throw Error(fmt::format("{}: argument '{}' has dtype {}, expected {}", info_.kernel_name,
                                p.name, dtype_name(t.dtype()), dtype_name(p.dtype)));
      if (!std::equal(t.shape().begin(), t.shape().end(), p.shape.begin(), p.shape.end()))
        throw Error(fmt::format("{}: argument '{}' has shape [{}], expected [{}]", info_.kernel_name,
                                p.name, fmt::join(t.shape(), ", "), fmt::join(p.shape, ", ")));
      if (!t.is_contiguous())
        throw Error(fmt::format("{}: argument '{}' must be contiguous (row-major)", info_.kernel_name, p.name));
      if (t.data() % 16 != 0)
        throw Error(fmt::format("{}: argument '{}' must be 16-byte aligned (address {:#x})",
                                info_.kernel_name, p.name, t.data()));
      storage[i] = t.data();
    } else {
      if (a.tensor)
        throw Error(fmt::format("{}: argument '{}' must be a scalar", info_.kernel_name, p.name));
      storage[i] = 0;
      switch (p.dtype) {
      case DType::F32: {
        float f = static_cast<float>(a.scalar);
        std::memcpy(&storage[i], &f, sizeof f);
        break;
      }
      case DType::F64:
        std::memcpy(&storage[i], &a.scalar, sizeof a.scalar);
        break;
      case DType::I32: {
        int32_t v = static_cast<int32_t>(a.scalar);
        std::memcpy(&storage[i], &v, sizeof v);
        break;
      }
      case DType::I64: {
        int64_t v = static_cast<int64_t>(a.scalar);
        std::memcpy(&storage[i], &v, sizeof v);
        break;
      }
      default:
        throw Error(fmt::format("{}: scalar '{}' of dtype {} cannot be passed", info_.kernel_name,
                                p.name, dtype_name(p.dtype)));
      }
    }
  }
}

void LoadedKernel::launch_packed(const uint64_t *words, CUstream stream) const {
  const auto &params = info_.params;
  void *pointers[kMaxParams];
  for (size_t i = 0; i < params.size(); ++i)
    pointers[i] = const_cast<uint64_t *>(&words[i]);
  // Tensor maps follow the kernel's own parameters; copies taken under the cache's lock
  // stay valid for the launch whatever other threads encode meanwhile. A map's tensor has
  // its parameter's shape and dtype (pack() checked them), so the address decides it.
  constexpr size_t kMaxMaps = 8;  // the fused-dq attention VJP holds 5 (q, k, v, dout, the dq sum)
  TensorMap maps[kMaxMaps];
  if (info_.tensor_maps.size() > kMaxMaps)
    throw Error(fmt::format("{}: too many tensor maps", info_.kernel_name));
  if (maps_) {
    std::lock_guard lock(maps_->mutex);
    for (size_t j = 0; j < info_.tensor_maps.size(); ++j) {
      const TensorMapParam &m = info_.tensor_maps[j];
      const KernelParam &p = params[m.param];
      const uint64_t address = words[m.param];
      maps[j] = maps_->get(j, address, [&] {
        return encode_tensor_map(p, m, address);
      });
      pointers[params.size() + j] = &maps[j];
    }
  }
  function_.launch({info_.grid[0], info_.grid[1], info_.grid[2]}, {info_.block_threads, 1, 1},
                   info_.dynamic_shared ? info_.shared_bytes : 0, stream, pointers);
}

} // namespace tokamax
