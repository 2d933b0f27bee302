//===- Common.h - softmax_cross_entropy: the Problem and its implementations -*- C++ -*-===//
//
// Internal to ops/lib/softmax_cross_entropy. Op.cpp reads a bound call of either op into
// a Problem and registers the implementations declared here; each implementation's
// functions and kernels live in its own file (Tile.cpp, Reference.cpp). A config struct
// sits beside its implementation's declaration, since the registration in Op.cpp reads
// and writes its keys (TypedConfig.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/TypedConfig.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax::softmax_cross_entropy_detail {

using ops_detail::ConfigKey;
using ops_detail::ImplKind;
using ops_detail::KernelExecutor;

/// A bound call of either op, as the implementations see it.
struct Problem {
  bool vjp = false;            ///< softmax_cross_entropy_vjp
  int64_t B = 0, V = 0;        ///< logits [B, V]
  DType dtype = DType::BF16;   ///< logits' and dlogits'
  DType compute = DType::F32;  ///< loss, lse, dloss and the math: f32, f64 for f64 logits
};

/// Reads a validated BoundArgs of either op.
Problem problem_of(const BoundArgs &args);

/// The kernels' label rule: whether `label` (i32, any shape) is outside [0, V).
inline dsl::Value label_out_of_range(const Problem &p, const dsl::Value &label) {
  return (label < dsl::Value(0)) | (label >= dsl::Value(p.V));
}

//===----------------------------------------------------------------------===//
// tile (Tile.cpp)
//===----------------------------------------------------------------------===//

struct TileConfig {
  int64_t block_rows = 1;  ///< rows per program
  int64_t block_v = 1024;  ///< columns per step over V (forward), per program (VJP)
  int64_t num_warps = 4;
  static constexpr auto keys = std::tuple{ConfigKey{"block_rows", &TileConfig::block_rows},
                                          ConfigKey{"block_v", &TileConfig::block_v},
                                          ConfigKey{"num_warps", &TileConfig::num_warps}};
  bool operator==(const TileConfig &) const = default;
};

/// The fused kernels: the forward keeps each row's running max, sum of exponentials and
/// label logit in registers over one walk of V; the VJP recomputes the softmax from lse.
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Tile, softmax_cross_entropy_detail::Problem, TileConfig) };

//===----------------------------------------------------------------------===//
// reference (Reference.cpp)
//===----------------------------------------------------------------------===//

struct ReferenceConfig {
  int64_t block_v = 256;  ///< columns per step over V
  static constexpr auto keys = std::tuple{ConfigKey{"block_v", &ReferenceConfig::block_v}};
  bool operator==(const ReferenceConfig &) const = default;
};

/// One row per program and two passes over V (the max, then the sum against it), math
/// in f32 (f64 for f64): the numbers the others are checked against, on any GPU.
struct Reference {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Reference, softmax_cross_entropy_detail::Problem, ReferenceConfig)
};

} // namespace tokamax::softmax_cross_entropy_detail
