//===- GluPlans.cpp - gated_linear_unit: launches and configs ---------------===//
//
//   forward:  the gate kernel (out);
//   VJP:      the gate VJP kernel (dh [M, 2, N] in x's dtype, in the call's scratch),
//             then dx = dh @ weights^T and dweights = x^T @ dh, as [M, 2N] / [K, 2N]
//             matrices, on the matmul kernels (tile: mma.sync; reference: exact).
//
// Configs (the gate kernel's): block_m, block_n, block_k, num_warps, and for tile
// group_m, async_copy, stages, wgmma and tma (both opt-in, out of the heuristic and the
// search space until measured on the device, as for attention; tma: TMA rings refilled
// by a producer warpgroup, wgmma from shared memory, sm_90a only). The tile heuristic takes 128 x 128 output tiles (two f32
// accumulators: 128 registers per thread on 8 warps) with 64-byte K slices through a
// three-slot cp.async ring where the rows allow it, 128 x 64 otherwise and for the VJP
// (whose epilogue holds dout, da and db too); exact products use matmul reference's
// 16 x 16 x 8 blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/glu/GluDetail.h"
#include "ops/lib/matmul/MatmulDetail.h"

#include "ops/lib/Dispatch.h"

#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::glu_detail {

namespace {

using Arg = ops_detail::KernelExecutor::Arg;

bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }

/// A hopper config as the tile config it runs.
Config asTile(Impl impl, const Config &c) { return impl == Impl::Hopper ? hopper_as_tile(c) : c; }

/// `smCount` resolves "programs": -1 (one per SM).
GateKernelSpec gateSpec(const Problem &p, Impl impl, const Config &hopperOrTile, int smCount) {
  const Config c = asTile(impl, hopperOrTile);
  GateKernelSpec s;
  s.p = p;
  s.exact = impl == Impl::Reference;
  s.block_m = c.get("block_m");
  s.block_n = c.get("block_n");
  s.block_k = c.get("block_k");
  s.num_warps = static_cast<int>(c.get("num_warps"));
  s.group_m = c.get_or("group_m", 8);
  s.async_copy = !s.exact && c.get_or("async_copy", 0) != 0 && async_copy_serves(p);
  s.stages = c.get_or("stages", 3);
  s.wgmma = s.async_copy && c.get_or("wgmma", 0) != 0;
  s.tma = s.async_copy && c.get_or("tma", 0) != 0;
  const int64_t programs = c.get_or("programs", 0);
  s.programs = s.tma ? (programs < 0 ? smCount : programs) : 0;
  return s;
}

/// c = op(a) @ op(b) on the implementation's matmul kernel (alpha 1, no bias).
void launchMatmul(ops_detail::KernelExecutor &ex, Impl impl, const MatmulSpec &spec, TensorView a, TensorView b,
                  TensorView c) {
  const MatmulKernelKind kind = impl == Impl::Reference ? MatmulKernelKind::Reference
                               : impl == Impl::Hopper  ? MatmulKernelKind::Hopper
                                                       : MatmulKernelKind::Tile;
  launch_matmul_step(ex, "glu", kind, spec, std::move(a), std::move(b), std::move(c));
}

/// Estimated 32-bit registers per thread of the two accumulators (and, without the
/// ring, the three blocks held one step ahead).
int64_t registerEstimate(const Problem &p, const Config &c) {
  const int64_t threads = 32 * c.get("num_warps"), bm = c.get("block_m"), bn = c.get("block_n"),
                bk = c.get("block_k");
  int64_t words = 2 * bm * bn * (p.compute == DType::F64 ? 2 : 1);
  if (!c.get_or("async_copy", 0))
    words += (bm + 2 * bn) * bk / 2;
  return words / threads;
}

int64_t ringBytes(const Problem &p, const Config &c) {
  if (!c.get_or("async_copy", 0))
    return 0;
  return c.get_or("stages", 3) * (c.get("block_m") + 2 * c.get("block_n")) * c.get("block_k") *
         int64_t(dtype_size(p.dtype));
}

