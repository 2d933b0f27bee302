//===- Interpreter.h - Run tile kernels on the CPU ----------------*- C++ -*-===//
//
// Runs a kernel's tile IR on host arrays, one program instance at a time, in grid order.
// It is the ops author's debugger and lets tests check numerics without a GPU.
// Out-of-bounds accesses that the GPU would not mask throw tokamax::Error.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <cstddef>
#include <span>
#include <string>

namespace tokamax {

/// One kernel argument on the host, in the order the kernel declared its parameters.
struct TOKAMAX_API HostArg {
  void *data = nullptr;  ///< tensors: row-major elements of the parameter's dtype
  size_t bytes = 0;
  double scalar = 0;  ///< scalars: the value (converted to the parameter's dtype)
  /// tensors, when known: the caller's shape, which must be the parameter's (as a device
  /// launch checks); empty: only the byte count is checked.
  std::span<const int64_t> shape;

  static HostArg tensor(void *data, size_t bytes, std::span<const int64_t> shape = {}) {
    return {data, bytes, 0, shape};
  }
  static HostArg value(double v) { return {nullptr, 0, v, {}}; }
};

/// Runs every program instance of the grid of the kernel in `ir` (tile IR text) on the
/// host. interpret() of a dsl::Kernel: <tokamax/jit/DslKernel.h>.
TOKAMAX_API void interpret_ir(const std::string &ir, std::span<HostArg> args);

/// True when TOKAMAX_INTERPRET=1 asks launches to run on the interpreter.
TOKAMAX_API bool interpreter_requested();

} // namespace tokamax
