//===- Driver.cpp - Loading the CUDA driver at first use ------------------===//
//
// libcuda.so.1 is dlopen'ed once per process (thread-safe function-local
// static). Only cuGetProcAddress_v2 is taken with dlsym; every other entry is
// resolved through it at the CUDA 12.0 ABI, which picks the right versioned
// symbol (cuMemAlloc_v2, ...) whatever the installed driver's version.
//
//===----------------------------------------------------------------------===//
#include "tokamax/runtime/detail/DriverApi.h"

#include "tokamax/runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tokamax {
namespace detail {
namespace {

constexpr int kAbiVersion = 12000;

struct LoadedDriver {
  DriverApi api;
  std::string error; // Why the driver is unusable; empty when it loaded.
  CUresult init = CUDA_ERROR_NOT_INITIALIZED;
  int version = 0;
};

using GetProcAddressFn = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t,
                                            CUdriverProcAddressQueryResult*);

LoadedDriver load() {
  LoadedDriver d;
  // The override is read only here, at first load: tests use it to simulate a
  // machine without a driver.
  const char* env = std::getenv("TOKAMAX_CUDA_DRIVER");
  const std::string path = env && *env ? env : "libcuda.so.1";
  // Never dlclose: driver threads and atexit handlers may outlive any owner.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    d.error = fmt::format("dlopen({}) failed: {}", path, why ? why : "unknown error");
    return d;
  }
  auto get_proc = reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    d.error = fmt::format("{} has no cuGetProcAddress_v2; a CUDA 12.0 or newer driver "
                          "is required",
                          path);
    return d;
  }

  std::vector<std::string> missing;
  auto resolve = [&](auto& fn, const char* name) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(name, &p, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !p)
      missing.emplace_back(name);
    else
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  // #name stringifies the unexpanded token, so cuGetProcAddress gets the base
  // name ("cuMemAlloc") while the member is cuda.h's versioned one.
#define TOKAMAX_RESOLVE(name) resolve(d.api.name, #name)
  TOKAMAX_RESOLVE(cuInit);
  TOKAMAX_RESOLVE(cuDriverGetVersion);
  TOKAMAX_RESOLVE(cuGetErrorName);
  TOKAMAX_RESOLVE(cuGetErrorString);
  TOKAMAX_RESOLVE(cuDeviceGet);
  TOKAMAX_RESOLVE(cuDeviceGetCount);
  TOKAMAX_RESOLVE(cuDeviceGetName);
  TOKAMAX_RESOLVE(cuDeviceGetAttribute);
  TOKAMAX_RESOLVE(cuDeviceTotalMem);
  TOKAMAX_RESOLVE(cuDevicePrimaryCtxRetain);
  TOKAMAX_RESOLVE(cuDevicePrimaryCtxRelease);
  TOKAMAX_RESOLVE(cuDevicePrimaryCtxGetState);
  TOKAMAX_RESOLVE(cuCtxSetCurrent);
  TOKAMAX_RESOLVE(cuCtxGetCurrent);
  TOKAMAX_RESOLVE(cuStreamCreate);
  TOKAMAX_RESOLVE(cuStreamDestroy);
  TOKAMAX_RESOLVE(cuStreamSynchronize);
  TOKAMAX_RESOLVE(cuStreamGetCtx);
  TOKAMAX_RESOLVE(cuMemAlloc);
  TOKAMAX_RESOLVE(cuMemFree);
  TOKAMAX_RESOLVE(cuMemGetInfo);
  TOKAMAX_RESOLVE(cuMemcpyHtoD);
  TOKAMAX_RESOLVE(cuMemcpyDtoH);
  TOKAMAX_RESOLVE(cuMemcpyDtoD);
  TOKAMAX_RESOLVE(cuMemcpyHtoDAsync);
  TOKAMAX_RESOLVE(cuMemcpyDtoHAsync);
  TOKAMAX_RESOLVE(cuMemcpyDtoDAsync);
  TOKAMAX_RESOLVE(cuMemsetD8);
  TOKAMAX_RESOLVE(cuMemsetD8Async);
  TOKAMAX_RESOLVE(cuModuleLoadDataEx);
  TOKAMAX_RESOLVE(cuModuleUnload);
  TOKAMAX_RESOLVE(cuModuleGetFunction);
  TOKAMAX_RESOLVE(cuFuncSetAttribute);
  TOKAMAX_RESOLVE(cuFuncGetAttribute);
  TOKAMAX_RESOLVE(cuLaunchKernel);
  TOKAMAX_RESOLVE(cuEventCreate);
  TOKAMAX_RESOLVE(cuEventDestroy);
  TOKAMAX_RESOLVE(cuEventRecord);
  TOKAMAX_RESOLVE(cuEventSynchronize);
  TOKAMAX_RESOLVE(cuEventElapsedTime);
  TOKAMAX_RESOLVE(cuStreamBeginCapture);
  TOKAMAX_RESOLVE(cuStreamEndCapture);
  TOKAMAX_RESOLVE(cuStreamIsCapturing);
  TOKAMAX_RESOLVE(cuGraphLaunch);
  TOKAMAX_RESOLVE(cuGraphUpload);
  TOKAMAX_RESOLVE(cuGraphExecUpdate);
  TOKAMAX_RESOLVE(cuGraphDestroy);
  TOKAMAX_RESOLVE(cuGraphExecDestroy);
  TOKAMAX_RESOLVE(cuTensorMapEncodeTiled);
