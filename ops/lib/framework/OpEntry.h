//===- OpEntry.h - What every op's entry points share -------------*- C++ -*-===//
//
// The checks of an op's bound arguments (their shape, their canonical form), and the call of an op on a
// stream's GPU or, for the `_host` entry points, on the CPU interpreter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <vector>

#include <optional>
#include <span>
#include <string>

namespace tokamax::ops_detail {

/// Throws unless `bound` is a call of `op` with one tensor slot per name in `arg_names`
/// and no attribute outside `attributes`: the checks of an op's validate() that come
/// before binding its arguments again.
inline void require_call_of(const std::string &op, const BoundArgs &bound, const std::vector<std::string> &arg_names,
                            std::initializer_list<std::string_view> attributes) {
  if (bound.op != op)
    throw Error(fmt::format("{}: the arguments are bound for op \"{}\"", op, bound.op));
  if (bound.args.size() != arg_names.size())
    throw Error(fmt::format("{}: expected {} arguments ({}), got {}", op, arg_names.size(), fmt::join(arg_names, ", "),
                            bound.args.size()));
  for (const auto &[key, value] : bound.attributes)
    if (std::find(attributes.begin(), attributes.end(), key) == attributes.end())
      throw Error(fmt::format("{}: unknown attribute \"{}\"", op, key));
}

/// The tensor in slot `i` of a call require_call_of passed, which the op requires.
inline const ArgSpec &required_arg(const std::string &op, const BoundArgs &bound,
                                   const std::vector<std::string> &arg_names, size_t i) {
  if (!bound.args[i])
    throw Error(fmt::format("{}: {} is required", op, arg_names[i]));
  return *bound.args[i];
}

/// The tensor in slot `i`, where there is one (an optional tensor of the op).
inline std::optional<ArgSpec> optional_arg(const BoundArgs &bound, size_t i) {
  return i < bound.args.size() ? bound.args[i] : std::nullopt;
}

/// require_call_of for an op whose every tensor is required.
inline void require_call_shape(const std::string &op, const BoundArgs &bound, const std::vector<std::string> &arg_names,
                               std::initializer_list<std::string_view> attributes) {
  require_call_of(op, bound, arg_names, attributes);
  for (size_t i = 0; i < bound.args.size(); ++i)
    required_arg(op, bound, arg_names, i);
}

/// Throws unless `bound` is what binding its own arguments again gives (`again`).
inline void require_canonical(const std::string &op, const BoundArgs &bound, const BoundArgs &again) {
  if (again != bound)
    throw Error(fmt::format("{}: the bound arguments are not in canonical form (expected {})", op, again.to_json()));
}

/// `op` on `stream`'s device, or on the CPU interpreter when `stream` is null, with the
/// implementation and config of `options`.
template <class Options>
void run_or_interpret(const Op &op, const BoundArgs &bound, std::span<const TensorView> in,
                      std::span<const TensorView> out, Stream *stream, const Options &options) {
  if (stream)
    op.run(bound, in, out, *stream, options.implementation, options.config);
  else
    op.interpret(bound, in, out, options.implementation, options.config);
}

} // namespace tokamax::ops_detail
