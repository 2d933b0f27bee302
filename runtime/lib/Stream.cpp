//===- Stream.cpp - CUDA streams ------------------------------------------===//
#include "tokamax/runtime/Stream.h"

#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <utility>

namespace tokamax {

Stream Stream::create(Device& device) {
  device.make_current();
  CUstream stream = nullptr;
  check(detail::driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return Stream(stream, true);
}

Stream Stream::wrap(CUstream stream) { return Stream(stream, false); }

Stream::Stream(Stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), owned_(std::exchange(other.owned_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = std::exchange(other.handle_, nullptr);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

Stream::~Stream() { reset(); }

void Stream::reset() noexcept {
  // Destructors cannot report failure; a failed destroy only leaks a handle.
  if (owned_ && handle_)
    (void)detail::driver().cuStreamDestroy(handle_);
  handle_ = nullptr;
  owned_ = false;
}

void Stream::synchronize() const {
  check(detail::driver().cuStreamSynchronize(handle_), "cuStreamSynchronize");
}

} // namespace tokamax
