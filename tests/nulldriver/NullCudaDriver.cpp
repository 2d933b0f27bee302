//===- NullCudaDriver.cpp - A CUDA driver that runs nothing ----------------===//
//
// libtokamax-null-cuda.so stands in for libcuda.so.1 (TOKAMAX_CUDA_DRIVER=<path>) on
// machines without a GPU, so that the host side of device calls can be measured and
// tested there: op dispatch, call caches, launch packing, graph capture bookkeeping.
// It reports two devices that look like H200s (sm_90a, 132 SMs); "device memory" is
// host memory, so copies and memsets really copy; kernels, events and graphs are
// accepted and do nothing. Numbers a kernel would compute are never produced: tests
// run under it check control flow and host costs, never results.
//
// cuGetProcAddress_v2 is exported, as the library resolves everything through it, and
// tokamax_null_cuda_allocations (the count of cuMemAlloc calls), which tests find with
// dlsym to check that a path allocates no device memory, and a launch log
// (tokamax_null_cuda_log_launches / tokamax_null_cuda_logged_launch) of each launch's
// function and first parameter words, to check what a replayed call launched.
//
// Contexts are checked as a real driver checks them: streams and modules belong to the
// context current when they were made, and a launch (or an async copy, fill or graph
// launch) fails with CUDA_ERROR_INVALID_CONTEXT without a current context and with
// CUDA_ERROR_INVALID_HANDLE when its function or stream belongs to another context.
// The launch log keeps the context of each launch, and tokamax_null_cuda_allocation_context
// tells which context allocated an address, for tests of multi-device calls.
//
//===----------------------------------------------------------------------===//
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

namespace {

/// Distinct non-null handles for contexts, streams, modules, functions, events, graphs;
/// a stream's and a module's hold the context current when they were made.
template <class Handle> Handle newHandle() { return reinterpret_cast<Handle>(new char[16]()); }
template <class Handle> void deleteHandle(Handle h) { delete[] reinterpret_cast<char *>(h); }
template <class Handle> CUcontext contextOf(Handle h) {
  CUcontext c;
  std::memcpy(&c, reinterpret_cast<const char *>(h), sizeof c);
  return c;
}
template <class Handle> void setContext(Handle h, CUcontext c) {
  std::memcpy(reinterpret_cast<char *>(h), &c, sizeof c);
}

constexpr int kDevices = 2;

CUcontext primaryContext(CUdevice device) {
  static CUcontext contexts[kDevices] = {newHandle<CUcontext>(), newHandle<CUcontext>()};
  return contexts[device];
}
thread_local CUcontext current = nullptr;

/// The legacy and per-thread default streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
/// are the current context's.
bool isDefaultStream(CUstream s) { return reinterpret_cast<uintptr_t>(s) <= 2; }
/// What a real driver says of work enqueued on `stream` in the current context.
CUresult checkStream(CUstream stream) {
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  return isDefaultStream(stream) || contextOf(stream) == current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult nullInit(unsigned int) { return CUDA_SUCCESS; }
CUresult nullDriverGetVersion(int *version) {
  *version = 12080;
  return CUDA_SUCCESS;
}
CUresult nullGetErrorName(CUresult result, const char **name) {
  switch (result) {  // the errors its context checks return, by their names
  case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
  case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
  default: *name = "CUDA_ERROR_NULL_DRIVER"; break;
  }
  return CUDA_SUCCESS;
}
CUresult nullGetErrorString(CUresult, const char **text) {
  *text = "error reported by the null driver";
  return CUDA_SUCCESS;
}

CUresult nullDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal < 0 || ordinal >= kDevices)
    return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult nullDeviceGetCount(int *count) {
  *count = kDevices;
  return CUDA_SUCCESS;
}
CUresult nullDeviceGetName(char *name, int length, CUdevice) {
  std::strncpy(name, "tokamax null device", size_t(length));
  return CUDA_SUCCESS;
}
CUresult nullDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1980000; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 6144; break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 50 << 20; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 227 << 10; break;
  default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult nullDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = size_t(141) << 30;
  return CUDA_SUCCESS;
}
std::atomic<bool> retained[kDevices];
CUresult nullPrimaryCtxRetain(CUcontext *context, CUdevice device) {
  if (device < 0 || device >= kDevices)
    return CUDA_ERROR_INVALID_DEVICE;
  *context = primaryContext(device);
  retained[device] = true;
  return CUDA_SUCCESS;
}
CUresult nullPrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active) {
  if (device < 0 || device >= kDevices)
    return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = retained[device];
  return CUDA_SUCCESS;
}
CUresult nullPrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult nullCtxSetCurrent(CUcontext context) {
  current = context;
  return CUDA_SUCCESS;
}
CUresult nullCtxGetCurrent(CUcontext *context) {
  *context = current;
  return CUDA_SUCCESS;
}

