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

std::optional<std::string> Reference::why_not(const Problem &) { return std::nullopt; }

Reference::Config Reference::heuristic(const Problem &p) {
  Config c;
  c.block_b = 16;
  c.block_v = 16;
  c.block_k = 8;
  c.num_warps = 4;
  if (p.vjp)
    c.block_d = 16;
  return c;
}

std::optional<std::string> Reference::check(const Problem &p, const Config &c) {
  return check_blocks(p, kind, c, c.block_d);
}

std::vector<Reference::Config> Reference::search_space(const Problem &p) {
  std::vector<Config> space{heuristic(p)};
  Config c;
  c.block_b = 16;
  c.block_v = 32;
  c.block_k = 8;
  c.num_warps = 4;
  if (p.vjp)
    c.block_d = 8;
  products_detail::add_new(space, std::move(c), [&](const Config &candidate) { return !check(p, candidate); });
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
