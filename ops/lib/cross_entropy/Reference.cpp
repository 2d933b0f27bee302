//===- Reference.cpp - linear_softmax_cross_entropy_loss by exact multiply-adds -===//
//
// tile's kernels with exact products in the accumulation dtype: every dtype, every GPU.
// Config: block_b, block_v, block_k, num_warps, for the VJP block_d and, optional,
// chunk_v; for the forward, optional, split_v. The heuristic takes matmul reference's
// small blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/cross_entropy/Common.h"

namespace tokamax::xent_detail {
namespace {

/// [16, block_v] logit tiles by 8-wide D steps on 4 warps, and the VJP's block of D for
/// its dx and dw kernels.
Reference::Config exact_blocks(const Problem &p, int64_t block_v, int64_t block_d) {
  return {{.block_b = 16, .block_v = block_v, .block_k = 8, .num_warps = 4},
          p.vjp ? std::optional<int64_t>(block_d) : std::nullopt};
}

} // namespace

std::optional<std::string> Reference::why_not(const Problem &) { return std::nullopt; }

Reference::Config Reference::heuristic(const Problem &p) { return exact_blocks(p, 16, 16); }

std::optional<std::string> Reference::check(const Problem &p, const Config &c) {
  return check_blocks(p, kind, c, c.block_d);
}

std::vector<Reference::Config> Reference::search_space(const Problem &p) {
  std::vector<Config> space{heuristic(p)};
  products_detail::add_new(space, exact_blocks(p, 32, 8),
                           [&](const Config &candidate) { return !check(p, candidate); });
  return space;
}

void Reference::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                        std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  run(p,
      Blocks{.exact = true, .block_b = c.block_b, .block_v = c.block_v, .block_k = c.block_k,
             .num_warps = c.num_warps, .block_d = own_block_d(p, c.block_d), .split_v = c.split_v,
             .chunk_v = c.chunk_v},
      in, out, ex);
}

} // namespace tokamax::xent_detail
