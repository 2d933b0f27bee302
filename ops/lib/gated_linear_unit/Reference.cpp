//===- Reference.cpp - gated_linear_unit by exact multiply-adds ---------===//
//
// The gate kernel with exact products in the accumulation dtype, the VJP's dx and
// dweights on the reference matmul: every dtype, every GPU. Config: block_m, block_n,
// block_k, num_warps; the heuristic takes matmul reference's 16 x 16 x 8 blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/gated_linear_unit/Common.h"

namespace tokamax::glu_detail {

std::optional<std::string> Reference::why_not(const Problem &) { return std::nullopt; }

Reference::Config Reference::heuristic(const Problem &) { return reference_blocks(); }

std::optional<std::string> Reference::check(const Problem &, const Config &c) { return check_reference_blocks(c); }

std::vector<Reference::Config> Reference::search_space(const Problem &) { return reference_search_space(); }

void Reference::execute(const Problem &p, const Config &c, std::span<const TensorView> in,
                        std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  GateKernelSpec s;  // one program a tile, no ring: the spec's defaults
  s.p = p;
  s.exact = true;
  s.block_m = c.block_m;
  s.block_n = c.block_n;
  s.block_k = c.block_k;
  s.num_warps = static_cast<int>(c.num_warps);
  run(p, s, MatmulKernelKind::Reference, in, out, ex);
}

} // namespace tokamax::glu_detail
