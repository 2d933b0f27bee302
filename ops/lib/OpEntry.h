//===- OpEntry.h - What every op's entry points share -------------*- C++ -*-===//
//
// The canonical-form check of an op's bound arguments, and the call of an op on a
// stream's GPU or, for the `_host` entry points, on the CPU interpreter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <span>
#include <string>

namespace tokamax::ops_detail {

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
