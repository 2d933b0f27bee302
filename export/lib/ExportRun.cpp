//===- ExportRun.cpp - Replaying an export's launches on a device -----------===//
//
// Preparing a device (prepare(), or its first run) checks its kind against the export's
// target, loads every kernel and allocates the intermediates and the scratch buffer (one
// allocation); every run then binds the caller's tensors and replays the steps: no JIT,
// no config resolution, no kernel keys, no allocation. Part of the launch path, which the
// top-level CMakeLists.txt keeps at -O3.
//
//===----------------------------------------------------------------------===//
#include "export/lib/ExportState.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax {

using namespace export_detail;

void ExportedFunction::check_device(const ExportTarget &device) const {
  if (!target().accepts(device))
    throw Error(fmt::format("export: this file was built for {} and cannot run on {}", target().to_string(),
                            device.to_string()));
}

void export_detail::bind_views(const Plan &plan, std::span<const TensorView> inputs,
                               std::span<const TensorView> outputs, const char *what, std::vector<uint64_t> &bound) {
  if (inputs.size() != plan.inputs.size() || outputs.size() != plan.outputs.size())
    throw Error(fmt::format("{}: expected {} inputs and {} outputs, got {} and {}", what, plan.inputs.size(),
                            plan.outputs.size(), inputs.size(), outputs.size()));
  bound.assign(plan.values.size(), 0);
  auto bind = [&](int v, const TensorView &t, const char *kind, size_t i) {
    const ValueSpec &spec = plan.values[v];
    if (t.dtype() != spec.dtype || !std::equal(t.shape().begin(), t.shape().end(), spec.shape.begin(), spec.shape.end()))
      throw Error(fmt::format("{}: {} {} is {} but the export was made for {}", what, kind, i,
                              ValueSpec{{t.shape().begin(), t.shape().end()}, t.dtype()}.text(), spec.text()));
    if (!t.is_contiguous())
      throw Error(fmt::format("{}: {} {} must be contiguous (row-major)", what, kind, i));
    if (!t.data() && spec.bytes() > 0)
      throw Error(fmt::format("{}: {} {} has no data (a null pointer)", what, kind, i));
    bound[v] = t.data();
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    bind(plan.inputs[i], inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    bind(plan.outputs[i], outputs[i], "output", i);
}

namespace {

/// The device all the bound tensors are on (device 0 when none has data).
Device &deviceOf(std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  int ordinal = -1;
  for (std::span<const TensorView> views : {inputs, outputs})
    for (const TensorView &t : views) {
      if (!t.data())
        continue;
      if (ordinal >= 0 && t.device() != ordinal)
        throw Error(fmt::format("export run: tensors on devices {} and {}; all must be on one", ordinal, t.device()));
      ordinal = t.device();
    }
  return Device::get(std::max(ordinal, 0));
}

/// Loads every kernel on `device` and lays the intermediates (the values the caller
/// does not pass) and the scratch buffer out in one allocation, 256-byte aligned. All or
/// nothing: a failure leaves `on` unprepared, to be retried whole.
void load(const ExportedFunction::State &s, Device &device, ExportedFunction::State::OnDevice &on) {
  const Plan &plan = s.plan;
  std::vector<std::unique_ptr<LoadedKernel>> kernels;
  for (const KernelEntry &k : plan.kernels) {
    const SectionView &cubin = s.sections[k.cubin];
    kernels.push_back(std::make_unique<LoadedKernel>(Module::load_cubin(cubin.payload, device), k.launch,
                                                     hex_encode(cubin.checksum)));
  }
  std::vector<bool> used(plan.values.size(), false);
  auto use = [&](const BufferRef &r) {
    if (r.value >= 0)
      used[r.value] = true;
  };
  for (const Step &step : plan.steps) {
    if (step.kernel < 0)
      use(step.buffer);
    for (const StepArg &a : step.args)
      if (!a.is_scalar)
        use(a.buffer);
  }
  for (std::span<const int> ids : {std::span<const int>(plan.inputs), std::span<const int>(plan.outputs)})
    for (int v : ids)
      used[v] = false;
  constexpr uint64_t kAlign = 256;
  auto aligned = [](uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  std::vector<uint64_t> offsets(plan.values.size(), 0);
  uint64_t total = 0;
  for (size_t v = 0; v < plan.values.size(); ++v)
    if (used[v]) {
      offsets[v] = total;
      total += aligned(std::max<uint64_t>(plan.values[v].bytes(), 1));
    }
  const uint64_t scratchOffset = total;
  total += aligned(plan.scratch_bytes);
  DeviceBuffer buffers(total, device);
  std::vector<uint64_t> intermediates(plan.values.size(), 0);
  for (size_t v = 0; v < plan.values.size(); ++v)
    if (used[v])
      intermediates[v] = buffers.ptr() + offsets[v];
  // Each kernel step's words, checked once by pack() with every tensor at the (aligned)
  // start of the buffer: runs replace the tensor words only. An offset that would
  // misalign a tensor is refused here, as launch() would refuse it.
  std::vector<std::array<uint64_t, LoadedKernel::kMaxParams>> words(plan.steps.size());
  std::vector<TensorView> views;
  std::vector<KernelArg> args;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step &step = plan.steps[i];
    if (step.kernel < 0)
      continue;
    const LaunchInfo &info = plan.kernels[step.kernel].launch;
    views.clear();
    views.reserve(step.args.size());  // the KernelArgs point into it: no reallocation below
    args.clear();
    for (size_t a = 0; a < step.args.size(); ++a) {
      const StepArg &arg = step.args[a];
      if (arg.is_scalar) {
        args.emplace_back(arg.scalar);
        continue;
      }
      if (arg.buffer.offset % 16 != 0)
        throw Error(fmt::format("export: step {} passes {} at offset {}, not 16-byte aligned", i,
                                info.params[a].name, arg.buffer.offset));
      views.emplace_back(buffers.ptr(), info.params[a].dtype, info.params[a].shape, device.ordinal());
      args.emplace_back(views.back());
    }
    kernels[step.kernel]->pack(args, words[i].data());
  }
  on.intermediates = std::move(intermediates);
  on.words = std::move(words);
  on.scratch = buffers.ptr() + scratchOffset;
  on.buffers = std::move(buffers);
  on.kernels = std::move(kernels);
  on.prepared = true;
}

/// The device's state, prepared (the caller holds the state's mutex).
ExportedFunction::State::OnDevice &prepared(const ExportedFunction &e, ExportedFunction::State &s, Device &device) {
  ExportedFunction::State::OnDevice &on = s.devices[device.ordinal()];
  if (!on.prepared) {
    e.check_device(ExportTarget::of(device));
    load(s, device, on);
  }
  return on;
}

} // namespace

void ExportedFunction::prepare(Device &device) const {
  if (!state_)
    throw Error("export: prepare of an empty ExportedFunction");
  std::lock_guard lock(state_->mutex);
  prepared(*this, *state_, device);
}

void ExportedFunction::run(std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                           Stream &stream) const {
  if (!state_)
    throw Error("export: run of an empty ExportedFunction");
  State &s = *state_;
  const Plan &plan = s.plan;
  Device &device = deviceOf(inputs, outputs);
  detail::check_stream_device(stream.handle(), device.ordinal(), "export run: the tensors are");
  const detail::DeviceScope scope(device.ordinal());  // the kernels were loaded in its context
  std::lock_guard lock(s.mutex);
  std::vector<uint64_t> &bound = s.devices[device.ordinal()].bound;
  bind_views(plan, inputs, outputs, "export run", bound);  // argument errors come first
  State::OnDevice &on = prepared(*this, s, device);
  for (size_t v = 0; v < on.bound.size(); ++v)
    if (!on.bound[v])
      on.bound[v] = on.intermediates[v];
  auto address = [&](const BufferRef &r) { return (r.value < 0 ? on.scratch : on.bound[r.value]) + r.offset; };
  for (const Step &step : plan.steps) {
    if (step.kernel < 0) {
      if (step.zero_bytes)
        memset_d8(address(step.buffer), 0, step.zero_bytes, stream.handle());
      continue;
    }
    std::array<uint64_t, LoadedKernel::kMaxParams> words = on.words[&step - plan.steps.data()];
    for (size_t a = 0; a < step.args.size(); ++a) {
      if (step.args[a].is_scalar)
        continue;
      words[a] = address(step.args[a].buffer);
      if (words[a] % 16 != 0)  // the caller's tensor (intermediates and offsets are aligned)
        throw Error(fmt::format("export run: {}'s argument '{}' must be 16-byte aligned (address {:#x})",
                                plan.kernels[step.kernel].launch.kernel_name,
                                plan.kernels[step.kernel].launch.params[a].name, words[a]));
    }
    on.kernels[step.kernel]->launch_packed(words.data(), stream.handle());
  }
}

} // namespace tokamax
