//===- LoadedKernel.h - A compiled kernel loaded on one device -----*- C++ -*-===//
//
// A cubin's module and function with its launch metadata: launch() checks each argument
// against the kernel's parameters, packs them with no allocation and launches. The JIT
// (<tokamax/jit/Jit.h>) and exports (<tokamax/export/ExportedFunction.h>) both
// launch through it; it needs only the driver.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Driver.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/LaunchInfo.h>
#include <tokamax/runtime/Module.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

namespace tokamax {

/// One launch argument: a tensor or a scalar, in the kernel's parameter order.
struct TOKAMAX_API KernelArg {
  const TensorView *tensor = nullptr;
  double scalar = 0;

  KernelArg(const TensorView &t) : tensor(&t) {}
  KernelArg(double v) : scalar(v) {}
  KernelArg(int v) : scalar(v) {}
  KernelArg(int64_t v) : scalar(static_cast<double>(v)) {}
};

/// A compiled kernel loaded on one device.
class TOKAMAX_API LoadedKernel {
public:
  /// Raises the function's dynamic shared memory limit when the kernel needs more than
  /// 48 KiB. `digest` names the kernel's code (a cache entry's digest, a cubin's SHA-256).
  LoadedKernel(Module module, LaunchInfo info, std::string digest);
  ~LoadedKernel();

  const LaunchInfo &info() const { return info_; }
  const std::string &digest() const { return digest_; }

  static constexpr size_t kMaxParams = 32;

  /// Checks the arguments against the kernel's parameters (count, dtype, shape,
  /// 16-byte alignment) and launches. No allocation. TMA tensor maps are encoded once
  /// per tensor address and reused while the address recurs.
  void launch(std::span<const KernelArg> args, CUstream stream) const;
  void launch(std::initializer_list<KernelArg> args, CUstream stream) const {
    launch(std::span<const KernelArg>(args.begin(), args.size()), stream);
  }
  /// launch() in two halves, for callers that replay a checked launch with other tensors:
  /// pack() checks the arguments as launch() does and writes one 8-byte word per
  /// parameter (a tensor's address; a scalar in its parameter's dtype) to `words`
  /// (kMaxParams of them); launch_packed() launches such words unchecked, so a tensor
  /// word may only be replaced by the 16-byte aligned address of a tensor of the shape
  /// and dtype that pack() checked.
  void pack(std::span<const KernelArg> args, uint64_t *words) const;
  void launch_packed(const uint64_t *words, CUstream stream) const;

private:
  Module module_;
  KernelFunction function_;
  LaunchInfo info_;
  std::string digest_;
  struct TensorMapCache;
  std::unique_ptr<TensorMapCache> maps_;  // set when the kernel reads through tensor maps
};

} // namespace tokamax
