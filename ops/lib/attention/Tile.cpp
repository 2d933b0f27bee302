//===- Tile.cpp - The flash kernels on tensor cores -------------------------===//
//
// The FlashAttention-2 structured kernels (FlashKernels.cpp) on tensor cores (bf16 /
// f16): the blocks no mask touches run without mask arithmetic (split edges), and with
// "async_copy" (the heuristic's choice wherever the head dims allow it) the blocks a
// loop walks go through a cp.async ring of "stages" slots in shared memory instead of
// registers; with it, "wgmma" (1: on sm_90a the products read the ring on wgmma; 2: the
// forward also issues the next step's Q K^T before this step's softmax; opt-in until
// measured on the device). The heuristic starts from FlashAttention-2's defaults
// (flash_defaults), with 128-row blocks for the forward at H <= 64, as measured.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/Common.h"

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::attention_detail {

namespace {

/// cp.async copies rows of whole 16-byte chunks: a config asking for the ring elsewhere
/// gets the register path.
bool ringServes(const Problem &p) { return is_half(p.dtype) && p.H % 8 == 0 && p.Hv % 8 == 0; }

/// The spec of a tile call's kernels.
KernelSpec tileSpec(const Problem &p, const FlashConfig &c) {
  KernelSpec s = block_spec(p, products_of(p), c);
  s.split_edges = true;
  s.prefetch = c.prefetch;
  s.async_copy = c.async_copy && ringServes(p);
  s.stages = static_cast<int>(c.stages);
  s.wgmma = s.async_copy && c.wgmma;
  s.overlap = s.wgmma && c.overlap;
  return s;
}

} // namespace

std::optional<std::string> Tile::why_not(const Problem &p) {
  if (auto no = grid_why_not(p))
    return no;
  if (!is_half(p.dtype))
    return fmt::format("tile serves bf16 and f16 (tensor cores), not {}; use chunked or reference",
                       dtype_name(p.dtype));
  return std::nullopt;
}

FlashConfig Tile::heuristic(const Problem &p) {
  FlashConfig c = flash_defaults(p);
  if (!is_half(p.dtype))
    return c;
  const int64_t dim = std::max(padded_head_dim(p.H), padded_head_dim(p.Hv));
  // The forward at H 64 on the H200: 128-row blocks 236 TFLOP/s, 64-row 177 (S1).
  if (!p.vjp && dim <= 64)
    c.block_q = std::min<int64_t>(128, pow2_at_least(p.T, 16));
  // The VJP at H 128 on the H200 (S2 fwd+bwd): through registers 64 x 64 on 8 warps
  // 164-172 TFLOP/s, 64 x 32 on 4 warps 131-142; through the cp.async ring 64 x 32 on 4
  // warps 242, 64 x 64 on 8 warps 232.
  if (p.vjp && dim == 128 && !ringServes(p))
    c.block_kv = 64, c.num_warps = 8;
  c.async_copy = ringServes(p);
  return c;
}

std::vector<FlashConfig> Tile::search_space(const Problem &p) {
  return flash_search_space(p, heuristic(p), ringServes(p), [&](const FlashConfig &c) { return !check(p, c); });
}

std::optional<std::string> Tile::check(const Problem &p, const FlashConfig &c) {
  if (auto bad = check_flash(p, c))
    return bad;
  // Measured on an H100: this VJP's dk and dv come out wrong (dq right; the interpreter
  // right; causal, H 32 / 128, 8 warps, 32-row blocks right). Refused until found.
  if (p.vjp && c.wgmma && p.H == 64 && p.Hv == 64 && c.num_warps == 4 && c.block_q >= 64 && c.block_kv >= 64)
    return fmt::format("tile's VJP with \"wgmma\" on 4 warps at head dim 64 with block_q and block_kv of 64 or "
                       "more gives wrong dk / dv on sm_90a (an open bug; got block_q {}, block_kv {}): use 8 warps, "
                       "a block of 32, or \"wgmma\": 0",
                       c.block_q, c.block_kv);
  return check_flash_shared_memory(tileSpec(p, c));
}

void Tile::execute(const Problem &p, const FlashConfig &c, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  run_flash(tileSpec(p, c), inputs, outputs, ex);
}

} // namespace tokamax::attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::attention_detail::Tile>;
