//===- Common.cpp - linear_softmax_cross_entropy_loss: what the implementations share -===//
//
// Each kernel's spec at a config's blocks, the checks every implementation (or tile and
// hopper) makes, and the launches of the forward and of the reference and tile VJPs.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/cross_entropy/Common.h"

#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/SharedMemory.h"
#include "ops/lib/products/Products.h"

#include <tokamax/runtime/Error.h>

#include <tokamax/runtime/Arch.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::xent_detail {

namespace {

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/// "tma" (opt-in, sm_90a; hopper's kernels): the logit tiles' x and w blocks by TMA through
/// rings of "stages" slots (2-4, default 3) refilled by a producer warpgroup, products
/// on wgmma. Every consumer warp owns 16 rows (block_b = 16 x num_warps, 4 or 8 warps);
/// block_k is one 32-, 64- or 128-byte swizzle row, block_v whole 128-byte rows; x's and
/// w's rows are whole 16-byte chunks (D and V multiples of 8 at 16 bits).
std::optional<std::string> checkTma(const Problem &p, const XentBlocks &c, int64_t block_d, bool tma,
                                    std::optional<int64_t> stages) {
  if (!tma)
    return stages ? std::optional<std::string>("stages (the TMA rings' slots) needs \"tma\": 1") : std::nullopt;
  const int64_t w = c.num_warps, bb = c.block_b, bv = c.block_v, bk = c.block_k;
  const int64_t slots = stages.value_or(3), bytes = int64_t(dtype_size(p.dtype));
  if ((w != 4 && w != 8) || bb != 16 * w)
    return fmt::format("tma needs 4 or 8 warps and block_b = 16 * num_warps, got block_b {} with {} warps", bb, w);
  if (auto problem = check_tma_block_shape(bk, "block_v", bv, bytes))
    return problem;
  if (slots < 2 || slots > 4)
    return fmt::format("stages (the TMA rings' slots) must be 2, 3 or 4, got {}", slots);
  if (p.D * bytes % 16 != 0 || p.V * bytes % 16 != 0)
    return fmt::format("tma reads x [B, D] and w [D, V] in rows of whole 16-byte chunks: D {} and V {} must be "
                       "multiples of {}",
                       p.D, p.V, 16 / bytes);
  // The rings of the kernel on them (the forward's rows, the VJP's dlogits), as the
  // compiler plans its shared memory.
  const XentKernelSpec s = spec_of(p,
                                   Blocks{.block_b = bb, .block_v = bv, .block_k = bk, .num_warps = w, .block_d = block_d,
                                          .split_v = c.split_v, .chunk_v = c.chunk_v, .tma = true, .stages = slots},
                                   p.vjp ? KernelKind::DLogits : KernelKind::Rows);
  return ops_detail::check_shared_memory([&](ops_detail::KernelExecutor &ex) { launch(ex, s, {}); });
}

using Arg = ops_detail::KernelExecutor::Arg;

} // namespace

void launch(ops_detail::KernelExecutor &ex, const XentKernelSpec &s, const std::vector<Arg> &args) {
  ex.launch(s.key(), [s] { return xent_kernel(s); }, args);
}

int64_t split_count(const Problem &p, int64_t block_v, int64_t wanted) {
  const int64_t tiles = std::max<int64_t>((p.V + block_v - 1) / block_v, 1);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min<int64_t>(32, tiles));
  const int64_t perSplit = (tiles + splits - 1) / splits;
  return (tiles + perSplit - 1) / perSplit;
}

int64_t four_programs_per_sm(const Problem &p, int64_t row_blocks) {
  const int64_t programs = 4 * Arch::parse("sm_90a").sm_count();  // four per SM of an H100 / H200
  return split_count(p, 128, (programs + row_blocks - 1) / std::max<int64_t>(row_blocks, 1));
}

int64_t chunk_columns(const Problem &p, int64_t block_v, size_t element_bytes) {
  constexpr int64_t kBudget = int64_t(128) << 20;
  const int64_t whole = (p.V + block_v - 1) / block_v * block_v;
  const int64_t fits = kBudget / (std::max<int64_t>(p.B, 1) * int64_t(element_bytes)) / block_v * block_v;
  return std::clamp(fits, block_v, whole);
}

