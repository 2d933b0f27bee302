//===- Tile.cpp - The tile implementation of the norms -------------------===//
//
// Rows of the last axis, bf16 / f16 / f32 x, up to kNormTileMaxCols columns:
//   forward:  one fused kernel (rows in registers; with programs, persistent programs
//             that load the parameters once, with prefetch loading the next row group
//             during the current one), with row_split one whose programs share a row
//             (Split), or, with block_cols, one kernel that loops twice over column
//             blocks (Shifted: shifted sums, then y);
//   VJP:      dx + per-program partial column sums in one kernel (Fused; row_split:
//             Split; staged: each row copied into shared memory, Staged), or with
//             block_cols row coefficients first (Looping); then the reduction.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/Common.h"

#include "ops/lib/framework/SharedMemory.h"

#include <tokamax/ops/Norm.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace tokamax::norm_detail {

namespace {

/// The longest row a program holds in registers.
int64_t fusedLimit(const NormProblem &p) { return p.vjp ? kNormTileMaxFusedVjpCols : kNormTileMaxFusedCols; }

/// The VJP's kernels at a config (its programs checked present).
VjpPlan vjpPlan(const NormProblem &p, const TileConfig &c) {
  // Staged takes row_split as the row's parts.
  const bool split = c.row_split && !c.staged, fused = !c.block_cols && !split;
  VjpPlan plan{Mode::Looping, c.block_rows, 1, static_cast<int>(c.num_warps), *c.programs,
               c.staged ? c.row_split.value_or(1) : 1};
  plan.mode = fused ? Mode::Fused : split ? Mode::Split : c.staged ? Mode::Staged : Mode::Looping;
  plan.block_cols = fused ? next_pow2(p.n) : split ? next_pow2(p.n) / *c.row_split : *c.block_cols;
  plan.chunk_rows = c.chunk_rows.value_or(0);
  return plan;
}

/// Why a staged VJP's kernels (a program holds two rows of x and dy, whole blocks) do not
/// fit a block's shared memory, as the compiler plans them.
std::optional<std::string> stagedSharedMemory(const NormProblem &p, const TileConfig &c) {
  const std::array<TensorView, 5> inputs{};  // dy, x, scale, [mean,] rstd: views without data
  const std::array<TensorView, 3> outputs{};
  return ops_detail::check_shared_memory([&](Executor &ex) { run_vjp(p, vjpPlan(p, c), inputs, outputs, ex); });
}

/// Programs of a persistent forward: as many as are resident at once. ptxas (sm_90a) fits
/// the fused forward with 16 elements of x a thread and both parameters held in 64
/// registers or fewer, without spills (docs/performance.md), hence the 64.
int64_t forwardPrograms(const NormProblem &p, int64_t blockRows, int numWarps) {
  int64_t perSm = std::clamp<int64_t>(std::min<int64_t>(64 / numWarps, 65536 / (32 * numWarps * 64)), 1, 32);
  return std::max<int64_t>(1, std::min(kTargetSms * perSm, groups_of(p, blockRows)));
}

/// The config of `rows` rows a program, `warps` warps, whole rows (or row_split parts).
TileConfig rowsConfig(int64_t rows, int64_t warps) {
  TileConfig c;
  c.block_rows = rows;
  c.num_warps = warps;
  return c;
}

/// The looping config: one row a program, `cols` columns a block.
TileConfig loopingConfig(int64_t cols, int64_t warps, std::optional<int64_t> programs) {
  TileConfig c = rowsConfig(1, warps);
  c.block_cols = cols;
  c.programs = programs;
  return c;
}

} // namespace

std::optional<std::string> Tile::why_not(const NormProblem &p) {
  if (auto reason = why_not_any(p))
    return reason;
  if (p.x == DType::F64)
    return std::string("f64 math is not supported by the tile implementation");
  if (p.inner > 1)
    return fmt::format("the tile implementation normalises the last axis only (here {} elements follow the "
                       "normalised axis)",
                       p.inner);
  if (p.n > kNormTileMaxCols)
    return fmt::format("rows of {} columns exceed the {} the tile implementation serves", p.n, kNormTileMaxCols);
  return std::nullopt;
}

