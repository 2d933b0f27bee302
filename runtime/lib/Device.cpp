//===- Device.cpp - CUDA devices and their primary contexts ---------------===//
#include "tokamax/runtime/Device.h"

#include "tokamax/runtime/Arch.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/detail/DeviceScope.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace tokamax {
namespace {

// Created once; one once_flag per ordinal so concurrent get() calls for
// different devices do not serialise and the fast path is lock-free.
struct Registry {
  int count;
  std::vector<std::once_flag> flags;
  std::vector<std::unique_ptr<Device>> devices;
  // Set once a device exists: every call's lookup is one load (call_once costs more).
  std::unique_ptr<std::atomic<Device*>[]> ready;

  explicit Registry(int n)
      : count(n), flags(static_cast<size_t>(n)), devices(static_cast<size_t>(n)),
        ready(std::make_unique<std::atomic<Device*>[]>(static_cast<size_t>(n))) {}
};

Registry& registry() {
  static Registry instance(Device::count());
  return instance;
}

int attribute(const detail::DriverApi& api, CUdevice_attribute attr, CUdevice dev) {
  int value = 0;
  check(api.cuDeviceGetAttribute(&value, attr, dev), "cuDeviceGetAttribute");
  return value;
}

// For attributes newer drivers may retire; a missing clock is not worth failing on.
int attribute_or_zero(const detail::DriverApi& api, CUdevice_attribute attr, CUdevice dev) {
  int value = 0;
  return api.cuDeviceGetAttribute(&value, attr, dev) == CUDA_SUCCESS ? value : 0;
}

} // namespace

int Device::count() {
  const detail::DriverApi& api = detail::driver();
  if (detail::driver_init_result() == CUDA_ERROR_NO_DEVICE)
    return 0;
  int n = 0;
  CUresult r = api.cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE)
    return 0;
  check(r, "cuDeviceGetCount");
  return n;
}

Device& Device::get(int ordinal) {
  Registry& reg = registry();
  if (ordinal >= 0 && ordinal < reg.count)
    if (Device* d = reg.ready[static_cast<size_t>(ordinal)].load(std::memory_order_acquire))
      return *d;
  if (reg.count == 0)
    throw NoDeviceError("no CUDA device found: the NVIDIA driver is installed but reports "
                        "no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)");
  if (ordinal < 0 || ordinal >= reg.count)
    throw Error(fmt::format("device ordinal {} out of range: {} CUDA device(s) present",
                            ordinal, reg.count));
  const auto index = static_cast<size_t>(ordinal);
  // If construction throws, the flag stays unset and a later call retries.
  std::call_once(reg.flags[index], [&] {
    reg.devices[index] = std::make_unique<Device>(Key{}, ordinal);
    reg.ready[index].store(reg.devices[index].get(), std::memory_order_release);
  });
  return *reg.devices[index];
}

Device::Device(Key, int ordinal) : ordinal_(ordinal) {
  const detail::DriverApi& api = detail::driver();
  CUdevice dev = 0;
  check(api.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  handle_ = dev;

  std::array<char, 256> name{};
  check(api.cuDeviceGetName(name.data(), static_cast<int>(name.size()), dev),
        "cuDeviceGetName");
  name_ = name.data();
  cc_major_ = attribute(api, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cc_minor_ = attribute(api, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  sm_count_ = attribute(api, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  clock_khz_ = attribute_or_zero(api, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  memory_clock_khz_ = attribute_or_zero(api, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
  memory_bus_width_ = attribute_or_zero(api, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
  l2_cache_bytes_ = attribute(api, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  max_smem_optin_ = static_cast<size_t>(
      attribute(api, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  size_t total = 0;
  check(api.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  total_memory_ = total;

  // Retained last so a failure above leaks no context reference.
  CUcontext ctx = nullptr;
  check(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  context_ = ctx;
  make_current();
}

std::string Device::arch() const { return target().name(); }

Arch Device::target() const { return Arch::of(*this); }

void Device::make_current() const {
  check(detail::driver().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

size_t Device::free_memory() const {
  make_current();
  size_t free = 0, total = 0;
  check(detail::driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return free;
}

std::string describe(const Device& device) {
  return fmt::format("device {}: {} ({}, cc {}.{}, {} SMs @ {} MHz, {:.1f} GiB @ {}-bit "
                     "{} MHz, L2 {} MiB, smem/block {} KiB)",
                     device.ordinal(), device.name(), device.arch(), device.cc_major(),
                     device.cc_minor(), device.sm_count(), device.clock_khz() / 1000,
                     double(device.total_memory()) / double(1ull << 30),
                     device.memory_bus_width(), device.memory_clock_khz() / 1000,
                     device.l2_cache_bytes() >> 20,
                     device.max_shared_memory_per_block_optin() >> 10);
}

namespace detail {

void ensure_current_context() {
  CUcontext ctx = nullptr;
  check(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx)
    Device::get(0).make_current();
}

DeviceScope::DeviceScope(int ordinal) {
  const DriverApi &api = driver();
  CUcontext before = nullptr;
  check(api.cuCtxGetCurrent(&before), "cuCtxGetCurrent");
  // Read first: a device created here makes its context current.
  device_ = &Device::get(ordinal);
  if (before == device_->context())
    return;
  device_->make_current();
  restore_ = before;
}

DeviceScope::~DeviceScope() {
  if (restore_)
    (void)driver().cuCtxSetCurrent(restore_);  // a destructor cannot report failure
}

int stream_device(CUstream stream, int likely) {
  // CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the handles 1 and 2.
  if (reinterpret_cast<uintptr_t>(stream) <= 2)
    return -1;
  const DriverApi &api = driver();
  CUcontext context = nullptr;
  check(api.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
  if (likely >= 0 && Device::get(likely).context() == context)
    return likely;
  CUcontext before = nullptr;
  check(api.cuCtxGetCurrent(&before), "cuCtxGetCurrent");
  int found = -1;
  for (int i = 0, n = registry().count; i < n && found < 0; ++i) {
    CUdevice dev = 0;
    unsigned flags = 0;
    int active = 0;
    if (api.cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
        api.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS)
      continue;
    if (active && Device::get(i).context() == context)
      found = i;
  }
  CUcontext after = nullptr;
  if (api.cuCtxGetCurrent(&after) == CUDA_SUCCESS && after != before)
    (void)api.cuCtxSetCurrent(before);  // Device::get of a new device made its context current
  if (found < 0)
    throw Error("the stream belongs to a CUDA context that is no device's primary context; tokamax launches in "
                "primary contexts (the CUDA runtime's), so the stream must be one of those");
  return found;
}

void throw_stream_device(std::string_view what, int ordinal, int on) {
  throw Error(fmt::format("{} on device {} but the stream is on device {}: a call runs on its tensors' device, on a "
                          "stream of that device",
                          what, ordinal, on));
}

void check_stream_device(CUstream stream, int ordinal, std::string_view what) {
  const int on = stream_device(stream, ordinal);
  if (on >= 0 && on != ordinal)
    throw_stream_device(what, ordinal, on);
}

} // namespace detail
} // namespace tokamax
