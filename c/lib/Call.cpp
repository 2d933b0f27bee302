//===- Call.cpp - The C ABI: ops, calls, runs, workspace, precompile --------===//
#include "c/lib/CApi.h"

#include "ops/lib/framework/CallCache.h"

#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Workspace.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

using namespace tokamax;
using tokamax::capi::guard;
using tokamax::capi::require_pointer;

namespace {

const Op &opNamed(const char *name) {
  require_pointer(name, "op");
  if (const Op *op = find_op(name))
    return *op;
  std::vector<std::string> known;
  for (const Op *op : registered_ops())
    if (capi::has_binder(op->name()))
      known.push_back(op->name());
  throw Error(fmt::format("unknown op \"{}\" (known: {})", name, fmt::join(known, ", ")));
}

const tkx_call &callOf(const tkx_call *call) {
  require_pointer(call, "call");
  return *call;
}

size_t numOutputs(const tkx_call &call) { return call.args.args.size() - call.op->num_inputs(); }

/// "input 0 (x)", "output 1 (mean)".
std::string argName(const tkx_call &call, size_t index) {
  const size_t inputs = call.op->num_inputs();
  return index < inputs ? fmt::format("input {} ({})", index, call.op->arg_names()[index])
                        : fmt::format("output {} ({})", index - inputs, call.op->arg_names()[index]);
}

/// A count of inputs or outputs a caller passed: the op's, or fewer (a caller built
/// before optional arguments were appended: the missing trailing ones are absent).
/// `what` is "num_inputs" or "num_outputs"; the error lists that side's arguments.
void checkCount(const tkx_call &call, std::string_view what, int32_t count) {
  const std::span<const std::string> names(call.op->arg_names());
  const size_t inputs = call.op->num_inputs();
  const auto side = what == "num_inputs" ? names.first(inputs) : names.subspan(inputs);
  if (count < 0 || static_cast<size_t>(count) > side.size())
    throw Error(fmt::format("{}: {} is {}, the op takes {} ({}; fewer pass the last ones as absent)",
                            call.op->name(), what, count, side.size(), fmt::join(side, ", ")));
}

/// The caller's i-th tensor, NULL past the count it passed.
const tkx_tensor *given(const tkx_tensor *const *tensors, int32_t count, size_t i) {
  return i < static_cast<size_t>(count) ? tensors[i] : nullptr;
}

/// The views of a run, checked against the bound specs; `device` the one device of them
/// all (-1: host), or -2 when every tensor is absent or empty.
struct RunViews {
  std::vector<TensorView> inputs, outputs;
  int device = -2;
};

RunViews runViews(const tkx_call &call, const tkx_tensor *const *inputs, int32_t num_inputs,
                  const tkx_tensor *const *outputs, int32_t num_outputs) {
  const size_t nin = call.op->num_inputs(), nout = numOutputs(call);
  checkCount(call, "num_inputs", num_inputs);
  checkCount(call, "num_outputs", num_outputs);
  if (num_inputs)
    require_pointer(inputs, "inputs");
  if (num_outputs)
    require_pointer(outputs, "outputs");
  RunViews views;
  std::string firstDevice;
  for (size_t i = 0; i < nin + nout; ++i) {
    const tkx_tensor *t = i < nin ? given(inputs, num_inputs, i) : given(outputs, num_outputs, i - nin);
    std::vector<TensorView> &into = i < nin ? views.inputs : views.outputs;
    const std::optional<ArgSpec> &bound = call.args.args[i];
    const std::string what = fmt::format("{}: {}", call.op->name(), argName(call, i));
    if (!bound) {
      if (t)
        throw Error(fmt::format("{} was absent when the call was created: pass NULL", what));
      into.emplace_back();
      continue;
    }
    if (!t)
      throw Error(fmt::format("{} is NULL; the call was created with {}", what, bound->to_json()));
    TensorView view = capi::view_of(*t, what);
    ArgSpec spec = ArgSpec::of(view);
    if (spec != *bound)
      throw Error(fmt::format("{}: got {}, the call was created with {}", what, spec.to_json(), bound->to_json()));
    if (views.device == -2) {
      views.device = t->device;
      firstDevice = what;
    } else if (t->device != views.device) {
      throw Error(fmt::format("{} is on device {} but {} is on device {}: every tensor of a call must be on one "
                              "device (-1: host)",
                              what, t->device, firstDevice, views.device));
    }
    into.push_back(view);
  }
  return views;
}

/// The arguments a run can take on the fast path (the call cache's limit too).
constexpr size_t kMaxRunArgs = 31;

/// Fills `views` (inputs then outputs; absent ones default) when every tensor is what
/// the call was bound to, contiguous, on one device (set in `device`; -2 when all are
/// absent or empty) and non-null where it has elements. Allocates and throws nothing:
/// false sends the run down runViews, which names what is wrong.
bool quickViews(const tkx_call &call, const tkx_tensor *const *inputs, int32_t num_inputs,
                const tkx_tensor *const *outputs, int32_t num_outputs, std::span<TensorView> views, int &device) {
  const size_t nin = call.op->num_inputs(), n = call.args.args.size();
  if (n > views.size() || num_inputs != int32_t(nin) || num_outputs != int32_t(n - nin) || (nin && !inputs) ||
      (n > nin && !outputs))
    return false;
  device = -2;
  for (size_t i = 0; i < n; ++i) {
    const tkx_tensor *t = i < nin ? inputs[i] : outputs[i - nin];
    const std::optional<ArgSpec> &bound = call.args.args[i];
    if (!bound) {
      if (t)
        return false;
      views[i] = TensorView();
      continue;
    }
    if (!t || t->struct_size < sizeof(tkx_tensor) || t->dtype != int32_t(bound->dtype) ||
        t->rank != int32_t(bound->shape.size()) || t->device < -1 || (t->rank && !t->shape) ||
        !std::equal(bound->shape.begin(), bound->shape.end(), t->shape))
      return false;
    int64_t numel = 1, expected = 1;
    for (int d = t->rank - 1; d >= 0; --d) {
      if (t->strides && t->shape[d] != 1 && t->strides[d] != expected)
        numel = -1;  // not row-major, unless the tensor is empty (checked below)
      expected *= t->shape[d];
    }
    if ((numel < 0 && expected != 0) || (!t->data && expected != 0))
      return false;
    if (device == -2)
      device = t->device;
    else if (t->device != device)
      return false;
    views[i] = TensorView(reinterpret_cast<uint64_t>(t->data), bound->dtype, bound->shape, t->device < 0 ? 0 : t->device);
  }
  return true;
}

/// A device run through the eager call cache (tokamax/ops/CallCache.h): resolved and
/// recorded on its first run per device, config providers and context, then replayed.
void runOnDevice(const tkx_call &c, std::span<const TensorView> in, std::span<const TensorView> out, void *stream) {
  Stream s = Stream::wrap(static_cast<CUstream>(stream));
  ops_detail::CallKey key(*c.op);
  key.add(c.identity);
  for (size_t i = 0; i < c.args.args.size(); ++i)
    c.args.args[i] ? key.add(i < in.size() ? in[i] : out[i - in.size()]) : key.add(uint64_t(0));
  ops_detail::run_eager(key, {*c.op, in, out, s, c.implementation, c.config},
                        [&]() -> const BoundArgs & { return c.args; });
}

/// A number per distinct bound call (op, specs, attributes), so that calls bound alike
/// (a framework re-creating one) share their cache entries. Tagged apart from the words a
/// tensor adds to a key.
uint64_t identityOf(const std::string &json) {
  static std::mutex mutex;
  static auto *ids = new std::unordered_map<std::string, uint64_t>;  // leaked: runs may outlive statics
  std::lock_guard lock(mutex);
  auto [it, added] = ids->try_emplace(json, (uint64_t(0xCA61) << 48) | (uint64_t(ids->size() + 1) << 1));
  return it->second;
}

std::mutex namesMutex;

} // namespace