/// The weights as the gate kernel reads them: [K, 2N] for TMA (2-D tensor maps).
std::vector<int64_t> weightsShape(const GateKernelSpec &s) {
  return s.tma ? std::vector<int64_t>{s.p.K, 2 * s.p.N} : std::vector<int64_t>{s.p.K, 2, s.p.N};
}

} // namespace

bool async_copy_serves(const Problem &p) { return isHalf(p.dtype) && p.K % 8 == 0 && p.N % 8 == 0; }

void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> in,
             std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const int device = ex.device();
  auto as = [&](const TensorView &t, std::vector<int64_t> shape) { return TensorView(t.data(), t.dtype(), shape, device); };
  if (!p.vjp) {
    if (p.M == 0 || p.N == 0)
      return;
    if (p.K == 0) {  // a = b = 0 and act(0) is finite: out = 0
      ex.zero(out[0]);
      return;
    }
    GateKernelSpec s = gateSpec(p, impl, config, ex.sm_count());
    ex.launch(s.key(), [s] { return gate_kernel(s); },
              {as(in[0], {p.M, p.K}), as(in[1], weightsShape(s)), as(out[0], {p.M, p.N})});
    return;
  }
  const TensorView &dout = in[0], &x = in[1], &w = in[2], &dx = out[0], &dw = out[1];
  if (p.M == 0 || p.N == 0 || p.K == 0) {  // empty sums: whatever is not empty is zero
    ex.zero(dx);
    ex.zero(dw);
    return;
  }
  const uint64_t dh = ex.scratch(size_t(p.M) * 2 * p.N * dtype_size(p.dtype));
  GateKernelSpec s = gateSpec(p, impl, config, ex.sm_count());
  ex.launch(s.key(), [s] { return gate_kernel(s); },
            {as(dout, {p.M, p.N}), as(x, {p.M, p.K}), as(w, weightsShape(s)),
             TensorView(dh, p.dtype, std::vector<int64_t>{p.M, 2, p.N}, device)});
  const TensorView dhRows(dh, p.dtype, std::vector<int64_t>{p.M, 2 * p.N}, device);
  // dx [M, K] = dh [M, 2N] @ (weights as [K, 2N])^T.
  launchMatmul(ex, impl, MatmulSpec{p.M, p.K, 2 * p.N, p.dtype, p.dtype, false, true}, dhRows,
               as(w, {p.K, 2 * p.N}), as(dx, {p.M, p.K}));
  // dweights [K, 2N] = x^T @ dh.
  launchMatmul(ex, impl, MatmulSpec{p.K, 2 * p.N, p.M, p.dtype, p.dtype, true, false}, as(x, {p.M, p.K}), dhRows,
               as(dw, {p.K, 2 * p.N}));
}

std::optional<std::string> why_not(const Problem &p, Impl impl) {
  if (impl != Impl::Reference && !isHalf(p.dtype))
    return fmt::format("{} serves bf16 and f16 (tensor cores), not {}; use reference", impl_name(impl),
                       dtype_name(p.dtype));
  if (impl == Impl::Hopper && !async_copy_serves(p))
    return fmt::format("hopper reads x [M, K] and the weights [K, 2N] by TMA in rows of whole 16-byte chunks: K {} "
                       "and N {} must be multiples of 8; use tile",
                       p.K, p.N);
  return std::nullopt;
}

