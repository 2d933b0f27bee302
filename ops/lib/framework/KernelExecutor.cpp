//===- KernelExecutor.cpp - Device, host and recording executors ------------===//
#include "ops/lib/framework/KernelExecutor.h"

#include "ops/lib/framework/ExecutorCapture.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

#include <tokamax/ops/Op.h>

#include <algorithm>
#include <cstring>

namespace tokamax::ops_detail {

uint64_t KernelExecutor::scratch(size_t bytes) {
  if (scratch_requested_)
    throw Error("internal error: an op call requested scratch memory twice; its workspaces must be carved out of "
                "one request (on the device both requests would start at the same address)");
  scratch_requested_ = true;
  return allocate_scratch(bytes);
}

namespace {

class DeviceKernelExecutor : public KernelExecutor {
public:
  DeviceKernelExecutor(Stream &stream, int device) : stream_(stream), device_(Device::get(device)) {}

  uint64_t allocate_scratch(size_t bytes) override { return stream_workspace(device_, stream_, bytes); }

  void launch(const KernelKey &key, const Build &build, const std::vector<Arg> &args) override {
    const LoadedKernel &kernel = kernelFor(key, device_, build);
    std::vector<KernelArg> launchArgs;
    launchArgs.reserve(args.size());
    for (const Arg &a : args) {
      if (a.is_scalar)
        launchArgs.emplace_back(a.scalar);
      else
        launchArgs.emplace_back(a.view);
    }
    kernel.launch(launchArgs, stream_.handle());
  }

  void zero(const TensorView &t) override {
    if (t.nbytes())
      memset_d8(t.data(), 0, t.nbytes(), stream_.handle());
  }
  void copy(const TensorView &dst, const TensorView &src) override {
    if (src.nbytes())
      copy_device_to_device(dst.data(), src.data(), src.nbytes(), stream_.handle());
  }
  int device() const override { return device_.ordinal(); }
  int sm_count() const override { return device_.sm_count(); }

private:
  Stream &stream_;
  Device &device_;
};

class HostKernelExecutor : public KernelExecutor {
public:
  uint64_t allocate_scratch(size_t bytes) override {
    // Filled with NaNs (all-ones bytes: -1 as integers), not zeros: on the device the
    // stream's workspace holds whatever the previous call left, so a kernel that reads
    // scratch it never wrote must fail here too.
    const size_t words = (bytes + 7) / 8 + 2;
    buffers_.emplace_back(std::make_unique_for_overwrite<double[]>(words));
    std::memset(buffers_.back().get(), 0xFF, words * sizeof(double));
    return reinterpret_cast<uint64_t>(buffers_.back().get());
  }

  void launch(const KernelKey &, const Build &build, const std::vector<Arg> &args) override {
    std::vector<HostArg> hostArgs;
    hostArgs.reserve(args.size());
    for (const Arg &a : args) {
      if (a.is_scalar)
        hostArgs.push_back(HostArg::value(a.scalar));
      else
        hostArgs.push_back(HostArg::tensor(reinterpret_cast<void *>(a.view.data()), a.view.nbytes(), a.view.shape()));
    }
    tokamax::interpret(build(), hostArgs);
  }

  void zero(const TensorView &t) override {
    if (t.nbytes())
      std::memset(reinterpret_cast<void *>(t.data()), 0, t.nbytes());
  }
  void copy(const TensorView &dst, const TensorView &src) override {
    if (src.nbytes())
      std::memmove(reinterpret_cast<void *>(dst.data()), reinterpret_cast<const void *>(src.data()), src.nbytes());
  }
  int device() const override { return 0; }
  int sm_count() const override { return kInterpreterPrograms; }

private:
  std::vector<std::unique_ptr<double[]>> buffers_;
};

/// Forwards to an ExecutorCapture's sink (which outlives the call).
class ForwardingKernelExecutor : public KernelExecutor {
public:
  explicit ForwardingKernelExecutor(KernelExecutor &sink) : sink_(sink) {}
  uint64_t allocate_scratch(size_t bytes) override { return sink_.allocate_scratch(bytes); }
  void launch(const KernelKey &key, const Build &build, const std::vector<Arg> &args) override {
    sink_.launch(key, build, args);
  }
  void zero(const TensorView &t) override { sink_.zero(t); }
  void copy(const TensorView &dst, const TensorView &src) override { sink_.copy(dst, src); }
  int device() const override { return sink_.device(); }
  int sm_count() const override { return sink_.sm_count(); }

private:
  KernelExecutor &sink_;
};

thread_local KernelExecutor *captureSink = nullptr;

/// Hands each distinct kernel launched to a callback; runs nothing.
class PlanningKernelExecutor : public KernelExecutor {
public:
  explicit PlanningKernelExecutor(PlannedLaunch planned) : planned_(std::move(planned)) {}
  uint64_t allocate_scratch(size_t) override { return 256; }
  /// Each kernel once (the cross-entropy's VJP launches the same kernels for every chunk of V).
  void launch(const KernelKey &key, const Build &build, const std::vector<Arg> &) override {
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) {
      keys_.push_back(key);
      planned_(key, build);
    }
  }
  void zero(const TensorView &) override {}
  void copy(const TensorView &, const TensorView &) override {}
  int device() const override { return 0; }
  int sm_count() const override { return Arch::parse("sm_90a").sm_count(); }

private:
  PlannedLaunch planned_;
  std::vector<KernelKey> keys_;
};

} // namespace

std::unique_ptr<KernelExecutor> device_kernel_executor(Stream &stream, int device) {
  return std::make_unique<DeviceKernelExecutor>(stream, device);
}
std::unique_ptr<KernelExecutor> host_kernel_executor() {
  if (captureSink)
    return std::make_unique<ForwardingKernelExecutor>(*captureSink);
  return std::make_unique<HostKernelExecutor>();
}

ExecutorCapture::ExecutorCapture(KernelExecutor &sink) : previous_(captureSink) { captureSink = &sink; }
ExecutorCapture::~ExecutorCapture() { captureSink = previous_; }
std::unique_ptr<KernelExecutor> planning_kernel_executor(PlannedLaunch planned) {
  return std::make_unique<PlanningKernelExecutor>(std::move(planned));
}
std::unique_ptr<KernelExecutor> recording_kernel_executor(std::vector<dsl::Kernel> &kernels) {
  return planning_kernel_executor([&kernels](const KernelKey &, const KernelExecutor::Build &build) {
    kernels.push_back(build());
  });
}

} // namespace tokamax::ops_detail
