//===- Hopper.cpp - gated_linear_unit on TMA rings and wgmma (sm_90a) ---===//
//
// tile's gate kernel with TMA rings always on (tile's "tma" configs), so the config has
// no async_copy, tma or wgmma key: block_m, block_n, block_k, num_warps, group_m,
// stages, programs and unfused (both products x W on the hopper matmul into scratch,
// then an elementwise gate: the heuristic). The VJP's dx and dweights run on the hopper
// matmul. First in auto's order (sm_90a; tile where K or N is not a multiple of 8).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/gated_linear_unit/Common.h"

#include <algorithm>

namespace tokamax::glu_detail {

std::optional<std::string> Hopper::why_not(const Problem &p) {
  if (auto problem = why_not_tensor_cores(kind, p.dtype))
    return problem;
  return why_not_tma_rows("x [M, K] and the weights [K, 2N]", "K", p.K, "N", p.N);
}

namespace {

/// Unfused: both products on the hopper matmul, then the gate. On an H200 at (M 8192, K
/// 4096, N 14336) bf16: forward 2.65 ms (725 TFLOP/s) against the gate kernel's 3.47,
/// forward + backward 11.6-11.8 ms against 15.8 (cuBLAS's two GEMMs + torch's gate:
/// 2.75 / 8.84). The gate kernel's keys (the search space's fused configs): [128, 128]
/// tiles with 32-wide K slices through a three-slot ring; the VJP's [128, 64] (its
/// epilogue also holds dout, da and db) with 64-wide slices and two slots.
Hopper::Config unfusedConfig(const Problem &p) {
  Hopper::Config c;
  c.unfused = true;
  c.block_m = 128;
  c.block_n = p.vjp ? 64 : 128;
  c.block_k = p.vjp ? 64 : 32;
  c.group_m = 8;
  c.num_warps = 8;
  c.stages = p.vjp ? 2 : 3;
  return c;
}

} // namespace

Hopper::Config Hopper::heuristic(const Problem &p) {
  const Config unfused = unfusedConfig(p);
  // A forward that writes no pre-activations runs the gate kernel on a persistent grid,
  // its gated [128, 128] tiles stored by TMA (64-wide K slices, four slots): on an H100
  // at (8192, 4096, 14336) 738.1 / 728.5 TFLOP/s against the unfused 707.7 / 710.5
  // (cuBLAS's two GEMMs + torch's gate 685), alternating in one call.
  if (!p.vjp && !p.preactivations) {
    Config fused = unfused;
    fused.unfused = false;
    fused.block_k = 64;
    fused.stages = 4;
    fused.programs = -1;
    fused.tma_store = 1;
    if (!check(p, fused))
      return fused;
  }
  return unfused;
}

std::optional<std::string> Hopper::check(const Problem &p, const Config &c) {
  return check_tensor_core_config(p, c.as_tile());
}

std::vector<Hopper::Config> Hopper::search_space(const Problem &p) {
  // The heuristic, the unfused plan (the gate kernel's keys unused), then the gate
  // kernel's configs.
  const Config unfused = unfusedConfig(p);
  Config fused = unfused;
  fused.unfused = false;
  std::vector<Config> space = hopper_search_space(fused, [&](const Config &c) { return !check(p, c); });
  for (const Config &c : {unfused, heuristic(p)})
    if (std::find(space.begin(), space.end(), c) == space.end())
      space.insert(space.begin(), c);
  return space;
}

void Hopper::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                     std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  run(p, tensor_core_spec(p, c.as_tile(), ex.sm_count()), MatmulKernelKind::Hopper, in, out, ex);
}

} // namespace tokamax::glu_detail
