//===- Event.cpp - CUDA events --------------------------------------------===//
#include "tokamax/runtime/Event.h"

#include "tokamax/runtime/detail/DriverApi.h"

#include <utility>

namespace tokamax {

Event::Event() {
  detail::ensure_current_context();
  CUevent event = nullptr;
  check(detail::driver().cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate");
  handle_ = event;
}

Event::Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Event::~Event() { reset(); }

void Event::reset() noexcept {
  if (handle_) // Destructors cannot report failure; at worst a handle leaks.
    (void)detail::driver().cuEventDestroy(handle_);
  handle_ = nullptr;
}

void Event::record(CUstream stream) {
  check(detail::driver().cuEventRecord(handle_, stream), "cuEventRecord");
}

void Event::synchronize() const {
  check(detail::driver().cuEventSynchronize(handle_), "cuEventSynchronize");
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  // cuEventElapsedTime fails with NOT_READY while `end` is pending.
  end.synchronize();
  float ms = 0.0f;
  check(detail::driver().cuEventElapsedTime(&ms, start.handle_, end.handle_),
        "cuEventElapsedTime");
  return ms;
}

} // namespace tokamax
