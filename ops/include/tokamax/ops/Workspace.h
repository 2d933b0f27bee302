//===- Workspace.h - A caller's scratch memory for op calls -------*- C++ -*-===//
//
// Op calls take their device scratch from stream_workspace (Op.h): one buffer per
// (device, stream) that the library allocates and grows. A framework that owns the
// memory (the C ABI's callers: PyTorch's allocator, XLA's scratch) hands its own buffer
// instead: while a CallerWorkspaceScope is open on a thread, stream_workspace returns the
// caller's buffer and allocates nothing, and a call that needs more throws
// WorkspaceTooSmall naming the bytes needed and given. scratch_bytes says beforehand how
// many bytes a call will ask for.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <cstddef>
#include <cstdint>

namespace tokamax {

/// A call's scratch request is larger than the caller's workspace.
class TOKAMAX_API WorkspaceTooSmall : public Error {
public:
  WorkspaceTooSmall(size_t needed, size_t given);
  ~WorkspaceTooSmall() override;
  size_t needed() const { return needed_; }
  size_t given() const { return given_; }

private:
  size_t needed_, given_;
};

/// While alive, stream_workspace on this thread returns `data` (device memory the caller
/// owns, `bytes` long, 16-byte aligned; may be 0 when `bytes` is 0) for any request of at
/// most `bytes`, and throws WorkspaceTooSmall for a larger one. Scopes nest (the newest
/// wins); open and close one on the same thread.
class TOKAMAX_API CallerWorkspaceScope {
public:
  CallerWorkspaceScope(uint64_t data, size_t bytes);
  ~CallerWorkspaceScope();
  CallerWorkspaceScope(const CallerWorkspaceScope &) = delete;
  CallerWorkspaceScope &operator=(const CallerWorkspaceScope &) = delete;

private:
  const CallerWorkspaceScope *previous_;
  uint64_t data_;
  size_t bytes_;
  friend const CallerWorkspaceScope *current_caller_workspace();
  friend uint64_t caller_workspace(const CallerWorkspaceScope &scope, size_t bytes);
};

/// The innermost CallerWorkspaceScope of the calling thread, or null.
TOKAMAX_API const CallerWorkspaceScope *current_caller_workspace();
/// The scope's buffer for a request of `bytes`; throws WorkspaceTooSmall when it is smaller.
TOKAMAX_API uint64_t caller_workspace(const CallerWorkspaceScope &scope, size_t bytes);

/// The bytes of device scratch a run of `impl` with `config` asks for on `device` (its one
/// stream_workspace request; 0 when it asks none), planned without launching anything.
/// Throws NotSupported for an implementation that does not plan its calls (an ops
/// author's own Implementation), whose scratch cannot be known beforehand.
TOKAMAX_API size_t scratch_bytes(const Implementation &impl, const BoundArgs &args, const Config &config,
                                 Device &device);

} // namespace tokamax
