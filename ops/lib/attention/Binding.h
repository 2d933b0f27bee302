//===- Binding.h - What the dense and packed attention ops' binding share -*- C++ -*-===//
//
// Internal to the attention ops (Op.cpp, Varlen.cpp) and to tracing (FunctionAttention.cpp):
// the checks and attributes both kinds of call bind with, and the options a bound call
// records.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tokamax::attention_detail {

inline std::string shape_text(const std::vector<int64_t> &s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
inline bool is_float(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }
/// lse's dtype and the statistics': f64 for f64 inputs, else f32.
inline DType compute_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }
inline std::optional<ArgSpec> spec_of(const TensorView *t) {
  return t ? std::optional<ArgSpec>(ArgSpec::of(*t)) : std::nullopt;
}

/// Throws unless `a` is exactly `dtype` `shape`, naming the argument.
inline void check_exact(const char *op, const char *name, const ArgSpec &a, const std::vector<int64_t> &shape,
                        DType dtype) {
  if (a.shape != shape || a.dtype != dtype)
    throw Error(fmt::format("{}: {} must be {} {}, got {} {}", op, name, dtype_name(dtype), shape_text(shape),
                            dtype_name(a.dtype), shape_text(a.shape)));
}

/// The attributes both kinds of call share (scale, masks, soft cap, the VJP's order); `H`
/// the head dim (the default scale's).
std::map<std::string, std::string> attention_attributes(const char *op, int64_t H, const AttentionOptions &o);
/// The options a bound call (dense or packed) records, its max lengths included.
AttentionOptions attention_options_of(const BoundArgs &args);

} // namespace tokamax::attention_detail
