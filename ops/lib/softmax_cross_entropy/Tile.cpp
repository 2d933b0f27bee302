//===- Tile.cpp - softmax_cross_entropy: the fused tile kernels -===//
//
//   forward: one program per block_rows rows walks V in block_v column steps, keeping
//            each row's running max, sum of exp(logit - max) (rescaled when the max
//            grows) and label logit in registers: one read of the logits, loss and lse
//            written once per row;
//   VJP:     one program per [block_rows, block_v] tile of dlogits: the softmax
//            recomputed from the forward's lse, minus 1 at the label, times dloss.
// No scratch, no atomics: reruns are bitwise identical.
//
// Config {block_rows, block_v, num_warps}: the heuristic gives a program about 4096
// elements (16 a thread on 8 warps); the search space adds a few shapes of that size
// from one long row to 16 short ones.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/softmax_cross_entropy/Common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tokamax::softmax_cross_entropy_detail {

using namespace dsl;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
/// What one program's tile may hold: elements in all, and per thread (registers).
constexpr int64_t kMaxTileElements = 16384, kMaxElementsPerThread = 128;

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/// loss and lse of block_rows rows per program, in one walk over V.
Kernel forwardKernel(const Problem &p, const TileConfig &c) {
  Kernel k("softmax_cross_entropy_tile", {.num_warps = int(c.num_warps)});
  TensorArg logits = k.input("logits", p.dtype, {p.B, p.V});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg loss = k.output("loss", p.compute, {p.B});
  TensorArg lse = k.output("lse", p.compute, {p.B});
  const int64_t rows = c.block_rows, cols = c.block_v;
  k.grid(cdiv(p.B, rows));
  Value m0 = k.program_id(0) * Value(rows);
  Value label = labels.load({m0}, {rows});
  Value labelColumn = label.expand(1);
  Value minusInf = k.full({rows}, -INFINITY, p.compute), zero = k.full({rows}, 0.0, p.compute);
  // Carried per row: the max so far, the sum of exp(logit - max), the label's logit.
  std::vector<Value> r = k.loop(0, p.V, cols, {minusInf, zero, zero}, [&](Value n0, std::vector<Value> carried) {
    // Columns past V read -inf: they add nothing to the max or the sum.
    Value x = logits.load({m0, n0}, {rows, cols}, -INFINITY).to(p.compute);
    Value column = (n0 + k.arange(0, cols)).expand(0);
    Value max = maximum(carried[0], x.max(1));
    Value sum = carried[1] * exp(carried[0] - max) + exp(x - max.expand(1)).sum(1);
    Value picked = carried[2] + where(column == labelColumn, x, 0.0).sum(1);
    return std::vector<Value>{max, sum, picked};
  });
  Value rowLse = r[0] + log(r[1]);
  loss.store({m0}, where(label_out_of_range(p, label), kNaN, rowLse - r[2]));
  lse.store({m0}, rowLse);
  return k;
}

/// dlogits of one [block_rows, block_v] tile per program.
Kernel vjpKernel(const Problem &p, const TileConfig &c) {
  Kernel k("softmax_cross_entropy_tile_vjp", {.num_warps = int(c.num_warps)});
  TensorArg dloss = k.input("dloss", p.compute, {p.B});
  TensorArg logits = k.input("logits", p.dtype, {p.B, p.V});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg lse = k.input("lse", p.compute, {p.B});
  TensorArg dlogits = k.output("dlogits", p.dtype, {p.B, p.V});
  const int64_t rows = c.block_rows, cols = c.block_v, columnBlocks = cdiv(p.V, cols);
  k.grid(cdiv(p.B, rows) * columnBlocks);
  Value pid = k.program_id(0);
  Value m0 = pid / Value(columnBlocks) * Value(rows), n0 = pid % Value(columnBlocks) * Value(cols);
  Value label = labels.load({m0}, {rows});
  // A label outside [0, V) makes the whole row NaN, as its loss is.
  Value g = where(label_out_of_range(p, label), kNaN, dloss.load({m0}, {rows})).expand(1);
  Value x = logits.load({m0, n0}, {rows, cols}).to(p.compute);
  Value prob = exp(x - lse.load({m0}, {rows}).expand(1));
  Value column = (n0 + k.arange(0, cols)).expand(0);
  dlogits.store({m0, n0}, (g * where(column == label.expand(1), prob - 1.0, prob)).to(p.dtype));
  return k;
}

} // namespace