extern "C" {

uint32_t tkx_api_version(void) { return TOKAMAX_C_API_VERSION; }

size_t tkx_struct_size(const char *name) {
  if (!name)
    return 0;
  if (std::string_view(name) == "tkx_tensor")
    return sizeof(tkx_tensor);
  return 0;
}

const char *tkx_op_names(void) {
  static const std::string names = [] {
    std::vector<std::string> bound;
    for (const Op *op : registered_ops())  // sorted by name
      if (capi::has_binder(op->name()))
        bound.push_back(op->name());
    return fmt::format("{}", fmt::join(bound, "\n"));
  }();
  return names.c_str();
}

tkx_status tkx_op_args(const char *op, const char **names, int32_t *num_inputs) {
  return guard("tkx_op_args", [&] {
    const Op &o = opNamed(op);
    // Library-owned for the process: one string per op, made on first ask.
    static std::map<std::string, std::unique_ptr<std::string>> texts;
    std::lock_guard lock(namesMutex);
    std::unique_ptr<std::string> &text = texts[o.name()];
    if (!text)
      text = std::make_unique<std::string>(fmt::format("{}", fmt::join(o.arg_names(), "\n")));
    if (names)
      *names = text->c_str();
    if (num_inputs)
      *num_inputs = static_cast<int32_t>(o.num_inputs());
  });
}

tkx_status tkx_call_create(const char *op, const tkx_tensor *const *inputs, int32_t num_inputs,
                           const char *options_json, tkx_call **call) {
  if (call)
    *call = nullptr;
  return guard("tkx_call_create", [&] {
    require_pointer(call, "call (the tkx_call ** to fill)");
    auto made = std::make_unique<tkx_call>();
    made->op = &opNamed(op);
    if (!capi::has_binder(made->op->name()))
      capi::bind_call(*made, {}, options_json);  // throws NotSupported naming the ops it binds
    const size_t nin = made->op->num_inputs();
    checkCount(*made, "num_inputs", num_inputs);
    if (num_inputs)
      require_pointer(inputs, "inputs");
    std::vector<std::optional<ArgSpec>> specs(nin);
    for (size_t i = 0; i < nin; ++i)
      if (const tkx_tensor *t = given(inputs, num_inputs, i))
        specs[i] = capi::spec_of(*t, fmt::format("{}: {}", op, argName(*made, i)));
    capi::bind_call(*made, specs, options_json);
    made->identity = identityOf(made->json);
    *call = made.release();
  });
}

void tkx_call_destroy(tkx_call *call) { delete call; }

int32_t tkx_call_num_outputs(const tkx_call *call) {
  return call ? static_cast<int32_t>(numOutputs(*call)) : -1;
}

tkx_status tkx_call_output(const tkx_call *call, int32_t i, int32_t *dtype, int32_t *rank, int64_t *shape) {
  return guard("tkx_call_output", [&] {
    const tkx_call &c = callOf(call);
    if (i < 0 || static_cast<size_t>(i) >= numOutputs(c))
      throw Error(fmt::format("{}: output index {} is outside 0..{}", c.op->name(), i, int(numOutputs(c)) - 1));
    const std::optional<ArgSpec> &spec = c.args.args[c.op->num_inputs() + i];
    if (dtype)
      *dtype = spec ? static_cast<int32_t>(spec->dtype) : -1;
    if (rank)
      *rank = spec ? static_cast<int32_t>(spec->shape.size()) : -1;
    if (shape && spec)
      std::copy(spec->shape.begin(), spec->shape.end(), shape);
  });
}

const char *tkx_call_json(const tkx_call *call) { return call ? call->json.c_str() : ""; }

tkx_status tkx_call_workspace_bytes(const tkx_call *call, int32_t device, size_t *bytes) {
  return guard("tkx_call_workspace_bytes", [&] {
    const tkx_call &c = callOf(call);
    require_pointer(bytes, "bytes");
    if (device < -1)
      throw Error(fmt::format("device {} is neither a CUDA ordinal nor -1 (host)", device));
    *bytes = 0;
    if (device == -1)
      return;
    // Current while the config resolves: the per-device autotuning cache answers for it.
    const detail::DeviceScope scope(device);
    Device &d = scope.device();
    const Implementation &impl = c.op->select(c.args, c.implementation, d.arch());
    *bytes = scratch_bytes(impl, c.args, c.op->resolve_config(impl, c.args, c.config), d);
  });
}

tkx_status tkx_call_run(const tkx_call *call, const tkx_tensor *const *inputs, int32_t num_inputs,
                        const tkx_tensor *const *outputs, int32_t num_outputs, void *stream, void *workspace,
                        size_t workspace_bytes) {
  return guard("tkx_call_run", [&] {
    const tkx_call &c = callOf(call);
    TensorView quick[kMaxRunArgs];
    int device = -2;
    if (quickViews(c, inputs, num_inputs, outputs, num_outputs, quick, device) && device >= 0) {
      CallerWorkspaceScope scope(reinterpret_cast<uint64_t>(workspace), workspace ? workspace_bytes : 0);
      const size_t nin = c.op->num_inputs();
      runOnDevice(c, std::span(quick, nin), std::span(quick + nin, c.args.args.size() - nin), stream);
      return;
    }
    RunViews views = runViews(c, inputs, num_inputs, outputs, num_outputs);
    if (views.device < 0) {  // host memory (or nothing to touch): the CPU interpreter
      c.op->interpret(c.args, views.inputs, views.outputs, c.implementation, c.config);
      return;
    }
    CallerWorkspaceScope scope(reinterpret_cast<uint64_t>(workspace), workspace ? workspace_bytes : 0);
    runOnDevice(c, views.inputs, views.outputs, stream);
  });
}

tkx_status tkx_call_precompile(const tkx_call *call, const char *arch) {
  return guard("tkx_call_precompile", [&] {
    const tkx_call &c = callOf(call);
    require_pointer(arch, "arch");
    Arch::parse(arch, "arch");
    CompileOptions options;
    options.arch = arch;
    const Implementation &impl = c.op->select(c.args, c.implementation, arch);
    const Config config = c.op->resolve_config(impl, c.args, c.config);
    const std::string cache = DiskCache::default_directory().string();
    for (const dsl::Kernel &kernel : impl.kernels(c.args, config))
      precompile(kernel, options, cache);
  });
}

} // extern "C"
