//===- Device.h - CUDA devices and their primary contexts -----------*- C++ -*-===//
//
// One Device object per GPU for the whole process. It retains the device's
// primary context on creation and keeps it until exit (releasing it during
// static destruction would race with the driver's own teardown), and caches
// the properties kernels are tuned for.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

#include <cstddef>
#include <string>

namespace tokamax {

class Arch;  // tokamax/runtime/Arch.h

class TOKAMAX_API Device {
  struct Key {
    explicit Key() = default;
  };

public:
  // Number of CUDA devices: 0 when the driver is present without a device.
  // Throws NoDeviceError when there is no driver at all.
  static int count();
  // The process-wide Device for `ordinal`, created on first use (thread-safe).
  // Its primary context is made current on the calling thread at creation.
  // Throws NoDeviceError when there is no device, Error for a bad ordinal.
  static Device& get(int ordinal = 0);

  Device(Key, int ordinal); // Only get() constructs devices.
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  // "sm_90a" for 9.0 and "sm_100a" for 10.0 (the arch-specific feature sets
  // kernels target there), otherwise "sm_<major><minor>": target().name().
  std::string arch() const;
  // The architecture with this device's SM count (Arch::of; <tokamax/runtime/Arch.h>).
  Arch target() const;
  int sm_count() const { return sm_count_; }
  size_t total_memory() const { return total_memory_; }
  int clock_khz() const { return clock_khz_; }
  int memory_clock_khz() const { return memory_clock_khz_; }
  int memory_bus_width() const { return memory_bus_width_; } // In bits.
  size_t max_shared_memory_per_block_optin() const { return max_smem_optin_; }
  int l2_cache_bytes() const { return l2_cache_bytes_; }
  // Device memory free right now (cuMemGetInfo in this device's context).
  size_t free_memory() const;

  // Makes this device's primary context current on the calling thread.
  void make_current() const;
  CUctx_st* context() const { return context_; }

private:
  int ordinal_;
  int handle_ = 0; // CUdevice
  CUctx_st* context_ = nullptr;
  std::string name_;
  int cc_major_ = 0;
  int cc_minor_ = 0;
  int sm_count_ = 0;
  size_t total_memory_ = 0;
  int clock_khz_ = 0;
  int memory_clock_khz_ = 0;
  int memory_bus_width_ = 0;
  size_t max_smem_optin_ = 0;
  int l2_cache_bytes_ = 0;
};

// One-line summary: name, arch, SMs, memory, L2, shared memory per block.
TOKAMAX_API std::string describe(const Device& device);

} // namespace tokamax
