//===- ExecutorCapture.h - Redirecting an op call's kernels -------*- C++ -*-===//
//
// While an ExecutorCapture is open on a thread, host_kernel_executor() hands that
// thread's op calls to the capture's executor instead of the interpreter: the way
// export_function records every launch, scratch request and zero fill of a call
// (Implementation::interpret with symbolic addresses) without running anything.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

namespace tokamax::ops_detail {

class ExecutorCapture {
public:
  /// `sink` receives the thread's host executions until the capture closes.
  explicit ExecutorCapture(KernelExecutor &sink);
  ~ExecutorCapture();
  ExecutorCapture(const ExecutorCapture &) = delete;
  ExecutorCapture &operator=(const ExecutorCapture &) = delete;

private:
  KernelExecutor *previous_;
};

} // namespace tokamax::ops_detail
