//===- Common.h - paged_attention and paged_kv_append: Problem, packing, implementations -*- C++ -*-===//
//
// Internal to ops/lib/paged_attention. Op.cpp reads a bound call of either op into a
// Problem and registers the implementations declared here; each implementation's
// config, checks, heuristic, plan and kernels live in its own file (Tile.cpp,
// Reference.cpp: each holds the decode and the append struct of its kind).
//
// Kernels see q as [B, Tq, K, G, H] (G = N / K: the query heads of kv head h are
// h G .. h G + G - 1, contiguous), k_pages [num_pages, page_size, K, H], v_pages
// [num_pages, page_size, K, Hv], page_table [B, max_pages], seq_lengths [B], out
// [B, Tq, K, G, Hv] and lse [B, K, G, Tq] (the same bytes as the API's shapes).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/TypedConfig.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/PagedAttention.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax::paged_attention_detail {

using dsl::Kernel;
using dsl::TensorArg;
using dsl::Value;
using ops_detail::ConfigKey;
using ops_detail::ImplKind;
using ops_detail::KernelExecutor;

inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;

/// A bound call of either op, as the implementations see it.
struct Problem {
  bool append = false;  ///< paged_kv_append
  int64_t B = 0, Tq = 1, N = 1, K = 1, H = 16, Hv = 16;
  int64_t num_pages = 1, page_size = 16, max_pages = 1;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< the math and lse: f32, f64 for f64 inputs
  double scale = 1, softcap = 0;  ///< softcap 0: none
  bool lse_out = false;

  int64_t group() const { return N / K; }
  /// Keys a sequence can hold: max_pages * page_size.
  int64_t capacity() const { return max_pages * page_size; }
};

/// Reads a validated BoundArgs of either op.
Problem problem_of(const BoundArgs &args);

/// `t`'s bytes (contiguous) as a tensor of `shape`: q, out and lse as the kernels see them.
inline TensorView reshaped(const TensorView &t, std::vector<int64_t> shape) {
  return TensorView(t.data(), t.dtype(), shape, t.device());
}

/// How the Tq x G query rows of one kv head are packed into programs of `rows` rows:
/// row r of a program is query token t0 + r / heads and query head g0 + r % heads of
/// the group (the group padded to a power of two; padding rows read zeros and are never
/// stored).
struct RowPacking {
  int64_t rows = 16;          ///< rows a program holds (a power of two)
  int64_t heads = 1;          ///< query heads a program holds: min(padded group, rows)
  int64_t tokens = 16;        ///< query tokens a program holds: rows / heads
  int64_t head_blocks = 1;    ///< programs along the padded group
  int64_t blocks = 1;         ///< programs per kv head: token blocks x head_blocks
};
RowPacking row_packing(const Problem &p, int64_t rows);

/// The operands every decode kernel declares first, in this order.
struct DecodeOperands {
  TensorArg q, k_pages, v_pages, page_table, seq_lengths;
};
DecodeOperands declare_decode_operands(Kernel &k, const Problem &p);
/// out [B, Tq, K, G, Hv] and, when the call wants it, lse [B, K, G, Tq].
struct DecodeOutputs {
  TensorArg out;
  std::optional<TensorArg> lse;
};
DecodeOutputs declare_decode_outputs(Kernel &k, const Problem &p);

/// Host inputs (Op::check_host_values, before the interpreter runs a kernel): what the
/// device cannot check, each seq_len in [Tq, capacity] and each page in use in [0,
/// num_pages); throws Error naming the entry. Every host call (the _host entry points,
/// the C ABI, Python, Functions) goes through Op::interpret, which calls it.
void check_host_values(const Problem &p, std::span<const TensorView> in);

/// Sequence b's key count clamped to [0, capacity] (an i32 scalar).
Value sequence_length(Kernel &k, const Problem &p, const TensorArg &seq_lengths, const Value &b);
/// Entry `page` of sequence b's page table (an i32 scalar; 0 past max_pages).
Value page_at(const TensorArg &page_table, const Value &b, const Value &page);

/// Stores the rows of a program (`rows` x hv, row r = token t0 + r / heads, head g0 +
/// r % heads of kv head h) into out's columns from hv0 (0 when not given), and their lse
/// ([rows]) when lse is given.
void store_rows(const RowPacking &rp, const DecodeOutputs &o, const Value &b, const Value &h, const Value &t0,
                const Value &g0, const Value &rows, const std::optional<Value> &lse,
                const std::optional<Value> &hv0 = std::nullopt);

//===----------------------------------------------------------------------===//
// tile (Tile.cpp)
//===----------------------------------------------------------------------===//

struct TileConfig {
  int64_t block_rows = 16;     ///< packed query rows (tokens x heads) per program
  int64_t pages_per_step = 4;  ///< pages each step of the walk loads (one product each)
  int64_t num_splits = 1;      ///< programs per (sequence, kv head, row block) along the keys
  int64_t num_warps = 4;
  /// Slots of the cp.async ring the pages go through (copied stages - 1 steps ahead);
  /// 1: no ring, each step's pages are loaded into registers where they are used.
  int64_t stages = 3;
  static constexpr auto keys = std::tuple{ConfigKey{"block_rows", &TileConfig::block_rows},
                                          ConfigKey{"pages_per_step", &TileConfig::pages_per_step},
                                          ConfigKey{"num_splits", &TileConfig::num_splits},
                                          ConfigKey{"num_warps", &TileConfig::num_warps},
                                          ConfigKey{"stages", &TileConfig::stages}};
  bool operator==(const TileConfig &) const = default;
};

/// Split-KV decode on tensor cores: a split kernel per (split, kv head x row block,
/// sequence), then a combine kernel over the splits' partial out and lse.
struct TileDecode {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Tile, paged_attention_detail::Problem, TileConfig)
};

struct TileAppendConfig {
  int64_t num_warps = 4;
  static constexpr auto keys = std::tuple{ConfigKey{"num_warps", &TileAppendConfig::num_warps}};
  bool operator==(const TileAppendConfig &) const = default;
};

/// One program per new token writes its K x H (and K x Hv) row into its page.
struct TileAppend {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Tile, paged_attention_detail::Problem, TileAppendConfig)
};

//===----------------------------------------------------------------------===//
// reference (Reference.cpp)
//===----------------------------------------------------------------------===//

struct ReferenceConfig {
  int64_t block_kv = 64;  ///< keys per step of the dense walk
  static constexpr auto keys = std::tuple{ConfigKey{"block_kv", &ReferenceConfig::block_kv}};
  bool operator==(const ReferenceConfig &) const = default;
};

/// The pages gathered into dense k / v, then exact attention in the compute dtype.
struct ReferenceDecode {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Reference, paged_attention_detail::Problem, ReferenceConfig)
};

struct ReferenceAppendConfig {
  static constexpr auto keys = std::tuple<>{};
  bool operator==(const ReferenceAppendConfig &) const = default;
};

/// One program per (new token, kv head) copies its row.
struct ReferenceAppend {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Reference, paged_attention_detail::Problem, ReferenceAppendConfig)
};

} // namespace tokamax::paged_attention_detail