#undef TOKAMAX_RESOLVE
  // Under its 12.0 name: plain "cuGraphInstantiate" at version 12000 is the
  // old five-argument entry point.
  resolve(d.api.cuGraphInstantiate, "cuGraphInstantiateWithFlags");

  if (!missing.empty()) {
    d.error = fmt::format("{} lacks driver entry points: {}", path, fmt::join(missing, ", "));
    return d;
  }
  d.init = d.api.cuInit(0);
  if (d.api.cuDriverGetVersion(&d.version) != CUDA_SUCCESS)
    d.version = 0;
  return d;
}

const LoadedDriver& loaded() {
  static const LoadedDriver instance = load();
  return instance;
}

std::string error_name(const DriverApi& api, int result) {
  const char* name = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(static_cast<CUresult>(result), &name) ==
                                CUDA_SUCCESS && name)
    return name;
  return fmt::format("CUDA_ERROR_{}", result);
}

std::string error_string(const DriverApi& api, int result) {
  const char* text = nullptr;
  if (api.cuGetErrorString &&
      api.cuGetErrorString(static_cast<CUresult>(result), &text) == CUDA_SUCCESS && text)
    return text;
  return "unknown error";
}

// The kernel last launched successfully on this thread: a fixed buffer, so noting it
// costs the launch path a copy, not an allocation.
thread_local char last_launch[128];

// Errors that a faulting kernel leaves in its context (sticky: every later call in the
// process reports them). They surface at a later synchronize or copy, which knows no
// kernel, so the message names the last kernel launched here.
bool is_kernel_fault(int result) {
  switch (result) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
    return true;
  default:
    return false;
  }
}

[[noreturn]] void throw_error(const DriverApi& api, int result, const char* call,
                              std::string_view detail) {
  std::string name = error_name(api, result);
  std::string message = fmt::format("{}: {}: {}", call, name, error_string(api, result));
  if (!detail.empty())
    message += fmt::format("\n{}", detail);
  if (is_kernel_fault(result) && last_launch[0])
    message += fmt::format("\na kernel faulted: the last kernel launched on this thread was '{}' "
                           "(the fault may be an earlier kernel's); the CUDA context stays "
                           "unusable for the rest of the process",
                           last_launch);
  throw DriverError(result, std::move(name), message);
}

} // namespace

const DriverApi& driver() {
  const LoadedDriver& d = loaded();
  if (!d.error.empty())
    throw NoDeviceError(fmt::format(
        "CUDA driver not available: {}. A GPU machine with the NVIDIA driver is "
        "required for device execution; use the CPU interpreter (TOKAMAX_INTERPRET=1) "
        "or tokamax-compile --arch to compile without one.",
        d.error));
  if (d.init != CUDA_SUCCESS && d.init != CUDA_ERROR_NO_DEVICE)
    throw_error(d.api, d.init, "cuInit", {});
  return d.api;
}

CUresult driver_init_result() {
  (void)driver();
  return loaded().init;
}

void note_launch(std::string_view kernel) noexcept {
  const size_t n = std::min(kernel.size(), sizeof(last_launch) - 1);
  std::memcpy(last_launch, kernel.data(), n);
  last_launch[n] = '\0';
}

void throw_driver_error(int result, const char* call, std::string_view detail) {
  throw_error(loaded().api, result, call, detail);
}

} // namespace detail

bool driver_available() {
  try {
    const detail::LoadedDriver& d = detail::loaded();
    return d.error.empty() && (d.init == CUDA_SUCCESS || d.init == CUDA_ERROR_NO_DEVICE);
  } catch (...) {
    return false;
  }
}

int driver_version() {
  (void)detail::driver();
  return detail::loaded().version;
}

void check(int result, const char* call) {
  if (result != CUDA_SUCCESS)
    detail::throw_driver_error(result, call);
}

} // namespace tokamax
