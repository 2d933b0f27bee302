//===- CApi.h - What the C ABI's sources share --------------------*- C++ -*-===//
//
// The C entry points (tokamax/c/tokamax.h) are thin: each runs its body through
// guard(), which turns every exception into a tkx_status and the calling thread's
// message. A tkx_call is an op bound once (BoundArgs, outputs inferred by the op's
// binder in Binders.cpp) plus the implementation and config its options named.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/c/tokamax.h>
#include <tokamax/ops/Op.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct tkx_call {
  const tokamax::Op *op = nullptr;
  tokamax::BoundArgs args;  ///< inputs then outputs, in the op's arg_names() order
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;
  std::string json;  ///< args.to_json(), handed out by tkx_call_json
  /// The same for every call bound alike (interned from `json`): with the tensors it keys
  /// the eager call cache, so a device run resolves once and then replays its plan.
  uint64_t identity = 0;
};

namespace tokamax::capi {

/// The status of the exception being handled, with the thread's message set to
/// "<function>: <what()>". Call only inside a catch block.
tkx_status status_of_current_exception(const char *function) noexcept;
/// Sets the thread's message (a successful call leaves the last failure's in place, as
/// errno does).
void set_last_error(std::string message) noexcept;

/// Runs `body` (returning void), mapping whatever it throws; TKX_OK when it returns.
template <class Body>
tkx_status guard(const char *function, Body &&body) noexcept {
  try {
    body();
    return TKX_OK;
  } catch (...) {
    return status_of_current_exception(function);
  }
}

/// Throws Error naming `what` unless `p` is non-null.
void require_pointer(const void *p, std::string_view what);

/// The spec a C tensor describes, checked (struct_size, dtype, rank, shape, strides:
/// contiguous only); `what` names it in errors ("input 0 (x)").
ArgSpec spec_of(const tkx_tensor &t, std::string_view what);
/// The view of a C tensor for a run (spec_of's checks plus the device and data).
TensorView view_of(const tkx_tensor &t, std::string_view what);

/// Binds `op` to its inputs' specs (std::nullopt: absent) and options (a JSON object's
/// text, or null), filling call.args (outputs inferred), call.implementation and
/// call.config. Throws Error naming the bad input or option; NotSupported for an op
/// that has no binder.
void bind_call(tkx_call &call, std::span<const std::optional<ArgSpec>> inputs, const char *options_json);
/// Whether the C ABI can bind `op` (the ops tkx_op_names lists).
bool has_binder(const std::string &op);

} // namespace tokamax::capi
