//===- DriverApi.h - INTERNAL: the dlopen'ed CUDA driver table ------*- C++ -*-===//
//
// Internal to libtokamax (runtime, compiler and ops .cpp files); not part of
// the public API and it requires <cuda.h>. Every driver entry point is called
// through this table, resolved once via cuGetProcAddress at the ABI of CUDA
// 12.0, so one build runs on any 12.x or newer driver.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"

#include <cuda.h>

#include <string_view>

namespace tokamax::detail {

// Function pointer types come from cuda.h's own declarations, so a signature
// mismatch is a compile error. cuda.h renames some entries by macro (cuMemAlloc
// -> cuMemAlloc_v2, ...); the member names get the same renaming in every file
// that includes this header, so `api.cuMemAlloc(...)` just works, and those
// versioned entries are what cuGetProcAddress returns for version 12000.
#define TOKAMAX_DRIVER_FN(name) decltype(&::name) name = nullptr

struct DriverApi {
  TOKAMAX_DRIVER_FN(cuInit);
  TOKAMAX_DRIVER_FN(cuDriverGetVersion);
  TOKAMAX_DRIVER_FN(cuGetErrorName);
  TOKAMAX_DRIVER_FN(cuGetErrorString);
  TOKAMAX_DRIVER_FN(cuDeviceGet);
  TOKAMAX_DRIVER_FN(cuDeviceGetCount);
  TOKAMAX_DRIVER_FN(cuDeviceGetName);
  TOKAMAX_DRIVER_FN(cuDeviceGetAttribute);
  TOKAMAX_DRIVER_FN(cuDeviceTotalMem);
  TOKAMAX_DRIVER_FN(cuDevicePrimaryCtxRetain);
  TOKAMAX_DRIVER_FN(cuDevicePrimaryCtxRelease);
  TOKAMAX_DRIVER_FN(cuDevicePrimaryCtxGetState);
  TOKAMAX_DRIVER_FN(cuCtxSetCurrent);
  TOKAMAX_DRIVER_FN(cuCtxGetCurrent);
  TOKAMAX_DRIVER_FN(cuStreamCreate);
  TOKAMAX_DRIVER_FN(cuStreamDestroy);
  TOKAMAX_DRIVER_FN(cuStreamSynchronize);
  TOKAMAX_DRIVER_FN(cuStreamGetCtx);
  TOKAMAX_DRIVER_FN(cuMemAlloc);
  TOKAMAX_DRIVER_FN(cuMemFree);
  TOKAMAX_DRIVER_FN(cuMemGetInfo);
  TOKAMAX_DRIVER_FN(cuMemcpyHtoD);
  TOKAMAX_DRIVER_FN(cuMemcpyDtoH);
  TOKAMAX_DRIVER_FN(cuMemcpyDtoD);
  TOKAMAX_DRIVER_FN(cuMemcpyHtoDAsync);
  TOKAMAX_DRIVER_FN(cuMemcpyDtoHAsync);
  TOKAMAX_DRIVER_FN(cuMemcpyDtoDAsync);
  TOKAMAX_DRIVER_FN(cuMemsetD8);
  TOKAMAX_DRIVER_FN(cuMemsetD8Async);
  TOKAMAX_DRIVER_FN(cuModuleLoadDataEx);
  TOKAMAX_DRIVER_FN(cuModuleUnload);
  TOKAMAX_DRIVER_FN(cuModuleGetFunction);
  TOKAMAX_DRIVER_FN(cuFuncSetAttribute);
  TOKAMAX_DRIVER_FN(cuFuncGetAttribute);
  TOKAMAX_DRIVER_FN(cuLaunchKernel);
  TOKAMAX_DRIVER_FN(cuEventCreate);
  TOKAMAX_DRIVER_FN(cuEventDestroy);
  TOKAMAX_DRIVER_FN(cuEventRecord);
  TOKAMAX_DRIVER_FN(cuEventSynchronize);
  TOKAMAX_DRIVER_FN(cuEventElapsedTime);
  TOKAMAX_DRIVER_FN(cuStreamBeginCapture);
  TOKAMAX_DRIVER_FN(cuStreamEndCapture);
  TOKAMAX_DRIVER_FN(cuStreamIsCapturing);
  // cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags; resolved
  // under that name.
  TOKAMAX_DRIVER_FN(cuGraphInstantiate);
  TOKAMAX_DRIVER_FN(cuGraphLaunch);
  TOKAMAX_DRIVER_FN(cuGraphUpload);
  TOKAMAX_DRIVER_FN(cuGraphExecUpdate);  // cuGraphExecUpdate_v2 (CUDA 12.0)
  TOKAMAX_DRIVER_FN(cuGraphDestroy);
  TOKAMAX_DRIVER_FN(cuGraphExecDestroy);
  TOKAMAX_DRIVER_FN(cuTensorMapEncodeTiled);
};

#undef TOKAMAX_DRIVER_FN

// The loaded driver table. Throws NoDeviceError when libcuda cannot be loaded
// (the message says why and what to do instead) and DriverError when cuInit
// failed for a reason other than "no device".
TOKAMAX_API const DriverApi& driver();

// The result of cuInit (CUDA_SUCCESS or CUDA_ERROR_NO_DEVICE once driver()
// returned). Lets Device::count() report 0 devices instead of failing.
TOKAMAX_API CUresult driver_init_result();

// Throws the DriverError for a failed call: "<call>: <NAME>: <message>", then
// "\n<detail>" when detail is not empty.
[[noreturn]] TOKAMAX_API void throw_driver_error(int result, const char* call,
                                                 std::string_view detail = {});

// Records the kernel just launched on this thread, so that a kernel fault reported by a
// later call (a sticky error at a synchronize or copy) names it. No allocation.
TOKAMAX_API void note_launch(std::string_view kernel) noexcept;

// Makes device 0's primary context current when this thread has none, so the
// context-free helpers (copies, events) work on a fresh thread.
TOKAMAX_API void ensure_current_context();

// Runs `release` (an unload or free, which cannot report failure) in `context`, then
// makes the thread's own context current again: releasing a device's resources must not
// move the thread to that device.
template <class Release> void release_in_context(CUcontext context, Release &&release) noexcept {
  const DriverApi &api = driver();
  CUcontext before = nullptr;
  (void)api.cuCtxGetCurrent(&before);
  (void)api.cuCtxSetCurrent(context);
  release(api);
  if (before && before != context)
    (void)api.cuCtxSetCurrent(before);
}

} // namespace tokamax::detail