XentKernelSpec spec_of(const Problem &p, const Blocks &b, KernelKind kind) {
  XentKernelSpec s;
  s.p = p;
  s.kind = kind;
  s.exact = b.exact;
  if (kind == KernelKind::DxRound) {  // a copy
    s.exact = false;
    s.block_b = s.block_v = s.block_k = s.block_d = 0;
    s.num_warps = 4;
    s.chunk_v = 0;
    return s;
  }
  if (kind == KernelKind::Reduce || kind == KernelKind::RowScale) {  // one program, no products
    s.exact = false;
    s.block_b = s.block_v = s.block_k = s.block_d = 0;
    return s;
  }
  s.block_b = b.block_b;
  s.block_v = b.block_v;
  s.block_k = b.block_k;
  s.block_d = b.block_d;
  s.num_warps = static_cast<int>(b.num_warps);
  if (kind == KernelKind::Rows || kind == KernelKind::Combine)
    s.split_v = split_count(p, s.block_v, b.split_v.value_or(1));
  if (kind == KernelKind::Combine) {  // no products: only the split count shapes it
    s.exact = false;
    s.block_b = s.block_v = s.block_k = 0;
    s.num_warps = 4;
  }
  if ((kind == KernelKind::Rows || kind == KernelKind::DLogits) && b.tma) {
    s.tma = true;
    s.stages = static_cast<int>(b.stages);
  }
  if (kind != KernelKind::Rows && kind != KernelKind::Combine)
    s.chunk_v = b.chunk_v ? std::min(*b.chunk_v, (p.V + s.block_v - 1) / s.block_v * s.block_v)
                          : chunk_columns(p, s.block_v, dtype_size(s.exact ? p.compute : p.dtype));
  return s;
}

