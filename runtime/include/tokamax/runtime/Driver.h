//===- Driver.h - Access to the CUDA driver -------------------------*- C++ -*-===//
//
// libcuda.so.1 is loaded with dlopen at first use, so libtokamax loads (and the
// compiler and CPU interpreter work) on machines without a GPU or driver. This
// header only forward-declares the driver's opaque handle types so that public
// headers never need <cuda.h>; the declarations match cuda.h exactly and may be
// combined with it in either include order.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Export.h"

#ifndef __cuda_cuda_h__
struct CUctx_st;
struct CUstream_st;
struct CUmod_st;
struct CUfunc_st;
struct CUevent_st;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
#endif

namespace tokamax {

// True when the driver library loaded, every needed entry point resolved and
// cuInit succeeded (or found no device). Never throws.
TOKAMAX_API bool driver_available();

// The driver's CUDA version, e.g. 12080 for 12.8. Throws NoDeviceError when
// the driver is not available.
TOKAMAX_API int driver_version();

// Throws DriverError("<call>: <NAME>: <message>") unless result is
// CUDA_SUCCESS. `result` is a CUresult.
TOKAMAX_API void check(int result, const char* call);

} // namespace tokamax
