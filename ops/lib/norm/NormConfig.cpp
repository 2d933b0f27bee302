//===- NormConfig.cpp - Norm implementations: applicability and configs -----===//
//
// Config keys: "block_rows" (rows per program; in the strided case, positions of the
// inner axes), "num_warps", "block_cols" (column block of looping kernels: always for the
// reference, for the tile implementation only when rows do not fit in registers),
// "programs" (VJPs: programs of the persistent dx kernel, each writing one row of partial
// column sums; tile forward, optional: persistent programs that load the parameters
// once) and, tile only, "row_split" (a row's column blocks, next_pow2(n) / row_split
// columns each, on that many adjacent programs: each sums the statistics over the whole
// row, holds its own block's parameters, and writes its block), "prefetch" (tile
// forward on persistent programs: each loads its next row group before working on the
// current one) and "staged" (tile VJP with block_cols, one row a program: each program
// copies its next row of x and dy into shared memory while working on the current one,
// read there twice: no coefficient kernel, x and dy leave DRAM once; with row_split the
// row's column blocks in that many parts on adjacent programs).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/norm/NormKernels.h"

#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::norm_detail {

namespace {

/// The GPU the heuristics size grids for (sm_90a's default: an H100 / H200's 132 SMs).
constexpr int64_t kTargetSms = Arch::parse("sm_90a").sm_count();

bool isPow2(int64_t v) { return v > 0 && !(v & (v - 1)); }

int64_t fusedLimit(const NormProblem &p) { return p.vjp ? kNormTileMaxFusedVjpCols : kNormTileMaxFusedCols; }

/// The shared memory a staged VJP program holds: two rows of x and dy, whole blocks.
int64_t stagedBytes(const NormProblem &p, int64_t blockCols) {
  return 2 * 2 * dsl::cdiv(p.n, blockCols) * blockCols * int64_t(dtype_size(p.x));
}
constexpr int64_t kStagedMaxBytes = 200 * 1024;

/// Row groups of a config (what the programs of a forward grid cover).
int64_t groupsOf(const NormProblem &p, int64_t blockRows) {
  return p.inner > 1 ? p.outer * dsl::cdiv(p.inner, blockRows) : dsl::cdiv(p.outer, blockRows);
}

/// Programs of a VJP's persistent dx kernel: as many as fit on the GPU at once, from an
/// estimate of their registers (ptxas: ~30 + 6 per element a thread holds of a tile; 64K
/// registers and 64 warps per SM).
int64_t vjpPrograms(const NormProblem &p, int64_t blockRows, int64_t blockCols, int numWarps) {
  int64_t perThread = std::max<int64_t>(1, blockRows * blockCols / (32 * numWarps));
  int64_t registers = (30 + 6 * perThread + 7) / 8 * 8;
  int64_t perSm = std::clamp<int64_t>(std::min<int64_t>(64 / numWarps, 65536 / (32 * numWarps * registers)), 1, 32);
  // Looping kernels have one program per column block too (a 2-D grid).
  int64_t columnBlocks = blockCols >= p.n ? 1 : dsl::cdiv(p.n, blockCols);
  return std::max<int64_t>(1, std::min(kTargetSms * perSm / columnBlocks, groupsOf(p, blockRows)));
}

/// Programs of a persistent forward: as many as are resident at once. ptxas (sm_90a) fits
/// the fused forward with 16 elements of x a thread and both parameters held in 64
/// registers or fewer, without spills (docs/performance.md), hence the 64.
int64_t forwardPrograms(const NormProblem &p, int64_t blockRows, int numWarps) {
  int64_t perSm = std::clamp<int64_t>(std::min<int64_t>(64 / numWarps, 65536 / (32 * numWarps * 64)), 1, 32);
  return std::max<int64_t>(1, std::min(kTargetSms * perSm, groupsOf(p, blockRows)));
}

} // namespace

//===----------------------------------------------------------------------===//
// Problem, applicability, configs
//===----------------------------------------------------------------------===//

