//===- Stream.h - CUDA streams -------------------------------------*- C++ -*-===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

namespace tokamax {

class Device;

// A CUDA stream: owned (created here, destroyed with the object) or wrapped
// (borrowed from a framework; never destroyed here). Move-only.
class TOKAMAX_API Stream {
public:
  // A new non-blocking stream on `device` (it does not serialise with the
  // legacy default stream).
  static Stream create(Device& device);
  // Borrows `stream`; nullptr is the legacy default stream.
  static Stream wrap(CUstream stream);

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  CUstream handle() const { return handle_; }
  bool owned() const { return owned_; }
  // Blocks until all work queued on the stream is done.
  void synchronize() const;

private:
  Stream(CUstream handle, bool owned) : handle_(handle), owned_(owned) {}
  void reset() noexcept;

  CUstream handle_ = nullptr;
  bool owned_ = false;
};

} // namespace tokamax
