//===- Views.h - Checking an op call's tensors against its binding -*- C++ -*-===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax::ops_detail {

/// An optional argument's spec / view: absent (nullopt, an empty view) for a null pointer.
inline std::optional<ArgSpec> spec_of(const TensorView *t) {
  return t ? std::optional<ArgSpec>(ArgSpec::of(*t)) : std::nullopt;
}
inline TensorView view_of(const TensorView *t) { return t ? *t : TensorView(); }

/// The views of a call (inputs then outputs, in `names` order) must match the bound
/// specs, since a generic Op::run / Op::interpret caller may pass anything: absent where
/// bound absent, the bound dtype and shape, contiguous, with data (no null pointer for a
/// non-empty tensor), and on the device tensors on one device (`host`: host views).
/// Throws Error naming the argument; nothing is launched before it returns.
void check_views(const BoundArgs &args, const std::vector<std::string> &names, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, bool host);

/// The Error of a call whose tensors are on two devices: `name` on `device`, where the
/// first tensor with data, `first`, is on `firstDevice`.
[[noreturn]] void throw_mixed_devices(std::string_view op, std::string_view name, int device, std::string_view first,
                                      int firstDevice);

/// A spec built by hand (ArgSpec is a plain struct) may hold what no tensor can: a
/// negative dim, or more than 2^63 elements. Throws Error naming `op` and `name`.
void check_spec(const char *op, const char *name, const ArgSpec &spec);
inline void check_spec(const char *op, const char *name, const std::optional<ArgSpec> &spec) {
  if (spec)
    check_spec(op, name, *spec);
}

/// Validates that x and out (named `x_name`, `out_name` in errors) agree, are contiguous, have data
/// and sit on one device; returns the element count.
int64_t checkSameTensors(const char *op, const TensorView &x, const TensorView &out, const char *x_name = "x",
                         const char *out_name = "out");

} // namespace tokamax::ops_detail
