//===- DeviceScope.h - INTERNAL: a call's device made current -------*- C++ -*-===//
//
// Internal to libtokamax: the entry points that launch (op calls, Functions, exports)
// run with their tensors' device's primary context current, so that the kernels they
// launch were loaded in the context they launch in and the stream they launch on is
// that context's. Needs no <cuda.h>.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

#include <string_view>

namespace tokamax {
class Device;
}

namespace tokamax::detail {

/// Makes device `ordinal`'s primary context current on the calling thread for the scope.
/// A thread that had another context current gets it back at the end; one that had none
/// keeps the device's. When it is current already this costs one cuCtxGetCurrent.
class TOKAMAX_API DeviceScope {
public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

  Device &device() const { return *device_; }

private:
  Device *device_;
  CUcontext restore_ = nullptr;  // the thread's context before, when it was another
};

/// The ordinal of the device whose primary context `stream` belongs to (cuStreamGetCtx);
/// -1 for the legacy and per-thread default streams, which are whichever context's is
/// current. `likely` (the call's device) is tried first; otherwise only devices whose
/// primary context is active are looked at (retaining an idle one would cost device
/// memory). Throws Error for a stream of a context that is no device's primary context.
/// Leaves the thread's current context as it was.
TOKAMAX_API int stream_device(CUstream stream, int likely = -1);
/// Throws Error unless work of device `ordinal` may go on `stream` (stream_device is it
/// or -1): "<what> on device <ordinal> but the stream is on device <other>: ...", `what`
/// naming the tensor ("layer_norm: x is").
TOKAMAX_API void check_stream_device(CUstream stream, int ordinal, std::string_view what);
/// Throws that Error for work of device `ordinal` on a stream of device `on`.
[[noreturn]] TOKAMAX_API void throw_stream_device(std::string_view what, int ordinal, int on);

} // namespace tokamax::detail