NormProblem problem_of(const BoundArgs &args, NormKind kind, bool vjp) {
  NormProblem p;
  p.kind = kind;
  p.vjp = vjp;
  const bool layer = kind == NormKind::Layer;
  size_t xIndex = vjp ? 1 : 0;
  const ArgSpec &x = args.arg(xIndex);
  int axis = static_cast<int>(args.int_attribute("axis"));
  p.x = x.dtype;
  p.compute = x.dtype == DType::F64 ? DType::F64 : DType::F32;
  p.outer = 1;
  p.inner = 1;
  for (int d = 0; d < axis; ++d)
    p.outer *= x.shape[d];
  p.n = x.shape[axis];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    p.inner *= x.shape[d];
  p.residual = p.compute;
  if (!vjp) {
    p.epsilon = args.float_attribute("epsilon");
    for (size_t i : {layer ? size_t(4) : size_t(3), layer ? size_t(5) : size_t(3)})
      if (args.has(i))
        p.residual = args.arg(i).dtype;
    if (args.has(1))
      p.scale = args.arg(1).dtype;
    size_t out = layer ? 3 : 2;  // y
    if (layer && args.has(2))
      p.offset = args.arg(2).dtype;
    if (layer)
      p.mean_out = args.has(out + 1);
    p.rstd_out = args.has(layer ? out + 2 : out + 1);
  } else {
    p.residual = args.arg(layer ? 4 : 3).dtype;  // rstd
    if (args.has(2))
      p.scale = args.arg(2).dtype;
    size_t dx = layer ? 5 : 4;
    if (args.has(dx + 1))
      p.dscale = args.arg(dx + 1).dtype;
    if (layer && args.has(dx + 2))
      p.doffset = args.arg(dx + 2).dtype;
  }
  return p;
}

std::optional<std::string> why_not(const NormProblem &p, ImplKind impl) {
  if (p.rows() > (int64_t(1) << 31) - 1)
    return fmt::format("{} rows exceed the 2^31 - 1 a kernel grid addresses", p.rows());
  if (impl == ImplKind::Reference)
    return std::nullopt;
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

Config heuristic(const NormProblem &p, ImplKind impl) {
  Config c;
  if (impl == ImplKind::Tile) {
    if (p.n <= fusedLimit(p)) {
      int64_t cols = next_pow2(p.n);
      // From the H200 config search (bf16 x, f32 parameters, kernel time;
      // tests/gpu/NormGpuTests.cpp "norm timings and config search"). Forward rows of
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
          const int64_t programs = std::min<int64_t>(2 * kTargetSms, groupsOf(p, rows));
          if (programs < groupsOf(p, rows))
            return Config{{"block_rows", rows}, {"num_warps", 16}, {"programs", programs}, {"prefetch", 1}};
          return Config{{"block_rows", rows}, {"num_warps", 16}};
        }
        return Config{{"block_rows", 1}, {"num_warps", warps}};
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
      c = Config{{"block_rows", rows}, {"num_warps", warps}};
      if (p.vjp)
        c.set("programs", vjpPrograms(p, rows, cols, warps));
    } else {
      // Rows past the fused limit walk column blocks: the forward 4096 on 16 warps (4096 x
      // 32768 layer_norm: 3525 GB/s against 2789 on 8), the VJP 2048 on 4 (4096x16384
      // with f32 parameters: layer_norm 2174 against 1978 for 4096 on 8, rms_norm 2228
      // against 1980).
      if (p.vjp) {
        c = Config{{"block_rows", 1}, {"block_cols", 2048}, {"num_warps", 4}};
        c.set("programs", vjpPrograms(p, 1, 2048, 4));
      } else {
        c = Config{{"block_rows", 1}, {"block_cols", 4096}, {"num_warps", 16}};
      }
    }
    return c;
  }
  // Reference: blocks of ~2048 elements, 4 warps.
  int64_t rows, cols;
  if (p.inner > 1) {
    rows = std::min<int64_t>(next_pow2(p.inner), 128);  // contiguous inner positions
    cols = std::clamp<int64_t>(2048 / rows, 1, next_pow2(p.n));
  } else {
    cols = std::min<int64_t>(next_pow2(p.n), 1024);
    rows = std::clamp<int64_t>(2048 / cols, 1, next_pow2(p.outer));
  }
  int warps = static_cast<int>(std::clamp<int64_t>(rows * cols / (32 * 16), 1, 4));
  c = Config{{"block_rows", rows}, {"block_cols", cols}, {"num_warps", warps}};
  if (p.vjp)
    c.set("programs", vjpPrograms(p, rows, cols, warps));
  return c;
}

