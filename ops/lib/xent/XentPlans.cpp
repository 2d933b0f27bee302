//===- XentPlans.cpp - linear_softmax_cross_entropy_loss: launches and configs -===//
//
//   forward:  the rows kernel (each row's loss and lse; the loss itself for "none", else
//             the call's scratch; with split_v > 1 each split's partials, merged by the
//             combine kernel), then for "sum" / "mean" the reduce kernel;
//   VJP:      the row-scale kernel (scale [B] in the call's scratch), a zero fill of the
//             f32 dx accumulator [B, D], then per chunk of V columns (c0 passed at
//             launch, one kernel for every chunk): dlogits [B, chunk] recomputed from
//             x, w and lse, dx_acc += dlogits w[:, chunk]^T (rounded into dx each time)
//             and dw[:, chunk] = x^T dlogits. The logits are recomputed once; the
//             scratch is B x chunk (about 128 MiB at most) plus B x D f32.
//
// Configs: block_b, block_v, block_k, num_warps (and for the VJP block_d and, optional,
// chunk_v: the V columns per chunk, else as many as keep dlogits near 128 MiB; for the
// forward, optional, split_v: programs per row block, each over a range of V, whose
// partial log-sum-exps the combine kernel merges in a fixed order). The tile
// heuristic takes [64, 128] logit tiles with 32-wide D slices on 4 warps (one f32
// accumulator of 64 registers per thread) and, for the VJP, 64-wide D blocks of dx and
// dw; exact products use matmul reference's small blocks. Opt-in until measured: "tma"
// (with "stages"): the rows and dlogits kernels' x and w blocks by TMA through rings a
// producer warpgroup refills, the logit tiles on wgmma (checkTma says what it needs).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/xent/XentDetail.h"

#include "ops/lib/Dispatch.h"
#include "ops/lib/matmul/MatmulDetail.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::xent_detail {

namespace {

bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }
bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

const char *const kTmaRingsExperimental =
    "the cross-entropy kernels on TMA rings (hopper, tile's tma config) are experimental until a device run verifies "
    "them: on an H100 their VJP's dx and dw differed from float64 (its workspaces overlapped, since fixed); use tile";

/// "tma" (opt-in until measured, sm_90a): the logit tiles' x and w blocks by TMA through
/// rings of "stages" slots (2-4, default 3) refilled by a producer warpgroup, products
/// on wgmma. Every consumer warp owns 16 rows (block_b = 16 x num_warps, 4 or 8 warps);
/// block_k is one 32-, 64- or 128-byte swizzle row, block_v whole 128-byte rows; x's and
/// w's rows are whole 16-byte chunks (D and V multiples of 8 at 16 bits).
std::optional<std::string> checkTma(const Problem &p, const Config &c) {
  const int64_t tma = c.get_or("tma", 0);
  if (tma != 0 && tma != 1)
    return fmt::format("tma must be 0 or 1, got {}", tma);
  if (!tma)
    return c.has("stages") ? std::optional<std::string>("stages (the TMA rings' slots) needs \"tma\": 1")
                           : std::nullopt;
  if (auto gate = ops_detail::experimental_gate(kTmaRingsExperimental))
    return gate;
  const int64_t w = c.get("num_warps"), bb = c.get("block_b"), bv = c.get("block_v"), bk = c.get("block_k");
  const int64_t stages = c.get_or("stages", 3), bytes = int64_t(dtype_size(p.dtype));
  if ((w != 4 && w != 8) || bb != 16 * w)
    return fmt::format("tma needs 4 or 8 warps and block_b = 16 * num_warps, got block_b {} with {} warps", bb, w);
  if (auto problem = check_tma_block_shape(bk, "block_v", bv, bytes))
    return problem;
  if (stages < 2 || stages > 4)
    return fmt::format("stages (the TMA rings' slots) must be 2, 3 or 4, got {}", stages);
  if (p.D * bytes % 16 != 0 || p.V * bytes % 16 != 0)
    return fmt::format("tma reads x [B, D] and w [D, V] in rows of whole 16-byte chunks: D {} and V {} must be "
                       "multiples of {}",
                       p.D, p.V, 16 / bytes);
  const int64_t shared = stages * (bb * bk + bk * bv) * bytes;
  if (shared > 200 * 1024)
    return fmt::format("{} stages of [{}, {}] and [{}, {}] blocks need {} KiB of shared memory (at most 200)", stages,
                       bb, bk, bk, bv, shared / 1024);
  return std::nullopt;
}

