//===- Event.h - CUDA events for timing and ordering ---------------*- C++ -*-===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

namespace tokamax {

// Owns one CUDA event (default flags, so it can time). Created in the calling
// thread's current context, or device 0's when there is none. Move-only.
class TOKAMAX_API Event {
public:
  Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  void record(CUstream stream = nullptr);
  void synchronize() const;
  CUevent handle() const { return handle_; }

  // Milliseconds between two recorded events; waits for `end` first.
  static float elapsed_ms(const Event& start, const Event& end);

private:
  void reset() noexcept;

  CUevent handle_ = nullptr;
};

} // namespace tokamax
