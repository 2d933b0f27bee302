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

namespace tokamax::ops_detail {
class CallKey;
}

namespace tokamax::attention_detail {

inline std::string shape_text(const std::vector<int64_t> &s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
inline bool is_float(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }
/// lse's dtype and the statistics': f64 for f64 inputs, else f32.
inline DType compute_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

/// Throws unless `a` is exactly `dtype` `shape`, naming the argument.
inline void check_exact(const char *op, const char *name, const ArgSpec &a, const std::vector<int64_t> &shape,
                        DType dtype) {
  if (a.shape != shape || a.dtype != dtype)
    throw Error(fmt::format("{}: {} must be {} {}, got {} {}", op, name, dtype_name(dtype), shape_text(shape),
                            dtype_name(a.dtype), shape_text(a.shape)));
}

/// What q, k and v of a dense call agree on (checked by attention_geometry).
struct AttentionGeometry {
  std::vector<int64_t> batch;
  int64_t B = 1, T = 0, S = 0, N = 0, K = 0, H = 0, Hv = 0;
  DType dtype = DType::BF16;
  bool headsMajor = false;  ///< BNTH: heads before seq

  /// [batch..., tail...].
  std::vector<int64_t> withBatch(std::initializer_list<int64_t> tail) const {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), tail);
    return s;
  }
  /// [batch..., seq, heads, dim] in the call's layout.
  std::vector<int64_t> shape(int64_t seq, int64_t heads, int64_t dim) const {
    return headsMajor ? withBatch({heads, seq, dim}) : withBatch({seq, heads, dim});
  }
};
/// q, k and v of a dense call ([B..., seq, heads, dim], or heads before seq where
/// `bnth`): ranks, batch dims, seq / heads / head dims, GQA; one dtype, bf16, f16, f32
/// or f64 (`fp8`: f8e4m3 or f8e5m2). Throws Error naming the argument.
AttentionGeometry attention_geometry(const char *op, const ArgSpec &q, const ArgSpec &k, const ArgSpec &v, bool bnth,
                                     bool fp8 = false);
/// q_seq_lengths / kv_seq_lengths (`name`): int32, one per batch row.
void check_seq_lengths(const char *op, const char *name, const std::optional<ArgSpec> &a, const AttentionGeometry &g);

/// The attributes both kinds of call share (scale, masks, soft cap, the VJP's order); `H`
/// the head dim (the default scale's).
std::map<std::string, std::string> attention_attributes(const char *op, int64_t H, const AttentionOptions &o);
/// Adds every option of an eager call to its call-cache key (its tensors are in it
/// already).
void add_options(ops_detail::CallKey &key, const AttentionOptions &o);
/// The options a bound call (dense or packed) records, its max lengths included.
AttentionOptions attention_options_of(const BoundArgs &args);

} // namespace tokamax::attention_detail
