//===- Chunked.cpp - The flash kernels, every block masked ------------------===//
//
// The FlashAttention-2 structured kernels (FlashKernels.cpp) on tensor cores for bf16 /
// f16 and on exact multiply-adds for f32 / f64, every block of a walk masked, loops
// through registers. It takes tile's keys (FlashConfig), so that a tile config runs
// here; having no cp.async ring, it reads "async_copy" and "wgmma" as registers.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/Common.h"

#include <algorithm>

namespace tokamax::attention_detail {

namespace {

/// The spec of a chunked call's kernels.
KernelSpec chunkedSpec(const Problem &p, const FlashConfig &c) {
  KernelSpec s = block_spec(p, products_of(p), c);
  s.prefetch = c.prefetch;
  s.stages = static_cast<int>(c.stages);  // keyed, though no ring is built
  return s;
}

} // namespace

std::optional<std::string> Chunked::why_not(const Problem &p) { return grid_why_not(p); }

FlashConfig Chunked::heuristic(const Problem &p) {
  FlashConfig c = flash_defaults(p);
  if (is_half(p.dtype) && std::max(padded_head_dim(p.H), padded_head_dim(p.Hv)) <= 64)
    c.block_kv = 128;  // chunks of 128 keys
  return c;
}

std::vector<FlashConfig> Chunked::search_space(const Problem &p) {
  return flash_search_space(p, heuristic(p), /*ring=*/false, [&](const FlashConfig &c) { return !check(p, c); });
}

std::optional<std::string> Chunked::check(const Problem &p, const FlashConfig &c) {
  if (auto bad = check_flash(p, c))
    return bad;
  return check_flash_shared_memory(chunkedSpec(p, c));
}

void Chunked::execute(const Problem &p, const FlashConfig &c, std::span<const TensorView> inputs,
                      std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  run_flash(chunkedSpec(p, c), inputs, outputs, ex);
}

} // namespace tokamax::attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::attention_detail::Chunked>;