CUresult nullStreamCreate(CUstream *stream, unsigned int) {
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  *stream = newHandle<CUstream>();
  setContext(*stream, current);
  return CUDA_SUCCESS;
}
CUresult nullStreamGetCtx(CUstream stream, CUcontext *context) {
  if (isDefaultStream(stream) && !current)
    return CUDA_ERROR_INVALID_CONTEXT;
  *context = isDefaultStream(stream) ? current : contextOf(stream);
  return CUDA_SUCCESS;
}
CUresult nullStreamDestroy(CUstream stream) {
  deleteHandle(stream);
  return CUDA_SUCCESS;
}
CUresult nullStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

std::atomic<size_t> allocations{0};

/// Each live allocation's end and the context that made it, by start address.
struct Allocation {
  CUdeviceptr end;
  CUcontext context;
};
std::mutex allocationsMutex;
std::map<CUdeviceptr, Allocation> liveAllocations;

// Device memory is host memory, 256-byte aligned as cuMemAlloc's is.
CUresult nullMemAlloc(CUdeviceptr *ptr, size_t bytes) {
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  ++allocations;
  const size_t size = (bytes + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, size ? size : 256);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  std::lock_guard lock(allocationsMutex);
  liveAllocations[*ptr] = Allocation{*ptr + bytes, current};
  return CUDA_SUCCESS;
}
CUresult nullMemFree(CUdeviceptr ptr) {
  {
    std::lock_guard lock(allocationsMutex);
    liveAllocations.erase(ptr);
  }
  std::free(reinterpret_cast<void *>(ptr));
  return CUDA_SUCCESS;
}
CUresult nullMemGetInfo(size_t *free, size_t *total) {
  *free = *total = size_t(141) << 30;
  return CUDA_SUCCESS;
}
void *at(CUdeviceptr p) { return reinterpret_cast<void *>(p); }
CUresult nullMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  std::memcpy(at(dst), src, bytes);
  return CUDA_SUCCESS;
}
CUresult nullMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  std::memcpy(dst, at(src), bytes);
  return CUDA_SUCCESS;
}
CUresult nullMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  std::memmove(at(dst), at(src), bytes);
  return CUDA_SUCCESS;
}
CUresult nullMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
  const CUresult r = checkStream(stream);
  return r ? r : nullMemcpyHtoD(dst, src, bytes);
}
CUresult nullMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  const CUresult r = checkStream(stream);
  return r ? r : nullMemcpyDtoH(dst, src, bytes);
}
CUresult nullMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  const CUresult r = checkStream(stream);
  return r ? r : nullMemcpyDtoD(dst, src, bytes);
}
CUresult nullMemsetD8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  std::memset(at(dst), value, bytes);
  return CUDA_SUCCESS;
}
CUresult nullMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream) {
  const CUresult r = checkStream(stream);
  return r ? r : nullMemsetD8(dst, value, bytes);
}