std::optional<std::string> check_config(const NormProblem &p, ImplKind impl, const Config &c) {
  const bool tile = impl == ImplKind::Tile;
  for (const auto &[key, value] : c.values) {
    bool known = key == "block_rows" || key == "num_warps" || key == "block_cols" || key == "programs" ||
                 key == "row_split" || key == "prefetch" || key == "staged";
    if (!known)
      return fmt::format("unknown key \"{}\"", key);
  }
  for (const char *key : {"block_rows", "num_warps"})
    if (!c.has(key))
      return fmt::format("missing \"{}\"", key);
  if (p.vjp && !c.has("programs"))
    return std::string("missing \"programs\"");
  int64_t rows = c.get("block_rows"), warps = c.get("num_warps");
  if (!isPow2(rows) || rows > 65536)
    return fmt::format("block_rows must be a power of two up to 65536, got {}", rows);
  if (!isPow2(warps) || warps > 32)
    return fmt::format("num_warps must be a power of two up to 32, got {}", warps);
  if (c.has("programs") && c.get("programs") < 1)
    return fmt::format("programs must be positive, got {}", c.get("programs"));
  if (!p.vjp && c.has("programs") && (!tile || c.has("block_cols")))
    return std::string("programs (persistent forward programs that load the parameters once) needs the tile "
                       "implementation without block_cols (a looping forward loads the parameters per block)");
  if (c.has("prefetch")) {
    const int64_t prefetch = c.get("prefetch");
    if (prefetch != 0 && prefetch != 1)
      return fmt::format("prefetch must be 0 or 1, got {}", prefetch);
    if (prefetch && (p.vjp || !tile || !c.has("programs") || c.has("block_cols") || c.has("row_split")))
      return std::string("prefetch (the next row group loaded during the current one) is a config of the tile "
                         "forward's fused kernel on persistent programs (programs, no block_cols or row_split)");
  }
  const bool staged = c.get_or("staged", 0) != 0;
  if (c.has("row_split")) {
    int64_t split = c.get("row_split");
    if (!tile)
      return std::string("row_split is a config of the tile implementation");
    if (!isPow2(split) || split < 2 || split > 16)
      return fmt::format("row_split must be a power of two from 2 to 16, got {}", split);
    if (staged && c.has("block_cols") && dsl::cdiv(p.n, c.get("block_cols")) % split != 0)
      return fmt::format("a staged row in {} parts needs a multiple of {} column blocks, got {} of {} columns", split,
                         split, dsl::cdiv(p.n, c.get("block_cols")), c.get("block_cols"));
    if (c.has("block_cols") && !staged)
      return std::string("row_split and block_cols exclude each other (row_split sets the column block)");
    if (next_pow2(p.n) < split)
      return fmt::format("row_split {} needs rows of at least {} columns, got {}", split, split, p.n);
    if (rows != 1)
      return fmt::format("row_split takes block_rows = 1, got {}", rows);
  }
  if (c.has("staged")) {
    const int64_t value = c.get("staged");
    if (value != 0 && value != 1)
      return fmt::format("staged must be 0 or 1, got {}", value);
    if (value) {
      if (!tile || !p.vjp || !c.has("block_cols") || rows != 1)
        return std::string("staged (each row copied into shared memory) is a config of the tile VJP with block_cols "
                           "and block_rows 1");
      if (p.inner > 1 || p.n % 8 != 0 || dtype_size(p.x) > 4)
        return fmt::format("staged copies rows of 16- or 32-bit x of whole 16-byte chunks with cp.async: {} columns "
                           "of {}{}",
                           p.n, dtype_name(p.x), p.inner > 1 ? ", normalised over an inner axis" : "");
      const int64_t bytes = stagedBytes(p, c.get("block_cols")) / c.get_or("row_split", 1);
      if (bytes > kStagedMaxBytes)
        return fmt::format("staged holds two rows of x and dy in shared memory: {} KiB for {} columns of {} (at most "
                           "{} KiB)",
                           bytes / 1024, p.n, dtype_name(p.x), kStagedMaxBytes / 1024);
    }
  }
  int64_t cols;
  if (c.has("block_cols")) {
    cols = c.get("block_cols");
    if (!isPow2(cols) || cols > kNormTileMaxCols)
      return fmt::format("block_cols must be a power of two up to {}, got {}", kNormTileMaxCols, cols);
  } else {
    if (!tile)
      return std::string("missing \"block_cols\"");
    cols = next_pow2(p.n) / c.get_or("row_split", 1);  // what one program holds
    if (cols > fusedLimit(p))
      return fmt::format("rows of {} columns do not fit in registers (fused up to {}); set block_cols or "
                         "row_split",
                         p.n, fusedLimit(p));
  }
  if (rows * cols > 65536)
    return fmt::format("a block of {} x {} elements is too large for one program", rows, cols);
  if (tile && c.has("block_cols") && rows != 1)
    return std::string("the looping tile kernels take block_rows = 1");
  return std::nullopt;
}