XentKernelSpec specOf(const Problem &p, Impl impl, const Config &c, KernelKind kind) {
  XentKernelSpec s;
  s.p = p;
  s.kind = kind;
  s.exact = impl == Impl::Reference;
  if (kind == KernelKind::WPanel || kind == KernelKind::DwPanel || kind == KernelKind::DxRound) {  // copies
    s.exact = false;
    s.block_b = s.block_v = s.block_k = s.block_d = 0;
    s.num_warps = 4;
    s.chunk_v = kind == KernelKind::DxRound ? 0 : specOf(p, impl, c, KernelKind::DLogits).chunk_v;
    return s;
  }
  if (kind == KernelKind::Reduce || kind == KernelKind::RowScale) {  // one program, no products
    s.exact = false;
    s.block_b = s.block_v = s.block_k = s.block_d = 0;
    return s;
  }
  s.block_b = c.get("block_b");
  s.block_v = c.get("block_v");
  s.block_k = c.get("block_k");
  s.block_d = p.vjp && impl != Impl::Hopper ? c.get("block_d") : 0;
  s.num_warps = static_cast<int>(c.get("num_warps"));
  if (kind == KernelKind::Rows || kind == KernelKind::Combine)
    s.split_v = split_count(p, s.block_v, c.get_or("split_v", 1));
  if (kind == KernelKind::Combine) {  // no products: only the split count shapes it
    s.exact = false;
    s.block_b = s.block_v = s.block_k = 0;
    s.num_warps = 4;
  }
  if ((kind == KernelKind::Rows || kind == KernelKind::DLogits) && (impl == Impl::Hopper || c.get_or("tma", 0))) {
    s.tma = true;
    s.stages = static_cast<int>(c.get_or("stages", 3));
  }
  if (kind != KernelKind::Rows && kind != KernelKind::Combine)
    s.chunk_v = c.has("chunk_v") ? std::min(c.get("chunk_v"), (p.V + s.block_v - 1) / s.block_v * s.block_v)
                                 : chunk_columns(p, s.block_v, dtype_size(s.exact ? p.compute : p.dtype));
  return s;
}

using Arg = ops_detail::KernelExecutor::Arg;

void launch(ops_detail::KernelExecutor &ex, const XentKernelSpec &s, const std::vector<Arg> &args) {
  ex.launch(s.key(), [s] { return xent_kernel(s); }, args);
}

/// The hopper VJP: the row scales, then per chunk of V columns: dlogits on TMA rings;
/// w's chunk copied into a [D, chunk] panel; dx_acc (+)= dlogits @ panel^T and then
/// panel = x^T @ dlogits on the hopper matmul (the panel reused once its copy of w is
/// read, in stream order); the panel copied into dw's chunk columns. Then dx_acc is
/// rounded into dx. Scratch: the row scales, the dlogits chunk, the panel and the f32 dx_acc.
void hopperVjpChunks(const Problem &p, const Config &config, const std::vector<TensorView> &t,
                     ops_detail::KernelExecutor &ex) {
  const TensorView &x = t[0], &w = t[1], &labels = t[2], &lse = t[3], &dloss = t[4], &dx = t[5], &dw = t[6];
  const int device = ex.device();
  XentKernelSpec dlSpec = specOf(p, Impl::Hopper, config, KernelKind::DLogits);
  dlSpec.programs = ex.sm_count();  // persistent: one program per SM
  const int64_t C = dlSpec.chunk_v;
  ops_detail::Workspace ws;
  const size_t scaleAt = ws.add(double(p.B) * dtype_size(p.compute)),
               dlogitsAt = ws.add(double(p.B) * C * dtype_size(p.dtype)),
               panelAt = ws.add(double(p.D) * C * dtype_size(p.dtype)),
               dxAccAt = ws.add(double(p.B) * p.D * dtype_size(p.compute));
  ws.allocate(ex);
  auto view = [&](size_t at, DType dtype, std::vector<int64_t> shape) {
    return TensorView(ws.at(at), dtype, std::move(shape), device);
  };
  const TensorView scale = view(scaleAt, p.compute, {p.B}), dlogits = view(dlogitsAt, p.dtype, {p.B, C}),
                   panel = view(panelAt, p.dtype, {p.D, C}), dxAcc = view(dxAccAt, p.compute, {p.B, p.D});
  launch(ex, specOf(p, Impl::Hopper, config, KernelKind::RowScale), {dloss, labels, scale});
  const XentKernelSpec wPanel = specOf(p, Impl::Hopper, config, KernelKind::WPanel),
                       dwPanel = specOf(p, Impl::Hopper, config, KernelKind::DwPanel);
  for (int64_t c0 = 0; c0 < p.V; c0 += C) {
    const Arg chunk = Arg::value(double(c0));
    launch(ex, dlSpec, {x, w, labels, lse, scale, dlogits, chunk});
    launch(ex, wPanel, {w, panel, chunk});
    MatmulSpec dxSpec{p.B, p.D, C, p.dtype, p.compute, /*trans_a=*/false, /*trans_b=*/true};
    dxSpec.accumulate = c0 > 0;
    launch_matmul_step(ex, "xent", MatmulKernelKind::Hopper, dxSpec, dlogits, panel, dxAcc);
    launch_matmul_step(ex, "xent", MatmulKernelKind::Hopper,
                       MatmulSpec{p.D, C, p.B, p.dtype, p.dtype, /*trans_a=*/true, /*trans_b=*/false}, x, dlogits,
                       panel);
    launch(ex, dwPanel, {panel, dw, chunk});
  }
  launch(ex, specOf(p, Impl::Hopper, config, KernelKind::DxRound), {dxAcc, dx});
}

} // namespace