TileConfig Tile::heuristic(const NormProblem &p) {
  if (p.n <= fusedLimit(p)) {
    int64_t cols = next_pow2(p.n);
    // From the H200 config search (bf16 x, f32 parameters, kernel time;
    // tests/gpu/layer_norm/NormGpuTests.cpp "norm timings and config search"). Forward rows of
    // 4096+ columns: one row a program, 32 elements a thread; layer_norm on persistent
    // programs that load the parameters once (16384x4096: 3316 GB/s against 2741 on
    // 4 warps without; 16384x8192: 3331 against 2606 for quarter-row blocks;
    // 4096x16384: 2692 against 2354), rms_norm without (16384x4096: 3820 against 3639
    // on 8 warps), its 16384-column rows in two 8192-column blocks (3366 against 2509).
    // With "prefetch" (the next row group's loads in flight through the current one's
    // reductions and stores; same search): 16384 elements a program on 16 warps, two
    // persistent programs per SM: layer_norm 16384x4096 3577 GB/s (4 rows) against
    // 3353, 16384x8192 3737 (2 rows) against 3366, 4096x16384 3567 against 2709;
    // rms_norm 4096x16384 3720 against 3387 (its shorter rows stay as they were).
    if (!p.vjp && cols >= 4096) {
      const int warps = static_cast<int>(std::min<int64_t>(cols / 1024, 32));
      if (p.kind == NormKind::Layer || cols >= 16384) {
        const int64_t rows = std::max<int64_t>(1, 16384 / cols);
        const int64_t programs = std::min<int64_t>(2 * kTargetSms, groups_of(p, rows));
        TileConfig c = rowsConfig(rows, 16);
        if (programs < groups_of(p, rows)) {
          c.programs = programs;
          c.prefetch = true;
        }
        return c;
      }
      return rowsConfig(1, warps);
    }
    // Otherwise about 2048+ elements per program, or a forward row of 1024+ columns per
    // program (32768x1024 layer_norm: 3588 GB/s against 3284 for two rows). Elements per
    // thread: 16 (8 in the VJP, which keeps x, dy and two partial sums live), several
    // 16-byte loads in flight and no spills; from 4096 columns layer_norm takes 32 (its
    // two row reductions across fewer warps; 16384x4096 forward 3832 against 3599 on 8
    // warps, VJP 3036 against 2142 on 16) and rms_norm's VJP 16 (3238 against 2266).
    int64_t perProgram = !p.vjp && cols >= 1024 ? cols : 2048;
    int64_t rows = std::clamp<int64_t>(std::max<int64_t>(perProgram, cols) / cols, 1, next_pow2(p.rows()));
    int64_t perThread = p.vjp ? 8 : 16;
    if (cols >= 4096)
      perThread = p.kind == NormKind::Layer ? 32 : 16;
    int warps = static_cast<int>(std::clamp<int64_t>(rows * cols / (32 * perThread), 1, 16));
    TileConfig c = rowsConfig(rows, warps);
    if (p.vjp)
      c.programs = vjp_programs(p, rows, cols, warps);
    return c;
  }
  // Rows past the fused limit walk column blocks: the forward 4096 on 16 warps (4096 x
  // 32768 layer_norm: 3525 GB/s against 2789 on 8), the VJP 2048 on 4 (4096x16384
  // with f32 parameters: layer_norm 2174 against 1978 for 4096 on 8, rms_norm 2228
  // against 1980).
  if (p.vjp)
    return loopingConfig(2048, 4, vjp_programs(p, 1, 2048, 4));
  return loopingConfig(4096, 16, std::nullopt);
}

std::optional<std::string> Tile::check(const NormProblem &p, const TileConfig &c) {
  if (auto problem = check_common(p, c.block_rows, c.num_warps, c.programs))
    return problem;
  const int64_t rows = c.block_rows;
  // Before anything divides by it (a staged row's parts count its column blocks).
  if (c.block_cols)
    if (auto problem = check_block_cols(*c.block_cols))
      return problem;
  if (!p.vjp && c.programs && c.block_cols)
    return std::string(kForwardProgramsNeedTile);
  if (c.prefetch && (p.vjp || !c.programs || c.block_cols || c.row_split))
    return std::string(kPrefetchNeedsPersistentTileForward);
  if (c.row_split) {
    const int64_t split = *c.row_split;
    if (!is_pow2(split) || split < 2 || split > 16)
      return fmt::format("row_split must be a power of two from 2 to 16, got {}", split);
    if (c.staged && c.block_cols && dsl::cdiv(p.n, *c.block_cols) % split != 0)
      return fmt::format("a staged row in {} parts needs a multiple of {} column blocks, got {} of {} columns", split,
                         split, dsl::cdiv(p.n, *c.block_cols), *c.block_cols);
    if (c.block_cols && !c.staged)
      return std::string("row_split and block_cols exclude each other (row_split sets the column block)");
    if (next_pow2(p.n) < split)
      return fmt::format("row_split {} needs rows of at least {} columns, got {}", split, split, p.n);
    if (rows != 1)
      return fmt::format("row_split takes block_rows = 1, got {}", rows);
  }
  if (c.chunk_rows) {
    if (!p.vjp || !c.block_cols || c.staged || c.row_split)
      return std::string("chunk_rows (the rows in chunks, each chunk's coefficient and dx kernels back to back) is a "
                         "config of the looping tile VJP: block_cols, without staged or row_split");
    if (*c.chunk_rows < 1)
      return fmt::format("chunk_rows must be positive, got {}", *c.chunk_rows);
  }
  if (c.staged) {
    if (!p.vjp || !c.block_cols || rows != 1)
      return std::string(kStagedNeedsLoopingTileVjp);
    if (p.inner > 1 || p.n % 8 != 0 || dtype_size(p.x) > 4)
      return fmt::format("staged copies rows of 16- or 32-bit x of whole 16-byte chunks with cp.async: {} columns "
                         "of {}{}",
                         p.n, dtype_name(p.x), p.inner > 1 ? ", normalised over an inner axis" : "");
  }
  int64_t cols;
  if (c.block_cols) {
    cols = *c.block_cols;
    if (auto problem = check_block_cols(cols))
      return problem;
  } else {
    cols = next_pow2(p.n) / c.row_split.value_or(1);  // what one program holds
    if (cols > fusedLimit(p))
      return fmt::format("rows of {} columns do not fit in registers (fused up to {}); set block_cols or "
                         "row_split",
                         p.n, fusedLimit(p));
  }
  if (auto problem = check_block_size(rows, cols))
    return problem;
  if (c.block_cols && rows != 1)
    return std::string("the looping tile kernels take block_rows = 1");
  if (c.staged)
    return stagedSharedMemory(p, c);
  return std::nullopt;
}

