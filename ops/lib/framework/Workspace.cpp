//===- Workspace.cpp - Caller-owned scratch, scratch sizes ------------------===//
#include <tokamax/ops/Workspace.h>

#include "ops/lib/framework/LaunchPlan.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/runtime/Device.h>

#include <fmt/format.h>

namespace tokamax {

WorkspaceTooSmall::WorkspaceTooSmall(size_t needed, size_t given)
    : Error(fmt::format("workspace too small: the call needs {} bytes of scratch, the caller's workspace holds {}",
                        needed, given)),
      needed_(needed), given_(given) {}
WorkspaceTooSmall::~WorkspaceTooSmall() = default;

namespace {
thread_local const CallerWorkspaceScope *currentScope = nullptr;
} // namespace

CallerWorkspaceScope::CallerWorkspaceScope(uint64_t data, size_t bytes)
    : previous_(currentScope), data_(data), bytes_(bytes) {
  if (data % 16 != 0)
    throw Error(fmt::format("workspace: the caller's workspace at {:#x} is not 16-byte aligned", data));
  if (bytes != 0 && data == 0)
    throw Error(fmt::format("workspace: a null workspace of {} bytes", bytes));
  currentScope = this;
}
CallerWorkspaceScope::~CallerWorkspaceScope() { currentScope = previous_; }

const CallerWorkspaceScope *current_caller_workspace() { return currentScope; }

uint64_t caller_workspace(const CallerWorkspaceScope &scope, size_t bytes) {
  if (bytes > scope.bytes_)
    throw WorkspaceTooSmall(bytes, scope.bytes_);
  return scope.data_;
}

namespace {

/// Runs nothing; keeps the size of the call's one scratch request.
class ScratchMeasure : public ops_detail::KernelExecutor {
public:
  explicit ScratchMeasure(Device &device) : device_(device) {}
  uint64_t allocate_scratch(size_t bytes) override {
    bytes_ = bytes;
    return ops_detail::kStandInScratch;
  }
  void launch(const KernelKey &, const Build &, const std::vector<Arg> &) override {}
  void zero(const TensorView &) override {}
  void copy(const TensorView &, const TensorView &) override {}
  int device() const override { return device_.ordinal(); }
  // Persistent grids size their scratch by the device's SMs: plan as the device would run.
  int sm_count() const override { return device_.sm_count(); }
  size_t bytes() const { return bytes_; }

private:
  Device &device_;
  size_t bytes_ = 0;
};

} // namespace

size_t scratch_bytes(const Implementation &impl, const BoundArgs &args, const Config &config, Device &device) {
  const auto *planned = dynamic_cast<const ops_detail::PlannedImplementation *>(&impl);
  if (!planned)
    throw NotSupported(fmt::format("{} {}: the implementation does not plan its calls, so its scratch is not known "
                                   "before it runs",
                                   args.op, impl.name()));
  ScratchMeasure measure(device);
  // Nothing is read or launched: views without data stand in for the tensors, as for kernels().
  std::vector<TensorView> in(planned->num_inputs()), out(args.args.size() - planned->num_inputs());
  planned->execute(args, config, in, out, measure);
  return measure.bytes();
}

} // namespace tokamax