CUresult nullModuleLoadDataEx(CUmodule *module, const void *, unsigned int, CUjit_option *, void **) {
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  *module = newHandle<CUmodule>();
  setContext(*module, current);
  return CUDA_SUCCESS;
}
CUresult nullModuleUnload(CUmodule module) {
  deleteHandle(module);
  return CUDA_SUCCESS;
}
CUresult nullModuleGetFunction(CUfunction *function, CUmodule module, const char *) {
  *function = reinterpret_cast<CUfunction>(module);  // never dereferenced
  return CUDA_SUCCESS;
}
// Like an sm_90 device: at most 227 KiB of dynamic shared memory per block.
CUresult nullFuncSetAttribute(CUfunction, CUfunction_attribute attribute, int value) {
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value > 227 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
CUresult nullFuncGetAttribute(int *value, CUfunction_attribute, CUfunction) {
  *value = 32;
  return CUDA_SUCCESS;
}
/// The launch log: off until a test asks for it with the number of parameter words to
/// keep, which every kernel it then launches must have (they are read as 8-byte words).
struct LoggedLaunch {
  CUfunction function;
  CUcontext context;  // current at the launch, which is the function's (else it failed)
  uint64_t words[4];
};
constexpr size_t kLogSize = 256;
LoggedLaunch launchLog[kLogSize];
std::atomic<size_t> loggedLaunches{0};
size_t logWords = 0;

CUresult nullLaunchKernel(CUfunction function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          CUstream stream, void **params, void **) {
  // A function is its module's handle (nullModuleGetFunction), which holds its context.
  if (const CUresult r = checkStream(stream))
    return r;
  if (contextOf(function) != current)
    return CUDA_ERROR_INVALID_HANDLE;
  if (logWords) {
    const size_t i = loggedLaunches.fetch_add(1);
    if (i < kLogSize) {
      launchLog[i].function = function;
      launchLog[i].context = current;
      for (size_t w = 0; w < logWords; ++w)
        std::memcpy(&launchLog[i].words[w], params[w], sizeof(uint64_t));
    }
  }
  return CUDA_SUCCESS;
}

CUresult nullEventCreate(CUevent *event, unsigned int) {
  *event = newHandle<CUevent>();
  return CUDA_SUCCESS;
}
CUresult nullEventDestroy(CUevent event) {
  deleteHandle(event);
  return CUDA_SUCCESS;
}
CUresult nullEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult nullEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult nullEventElapsedTime(float *ms, CUevent, CUevent) {
  *ms = 0.001f;
  return CUDA_SUCCESS;
}

CUresult nullStreamBeginCapture(CUstream, CUstreamCaptureMode) { return CUDA_SUCCESS; }
CUresult nullStreamEndCapture(CUstream, CUgraph *graph) {
  *graph = newHandle<CUgraph>();
  return CUDA_SUCCESS;
}
CUresult nullStreamIsCapturing(CUstream, CUstreamCaptureStatus *status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult nullGraphInstantiate(CUgraphExec *exec, CUgraph, unsigned long long) {
  *exec = newHandle<CUgraphExec>();
  return CUDA_SUCCESS;
}
CUresult nullGraphExecUpdate(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *info) {
  std::memset(info, 0, sizeof *info);
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}
CUresult nullGraphLaunch(CUgraphExec, CUstream stream) { return checkStream(stream); }
CUresult nullGraphUpload(CUgraphExec, CUstream) { return CUDA_SUCCESS; }
CUresult nullGraphDestroy(CUgraph graph) {
  deleteHandle(graph);
  return CUDA_SUCCESS;
}
CUresult nullGraphExecDestroy(CUgraphExec exec) {
  deleteHandle(exec);
  return CUDA_SUCCESS;
}

/// Records what it was asked for in the map's words (a test reads them back): rank,
/// dims, byte strides (rank - 1), box.
CUresult nullTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType, cuuint32_t rank, void *,
                                  const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  std::memset(map, 0, sizeof *map);
  if (rank < 1 || rank > 5)
    return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t words[16] = {rank};
  for (cuuint32_t i = 0; i < rank; ++i) {
    words[1 + i] = dims[i];
    words[1 + rank + (rank - 1) + i] = box[i];
  }
  for (cuuint32_t i = 0; i + 1 < rank; ++i)
    words[1 + rank + i] = strides[i];
  std::memcpy(map, words, sizeof words);
  return CUDA_SUCCESS;
}

struct Entry {
  std::string_view name;
  void *function;
};

/// The stub as a void pointer, once it has exactly the type cuda.h gives the entry point.
template <class Expected> void *checked(Expected fn) { return reinterpret_cast<void *>(fn); }

// #name is the unexpanded base name the library asks for ("cuMemAlloc"); ::name expands
// to cuda.h's versioned declaration (cuMemAlloc_v2), whose type the stub must have.
#define NULL_ENTRY(name, fn) Entry{#name, checked<decltype(&::name)>(&fn)}
const Entry kEntries[] = {
    NULL_ENTRY(cuInit, nullInit),
    NULL_ENTRY(cuDriverGetVersion, nullDriverGetVersion),
    NULL_ENTRY(cuGetErrorName, nullGetErrorName),
    NULL_ENTRY(cuGetErrorString, nullGetErrorString),
    NULL_ENTRY(cuDeviceGet, nullDeviceGet),
    NULL_ENTRY(cuDeviceGetCount, nullDeviceGetCount),
    NULL_ENTRY(cuDeviceGetName, nullDeviceGetName),
    NULL_ENTRY(cuDeviceGetAttribute, nullDeviceGetAttribute),
    NULL_ENTRY(cuDeviceTotalMem, nullDeviceTotalMem),
    NULL_ENTRY(cuDevicePrimaryCtxRetain, nullPrimaryCtxRetain),
    NULL_ENTRY(cuDevicePrimaryCtxRelease, nullPrimaryCtxRelease),
    NULL_ENTRY(cuDevicePrimaryCtxGetState, nullPrimaryCtxGetState),
    NULL_ENTRY(cuCtxSetCurrent, nullCtxSetCurrent),
    NULL_ENTRY(cuCtxGetCurrent, nullCtxGetCurrent),
    NULL_ENTRY(cuStreamCreate, nullStreamCreate),
    NULL_ENTRY(cuStreamDestroy, nullStreamDestroy),
    NULL_ENTRY(cuStreamGetCtx, nullStreamGetCtx),
    NULL_ENTRY(cuStreamSynchronize, nullStreamSynchronize),
    NULL_ENTRY(cuMemAlloc, nullMemAlloc),
    NULL_ENTRY(cuMemFree, nullMemFree),
    NULL_ENTRY(cuMemGetInfo, nullMemGetInfo),
    NULL_ENTRY(cuMemcpyHtoD, nullMemcpyHtoD),
    NULL_ENTRY(cuMemcpyDtoH, nullMemcpyDtoH),
    NULL_ENTRY(cuMemcpyDtoD, nullMemcpyDtoD),
    NULL_ENTRY(cuMemcpyHtoDAsync, nullMemcpyHtoDAsync),
    NULL_ENTRY(cuMemcpyDtoHAsync, nullMemcpyDtoHAsync),
    NULL_ENTRY(cuMemcpyDtoDAsync, nullMemcpyDtoDAsync),
    NULL_ENTRY(cuMemsetD8, nullMemsetD8),
    NULL_ENTRY(cuMemsetD8Async, nullMemsetD8Async),
    NULL_ENTRY(cuModuleLoadDataEx, nullModuleLoadDataEx),
    NULL_ENTRY(cuModuleUnload, nullModuleUnload),
    NULL_ENTRY(cuModuleGetFunction, nullModuleGetFunction),
    NULL_ENTRY(cuFuncSetAttribute, nullFuncSetAttribute),
    NULL_ENTRY(cuFuncGetAttribute, nullFuncGetAttribute),
    NULL_ENTRY(cuLaunchKernel, nullLaunchKernel),
    NULL_ENTRY(cuEventCreate, nullEventCreate),
    NULL_ENTRY(cuEventDestroy, nullEventDestroy),
    NULL_ENTRY(cuEventRecord, nullEventRecord),
    NULL_ENTRY(cuEventSynchronize, nullEventSynchronize),
    NULL_ENTRY(cuEventElapsedTime, nullEventElapsedTime),
    NULL_ENTRY(cuStreamBeginCapture, nullStreamBeginCapture),
    NULL_ENTRY(cuStreamEndCapture, nullStreamEndCapture),
    NULL_ENTRY(cuStreamIsCapturing, nullStreamIsCapturing),
    NULL_ENTRY(cuGraphInstantiateWithFlags, nullGraphInstantiate),
    NULL_ENTRY(cuGraphExecUpdate, nullGraphExecUpdate),
    NULL_ENTRY(cuGraphLaunch, nullGraphLaunch),
    NULL_ENTRY(cuGraphUpload, nullGraphUpload),
    NULL_ENTRY(cuGraphDestroy, nullGraphDestroy),
    NULL_ENTRY(cuGraphExecDestroy, nullGraphExecDestroy),
    NULL_ENTRY(cuTensorMapEncodeTiled, nullTensorMapEncodeTiled),
};
#undef NULL_ENTRY

} // namespace

