//===- Reference.cpp - ragged_dot by exact multiply-adds ---------------===//
//
// The tile kernels' grids with exact products in the accumulation dtype: every dtype,
// every GPU. Config: block_m, block_n, block_k, num_warps; the heuristic takes matmul
// reference's 16 x 16 x 8 blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/ragged_dot/Common.h"

namespace tokamax::ragged_detail {

std::optional<std::string> Reference::why_not(const Problem &p) { return why_not_offsets(p); }

Reference::Config Reference::heuristic(const Problem &) { return reference_blocks(); }

std::optional<std::string> Reference::check(const Problem &, const Config &c) { return check_reference_blocks(c); }

std::vector<Reference::Config> Reference::search_space(const Problem &) { return reference_search_space(); }

void Reference::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                        std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const Blocks blocks{
      .exact = true, .block_m = c.block_m, .block_n = c.block_n, .block_k = c.block_k,
      .num_warps = static_cast<int>(c.num_warps)};
  run(p, blocks, in, out, ex);
}

} // namespace tokamax::ragged_detail