int64_t split_count(const Problem &p, int64_t block_v, int64_t wanted) {
  const int64_t tiles = std::max<int64_t>((p.V + block_v - 1) / block_v, 1);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min<int64_t>(32, tiles));
  const int64_t perSplit = (tiles + splits - 1) / splits;
  return (tiles + perSplit - 1) / perSplit;
}

int64_t chunk_columns(const Problem &p, int64_t block_v, size_t element_bytes) {
  constexpr int64_t kBudget = int64_t(128) << 20;
  const int64_t whole = (p.V + block_v - 1) / block_v * block_v;
  const int64_t fits = kBudget / (std::max<int64_t>(p.B, 1) * int64_t(element_bytes)) / block_v * block_v;
  return std::clamp(fits, block_v, whole);
}

void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> in,
             std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const int device = ex.device();
  const double rowBytes = double(p.B) * dtype_size(p.compute);
  // The call's workspaces, carved out of its one scratch request.
  ops_detail::Workspace ws;
  auto view = [&](size_t at, DType dtype, std::vector<int64_t> shape) {
    return TensorView(ws.at(at), dtype, std::move(shape), device);
  };
  if (!p.vjp) {
    const TensorView &x = in[0], &w = in[1], &labels = in[2], &loss = out[0], &lse = out[1];
    if (p.B == 0) {  // no rows: the reduced loss is 0
      if (p.reduction != LossReduction::None)
        ex.zero(loss);
      return;
    }
    const XentKernelSpec rowsSpec = specOf(p, impl, config, KernelKind::Rows);
    const bool rowsInScratch = p.reduction != LossReduction::None;
    const size_t rowsAt = rowsInScratch ? ws.add(rowBytes) : 0,
                 partialsAt = rowsSpec.split_v > 1 ? ws.add(3 * double(rowsSpec.split_v) * rowBytes) : 0;
    ws.allocate(ex);
    const TensorView rows = rowsInScratch ? view(rowsAt, p.compute, {p.B}) : loss;
    if (rowsSpec.split_v > 1) {  // the splits' partials, merged in a fixed order
      const TensorView partials = view(partialsAt, p.compute, {3, rowsSpec.split_v, p.B});
      launch(ex, rowsSpec, {x, w, labels, partials});
      launch(ex, specOf(p, impl, config, KernelKind::Combine), {partials, labels, rows, lse});
    } else {
      launch(ex, rowsSpec, {x, w, labels, rows, lse});
    }
    if (p.reduction != LossReduction::None)
      launch(ex, specOf(p, impl, config, KernelKind::Reduce), {rows, labels, loss});
    return;
  }
  const TensorView &dloss = in[0], &x = in[1], &w = in[2], &labels = in[3], &lse = in[4], &dx = out[0],
                   &dw = out[1];
  if (p.B == 0 || p.D == 0) {  // empty sums: whatever is not empty is zero
    ex.zero(dx);
    ex.zero(dw);
    return;
  }
  if (impl == Impl::Hopper) {
    hopperVjpChunks(p, config, {x, w, labels, lse, dloss, dx, dw}, ex);
    return;
  }
  const XentKernelSpec dlSpec = specOf(p, impl, config, KernelKind::DLogits),
                       dxSpec = specOf(p, impl, config, KernelKind::Dx),
                       dwSpec = specOf(p, impl, config, KernelKind::Dw);
  const DType operand = impl == Impl::Reference ? p.compute : p.dtype;
  const size_t scaleAt = ws.add(rowBytes), dlogitsAt = ws.add(double(p.B) * dlSpec.chunk_v * dtype_size(operand)),
               dxAccAt = ws.add(double(p.B) * p.D * dtype_size(p.compute));
  ws.allocate(ex);
  const TensorView scale = view(scaleAt, p.compute, {p.B}), dlogits = view(dlogitsAt, operand, {p.B, dlSpec.chunk_v}),
                   dxAcc = view(dxAccAt, p.compute, {p.B, p.D});
  launch(ex, specOf(p, impl, config, KernelKind::RowScale), {dloss, labels, scale});
  ex.zero(dxAcc);
  for (int64_t c0 = 0; c0 < p.V; c0 += dlSpec.chunk_v) {
    const Arg chunk = Arg::value(double(c0));
    launch(ex, dlSpec, {x, w, labels, lse, scale, dlogits, chunk});
    launch(ex, dxSpec, {dlogits, w, dxAcc, dx, chunk});
    launch(ex, dwSpec, {x, dlogits, dw, chunk});
  }
}

