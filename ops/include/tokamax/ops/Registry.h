//===- Registry.h - Kernels known to tokamax-compile --------------*- C++ -*-===//
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <functional>
#include <string>
#include <vector>

namespace tokamax {

/// A kernel specialisation `tokamax-compile precompile` builds ahead of time.
struct TOKAMAX_API RegisteredKernel {
  std::string name;         ///< e.g. "softmax[16384x4096 bf16]"
  std::function<dsl::Kernel()> build;
  std::string only_arch;    ///< non-empty: the one architecture it compiles for (e.g. "sm_90a")
};

/// The example ops at the shapes the examples and benchmarks use.
TOKAMAX_API std::vector<RegisteredKernel> registered_kernels();

} // namespace tokamax
