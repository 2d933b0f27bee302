//===- Hopper.cpp - linear_softmax_cross_entropy_loss on TMA rings (sm_90a) -===//
//
// Auto's first choice on sm_90a where D and V are multiples of 8. The rows and dlogits
// kernels always on TMA rings (tile's "tma" configs), the VJP's dx and dw products on
// the hopper matmul.
// Config: block_b, block_v, block_k, num_warps, stages, and split_v (forward) or
// chunk_v (VJP).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/cross_entropy/Common.h"

#include "ops/lib/products/Products.h"

#include <tokamax/runtime/Arch.h>

#include <algorithm>

namespace tokamax::xent_detail {

namespace {

using Arg = ops_detail::KernelExecutor::Arg;

Blocks blocksOf(const HopperConfig &c) {
  return {.block_b = c.block_b, .block_v = c.block_v, .block_k = c.block_k, .num_warps = c.num_warps,
          .split_v = c.split_v, .chunk_v = c.chunk_v, .tma = true, .stages = c.stages.value_or(3)};
}

/// The VJP: the row scales, then per chunk of V columns: dlogits on TMA rings; dx_acc
/// (+)= dlogits @ w[:, chunk]^T and dw[:, chunk] = x^T @ dlogits on the hopper matmul,
/// both reading / writing the chunk's columns of w and dw in place (windowed products:
/// no copies of them). Then dx_acc is rounded into dx. Scratch: the row scales, the
/// dlogits chunk and the f32 dx_acc.
void runVjp(const Problem &p, const Blocks &blocks, std::span<const TensorView> in, std::span<const TensorView> out,
            ops_detail::KernelExecutor &ex) {
  const TensorView &dloss = in[0], &x = in[1], &w = in[2], &labels = in[3], &lse = in[4], &dx = out[0],
                   &dw = out[1];
  XentKernelSpec dlSpec = spec_of(p, blocks, KernelKind::DLogits);
  dlSpec.programs = ex.sm_count();  // persistent: one program per SM
  const int64_t C = dlSpec.chunk_v;
  ops_detail::Workspace ws;
  const size_t scaleAt = ws.add(double(p.B) * dtype_size(p.compute)),
               dlogitsAt = ws.add(double(p.B) * C * dtype_size(p.dtype)),
               dxAccAt = ws.add(double(p.B) * p.D * dtype_size(p.compute));
  ws.allocate(ex);
  auto view = [&](size_t at, DType dtype, std::vector<int64_t> shape) {
    return TensorView(ws.at(at), dtype, std::move(shape), ex.device());
  };
  const TensorView scale = view(scaleAt, p.compute, {p.B}), dlogits = view(dlogitsAt, p.dtype, {p.B, C}),
                   dxAcc = view(dxAccAt, p.compute, {p.B, p.D});
  launch(ex, spec_of(p, blocks, KernelKind::RowScale), {dloss, labels, scale});
  for (int64_t c0 = 0; c0 < p.V; c0 += C) {
    launch(ex, dlSpec, {x, w, labels, lse, scale, dlogits, Arg::value(double(c0))});
    // dlogits' columns past V are 0 and w's read as 0 there: the last chunk may overhang.
    MatmulSpec dxSpec{p.B, p.D, C, p.dtype, p.compute, /*trans_a=*/false, /*trans_b=*/true};
    dxSpec.accumulate = c0 > 0;
    dxSpec.b_cols = p.V;
    launch_matmul_step(ex, "xent", MatmulKernelKind::Hopper, dxSpec, dlogits, w, dxAcc, c0);
    MatmulSpec dwSpec{p.D, C, p.B, p.dtype, p.dtype, /*trans_a=*/true, /*trans_b=*/false};
    dwSpec.c_cols = p.V;
    launch_matmul_step(ex, "xent", MatmulKernelKind::Hopper, dwSpec, x, dlogits, dw, c0);
  }
  launch(ex, spec_of(p, blocks, KernelKind::DxRound), {dxAcc, dx});
}

} // namespace

std::optional<std::string> HopperConfig::refused_key(const std::string &key) {
  if (key == "block_d")
    return "unknown key \"block_d\" for hopper (the VJP's)";
  return std::nullopt;
}

std::optional<std::string> Hopper::why_not(const Problem &p) {
  if (auto problem = why_not_tensor_cores(kind, p.dtype))
    return problem;
  return why_not_tma_rows("x [B, D] and w [D, V]", "D", p.D, "V", p.V);
}

Hopper::Config Hopper::heuristic(const Problem &p) {
  // [128, 256] logit tiles on two consumer warpgroups, 64-wide D steps through a
  // four-slot ring (each step's x block feeds twice the products of [128, 128] tiles,
  // which reread x's row block from L2 once per 128 columns): at X1 on the H100 the
  // forward 12.93 / 14.61 ms (4 / 3 slots) against 22.58 with [128, 128] tiles and 3
  // slots, fwd+bwd 59.69 / 60.23 against 75.91, alternating in one call (52.20 since the
  // VJP's products read and write w's and dw's chunks in place and sum dx by TMA
  // reduce-adds; 8192-column chunks beat 16384 and 32768 there). Where those pass
  // the shared memory (small V, f32), [128, 128] tiles through three slots. One such
  // program fits an SM (registers): the forward splits V so that its row blocks x splits
  // fill whole waves of 132 SMs best (B 8192: 64 row blocks in 2 splits, 128 programs,
  // one wave).
  Config c{{.block_b = 128, .block_v = 256, .block_k = 64, .num_warps = 8}, /*stages=*/4};
  if (check(p, c))
    c = Config{{.block_b = 128, .block_v = 128, .block_k = 64, .num_warps = 8}, /*stages=*/3};
  if (p.vjp)
    return c;
  const int64_t rowBlocks = std::max<int64_t>((p.B + 127) / 128, 1);
  int64_t best = 1;
  double bestFill = 0;
  const int64_t sms = Arch::parse("sm_90a").sm_count();
  for (int64_t wanted = 1; wanted <= 32; ++wanted) {
    const int64_t splits = split_count(p, c.block_v, wanted), programs = rowBlocks * splits;
    const double fill = double(programs) / double((programs + sms - 1) / sms * sms);
    if (fill > bestFill + 1e-9) {
      best = splits;
      bestFill = fill;
    }
  }
  if (best > 1)
    c.split_v = best;
  return c;
}

std::optional<std::string> Hopper::check(const Problem &p, const Config &c) {
  if (auto problem = check_blocks(p, kind, c, std::nullopt))
    return problem;
  return check_tensor_cores(p, c, 0, /*tma=*/true, c.stages);
}

std::vector<Hopper::Config> Hopper::search_space(const Problem &p) {
  // Ring depth; 256-column logit tiles (each step's x block feeds twice the products: at
  // X1 the [128, 128] tiles reread x's row block from L2 once per 128 columns); more
  // splits of V; 64-row tiles on one consumer warpgroup.
  std::vector<Config> space{heuristic(p)};
  auto add = [&](Config c) {
    products_detail::add_new(space, std::move(c), [&](const Config &candidate) { return !check(p, candidate); });
  };
  for (int64_t blockV : {128, 256})
    for (int64_t stages : {2, 3, 4}) {
      if (blockV == 256 && stages == 2)
        continue;  // (never run on a device)
      Config c = space.front();
      c.block_v = blockV;
      c.stages = stages;
      add(c);
    }
  if (!p.vjp)
    if (int64_t splits = four_programs_per_sm(p, std::max<int64_t>((p.B + 127) / 128, 1)); splits > 1) {
      Config c = space.front();
      c.split_v = splits;
      add(c);
    }
  Config narrow = space.front();
  narrow.block_b = 64;
  narrow.block_v = 128;
  narrow.num_warps = 4;
  narrow.stages = 4;
  add(narrow);
  return space;
}

void Hopper::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                     std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  if (!p.vjp)
    run_forward(p, blocksOf(c), in, out, ex);
  else if (!zero_empty_vjp(p, out, ex))
    runVjp(p, blocksOf(c), in, out, ex);
}

} // namespace tokamax::xent_detail
