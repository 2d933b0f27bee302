// The XLA FFI handler of tokamax_cpp.jax: one generic custom call for every op of the
// library. Attributes: "op" (the C++ op), "options" (its canonical options JSON),
// "inputs" / "outputs" (one '1' / '0' per argument of the op, in its order: which are
// passed; absent optional ones are not buffers and go to tkx_call_create / tkx_call_run as
// NULL slots, so num_inputs is always the op's full input count; "outputs" may end in
// 'w': the last result is the run's workspace). Each (op, options, specs) is bound once
// (tkx_call) and kept; a run goes on XLA's stream with the workspace result, or one from
// XLA's scratch allocator where that is too small (GPU), or on the CPU interpreter (host
// buffers).
//
// Per execution nothing is parsed or bound again: the key is built in a reused per-thread
// string, found in a per-thread map (the process-wide one, under a mutex, only on a
// thread's first sight of a call), the workspace size is remembered per device (asked
// again only when a run reports TKX_WORKSPACE_TOO_SMALL, as after a config scope changed
// the call's config), and the library replays the call's cached launch plan.
//
// Built by tokamax_cpp.jax at first use with jax.ffi.include_dir() and the system C++
// compiler; the tkx_* entry points come from the library the package loaded
// (tokamax_ffi_init), so this file needs only the XLA FFI headers and libdl.
#ifndef TOKAMAX_FFI_NO_XLA  // defined by the XLA-free test of the slot mapping
#include "xla/ffi/api/ffi.h"
#endif

#include <dlfcn.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#ifndef TOKAMAX_FFI_NO_XLA
namespace ffi = xla::ffi;
#endif

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

// The bound calls, by op + options + input specs. Calls are immutable and thread-safe.
std::mutex callsMutex;
std::unordered_map<std::string, TkxCall *> calls;

constexpr int kWorkspaceTooSmall = 5;  // TKX_WORKSPACE_TOO_SMALL

// A thread's view of a bound call: the call and its workspace bytes per device as last
// asked.
struct Bound {
  TkxCall *call = nullptr;
  std::vector<std::pair<int32_t, size_t>> workspace;
};
thread_local std::unordered_map<std::string, Bound> threadCalls;

void appendInt(std::string &key, int64_t v) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  key.append(digits, end);
}

// A buffer XLA passed, without XLA's types (the slot mapping below is tested without XLA:
// tests/python/test_ffi_handler.py). dtype -1: an element type the library does not take.
struct Passed {
  int32_t dtype, rank;
  const int64_t *dims;
  void *data;
};

struct Buffers {
  std::vector<TkxTensor> tensors;        // one per passed buffer
  std::vector<const TkxTensor *> slots;  // one per argument of the op, in its order (null: absent)
};

// What went wrong, XLA-free; the handler turns it into an ffi::Error.
struct Failure {
  enum Kind { kNone, kInvalidArgument, kInternal, kResourceExhausted } kind = kNone;
  std::string message;
  explicit operator bool() const { return kind != kNone; }
};

Failure tkxFailure(const char *what) { return {Failure::kInternal, std::string("tokamax_cpp ") + what + ": " + api.last_error()}; }

// The op's argument slots: one per character of the presence mask `present` (the op's
// full argument list, as tkx_op_args / the call's outputs give it), the passed buffers in
// order in the '1' slots, NULL in the '0' ones. `key` (where given) gets the specs.
Failure fill(const char *what, std::string_view present, const std::vector<Passed> &passed, int32_t device,
             Buffers &b, std::string *key) {
  size_t marked = 0;
  for (char p : present) {
    if (p != '0' && p != '1')
      return {Failure::kInvalidArgument, std::string("tokamax_cpp: the ") + what + " mask '" + std::string(present) +
                                             "' is not made of '0' / '1'"};
    marked += p == '1';
  }
  if (marked != passed.size())
    return {Failure::kInvalidArgument, std::string("tokamax_cpp: ") + std::to_string(passed.size()) + " " + what +
                                           " buffers, the mask '" + std::string(present) + "' marks " +
                                           std::to_string(marked)};
  b.tensors.clear();
  b.tensors.reserve(passed.size());  // no reallocation below: the slots point into it
  b.slots.assign(present.size(), nullptr);
  size_t next = 0;
  for (size_t i = 0; i < present.size(); ++i) {
    if (present[i] != '1') {
      if (key)
        *key += "|-";
      continue;
    }
    const Passed &buf = passed[next++];
    if (buf.dtype < 0)
      return {Failure::kInvalidArgument, std::string("tokamax_cpp: ") + what + " " + std::to_string(i) +
                                             ": an element type the library does not take"};
    b.tensors.push_back({sizeof(TkxTensor), buf.dtype, buf.rank, device, buf.dims, nullptr, buf.data});
    b.slots[i] = &b.tensors.back();
    if (key) {
      *key += '|';
      appendInt(*key, buf.dtype);
      *key += ':';
      for (int32_t d = 0; d < buf.rank; ++d) {
        appendInt(*key, buf.dims[d]);
        *key += ',';
      }
    }
  }
  return {};
}