std::optional<std::string> Tile::why_not(const Problem &p) {
  if (p.dtype == DType::F64)
    return fmt::format("tile serves bf16, f16 and f32, not {}; use reference", dtype_name(p.dtype));
  return std::nullopt;
}

TileConfig Tile::heuristic(const Problem &p) {
  // Whole short rows, or 1024-column steps of long ones; rows to about 4096 elements
  // (no more than B needs), on a warp per 512 of them (16 elements a thread).
  TileConfig c;
  c.block_v = std::clamp<int64_t>(next_power_of_two(p.V), 16, 1024);
  c.block_rows = std::clamp<int64_t>(4096 / c.block_v, 1, std::min<int64_t>(64, next_power_of_two(p.B)));
  c.num_warps = std::clamp<int64_t>(c.block_rows * c.block_v / 512, 1, 8);
  return c;
}

std::vector<TileConfig> Tile::search_space(const Problem &p) {
  std::vector<TileConfig> space{heuristic(p)};
  // Tiles of 2048-4096 elements from one long row to 16 short ones; none wider than V
  // or taller than B needs.
  for (TileConfig c : {TileConfig{1, 2048, 4}, TileConfig{2, 2048, 8}, TileConfig{4, 512, 4}, TileConfig{8, 512, 8},
                       TileConfig{16, 128, 4}}) {
    if (c.block_v > std::max<int64_t>(16, next_power_of_two(p.V)) || c.block_rows > next_power_of_two(p.B))
      continue;
    if (std::find(space.begin(), space.end(), c) == space.end() && !check(p, c))
      space.push_back(c);
  }
  return space;
}

std::optional<std::string> Tile::check(const Problem &, const TileConfig &c) {
  if (!isPowerOfTwo(c.block_rows) || c.block_rows > 256)
    return fmt::format("block_rows must be a power of two in [1, 256], got {}", c.block_rows);
  if (!isPowerOfTwo(c.block_v) || c.block_v < 16 || c.block_v > 8192)
    return fmt::format("block_v must be a power of two in [16, 8192], got {}", c.block_v);
  if (c.num_warps != 1 && c.num_warps != 2 && c.num_warps != 4 && c.num_warps != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", c.num_warps);
  const int64_t elements = c.block_rows * c.block_v, threads = 32 * c.num_warps;
  if (elements > kMaxTileElements)
    return fmt::format("block_rows {} x block_v {} is {} elements, over the {} one program holds", c.block_rows,
                       c.block_v, elements, kMaxTileElements);
  if (elements > kMaxElementsPerThread * threads)
    return fmt::format("block_rows {} x block_v {} on {} warps is {} elements a thread, over {} (registers)",
                       c.block_rows, c.block_v, c.num_warps, elements / threads, kMaxElementsPerThread);
  return std::nullopt;
}

void Tile::execute(const Problem &p, const TileConfig &c, std::span<const TensorView> in,
                   std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)  // no rows: nothing to write
    return;
  const KernelKey key = ops_detail::specializationKey(
      p.vjp ? "softmax_cross_entropy_tile_vjp" : "softmax_cross_entropy_tile",
      {p.B, p.V, int64_t(p.dtype), c.block_rows, c.block_v, c.num_warps});
  if (p.vjp)  // dloss, logits, labels, lse | dlogits
    ex.launch(key, [p, c] { return vjpKernel(p, c); }, {in[0], in[1], in[2], in[3], out[0]});
  else  // logits, labels | loss, lse
    ex.launch(key, [p, c] { return forwardKernel(p, c); }, {in[0], in[1], out[0], out[1]});
}

} // namespace tokamax::softmax_cross_entropy_detail
