//===- Common.h - What the norm implementations share ----------*- C++ -*-===//
//
// Internal to ops/lib/layer_norm. A layer_norm / rms_norm call (forward or VJP) as its
// two implementations see it (NormProblem), the implementations with their typed configs
// (Tile.cpp, Reference.cpp; registered by Op.cpp in auto's order: tile, then reference),
// and what both use: the sizing of persistent grids, the checks they make alike, and the
// plans that turn a chosen kernel geometry into launches of the shared kernels
// (Kernels.h). Layer vs rms and forward vs VJP are the Problem's.
//
// Config keys (the same for both implementations, so autotuning results, caches, exports
// and --config strings written before the typed configs stay valid): "block_rows",
// "num_warps", "block_cols", "programs", "row_split", "prefetch" and "staged"; each
// config struct says what each means for it. A key that only the other implementation
// (or the other direction) takes is still read, to be refused with the reason.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/TypedConfig.h"
#include "ops/lib/layer_norm/Kernels.h"

#include <tokamax/runtime/Arch.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax::norm_detail {

using ops_detail::ConfigKey;
using ops_detail::ImplKind;
using ops_detail::KeyUse;
/// Where a call's kernels go: the device, the interpreter, or a list (KernelExecutor.h).
using Executor = ops_detail::KernelExecutor;

/// A norm call as the implementations see it.
struct NormProblem {
  NormKind kind = NormKind::Layer;
  bool vjp = false;
  int64_t outer = 1, n = 1, inner = 1;
  DType x = DType::F32, compute = DType::F32;
  DType residual = DType::F32;                ///< mean / rstd dtype (f32 or compute)
  std::optional<DType> scale, offset;         ///< forward: parameters; VJP: scale
  bool mean_out = false, rstd_out = false;    ///< forward residual outputs
  std::optional<DType> dscale, doffset;       ///< VJP outputs
  double epsilon = 1e-6;

  int64_t rows() const { return outer * inner; }
};

/// Reads a BoundArgs of layer_norm / rms_norm / their VJPs (already validated).
NormProblem problem_of(const BoundArgs &args, NormKind kind, bool vjp);

//===----------------------------------------------------------------------===//
// The implementations
//===----------------------------------------------------------------------===//

/// Tile (Tile.cpp): rows of the last axis up to kNormTileMaxCols columns, bf16 / f16 /
/// f32, held whole in registers where they fit, else looped over column blocks.
struct TileConfig {
  /// "block_rows": rows a program holds (1 with block_cols or row_split).
  int64_t block_rows = 1;
  int64_t num_warps = 4;
  /// "block_cols": the column block of the looping kernels, for rows that do not fit in
  /// registers; unset, a program holds whole rows (or a row_split part of one).
  std::optional<int64_t> block_cols;
  /// "programs": the VJP's dx programs, each writing one row of partial column sums
  /// (required); the forward's, optional, persistent programs that load the parameters once.
  std::optional<int64_t> programs;
  /// "row_split": a row's column blocks (next_pow2(n) / row_split columns each) on that
  /// many adjacent programs, each summing the statistics over the whole row and writing its
  /// own block; with staged, the parts of a staged row.
  std::optional<int64_t> row_split;
  /// "prefetch": forward on persistent programs: each loads its next row group while
  /// working on the current one.
  bool prefetch = false;
  /// "staged": VJP with block_cols, one row a program: each copies its next row of x and dy
  /// into shared memory while working on the current one (no coefficient kernel; x and dy
  /// leave DRAM once).
  bool staged = false;
  /// "chunk_rows": looping VJP (block_cols), the rows in chunks of this many, each
  /// chunk's coefficient and dx kernels back to back: the dx kernel finds the chunk's x
  /// and dy in L2, so they leave DRAM once where a chunk fits (opt-in until timed).
  std::optional<int64_t> chunk_rows;

  static constexpr auto keys = std::tuple{
      ConfigKey{"block_rows", &TileConfig::block_rows},
      ConfigKey{"num_warps", &TileConfig::num_warps},
      ConfigKey{"block_cols", &TileConfig::block_cols, KeyUse::Optional},
      ConfigKey{"programs", &TileConfig::programs, KeyUse::Optional},
      ConfigKey{"row_split", &TileConfig::row_split, KeyUse::Optional},
      ConfigKey{"prefetch", &TileConfig::prefetch, KeyUse::Optional},
      ConfigKey{"staged", &TileConfig::staged, KeyUse::Optional},
      ConfigKey{"chunk_rows", &TileConfig::chunk_rows, KeyUse::Optional}};
  bool operator==(const TileConfig &) const = default;
};

struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Tile, NormProblem, TileConfig) };