// The call for (op, options, input specs), bound once; null with `failure` set otherwise.
TkxCall *boundCall(std::string_view op, std::string_view options, const std::string &specKey, const Buffers &in,
                   Failure &failure) {
  std::string key;
  key.reserve(op.size() + options.size() + specKey.size() + 2);
  key.append(op).append(1, '\n').append(options).append(1, '\n').append(specKey);
  std::lock_guard<std::mutex> lock(callsMutex);
  auto it = calls.find(key);
  if (it != calls.end())
    return it->second;
  TkxCall *call = nullptr;
  if (api.call_create(std::string(op).c_str(), in.slots.data(), static_cast<int32_t>(in.slots.size()),
                      std::string(options).c_str(), &call) != 0) {
    failure = tkxFailure("binding");
    return nullptr;
  }
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

// This thread's entry of the call for (op, options, the specs in `specKey`: a reused
// string, so a repeated run allocates nothing here); null with `failure` set.
Bound *threadBound(std::string_view op, std::string_view options, const std::string &specKey, const Buffers &in,
                   Failure &failure) {
  thread_local std::string key;
  key.clear();
  key.append(op).append(1, '\n').append(options).append(1, '\n').append(specKey);
  auto it = threadCalls.find(key);
  if (it != threadCalls.end())
    return &it->second;
  TkxCall *call = boundCall(op, options, specKey, in, failure);
  if (!call)
    return nullptr;
  Bound &b = threadCalls[key];
  b.call = call;
  return &b;
}

// The workspace bytes of `b` on `device`, asked once (again when `fresh`).
int workspaceBytes(Bound &b, int32_t device, bool fresh, size_t &bytes) {
  for (auto &[d, n] : b.workspace)
    if (d == device && !fresh) {
      bytes = n;
      return 0;
    }
  if (int status = api.call_workspace_bytes(b.call, device, &bytes))
    return status;
  for (auto &[d, n] : b.workspace)
    if (d == device) {
      n = bytes;
      return 0;
    }
  b.workspace.emplace_back(device, bytes);
  return 0;
}

// The bytes of a result buffer (the workspace result is u8 [n]).
size_t bufferBytes(const Passed &p) {
  size_t n = 1;
  for (int32_t d = 0; d < p.rank; ++d)
    n *= static_cast<size_t>(p.dims[d]);
  return n;
}

// One run: binds (or finds) the call, maps XLA's operands / results to the op's input /
// output slots, runs on `stream` (GPU), or on the CPU interpreter where `device` is false
// (host buffers). An `outputs` mask ending in 'w' says the last result is a workspace
// XLA allocated with the executable's buffers (its size asked at trace time): the run
// takes it when it is large enough, else one from `allocate` (XLA's scratch allocator);
// with no `allocate` (the command-buffer handler, whose runs XLA may record into a CUDA
// graph, where scratch memory would not outlive the recording) a too small one is an
// error.
Failure runCall(void *stream, bool device, const std::function<std::optional<void *>(size_t)> &allocate,
                const std::vector<Passed> &args, std::vector<Passed> &rets, std::string_view inputs,
                std::string_view op, std::string_view options, std::string_view outputs) {
  if (!api.call_create)
    return {Failure::kInternal, "tokamax_cpp: the handler was not initialised (tokamax_ffi_init)"};
  std::optional<Passed> given;  // the workspace result
  if (!outputs.empty() && outputs.back() == 'w') {
    if (rets.empty())
      return {Failure::kInvalidArgument, "tokamax_cpp: the output mask asks for a workspace result, none was passed"};
    given = rets.back();
    rets.pop_back();
    outputs.remove_suffix(1);
  }
  thread_local Buffers in, out;  // reused: their vectors keep their room
  thread_local std::string specKey;
  specKey.clear();
  if (Failure f = fill("input", inputs, args, -1, in, &specKey))
    return f;
  // A stream belongs to one device: its ordinal is asked once per stream a thread sees.
  thread_local void *lastStream = nullptr;
  thread_local int32_t lastOrdinal = -1;
  int32_t ordinal = -1;
  if (device && stream && stream == lastStream) {
    ordinal = lastOrdinal;
  } else if (device) {
    ordinal = deviceOf(in);
    if (stream && !in.tensors.empty() && in.tensors[0].data)  // deviceOf read a pointer: keep its answer
      lastStream = stream, lastOrdinal = ordinal;
  }
  for (TkxTensor &t : in.tensors)
    t.device = ordinal;
  Failure failure;
  Bound *bound = threadBound(op, options, specKey, in, failure);
  if (!bound)
    return failure;
  TkxCall *call = bound->call;
  if (Failure f = fill("output", outputs, rets, ordinal, out, nullptr))
    return f;
  if (static_cast<int32_t>(out.slots.size()) != api.call_num_outputs(call))
    return {Failure::kInvalidArgument, "tokamax_cpp: the output mask '" + std::string(outputs) + "' has " +
                                           std::to_string(out.slots.size()) + " slots, " + std::string(op) +
                                           " has " + std::to_string(api.call_num_outputs(call)) + " outputs"};
  for (bool fresh : {false, true}) {
    void *workspace = nullptr;
    size_t bytes = 0;
    if (device) {
      if (workspaceBytes(*bound, ordinal, fresh, bytes) != 0)
        return tkxFailure("workspace size");
      if (bytes && given && bufferBytes(*given) >= bytes) {
        workspace = given->data;
        bytes = bufferBytes(*given);
      } else if (bytes && allocate) {
        std::optional<void *> got = allocate(bytes);
        if (!got)
          return {Failure::kResourceExhausted,
                  "tokamax_cpp: XLA's scratch allocator refused " + std::to_string(bytes) + " bytes"};
        workspace = *got;
      } else if (bytes) {
        return {Failure::kInternal, "tokamax_cpp: " + std::string(op) + " needs " + std::to_string(bytes) +
                                        " bytes of workspace, the traced call has " +
                                        std::to_string(given ? bufferBytes(*given) : 0) +
                                        " (its config changed since it was traced: trace it again)"};
      }
    }
    const int status = api.call_run(call, in.slots.data(), static_cast<int32_t>(in.slots.size()), out.slots.data(),
                                    static_cast<int32_t>(out.slots.size()), stream, workspace, bytes);
    if (status == 0)
      return {};
    if (status != kWorkspaceTooSmall || fresh || !device)  // too small: a config scope changed the config
      return tkxFailure("run");
  }
  return tkxFailure("run");
}

#ifndef TOKAMAX_FFI_NO_XLA
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

Passed passed(ffi::AnyBuffer buf) {
  auto dims = buf.dimensions();
  return {tkxDtype(buf.element_type()), static_cast<int32_t>(dims.size()), dims.begin(), buf.untyped_data()};
}

ffi::Error run(void *stream, bool device, ffi::ScratchAllocator *scratch, ffi::RemainingArgs args,
               ffi::RemainingRets rets, std::string_view inputs, std::string_view op, std::string_view options,
               std::string_view outputs) {
  thread_local std::vector<Passed> argBuffers, retBuffers;  // reused: no allocation per run
  argBuffers.clear();
  retBuffers.clear();
  for (size_t i = 0; i < args.size(); ++i)
    argBuffers.push_back(passed(*args.get<ffi::AnyBuffer>(i)));
  for (size_t i = 0; i < rets.size(); ++i)
    retBuffers.push_back(passed(**rets.get<ffi::AnyBuffer>(i)));
  std::function<std::optional<void *>(size_t)> allocate;
  if (scratch)
    allocate = [scratch](size_t bytes) { return scratch->Allocate(bytes, 16); };
  Failure f = runCall(stream, device, allocate, argBuffers, retBuffers, inputs, op, options, outputs);
  switch (f.kind) {
  case Failure::kNone: return ffi::Error::Success();
  case Failure::kInvalidArgument: return ffi::Error(ffi::ErrorCode::kInvalidArgument, f.message);
  case Failure::kResourceExhausted: return ffi::Error(ffi::ErrorCode::kResourceExhausted, f.message);
  case Failure::kInternal: break;
  }
  return ffi::Error(ffi::ErrorCode::kInternal, f.message);
}

ffi::Error runDevice(void *stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view inputs, std::string_view op, std::string_view options,
                     std::string_view outputs) {
  return run(stream, true, &scratch, args, rets, inputs, op, options, outputs);
}

// The command-buffer handler's run: no scratch allocator (see runCall).
ffi::Error runDeviceRecordable(void *stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                               std::string_view inputs, std::string_view op, std::string_view options,
                               std::string_view outputs) {
  return run(stream, true, nullptr, args, rets, inputs, op, options, outputs);
}

ffi::Error runHost(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view inputs, std::string_view op,
                   std::string_view options, std::string_view outputs) {
  return run(nullptr, false, nullptr, args, rets, inputs, op, options, outputs);
}

#endif  // TOKAMAX_FFI_NO_XLA

} // namespace

#ifndef TOKAMAX_FFI_NO_XLA
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

// The same for XLA's command buffers (CUDA graphs): a run only launches on XLA's stream
// into the buffers XLA gave it, the workspace included (tokamax_cpp.jax binds calls with
// their config resolved at trace time and a workspace result of its size).
XLA_FFI_DEFINE_HANDLER_SYMBOL(TokamaxFfiCudaRecordable, runDeviceRecordable,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void *>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("inputs")
                                  .Attr<std::string_view>("op")
                                  .Attr<std::string_view>("options")
                                  .Attr<std::string_view>("outputs"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(TokamaxFfiHost, runHost,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("inputs")
                                  .Attr<std::string_view>("op")
                                  .Attr<std::string_view>("options")
                                  .Attr<std::string_view>("outputs"));
#endif  // TOKAMAX_FFI_NO_XLA

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