std::vector<TileConfig> Tile::search_space(const NormProblem &p) {
  std::vector<TileConfig> out{heuristic(p)};
  auto add = [&](const TileConfig &c) {
    if (!check(p, c) && std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(c);
  };
  const bool fused = p.n <= fusedLimit(p);
  if (fused) {
    int64_t cols = next_pow2(p.n);
    for (int64_t rows = 1; rows <= next_pow2(p.rows()) && rows * cols <= 16384; rows *= 2)
      for (int warps = 1; warps <= 32; warps *= 2) {
        int64_t perThread = rows * cols / (32 * warps);
        if (perThread < 2 || perThread > 64)
          continue;
        TileConfig c = rowsConfig(rows, warps);
        if (p.vjp) {
          int64_t h = vjp_programs(p, rows, cols, warps), groups = groups_of(p, rows);
          for (int64_t programs : {h, h * 2}) {
            c.programs = std::max<int64_t>(1, std::min(programs, groups));
            add(c);
          }
        } else {
          add(c);
        }
      }
  }
  // Persistent forward programs over the fused configs above, and rows split over 2-8
  // programs (8192+ columns: 4096 or more columns a block).
  if (fused && !p.vjp && p.n >= 1024) {
    for (const TileConfig &c : std::vector<TileConfig>(out))
      if (!c.block_cols && !c.programs) {
        int64_t h = forwardPrograms(p, c.block_rows, int(c.num_warps));
        for (int64_t programs : {h, h * 2}) {
          TileConfig persistent = c;
          persistent.programs = std::min(programs, groups_of(p, c.block_rows));
          add(persistent);
          if (p.n >= 2048) {  // long rows: the next row's loads in flight through this one's reductions
            persistent.prefetch = true;
            add(persistent);
          }
        }
      }
  }
  if (p.n > 4096)
    for (int64_t split = 2; split <= 8; split *= 2)
      for (int warps = 8; warps <= 32; warps *= 2) {
        int64_t perThread = next_pow2(p.n) / split / (32 * warps);
        if (perThread < 4 || perThread > 32)
          continue;
        TileConfig c = rowsConfig(1, warps);
        c.row_split = split;
        c.programs = p.vjp ? vjp_programs(p, 1, next_pow2(p.n) / split, warps) : forwardPrograms(p, 1, warps);
        add(c);
      }
  // Staged VJPs for rows past the fused limit, each row in 2 or 4 parts on adjacent
  // programs (one program a row held the partial sums of the whole row in registers:
  // ptxas spilled at 16384 columns at every block and warp count), about one or two
  // programs an SM. At 4096x16384 on sm_90a none of these spills (95-225 registers).
  if (p.vjp && p.n > fusedLimit(p))
    for (int64_t parts : {2, 4})
      for (int64_t cols : {2048, 4096})
        for (int warps : {8, 16})
          for (int64_t perSm : {1, 2}) {
            const int64_t programs = std::clamp<int64_t>(kTargetSms * perSm / parts, 1, groups_of(p, 1));
            TileConfig c = loopingConfig(cols, warps, programs);
            c.staged = true;
            c.row_split = parts;
            add(c);
          }
  // Looping configs: the tile's long rows, and for rows of a few thousand columns an
  // alternative to the fused kernels (two passes, but fewer registers).
  if (!fused || p.n > 2048)
    for (const LoopingBlock &b : looping_blocks(p, 1, fused))
      add(loopingConfig(b.block_cols, b.num_warps, b.programs));
  return out;
}

void Tile::execute(const NormProblem &p, const TileConfig &c, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, Executor &executor) {
  require_runnable(why_not(p), check(p, c), ops_detail::to_config(c));
  const int warps = static_cast<int>(c.num_warps);
  if (!p.vjp) {
    ForwardPlan plan{Mode::Fused, c.block_rows, 1, warps, c.programs, c.prefetch};
    if (c.block_cols) {
      plan.mode = Mode::Shifted;
      plan.block_cols = *c.block_cols;
    } else {
      plan.mode = c.row_split ? Mode::Split : Mode::Fused;
      plan.block_cols = next_pow2(p.n) / c.row_split.value_or(1);
    }
    run_forward(p, plan, inputs, outputs, executor);
    return;
  }
  run_vjp(p, vjpPlan(p, c), inputs, outputs, executor);
}

} // namespace tokamax::norm_detail