std::optional<std::string> why_not(const Problem &p, Impl impl) {
  if (impl == Impl::Hopper)
    if (auto gate = ops_detail::experimental_gate(kTmaRingsExperimental))
      return *gate;
  if (impl != Impl::Reference && !isHalf(p.dtype))
    return fmt::format("{} serves bf16 and f16 (tensor cores), not {}; use reference", impl_name(impl),
                       dtype_name(p.dtype));
  if (impl == Impl::Hopper && (p.D % 8 != 0 || p.V % 8 != 0))
    return fmt::format("hopper reads x [B, D] and w [D, V] by TMA in rows of whole 16-byte chunks: D {} and V {} "
                       "must be multiples of 8; use tile",
                       p.D, p.V);
  return std::nullopt;
}

Config heuristic(const Problem &p, Impl impl) {
  if (impl == Impl::Hopper) {
    // [128, 128] logit tiles on two consumer warpgroups, 64-wide D steps through a
    // three-slot ring. One such program fits an SM (registers): the forward splits V so
    // that its row blocks x splits fill whole waves of sm_90a's 132 SMs best (B 8192: 64 row
    // blocks in 2 splits, 128 programs, one wave).
    Config c{{"block_b", 128}, {"block_v", 128}, {"block_k", 64}, {"num_warps", 8}, {"stages", 3}};
    const int64_t rowBlocks = std::max<int64_t>((p.B + 127) / 128, 1);
    const int64_t sms = Arch::parse("sm_90a").sm_count();
    int64_t best = 1;
    double bestFill = 0;
    for (int64_t wanted = 1; wanted <= 32; ++wanted) {
      const int64_t splits = split_count(p, 128, wanted), programs = rowBlocks * splits;
      const double fill = double(programs) / double((programs + sms - 1) / sms * sms);
      if (fill > bestFill + 1e-9) {
        best = splits;
        bestFill = fill;
      }
    }
    if (!p.vjp && best > 1)
      c.set("split_v", best);
    return c;
  }
  Config c = impl == Impl::Reference
                 ? Config{{"block_b", 16}, {"block_v", 16}, {"block_k", 8}, {"num_warps", 4}}
                 : Config{{"block_b", std::clamp<int64_t>(ops_detail::next_power_of_two(p.B), 16, 64)},
                          {"block_v", 128}, {"block_k", 32}, {"num_warps", 4}};
  if (impl == Impl::Tile && !p.vjp) {
    // Few row blocks (B / 64 against 132 SMs at B 8192) walk V in several splits: about
    // four programs per SM of an H100 / H200 (sm_90a's SM count).
    const int64_t rowBlocks = (p.B + c.get("block_b") - 1) / c.get("block_b");
    const int64_t programs = 4 * Arch::parse("sm_90a").sm_count();
    if (int64_t splits = split_count(p, 128, (programs + rowBlocks - 1) / std::max<int64_t>(rowBlocks, 1)); splits > 1)
      c.set("split_v", splits);
  }
  if (p.vjp)  // the dx / dw accumulator beside the logit tile: 8 warps keep both in registers
    c.set("block_d", impl == Impl::Reference ? 16 : 64).set("num_warps", impl == Impl::Reference ? 4 : 8);
  return c;
}