extern "C" __attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **function, int, cuuint64_t, CUdriverProcAddressQueryResult *status) {
  for (const Entry &e : kEntries)
    if (e.name == symbol) {
      *function = e.function;
      if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *function = nullptr;
  if (status)
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

extern "C" __attribute__((visibility("default"))) size_t tokamax_null_cuda_allocations() { return allocations; }

/// Starts a new launch log keeping `words` (at most 4; 0 stops logging) parameter words of
/// each launch.
extern "C" __attribute__((visibility("default"))) void tokamax_null_cuda_log_launches(size_t words) {
  logWords = words < 4 ? words : 4;
  loggedLaunches = 0;
}
/// The launches logged so far; for i below that (and the log's 256 entries), launch i's
/// function and parameter words.
extern "C" __attribute__((visibility("default"))) size_t tokamax_null_cuda_logged_launch(size_t i, void **function,
                                                                                        uint64_t *words) {
  const size_t n = loggedLaunches.load() < kLogSize ? loggedLaunches.load() : kLogSize;
  if (i < n) {
    *function = launchLog[i].function;
    std::memcpy(words, launchLog[i].words, logWords * sizeof(uint64_t));
  }
  return n;
}
/// The context current at logged launch i (null past the log).
extern "C" __attribute__((visibility("default"))) void *tokamax_null_cuda_logged_context(size_t i) {
  const size_t n = loggedLaunches.load() < kLogSize ? loggedLaunches.load() : kLogSize;
  return i < n ? launchLog[i].context : nullptr;
}
/// The calling thread's current context.
extern "C" __attribute__((visibility("default"))) void *tokamax_null_cuda_current_context() { return current; }
/// The context that allocated the live allocation holding `address`, or null.
extern "C" __attribute__((visibility("default"))) void *tokamax_null_cuda_allocation_context(uint64_t address) {
  std::lock_guard lock(allocationsMutex);
  auto it = liveAllocations.upper_bound(CUdeviceptr(address));
  if (it == liveAllocations.begin())
    return nullptr;
  --it;
  return address < it->second.end || address == it->first ? it->second.context : nullptr;
}
