//===- Memory.h - Device memory and copies ------------------------*- C++ -*-===//
//
// Device addresses are plain uint64_t (CUdeviceptr) so they can be stored in
// tensors and kernel parameter blocks without the driver's headers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

#include <cstddef>
#include <cstdint>

namespace tokamax {

class Device;

// Owns one cuMemAlloc allocation. A zero-byte buffer allocates nothing and has
// ptr() == 0. Move-only.
class TOKAMAX_API DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, Device& device);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  uint64_t ptr() const { return ptr_; }
  size_t size() const { return size_; }
  // The owning device; nullptr for a default-constructed buffer.
  Device* device() const { return device_; }

private:
  void reset() noexcept;

  uint64_t ptr_ = 0;
  size_t size_ = 0;
  Device* device_ = nullptr;
};

// Copies and memsets are synchronous when `stream` is null and asynchronous on
// `stream` otherwise (host memory must then stay alive until the stream
// reaches the copy). When the calling thread has no current context, device
// 0's primary context is made current first.
TOKAMAX_API void copy_host_to_device(uint64_t dst, const void* src, size_t bytes,
                                     CUstream stream = nullptr);
TOKAMAX_API void copy_device_to_host(void* dst, uint64_t src, size_t bytes,
                                     CUstream stream = nullptr);
TOKAMAX_API void copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes,
                                       CUstream stream = nullptr);
TOKAMAX_API void memset_d8(uint64_t dst, uint8_t value, size_t bytes,
                           CUstream stream = nullptr);

} // namespace tokamax