std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &c) {
  std::vector<const char *> keys{"block_b", "block_v", "block_k", "num_warps"};
  if (p.vjp && impl != Impl::Hopper)  // hopper's dx and dw run on the matmul kernel
    keys.push_back("block_d");
  for (const char *key : keys)
    if (!c.has(key))
      return fmt::format("missing \"{}\"", key);
  for (const auto &[key, value] : c.values)
    if (std::find_if(keys.begin(), keys.end(), [&](const char *k) { return key == k; }) == keys.end() &&
        !(p.vjp && key == "chunk_v") && !(!p.vjp && key == "split_v") &&
        !(impl == Impl::Tile && key == "tma") && !(impl != Impl::Reference && key == "stages"))
      return fmt::format("unknown key \"{}\" for {}{}", key, impl_name(impl),
                         key == "block_d" || key == "chunk_v" ? " (the VJP's)" : key == "split_v" ? " (the forward's)" : "");
  if (c.has("split_v") && (c.get("split_v") < 1 || c.get("split_v") > 32))
    return fmt::format("split_v (the forward's programs per row block) must be in [1, 32], got {}", c.get("split_v"));
  if (c.has("chunk_v") && (c.get("chunk_v") < 1 || c.get("chunk_v") % c.get("block_v") != 0))
    return fmt::format("chunk_v (the VJP's V columns per chunk) must be a positive multiple of block_v {}, got {}",
                       c.get("block_v"), c.get("chunk_v"));
  const bool tile = impl != Impl::Reference;
  const int64_t minBlock = tile ? 16 : 1;
  for (const char *key : keys) {
    if (std::string(key) == "num_warps")
      continue;
    const int64_t v = c.get(key);
    if (!isPowerOfTwo(v) || v < minBlock || v > 256)
      return fmt::format("{} must be a power of two in [{}, 256], got {}", key, minBlock, v);
  }
  const int64_t w = c.get("num_warps"), bb = c.get("block_b"), bv = c.get("block_v"), bk = c.get("block_k");
  if (w != 1 && w != 2 && w != 4 && w != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", w);
  const int64_t bd = p.vjp && impl != Impl::Hopper ? c.get("block_d") : 0;
  if (!tile) {  // exact products hold [rows, k, columns] partial products
    const int64_t largest = std::max({bb * bk * bv, bb * bv * bd});
    if (largest > 8192)
      return fmt::format("exact products must hold at most 8192 partial products, got {}", largest);
    return std::nullopt;
  }
  if (impl == Impl::Hopper) {  // always on TMA rings
    Config tma = c;
    if (auto problem = checkTma(p, tma.set("tma", 1)))
      return problem;
  } else if (auto problem = checkTma(p, c)) {
    return problem;
  }
  // The largest f32 accumulator: the logit tile, or the VJP's dx / dw tiles.
  const int64_t words = std::max({bb * bv, bb * bd, bd * bv});
  if (words / (32 * w) > 160)
    return fmt::format("block_b {} x block_v {} with {} warps needs ~{} accumulator registers per thread", bb, bv, w,
                       words / (32 * w));
  return std::nullopt;
}

std::vector<Config> search_space(const Problem &p, Impl impl) {
  std::vector<Config> space{heuristic(p, impl)};
  auto add = [&](Config c) {
    if (std::find(space.begin(), space.end(), c) == space.end() && !check_config(p, impl, c))
      space.push_back(std::move(c));
  };
  if (impl == Impl::Hopper) {  // ring depth, more splits of V, 64-row tiles on one consumer warpgroup
    for (int64_t stages : {2, 4})
      add(Config(space.front()).set("stages", stages));
    if (!p.vjp) {
      const int64_t rowBlocks = std::max<int64_t>((p.B + 127) / 128, 1);
      if (int64_t splits = split_count(p, 128, (528 + rowBlocks - 1) / rowBlocks); splits > 1)
        add(Config(space.front()).set("split_v", splits));
    }
    Config narrow = space.front();
    add(narrow.set("block_b", 64).set("num_warps", 4).set("stages", 4));
    return space;
  }
  if (impl == Impl::Reference) {
    Config c{{"block_b", 16}, {"block_v", 32}, {"block_k", 8}, {"num_warps", 4}};
    if (p.vjp)
      c.set("block_d", 8);
    add(c);
    return space;
  }
  for (int64_t bb : {32, 64, 128})
    for (int64_t bv : {64, 128, 256})
      for (int64_t bk : {32, 64})
        for (int64_t warps : {4, 8})
          for (int64_t bd : {0, 64, 128}) {
            if ((bd != 0) != p.vjp)
              continue;
            Config c{{"block_b", bb}, {"block_v", bv}, {"block_k", bk}, {"num_warps", warps}};
            if (bd)
              c.set("block_d", bd);
            if (space.front().has("split_v"))  // the heuristic's splits of V
              c.set("split_v", space.front().get("split_v"));
            add(std::move(c));
          }
  return space;
}

} // namespace tokamax::xent_detail
