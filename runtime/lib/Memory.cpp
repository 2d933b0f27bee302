//===- Memory.cpp - Device memory and copies ------------------------------===//
#include "tokamax/runtime/Memory.h"

#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

#include <utility>

namespace tokamax {

DeviceBuffer::DeviceBuffer(size_t bytes, Device& device) : size_(bytes), device_(&device) {
  if (bytes == 0) // cuMemAlloc rejects zero sizes; an empty tensor is legal.
    return;
  device.make_current();
  CUdeviceptr ptr = 0;
  CUresult r = detail::driver().cuMemAlloc(&ptr, bytes);
  if (r != CUDA_SUCCESS) {
    // What was free says whether the request or other allocations are to blame; queried
    // without throwing, since the context may be the reason for the failure.
    size_t free = 0, total = 0;
    const bool known = detail::driver().cuMemGetInfo(&free, &total) == CUDA_SUCCESS;
    detail::throw_driver_error(
        r, "cuMemAlloc",
        fmt::format("while allocating {} bytes ({:.2f} GiB) on device {} ({}); {}", bytes,
                    double(bytes) / double(1ull << 30), device.ordinal(), device.name(),
                    known ? fmt::format("{} bytes ({:.2f} GiB) free of {}", free,
                                        double(free) / double(1ull << 30), total)
                          : std::string("free memory unknown")));
  }
  ptr_ = ptr;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, 0);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, nullptr);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() noexcept {
  if (ptr_) {
    // Destructors cannot throw: a failed free (e.g. after a sticky kernel
    // fault) only leaks device memory that the dying context reclaims anyway.
    detail::release_in_context(device_->context(),
                               [&](const detail::DriverApi& api) { (void)api.cuMemFree(ptr_); });
  }
  ptr_ = 0;
  size_ = 0;
  device_ = nullptr;
}

namespace {
// A null address with bytes to move is a caller's bug; the driver would fault (host
// side) or poison the context, so it is refused before the driver is touched.
void check_addresses(const char* call, bool dst, bool src) {
  if (!dst)
    throw Error(fmt::format("{}: dst is a null pointer", call));
  if (!src)
    throw Error(fmt::format("{}: src is a null pointer", call));
}
} // namespace

void copy_host_to_device(uint64_t dst, const void* src, size_t bytes, CUstream stream) {
  if (bytes == 0)
    return;
  check_addresses("copy_host_to_device", dst != 0, src != nullptr);
  detail::ensure_current_context();
  const detail::DriverApi& api = detail::driver();
  if (stream)
    check(api.cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
  else
    check(api.cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void copy_device_to_host(void* dst, uint64_t src, size_t bytes, CUstream stream) {
  if (bytes == 0)
    return;
  check_addresses("copy_device_to_host", dst != nullptr, src != 0);
  detail::ensure_current_context();
  const detail::DriverApi& api = detail::driver();
  if (stream)
    check(api.cuMemcpyDtoHAsync(dst, src, bytes, stream), "cuMemcpyDtoHAsync");
  else
    check(api.cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes, CUstream stream) {
  if (bytes == 0)
    return;
  check_addresses("copy_device_to_device", dst != 0, src != 0);
  detail::ensure_current_context();
  const detail::DriverApi& api = detail::driver();
  if (stream)
    check(api.cuMemcpyDtoDAsync(dst, src, bytes, stream), "cuMemcpyDtoDAsync");
  else
    check(api.cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD");
}

void memset_d8(uint64_t dst, uint8_t value, size_t bytes, CUstream stream) {
  if (bytes == 0)
    return;
  check_addresses("memset_d8", dst != 0, true);
  detail::ensure_current_context();
  const detail::DriverApi& api = detail::driver();
  if (stream)
    check(api.cuMemsetD8Async(dst, value, bytes, stream), "cuMemsetD8Async");
  else
    check(api.cuMemsetD8(dst, value, bytes), "cuMemsetD8");
}

} // namespace tokamax
