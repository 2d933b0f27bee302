//===- KernelExecutor.h - Where an op call's kernels go -----------*- C++ -*-===//
//
// An op plans a call as a list of kernel launches, each named by a specialisation key
// and a builder of its DSL kernel, plus zero fills and copies. The same plan runs on the
// device (JIT + launch on a stream), on the CPU interpreter (host views), or is recorded
// (the kernels a config needs, for precompilation and PTX checks; a launch plan that
// eager calls and Functions replay: LaunchPlan.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <functional>
#include <memory>
#include <vector>

namespace tokamax {
class Stream;
}

namespace tokamax::ops_detail {

/// The op name with the fields of a spec and config.
inline KernelKey specializationKey(const char *op, std::initializer_list<int64_t> fields) {
  return KernelKey(op, fields);
}

/// The loaded kernel for `key` (one hash lookup once compiled).
template <class Build>
const LoadedKernel &kernelFor(const KernelKey &key, Device &device, Build &&build) {
  if (const LoadedKernel *k = Jit::instance().find(key, device))
    return *k;
  return Jit::instance().get_ir(key, device, [&] { return build().ir(); });
}

class KernelExecutor {
public:
  /// A tensor (view in the kernel's declared shape) or a scalar parameter.
  struct Arg {
    TensorView view;
    double scalar = 0;
    bool is_scalar = false;
    Arg(TensorView v) : view(std::move(v)) {}
    static Arg value(double v) {
      Arg a{TensorView()};
      a.scalar = v;
      a.is_scalar = true;
      return a;
    }
  };
  using Build = std::function<dsl::Kernel()>;

  virtual ~KernelExecutor() = default;
  /// The call's one scratch buffer (16-byte aligned, contents undefined): carve every
  /// workspace of a call out of this single request (Workspace below). On the device each
  /// request of a stream starts at the stream's one workspace, so two requests of one
  /// call would overlap: a second request throws Error.
  uint64_t scratch(size_t bytes);
  /// What scratch() returns, unchecked: for executors that forward another's requests.
  virtual uint64_t allocate_scratch(size_t bytes) = 0;
  virtual void launch(const KernelKey &key, const Build &build, const std::vector<Arg> &args) = 0;
  /// Fills the bytes of `t` with zeros.
  virtual void zero(const TensorView &t) = 0;
  /// Copies src's bytes to the start of dst (which holds at least as many).
  virtual void copy(const TensorView &dst, const TensorView &src) = 0;
  /// The device tensors live on (views of scratch take it); 0 on the host.
  virtual int device() const = 0;
  /// Programs of a persistent grid that fills the device: its SM count (132 when only
  /// listing kernels, as on an H100 / H200; kInterpreterPrograms on the interpreter).
  virtual int sm_count() const = 0;

private:
  bool scratch_requested_ = false;
};

/// Carves 256-byte aligned pieces out of a call's one scratch request: add() every
/// piece, allocate() once, then at(offset) gives each piece's address.
class Workspace {
public:
  /// The offset of a new piece of `bytes` bytes.
  size_t add(double bytes) {
    size_t at = total_;
    total_ += (static_cast<size_t>(bytes) + 255) / 256 * 256;
    return at;
  }
  void allocate(KernelExecutor &ex) { base_ = total_ ? ex.scratch(total_) : 0; }
  uint64_t at(size_t offset) const { return base_ + offset; }

private:
  size_t total_ = 0;
  uint64_t base_ = 0;
};

/// Programs a persistent grid gets on the interpreter: few, but more than one, so the
/// kernel's loop over tiles still runs.
inline constexpr int kInterpreterPrograms = 3;

std::unique_ptr<KernelExecutor> device_kernel_executor(Stream &stream, int device);
std::unique_ptr<KernelExecutor> host_kernel_executor();
/// Hands each distinct kernel launched (its key and builder, unbuilt) to `planned`
/// instead of running it; scratch, fills and copies are ignored.
using PlannedLaunch = std::function<void(const KernelKey &, const KernelExecutor::Build &)>;
std::unique_ptr<KernelExecutor> planning_kernel_executor(PlannedLaunch planned);
/// Builds each launched kernel into `kernels` instead of running it.
std::unique_ptr<KernelExecutor> recording_kernel_executor(std::vector<dsl::Kernel> &kernels);

} // namespace tokamax::ops_detail
