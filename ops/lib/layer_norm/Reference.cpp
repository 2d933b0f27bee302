//===- Reference.cpp - The reference implementation of the norms ---------===//
//
// Any axis, any dtype (f64 computes in f64); every kernel loops over column blocks:
//   forward:  one kernel looping three times over a row's column blocks (mean,
//             variance, y);
//   VJP:      row coefficients, then dx + per-program partial column sums, then the
//             reduction.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/Common.h"

#include <algorithm>

namespace tokamax::norm_detail {

std::optional<std::string> Reference::why_not(const NormProblem &p) { return why_not_any(p); }

ReferenceConfig Reference::heuristic(const NormProblem &p) {
  // Blocks of ~2048 elements, 4 warps.
  int64_t rows, cols;
  if (p.inner > 1) {
    rows = std::min<int64_t>(next_pow2(p.inner), 128);  // contiguous inner positions
    cols = std::clamp<int64_t>(2048 / rows, 1, next_pow2(p.n));
  } else {
    cols = std::min<int64_t>(next_pow2(p.n), 1024);
    rows = std::clamp<int64_t>(2048 / cols, 1, next_pow2(p.outer));
  }
  int warps = static_cast<int>(std::clamp<int64_t>(rows * cols / (32 * 16), 1, 4));
  ReferenceConfig c;
  c.block_rows = rows;
  c.block_cols = cols;
  c.num_warps = warps;
  if (p.vjp)
    c.programs = vjp_programs(p, rows, cols, warps);
  return c;
}

std::optional<std::string> Reference::check(const NormProblem &p, const ReferenceConfig &c) {
  if (auto problem = check_common(p, c.block_rows, c.num_warps, c.programs))
    return problem;
  if (!p.vjp && c.programs)
    return std::string(kForwardProgramsNeedTile);
  if (c.prefetch)
    return std::string(kPrefetchNeedsPersistentTileForward);
  if (c.row_split)
    return std::string("row_split is a config of the tile implementation");
  if (c.staged)
    return std::string(kStagedNeedsLoopingTileVjp);
  if (auto problem = check_block_cols(c.block_cols))
    return problem;
  return check_block_size(c.block_rows, c.block_cols);
}

std::vector<ReferenceConfig> Reference::search_space(const NormProblem &p) {
  std::vector<ReferenceConfig> out{heuristic(p)};
  // Column blocks of 512-8192 at the heuristic's rows.
  for (const LoopingBlock &b : looping_blocks(p, out.front().block_rows, false)) {
    ReferenceConfig c;
    c.block_rows = out.front().block_rows;
    c.block_cols = b.block_cols;
    c.num_warps = b.num_warps;
    c.programs = b.programs;
    if (!check(p, c) && std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(c);
  }
  return out;
}

void Reference::execute(const NormProblem &p, const ReferenceConfig &c, std::span<const TensorView> inputs,
                        std::span<const TensorView> outputs, Executor &executor) {
  require_runnable(why_not(p), check(p, c), ops_detail::to_config(c));
  const int warps = static_cast<int>(c.num_warps);
  if (p.vjp)  // the VJP's programs are checked present
    run_vjp(p, VjpPlan{Mode::Looping, c.block_rows, c.block_cols, warps, *c.programs}, inputs, outputs, executor);
  else
    run_forward(p, ForwardPlan{Mode::Looping, c.block_rows, c.block_cols, warps}, inputs, outputs, executor);
}

} // namespace tokamax::norm_detail