/// Reference (Reference.cpp): any axis and dtype; every kernel loops over column blocks.
struct ReferenceConfig {
  /// "block_rows": rows a program holds; in the strided case, positions of the inner axes.
  int64_t block_rows = 1;
  int64_t num_warps = 4;
  /// "block_cols": the column block every kernel loops over.
  int64_t block_cols = 1;
  /// "programs": the VJP's dx programs, each writing one row of partial column sums
  /// (required); refused for the forward.
  std::optional<int64_t> programs;
  /// "row_split", "prefetch", "staged": the tile implementation's, refused with the reason.
  std::optional<int64_t> row_split;
  bool prefetch = false;
  bool staged = false;

  static constexpr auto keys = std::tuple{
      ConfigKey{"block_rows", &ReferenceConfig::block_rows},
      ConfigKey{"num_warps", &ReferenceConfig::num_warps},
      ConfigKey{"block_cols", &ReferenceConfig::block_cols},
      ConfigKey{"programs", &ReferenceConfig::programs, KeyUse::Optional},
      ConfigKey{"row_split", &ReferenceConfig::row_split, KeyUse::Optional},
      ConfigKey{"prefetch", &ReferenceConfig::prefetch, KeyUse::Optional},
      ConfigKey{"staged", &ReferenceConfig::staged, KeyUse::Optional}};
  bool operator==(const ReferenceConfig &) const = default;
};

struct Reference { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Reference, NormProblem, ReferenceConfig) };

//===----------------------------------------------------------------------===//
// Shared by the implementations (Common.cpp)
//===----------------------------------------------------------------------===//

/// The GPU the heuristics size grids for (sm_90a's default: an H100 / H200's 132 SMs).
inline constexpr int64_t kTargetSms = Arch::parse("sm_90a").sm_count();

bool is_pow2(int64_t v);

/// Row groups of a config (what the programs of a forward grid cover).
int64_t groups_of(const NormProblem &p, int64_t blockRows);

/// Programs of a VJP's persistent dx kernel: as many as fit on the GPU at once.
int64_t vjp_programs(const NormProblem &p, int64_t blockRows, int64_t blockCols, int numWarps);

/// What neither implementation serves: a grid past 2^31 - 1 rows.
std::optional<std::string> why_not_any(const NormProblem &p);

/// The checks both implementations begin with, in this order: the VJP's programs
/// present, block_rows and num_warps powers of two in range, programs positive.
std::optional<std::string> check_common(const NormProblem &p, int64_t blockRows, int64_t numWarps,
                                        const std::optional<int64_t> &programs);
/// block_cols a power of two up to kNormTileMaxCols.
std::optional<std::string> check_block_cols(int64_t blockCols);
/// A block of blockRows x blockCols elements, at most 65536.
std::optional<std::string> check_block_size(int64_t blockRows, int64_t blockCols);

/// Why a key of the tile forward or VJP is refused where it does not apply.
extern const char *const kForwardProgramsNeedTile;
extern const char *const kPrefetchNeedsPersistentTileForward;
extern const char *const kStagedNeedsLoopingTileVjp;

/// A looping config of the search spaces: column blocks of 512-8192 columns (below n when
/// `belowN`) on 4-16 warps, 4-64 elements a thread; the VJP's with its dx programs.
struct LoopingBlock {
  int64_t block_cols;
  int64_t num_warps;
  std::optional<int64_t> programs;
};
std::vector<LoopingBlock> looping_blocks(const NormProblem &p, int64_t blockRows, bool belowN);

//===----------------------------------------------------------------------===//
// Plans: a kernel geometry chosen from a config, as launches (Common.cpp)
//===----------------------------------------------------------------------===//

/// A forward call: one kernel.
struct ForwardPlan {
  Mode mode = Mode::Fused;
  int64_t block_rows = 1, block_cols = 1;
  int num_warps = 4;
  std::optional<int64_t> programs;  ///< persistent programs (unset: one per row group)
  bool prefetch = false;
};

/// A VJP: row coefficients (Looping only), dx with per-program partial column sums, and
/// the fixed-order reduction of the partial sums into dscale / doffset.
struct VjpPlan {
  Mode mode = Mode::Fused;  ///< of the dx kernel
  int64_t block_rows = 1, block_cols = 1;
  int num_warps = 4;
  int64_t programs = 1;  ///< dx programs, each writing a row of partial sums
  int64_t parts = 1;     ///< Staged: a row's parts on adjacent programs
  int64_t chunk_rows = 0;  ///< Looping: the rows in chunks of this many (0: one chunk)
};

/// Throws NotSupported for `whyNot`, Error for `problem` (what is wrong with `config`).
void require_runnable(const std::optional<std::string> &whyNot, const std::optional<std::string> &problem,
                      const Config &config);

/// Runs the call; tensors in the op's argument order (inputs, then outputs).
void run_forward(const NormProblem &p, const ForwardPlan &plan, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, Executor &executor);
void run_vjp(const NormProblem &p, const VjpPlan &plan, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, Executor &executor);

} // namespace tokamax::norm_detail
