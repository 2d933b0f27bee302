//===- Cupti.cpp - Kernel activity records through a dlopen'ed CUPTI ------===//
//
// CUPTI hands activity records over in buffers we provide (buffer_requested) and
// gives them back, filled, from its own thread or from inside
// cuptiActivityFlushAll (buffer_completed). The completed-buffer callback parses
// kernel records into one process-wide sink under a mutex; a CuptiKernelTrace
// takes them out after forcing a flush. The callbacks are registered once and
// stay registered (CUPTI cannot unregister them); recording is enabled only
// while a trace lives.
//
//===----------------------------------------------------------------------===//
#include "Cupti.h"

#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <cupti_activity.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace tokamax::detail {
namespace {

struct CuptiApi {
  decltype(&::cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
  decltype(&::cuptiActivityEnable) enable = nullptr;
  decltype(&::cuptiActivityDisable) disable = nullptr;
  decltype(&::cuptiActivityFlushAll) flushAll = nullptr;
  decltype(&::cuptiActivityGetNextRecord) getNextRecord = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) getNumDroppedRecords = nullptr;
  decltype(&::cuptiGetResultString) getResultString = nullptr;
  decltype(&::cuptiGetContextId) getContextId = nullptr;
  std::string error;  // empty when loaded
};

constexpr const char* kLibrary = "libcupti.so.13";

// The directory holding this library (libtokamax_runtime, beside libtokamax), so a
// package can ship libcupti there.
std::string own_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cupti_load_error), &info) || !info.dli_fname)
    return {};
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::vector<std::string> candidate_paths() {
  std::vector<std::string> paths;
  if (const char* v = std::getenv("TOKAMAX_CUPTI_LIBRARY"); v && *v)
    paths.emplace_back(v);
  if (std::string dir = own_directory(); !dir.empty())
    paths.push_back(dir + "/" + kLibrary);
  paths.emplace_back(kLibrary);  // the loader's search path (LD_LIBRARY_PATH, ldconfig)
  std::vector<std::string> roots;
  for (const char* var : {"TOKAMAX_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v)
      roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots)
    for (const char* sub : {"/extras/CUPTI/lib64/", "/lib64/", "/targets/x86_64-linux/lib/"})
      paths.push_back(root + sub + kLibrary);
  return paths;
}

CuptiApi load() {
  CuptiApi api;
  std::string tried;
  void* lib = nullptr;
  for (const std::string& path : candidate_paths()) {
    // Never dlclose: CUPTI keeps threads and callbacks into the driver.
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib)
      break;
    const char* why = dlerror();
    tried += fmt::format("\n  {}: {}", path, why ? why : "unknown error");
  }
  if (!lib) {
    api.error = fmt::format("{} could not be loaded (install the CUDA toolkit's CUPTI, put it "
                            "beside libtokamax or on LD_LIBRARY_PATH, or set "
                            "TOKAMAX_CUPTI_LIBRARY); tried:{}",
                            kLibrary, tried);
    return api;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn)
      missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(api.registerCallbacks, "cuptiActivityRegisterCallbacks");
  sym(api.enable, "cuptiActivityEnable");
  sym(api.disable, "cuptiActivityDisable");
  sym(api.flushAll, "cuptiActivityFlushAll");
  sym(api.getNextRecord, "cuptiActivityGetNextRecord");
  sym(api.getNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
  sym(api.getResultString, "cuptiGetResultString");
  sym(api.getContextId, "cuptiGetContextId");
  if (!missing.empty())
    api.error = fmt::format("{} lacks entry points: {}", kLibrary, missing);
  return api;
}

const CuptiApi& cupti() {
  static const CuptiApi api = load();
  return api;
}

std::string result_string(CUptiResult result) {
  const char* text = nullptr;
  if (cupti().getResultString && cupti().getResultString(result, &text) == CUPTI_SUCCESS && text)
    return text;
  return fmt::format("CUPTI error {}", int(result));
}

void check_cupti(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS)
    throw Error(fmt::format("{}: {}", call, result_string(result)));
}

// Kernels parsed out of completed buffers, waiting for take().
struct Sink {
  std::mutex mutex;
  std::vector<CuptiKernel> kernels;
  uint64_t missing = 0;  // kernel records without timestamps
};

Sink& sink() {
  static Sink* s = new Sink;  // leaked: CUPTI may call back during static destruction
  return *s;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<CuptiKernel> kernels;
  uint64_t missing = 0;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cupti().getNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    // Every kernel record version starts with these fields at the same offsets.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if ((k->start == 0 && k->end == 0) || k->end < k->start) {
      ++missing;
      continue;
    }
    kernels.push_back({k->start, k->end, k->contextId, k->streamId, k->deviceId});
  }
  std::free(buffer);
  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  s.kernels.insert(s.kernels.end(), kernels.begin(), kernels.end());
  s.missing += missing;
}

std::mutex& trace_mutex() {
  static std::mutex m;
  return m;
}

} // namespace

std::string cupti_load_error() { return cupti().error; }

struct CuptiKernelTrace::Lock {
  std::unique_lock<std::mutex> hold{trace_mutex()};
  uint64_t dropped = 0;
};

CuptiKernelTrace::CuptiKernelTrace() {
  const CuptiApi& api = cupti();
  if (!api.error.empty())
    throw Error("CUPTI timing is unavailable: " + api.error);
  lock_ = std::make_unique<Lock>();
  static const CUptiResult registered = api.registerCallbacks(buffer_requested, buffer_completed);
  check_cupti(registered, "cuptiActivityRegisterCallbacks");
  const CUptiResult enabled = api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (enabled != CUPTI_SUCCESS)
    throw Error(fmt::format("cuptiActivityEnable(CONCURRENT_KERNEL): {}{}", result_string(enabled),
                            enabled == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                                ? " (another profiler, e.g. Nsight, holds CUPTI)"
                                : ""));
  take();  // drop anything left from before
  lock_->dropped = 0;
}

CuptiKernelTrace::~CuptiKernelTrace() {
  if (!lock_)
    return;
  cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cupti().flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  s.kernels.clear();
  s.missing = 0;
}

std::vector<CuptiKernel> CuptiKernelTrace::take() {
  check_cupti(cupti().flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  size_t dropped = 0;
  if (cupti().getNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS)
    lock_->dropped += dropped;
  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  lock_->dropped += s.missing;
  s.missing = 0;
  std::vector<CuptiKernel> out;
  out.swap(s.kernels);
  return out;
}

uint64_t CuptiKernelTrace::dropped() const { return lock_->dropped; }

uint32_t CuptiKernelTrace::context_id(CUcontext context) const {
  uint32_t id = 0;
  check_cupti(cupti().getContextId(context, &id), "cuptiGetContextId");
  return id;
}

} // namespace tokamax::detail