Config heuristic(const Problem &p, Impl impl) {
  // [128, 128] tiles with 32-wide K slices through a three-slot ring; the VJP's [128, 64]
  // (its epilogue also holds dout, da and db) with 64-wide slices and two slots: configs
  // whose tma kernels passed their numerics on the H200. One program a tile: the
  // persistent grid ("programs": -1) and 64-wide slices at [128, 128] did not finish on
  // the H200's only run of them (see docs/performance.md), so they stay out of the
  // heuristic.
  if (impl == Impl::Hopper)
    return p.vjp ? Config{{"block_m", 128}, {"block_n", 64}, {"block_k", 64}, {"group_m", 8}, {"num_warps", 8},
                          {"stages", 2}}
                 : Config{{"block_m", 128}, {"block_n", 128}, {"block_k", 32}, {"group_m", 8}, {"num_warps", 8},
                          {"stages", 3}};
  if (impl == Impl::Reference)
    return {{"block_m", 16}, {"block_n", 16}, {"block_k", 8}, {"num_warps", 4}};
  // Two [128, 128] f32 accumulators take 128 registers per thread on 8 warps: the ring's
  // forward fits; the register loads' blocks and the VJP's epilogue need half-width tiles.
  const bool ring = async_copy_serves(p);
  const int64_t bm = std::clamp<int64_t>(ops_detail::next_power_of_two(p.M), 16, 128);
  const int64_t bn = std::clamp<int64_t>(ops_detail::next_power_of_two(p.N), 16, ring && !p.vjp ? 128 : 64);
  Config c{{"block_m", bm}, {"block_n", bn}, {"block_k", 32}, {"group_m", 8},
           {"num_warps", std::clamp<int64_t>(bm * bn / 1024, 1, 8)}};
  if (async_copy_serves(p))
    c.set("async_copy", 1).set("stages", 3);
  return c;
}

std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &config) {
  for (const char *key : {"block_m", "block_n", "block_k", "num_warps"})
    if (!config.has(key))
      return fmt::format("missing \"{}\"", key);
  if (impl == Impl::Hopper)
    if (auto problem = check_hopper_keys(config))
      return problem;
  const Config c = asTile(impl, config);
  const bool tile = impl != Impl::Reference;
  for (const auto &[key, value] : c.values)
    if (key != "block_m" && key != "block_n" && key != "block_k" && key != "num_warps" &&
        !(tile && (key == "group_m" || key == "async_copy" || key == "stages" || key == "wgmma" || key == "tma" ||
                   key == "programs")))
      return fmt::format("unknown key \"{}\" for {}", key, impl_name(impl));
  const int64_t bm = c.get("block_m"), bn = c.get("block_n"), w = c.get("num_warps");
  if (auto problem = check_block_sizes(c, tile))
    return problem;
  if (!tile)
    return std::nullopt;
  if (c.get_or("group_m", 8) < 1)
    return fmt::format("group_m must be at least 1, got {}", c.get("group_m"));
  if (c.has("programs") && (c.get("programs") < -1 || !c.get_or("tma", 0)))
    return fmt::format("programs (a persistent grid of the tma kernels: -1 one per SM, 0 one per tile, or a count) "
                       "needs \"tma\": 1 and a value >= -1, got {}",
                       c.get("programs"));
  if (auto problem = check_ring_keys(c, async_copy_serves(p), p.K, p.N))
    return problem;
  const bool async = c.get_or("async_copy", 0) != 0;
  if (const int64_t wgmma = c.get_or("wgmma", 0); wgmma != 0 && wgmma != 1)
    return fmt::format("wgmma must be 0 or 1, got {}", wgmma);
  if (c.get_or("wgmma", 0) && (!async || bm != 16 * w))
    return fmt::format("wgmma (products reading the cp.async ring on sm_90a) needs \"async_copy\": 1 and "
                       "block_m = 16 * num_warps (every warp along M), got block_m {} with {} warps",
                       bm, w);
  if (auto problem = check_tma_ring_keys(c, int64_t(dtype_size(p.dtype))))
    return problem;
  if (ringBytes(p, c) > ops_detail::kHopperSharedBudget)
    return fmt::format("the cp.async ring needs {} KiB of shared memory (at most 220)", ringBytes(p, c) / 1024);
  if (registerEstimate(p, c) > 128)
    return fmt::format("block_m {} x block_n {} with {} warps needs ~{} registers per thread for the accumulators "
                       "and blocks",
                       bm, bn, w, registerEstimate(p, c));
  return std::nullopt;
}

std::vector<Config> search_space(const Problem &p, Impl impl) {
  if (impl == Impl::Hopper)
    return hopper_search_space(heuristic(p, impl), [&](const Config &c) { return !check_config(p, impl, c); });
  return block_search_space(heuristic(p, impl), impl == Impl::Reference, async_copy_serves(p), Config{{"group_m", 8}},
                            [&](const Config &c) { return !check_config(p, impl, c); });
}

} // namespace tokamax::glu_detail