std::optional<std::string> check_blocks(const Problem &p, Impl impl, const XentBlocks &c,
                                        std::optional<int64_t> block_d) {
  const bool ownDxDw = p.vjp && impl != Impl::Hopper;  // hopper's dx and dw run on the matmul kernel
  if (ownDxDw && !block_d)
    return "missing \"block_d\"";
  // The other direction's keys, in the map's order.
  for (auto [key, present, vjpKey] : {std::tuple{"block_d", block_d.has_value(), true},
                                      std::tuple{"chunk_v", c.chunk_v.has_value(), true},
                                      std::tuple{"split_v", c.split_v.has_value(), false}})
    if (present && vjpKey != p.vjp)
      return fmt::format("unknown key \"{}\" for {} (the {}'s)", key, impl_name(impl), vjpKey ? "VJP" : "forward");
  if (c.split_v && (*c.split_v < 1 || *c.split_v > 32))
    return fmt::format("split_v (the forward's programs per row block) must be in [1, 32], got {}", *c.split_v);
  // (a block_v below 1 is refused below, not divided by)
  if (c.chunk_v && c.block_v > 0 && (*c.chunk_v < 1 || *c.chunk_v % c.block_v != 0))
    return fmt::format("chunk_v (the VJP's V columns per chunk) must be a positive multiple of block_v {}, got {}",
                       c.block_v, *c.chunk_v);
  const bool tile = impl != Impl::Reference;
  const int64_t minBlock = tile ? 16 : 1, bd = ownDxDw ? *block_d : 0;
  for (auto [key, v, checked] : {std::tuple{"block_b", c.block_b, true}, std::tuple{"block_v", c.block_v, true},
                                 std::tuple{"block_k", c.block_k, true}, std::tuple{"block_d", bd, ownDxDw}})
    if (checked && (!isPowerOfTwo(v) || v < minBlock || v > 256))
      return fmt::format("{} must be a power of two in [{}, 256], got {}", key, minBlock, v);
  if (c.num_warps != 1 && c.num_warps != 2 && c.num_warps != 4 && c.num_warps != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", c.num_warps);
  if (!tile) {  // exact products hold [rows, k, columns] partial products
    const int64_t largest = std::max({c.block_b * c.block_k * c.block_v, c.block_b * c.block_v * bd});
    if (largest > 8192)
      return fmt::format("exact products must hold at most 8192 partial products, got {}", largest);
  }
  return std::nullopt;
}

int64_t own_block_d(const Problem &p, std::optional<int64_t> block_d) {
  if (!p.vjp)
    return 0;
  if (!block_d)
    throw Error("missing \"block_d\"");
  return *block_d;
}

std::optional<std::string> check_tensor_cores(const Problem &p, const XentBlocks &c, int64_t block_d, bool tma,
                                              std::optional<int64_t> stages) {
  if (auto problem = checkTma(p, c, block_d, tma, stages))
    return problem;
  // The largest f32 accumulator: the logit tile, or the VJP's dx / dw tiles.
  const int64_t words = std::max({c.block_b * c.block_v, c.block_b * block_d, block_d * c.block_v});
  if (words / (32 * c.num_warps) > 160)
    return fmt::format("block_b {} x block_v {} with {} warps needs ~{} accumulator registers per thread", c.block_b,
                       c.block_v, c.num_warps, words / (32 * c.num_warps));
  return std::nullopt;
}

void run_forward(const Problem &p, const Blocks &blocks, std::span<const TensorView> in,
                 std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const TensorView &x = in[0], &w = in[1], &labels = in[2], &loss = out[0], &lse = out[1];
  if (p.B == 0) {  // no rows: the reduced loss is 0
    if (p.reduction != LossReduction::None)
      ex.zero(loss);
    return;
  }
  const double rowBytes = double(p.B) * dtype_size(p.compute);
  const XentKernelSpec rowsSpec = spec_of(p, blocks, KernelKind::Rows);
  const bool rowsInScratch = p.reduction != LossReduction::None;
  // The call's workspaces, carved out of its one scratch request.
  ops_detail::Workspace ws;
  const size_t rowsAt = rowsInScratch ? ws.add(rowBytes) : 0,
               partialsAt = rowsSpec.split_v > 1 ? ws.add(3 * double(rowsSpec.split_v) * rowBytes) : 0;
  ws.allocate(ex);
  auto view = [&](size_t at, std::vector<int64_t> shape) {
    return TensorView(ws.at(at), p.compute, std::move(shape), ex.device());
  };
  const TensorView rows = rowsInScratch ? view(rowsAt, {p.B}) : loss;
  if (rowsSpec.split_v > 1) {  // the splits' partials, merged in a fixed order
    const TensorView partials = view(partialsAt, {3, rowsSpec.split_v, p.B});
    launch(ex, rowsSpec, {x, w, labels, partials});
    launch(ex, spec_of(p, blocks, KernelKind::Combine), {partials, labels, rows, lse});
  } else {
    launch(ex, rowsSpec, {x, w, labels, rows, lse});
  }
  if (p.reduction != LossReduction::None)
    launch(ex, spec_of(p, blocks, KernelKind::Reduce), {rows, labels, loss});
}

bool zero_empty_vjp(const Problem &p, std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  if (p.B != 0 && p.D != 0)
    return false;
  ex.zero(out[0]);  // empty sums: whatever is not empty is zero
  ex.zero(out[1]);
  return true;
}

void run(const Problem &p, const Blocks &blocks, std::span<const TensorView> in, std::span<const TensorView> out,
         ops_detail::KernelExecutor &ex) {
  if (!p.vjp) {
    run_forward(p, blocks, in, out, ex);
    return;
  }
  if (zero_empty_vjp(p, out, ex))
    return;
  const TensorView &dloss = in[0], &x = in[1], &w = in[2], &labels = in[3], &lse = in[4], &dx = out[0],
                   &dw = out[1];
  const XentKernelSpec dlSpec = spec_of(p, blocks, KernelKind::DLogits), dxSpec = spec_of(p, blocks, KernelKind::Dx),
                       dwSpec = spec_of(p, blocks, KernelKind::Dw);
  const DType operand = blocks.exact ? p.compute : p.dtype;
  ops_detail::Workspace ws;
  const size_t scaleAt = ws.add(double(p.B) * dtype_size(p.compute)),
               dlogitsAt = ws.add(double(p.B) * dlSpec.chunk_v * dtype_size(operand)),
               dxAccAt = ws.add(double(p.B) * p.D * dtype_size(p.compute));
  ws.allocate(ex);
  auto view = [&](size_t at, DType dtype, std::vector<int64_t> shape) {
    return TensorView(ws.at(at), dtype, std::move(shape), ex.device());
  };
  const TensorView scale = view(scaleAt, p.compute, {p.B}), dlogits = view(dlogitsAt, operand, {p.B, dlSpec.chunk_v}),
                   dxAcc = view(dxAccAt, p.compute, {p.B, p.D});
  launch(ex, spec_of(p, blocks, KernelKind::RowScale), {dloss, labels, scale});
  ex.zero(dxAcc);
  for (int64_t c0 = 0; c0 < p.V; c0 += dlSpec.chunk_v) {
    const Arg chunk = Arg::value(double(c0));
    launch(ex, dlSpec, {x, w, labels, lse, scale, dlogits, chunk});
    launch(ex, dxSpec, {dlogits, w, dxAcc, dx, chunk});
    launch(ex, dwSpec, {x, dlogits, dw, chunk});
  }
}

} // namespace tokamax::xent_detail
