// The XLA FFI handler of tokamax_cpp.jax: one generic custom call for every op of the
// library. Attributes: "op" (the C++ op), "options" (its canonical options JSON),
// "inputs" / "outputs" (one '1' / '0' per argument of the op: which are passed; absent
// optional ones are not buffers). Each (op, options, specs) is bound once (tkx_call) and
// kept; a run goes on XLA's stream with its workspace from XLA's scratch allocator (GPU),
// or on the CPU interpreter (host buffers).
//
// Built by tokamax_cpp.jax at first use with jax.ffi.include_dir() and the system C++
// compiler; the tkx_* entry points come from the library the package loaded
// (tokamax_ffi_init), so this file needs only the XLA FFI headers and libdl.
#include "xla/ffi/api/ffi.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ffi = xla::ffi;

namespace {

// ---- The C ABI, resolved at init (layout as c/include/tokamax/c/tokamax.h) ----
struct TkxTensor {
  uint32_t struct_size;
  int32_t dtype, rank, device;
  const int64_t *shape, *strides;
  void *data;
};
struct TkxCall;
constexpr int kMaxRank = 8;

struct Api {
  const char *(*last_error)();
  int (*call_create)(const char *, const TkxTensor *const *, int32_t, const char *, TkxCall **);
  int32_t (*call_num_outputs)(const TkxCall *);
  int (*call_output)(const TkxCall *, int32_t, int32_t *, int32_t *, int64_t *);
  int (*call_workspace_bytes)(const TkxCall *, int32_t, size_t *);
  int (*call_run)(const TkxCall *, const TkxTensor *const *, int32_t, const TkxTensor *const *, int32_t, void *,
                  void *, size_t);
  // libcuda, for the device of XLA's buffers (GPU handler only).
  int (*pointer_attribute)(void *, int, uintptr_t);
} api;

template <class F>
bool resolve(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// XLA's element types -> tkx_dtype (-1: none of ours).
int32_t tkxDtype(ffi::DataType t) {
  switch (t) {
  case ffi::DataType::BF16: return 0;
  case ffi::DataType::F16: return 1;
  case ffi::DataType::F32: return 2;
  case ffi::DataType::F64: return 3;
  case ffi::DataType::S8: return 4;
  case ffi::DataType::S32: return 5;
  case ffi::DataType::S64: return 6;
  case ffi::DataType::PRED: return 7;
  case ffi::DataType::F8E4M3FN: return 8;
  case ffi::DataType::F8E5M2: return 9;
  default: return -1;
  }
}

ffi::Error tkxError(const char *what) {
  return ffi::Error(ffi::ErrorCode::kInternal, std::string("tokamax_cpp ") + what + ": " + api.last_error());
}

// The bound calls, by op + options + input specs. Calls are immutable and thread-safe.
std::mutex callsMutex;
std::unordered_map<std::string, TkxCall *> calls;

struct Buffers {
  std::vector<TkxTensor> tensors;   // one per passed buffer
  std::vector<const TkxTensor *> slots;  // one per op argument (null: absent)
};

// The op's argument slots from the passed buffers and the presence mask.
template <class Get>
ffi::Error fill(std::string_view present, size_t passed, Get get, int32_t device, Buffers &b, std::string *key) {
  b.tensors.reserve(passed);
  size_t next = 0;
  for (char p : present) {
    if (p != '1') {
      b.slots.push_back(nullptr);
      if (key)
        *key += "|-";
      continue;
    }
    if (next >= passed)
      return ffi::Error::InvalidArgument("tokamax_cpp: fewer buffers than the presence mask says");
    ffi::AnyBuffer buf = get(next++);
    const int32_t dtype = tkxDtype(buf.element_type());
    if (dtype < 0)
      return ffi::Error::InvalidArgument("tokamax_cpp: an element type the library does not take");
    auto dims = buf.dimensions();
    b.tensors.push_back({sizeof(TkxTensor), dtype, static_cast<int32_t>(dims.size()), device, dims.begin(), nullptr,
                         buf.untyped_data()});
    if (key) {
      *key += "|" + std::to_string(dtype) + ":";
      for (int64_t d : dims)
        *key += std::to_string(d) + ",";
    }
  }
  if (next != passed)
    return ffi::Error::InvalidArgument("tokamax_cpp: more buffers than the presence mask says");
  for (size_t i = 0, t = 0; i < b.slots.size(); ++i)
    if (present[i] == '1')
      b.slots[i] = &b.tensors[t++];
  return ffi::Error::Success();
}

ffi::ErrorOr<TkxCall *> boundCall(std::string_view op, std::string_view options, const std::string &specKey,
                                  const Buffers &in) {
  std::string key = std::string(op) + '\n' + std::string(options) + '\n' + specKey;
  std::lock_guard<std::mutex> lock(callsMutex);
  auto it = calls.find(key);
  if (it != calls.end())
    return it->second;
  TkxCall *call = nullptr;
  if (api.call_create(std::string(op).c_str(), in.slots.data(), static_cast<int32_t>(in.slots.size()),
                      std::string(options).c_str(), &call) != 0)
    return ffi::Unexpected(tkxError("binding"));
  calls.emplace(std::move(key), call);
  return call;
}

int32_t deviceOf(const Buffers &in) {
  constexpr int kDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
  for (const TkxTensor &t : in.tensors) {
    int ordinal = -1;
    if (t.data && api.pointer_attribute && api.pointer_attribute(&ordinal, kDeviceOrdinal, reinterpret_cast<uintptr_t>(t.data)) == 0)
      return ordinal;
  }
  return 0;  // no data to touch: an empty call, which launches nothing
}

ffi::Error run(void *stream, ffi::ScratchAllocator *scratch, ffi::RemainingArgs args, ffi::RemainingRets rets,
               std::string_view inputs, std::string_view op, std::string_view options, std::string_view outputs) {
  if (!api.call_create)
    return ffi::Error::Internal("tokamax_cpp: the handler was not initialised (tokamax_ffi_init)");
  Buffers in, out;
  std::string specKey;
  ffi::Error e = fill(inputs, args.size(), [&](size_t i) { return *args.get<ffi::AnyBuffer>(i); }, -1, in, &specKey);
  if (e.failure())
    return e;
  const int32_t device = scratch ? deviceOf(in) : -1;
  for (TkxTensor &t : in.tensors)
    t.device = device;
  ffi::ErrorOr<TkxCall *> call = boundCall(op, options, specKey, in);
  if (!call.has_value())
    return call.error();
  e = fill(outputs, rets.size(), [&](size_t i) { return **rets.get<ffi::AnyBuffer>(i); }, device, out, nullptr);
  if (e.failure())
    return e;
  void *workspace = nullptr;
  size_t bytes = 0;
  if (scratch) {
    if (api.call_workspace_bytes(*call, device, &bytes) != 0)
      return tkxError("workspace size");
    if (bytes) {
      std::optional<void *> got = scratch->Allocate(bytes, 16);
      if (!got)
        return ffi::Error(ffi::ErrorCode::kResourceExhausted, "tokamax_cpp: XLA's scratch allocator refused " +
                                                                  std::to_string(bytes) + " bytes");
      workspace = *got;
    }
  }
  if (api.call_run(*call, in.slots.data(), static_cast<int32_t>(in.slots.size()), out.slots.data(),
                   static_cast<int32_t>(out.slots.size()), stream, workspace, bytes) != 0)
    return tkxError("run");
  return ffi::Error::Success();
}

ffi::Error runDevice(void *stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view inputs, std::string_view op, std::string_view options,
                     std::string_view outputs) {
  return run(stream, &scratch, args, rets, inputs, op, options, outputs);
}

ffi::Error runHost(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view inputs, std::string_view op,
                   std::string_view options, std::string_view outputs) {
  return run(nullptr, nullptr, args, rets, inputs, op, options, outputs);
}

} // namespace

// Attributes are declared in name order.
XLA_FFI_DEFINE_HANDLER_SYMBOL(TokamaxFfiCuda, runDevice,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void *>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("inputs")
                                  .Attr<std::string_view>("op")
                                  .Attr<std::string_view>("options")
                                  .Attr<std::string_view>("outputs"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TokamaxFfiHost, runHost,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("inputs")
                                  .Attr<std::string_view>("op")
                                  .Attr<std::string_view>("options")
                                  .Attr<std::string_view>("outputs"));

// Resolves the tkx_* entry points from the library at `library_path` (already loaded by
// the package: RTLD_NOLOAD finds that copy) and libcuda's, where present. 0 on success.
extern "C" __attribute__((visibility("default"))) int tokamax_ffi_init(const char *library_path) {
  void *lib = dlopen(library_path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib)
    lib = dlopen(library_path, RTLD_NOW);
  if (!lib)
    return 1;
  bool ok = resolve(lib, "tkx_last_error", api.last_error) && resolve(lib, "tkx_call_create", api.call_create) &&
            resolve(lib, "tkx_call_num_outputs", api.call_num_outputs) &&
            resolve(lib, "tkx_call_output", api.call_output) &&
            resolve(lib, "tkx_call_workspace_bytes", api.call_workspace_bytes) &&
            resolve(lib, "tkx_call_run", api.call_run);
  if (!ok) {
    api.call_create = nullptr;
    return 2;
  }
  if (void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))
    resolve(cuda, "cuPointerGetAttribute", api.pointer_attribute);
  else if (void *loaded = dlopen("libcuda.so.1", RTLD_NOW))
    resolve(loaded, "cuPointerGetAttribute", api.pointer_attribute);
  return 0;
}