std::vector<Config> search_space(const NormProblem &p, ImplKind impl) {
  std::vector<Config> out{heuristic(p, impl)};
  auto add = [&](Config c) {
    if (!check_config(p, impl, c) && std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(std::move(c));
  };
  const bool fused = impl == ImplKind::Tile && p.n <= fusedLimit(p);
  if (fused) {
    int64_t cols = next_pow2(p.n);
    for (int64_t rows = 1; rows <= next_pow2(p.rows()) && rows * cols <= 16384; rows *= 2)
      for (int warps = 1; warps <= 32; warps *= 2) {
        int64_t perThread = rows * cols / (32 * warps);
        if (perThread < 2 || perThread > 64)
          continue;
        Config c{{"block_rows", rows}, {"num_warps", warps}};
        if (p.vjp) {
          int64_t h = vjpPrograms(p, rows, cols, warps), groups = groupsOf(p, rows);
          for (int64_t programs : {h, h * 2})
            add(Config(c).set("programs", std::max<int64_t>(1, std::min(programs, groups))));
        } else {
          add(c);
        }
      }
  }
  // Persistent forward programs over the fused configs above, and rows split over 2-8
  // programs (8192+ columns: 4096 or more columns a block).
  if (fused && !p.vjp && p.n >= 1024) {
    for (Config c : std::vector<Config>(out))
      if (!c.has("block_cols") && !c.has("programs")) {
        int64_t h = forwardPrograms(p, c.get("block_rows"), int(c.get("num_warps")));
        for (int64_t programs : {h, h * 2}) {
          Config persistent = Config(c).set("programs", std::min(programs, groupsOf(p, c.get("block_rows"))));
          add(persistent);
          if (p.n >= 2048)  // long rows: the next row's loads in flight through this one's reductions
            add(persistent.set("prefetch", 1));
        }
      }
  }
  if (impl == ImplKind::Tile && p.n > 4096)
    for (int64_t split = 2; split <= 8; split *= 2)
      for (int warps = 8; warps <= 32; warps *= 2) {
        int64_t perThread = next_pow2(p.n) / split / (32 * warps);
        if (perThread < 4 || perThread > 32)
          continue;
        Config c{{"block_rows", 1}, {"num_warps", warps}, {"row_split", split}};
        add(Config(c).set("programs", p.vjp ? vjpPrograms(p, 1, next_pow2(p.n) / split, warps)
                                            : forwardPrograms(p, 1, warps)));
      }
  // Staged VJPs for rows past the fused limit, each row in 2 or 4 parts on adjacent
  // programs (one program a row held the partial sums of the whole row in registers:
  // ptxas spilled at 16384 columns at every block and warp count), about one or two
  // programs an SM. At 4096x16384 on sm_90a none of these spills (95-225 registers).
  if (impl == ImplKind::Tile && p.vjp && p.n > fusedLimit(p))
    for (int64_t parts : {2, 4})
      for (int64_t cols : {2048, 4096})
        for (int warps : {8, 16})
          for (int64_t perSm : {1, 2}) {
            const int64_t programs = std::clamp<int64_t>(kTargetSms * perSm / parts, 1, groupsOf(p, 1));
            add(Config{{"block_rows", 1}, {"block_cols", cols}, {"num_warps", warps}, {"staged", 1},
                       {"row_split", parts}, {"programs", programs}});
          }
  // Looping configs: the reference's, the tile's long rows, and for rows of a few thousand
  // columns an alternative to the fused tile kernels (two passes, but fewer registers).
  if (!fused || p.n > 2048) {
    int64_t rows = impl == ImplKind::Tile ? 1 : heuristic(p, impl).get("block_rows");
    for (int64_t cols = 512; cols <= 8192 && (!fused || cols < p.n); cols *= 2)
      for (int warps = 4; warps <= 16; warps *= 2) {
        int64_t perThread = rows * cols / (32 * warps);
        if (perThread < 4 || perThread > 64)
          continue;
        Config c{{"block_rows", rows}, {"block_cols", cols}, {"num_warps", warps}};
        if (p.vjp)
          c.set("programs", vjpPrograms(p, rows, cols, warps));
        add(c);
      }
  }
  return out;
}

} // namespace tokamax::norm_detail
