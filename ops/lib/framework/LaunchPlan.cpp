//===- LaunchPlan.cpp - Recording and replaying an op call's launches -------===//
#include "ops/lib/framework/LaunchPlan.h"

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tokamax::ops_detail {

namespace {

constexpr int kStandInShift = 40;
constexpr uint64_t kOffsetMask = kStandInMaxBytes;
static_assert(kOffsetMask == (uint64_t(1) << kStandInShift) - 1);

/// Records the launches the implementation plans into `plan`, against stand-in
/// addresses; kernels are loaded on `device` as they are named.
class PlanRecorder : public KernelExecutor {
public:
  PlanRecorder(LaunchPlan &plan, std::span<const uint64_t> sizes, Device &device, std::string what)
      : plan_(plan), sizes_(sizes), device_(device), what_(std::move(what)) {}

  uint64_t allocate_scratch(size_t bytes) override {
    plan_.scratch_bytes = std::max<uint64_t>(plan_.scratch_bytes, bytes);
    return kStandInScratch;
  }

  void launch(const KernelKey &key, const Build &build, const std::vector<Arg> &args) override {
    PlanStep step;
    step.kernel = &kernelFor(key, device_, build);
    std::vector<KernelArg> kernelArgs;
    for (const Arg &a : args)
      kernelArgs.push_back(a.is_scalar ? KernelArg(a.scalar) : KernelArg(a.view));
    step.words.resize(LoadedKernel::kMaxParams);
    step.kernel->pack(kernelArgs, step.words.data());  // the checks a launch makes
    step.words.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      if (!args[i].is_scalar) {
        step.tensors.emplace_back(uint32_t(i), resolve(args[i].view.data(), args[i].view.nbytes()));
        step.words[i] = 0;
      }
    plan_.steps.push_back(std::move(step));
  }

  void zero(const TensorView &t) override {
    if (!t.nbytes())
      return;
    PlanStep step;
    step.kind = PlanStep::Kind::Zero;
    step.dst = resolve(t.data(), t.nbytes());
    step.bytes = t.nbytes();
    plan_.steps.push_back(std::move(step));
  }

  void copy(const TensorView &dst, const TensorView &src) override {
    if (!src.nbytes())
      return;
    PlanStep step;
    step.kind = PlanStep::Kind::Copy;
    step.dst = resolve(dst.data(), src.nbytes());
    step.src = resolve(src.data(), src.nbytes());
    step.bytes = src.nbytes();
    plan_.steps.push_back(std::move(step));
  }

  int device() const override { return device_.ordinal(); }
  int sm_count() const override { return device_.sm_count(); }

private:
  BufferRef resolve(uint64_t address, uint64_t bytes) const {
    return resolve_stand_in(address, bytes, sizes_, plan_.scratch_bytes, what_);
  }

  LaunchPlan &plan_;
  std::span<const uint64_t> sizes_;
  Device &device_;
  std::string what_;
};

} // namespace

uint64_t stand_in_address(size_t argument) { return (uint64_t(argument) + 1) << kStandInShift; }

BufferRef resolve_stand_in(uint64_t address, uint64_t bytes, std::span<const uint64_t> sizes, uint64_t scratchBytes,
                           std::string_view what) {
  BufferRef r;
  uint64_t size = scratchBytes;
  if (address >= kStandInScratch) {
    r.buffer = uint32_t(sizes.size());
    r.offset = address - kStandInScratch;
  } else {
    const uint64_t index = (address >> kStandInShift) - 1;
    if (address >> kStandInShift == 0 || index >= sizes.size())
      throw Error(fmt::format("{} passed a kernel an address that is none of its tensors", what));
    r.buffer = uint32_t(index);
    r.offset = address & kOffsetMask;
    size = sizes[index];
  }
  if (r.offset > size || bytes > size - r.offset)
    throw Error(fmt::format("{} passed a kernel {} bytes at offset {} of a {}-byte buffer", what, bytes, r.offset,
                            size));
  return r;
}

LaunchPlan record_call_plan(const PlannedImplementation &impl, const BoundArgs &args, const Config &config,
                            Device &device) {
  const size_t n = args.args.size(), numInputs = std::min(impl.num_inputs(), n);
  std::vector<uint64_t> sizes(n, 0);
  std::vector<TensorView> in(numInputs), out(n - numInputs);
  for (size_t i = 0; i < n; ++i) {
    if (!args.args[i])
      continue;
    const ArgSpec &spec = *args.args[i];
    sizes[i] = uint64_t(spec.numel()) * dtype_size(spec.dtype);
    if (sizes[i] > kOffsetMask)
      throw Error(fmt::format("{}: argument {} of {} bytes is over the 2^40 bytes a plan can address", args.op,
                              impl.arg_names()[i], sizes[i]));
    TensorView view(stand_in_address(i), spec.dtype, spec.shape, device.ordinal());
    (i < numInputs ? in[i] : out[i - numInputs]) = view;
  }
  LaunchPlan plan;
  PlanRecorder recorder(plan, sizes, device, fmt::format("{} ({})", args.op, impl.name()));
  impl.execute(args, config, in, out, recorder);
  plan.buffers = uint32_t(n + 1);
  plan.scratch = uint32_t(n);
  return plan;
}

void LaunchPlan::mark_kernel_buffers(std::vector<bool> &marks) const {
  for (const PlanStep &s : steps)
    for (const auto &[param, ref] : s.tensors)
      marks[ref.buffer] = true;
}

void LaunchPlan::replay(std::span<const uint64_t> bases, CUstream stream) const {
  alignas(8) uint64_t words[LoadedKernel::kMaxParams];
  for (const PlanStep &s : steps) {
    switch (s.kind) {
    case PlanStep::Kind::Launch:
      std::memcpy(words, s.words.data(), s.words.size() * sizeof(uint64_t));
      for (const auto &[param, ref] : s.tensors)
        words[param] = bases[ref.buffer] + ref.offset;
      s.kernel->launch_packed(words, stream);
      break;
    case PlanStep::Kind::Zero:
      memset_d8(bases[s.dst.buffer] + s.dst.offset, 0, s.bytes, stream);
      break;
    case PlanStep::Kind::Copy:
      copy_device_to_device(bases[s.dst.buffer] + s.dst.offset, bases[s.src.buffer] + s.src.offset, s.bytes, stream);
      break;
    }
  }
}

void LaunchPlan::remap(std::span<const uint32_t> map, uint32_t count) {
  for (PlanStep &s : steps) {
    for (auto &[param, ref] : s.tensors)
      ref.buffer = map[ref.buffer];
    s.dst.buffer = map[s.dst.buffer];
    s.src.buffer = map[s.src.buffer];
  }
  scratch = map[scratch];
  buffers = count;
}

} // namespace tokamax::ops_detail
