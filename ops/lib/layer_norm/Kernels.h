//===- Kernels.h - The DSL kernels of layer_norm / rms_norm ---*- C++ -*-===//
//
// Internal to ops/lib/layer_norm. Every norm kernel is built from one NormKernelSpec; its IR
// is a pure function of the spec, and key() hashes every field, so (key, device) names
// the loaded kernel in the JIT.
//
// Geometry: x is viewed as [outer, n, inner] and normalised over n. inner == 1 is the
// "row" case (2-D tensors [rows = outer, n], tiles [block_rows, block_cols]); inner > 1 is
// the strided case (3-D tensors, tiles [1, block_cols, block_rows] read in place: the
// block_rows positions of the inner axes are contiguous in memory). Row vectors (mean,
// rstd, VJP coefficients) are [outer] or [outer, inner].
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::norm_detail {

enum class NormKind : uint8_t { Layer, Rms };

enum class KernelKind : uint8_t {
  Fwd,      ///< y (+ mean, rstd)
  VjpCoef,  ///< per row: c1 = mean(wdy * xhat), c2 = mean(wdy) (layer) into row workspaces
  VjpDx,    ///< dx, and per-program partial column sums of dy * xhat and dy
  Reduce,   ///< partial column sums [programs, n] -> dscale / doffset, in a fixed order
};

enum class Mode : uint8_t {
  Fused,    ///< the whole row in one tile (block_cols >= n): x read once
  Looping,  ///< loops over column blocks (Fwd: exact mean then variance, then y)
  Shifted,  ///< Fwd, looping: sums of (x - shift) and their squares in one pass, then y (shift:
            ///< the mean of the row's first column block)
  Split,    ///< Fwd / VjpDx, row case: each of a row's column blocks on a program of its own
            ///< (adjacent program ids, so they run together); every one sums the statistics
            ///< over the whole row in the same fixed order (the other blocks come from L2:
            ///< x leaves DRAM once) and writes its own block, parameters held in registers
  Staged,   ///< VjpDx, row case, 16- or 32-bit x: persistent programs each copy a whole row
            ///< of x and dy into shared memory (cp.async, its column blocks in slots) while
            ///< working on the row before; the coefficients and dx read the row there, so
            ///< x and dy leave DRAM once with no coefficient kernel, and each program keeps
            ///< the partial column sums of every block in registers
};

struct NormKernelSpec {
  KernelKind kernel = KernelKind::Fwd;
  Mode mode = Mode::Fused;
  NormKind kind = NormKind::Layer;
  int64_t outer = 1, n = 1, inner = 1;
  DType x = DType::F32;
  DType compute = DType::F32;   ///< f32, f64 for f64 x; also the partial sums' dtype
  DType residual = DType::F32;  ///< mean / rstd as stored (f32, or f64 for f64 x)
  std::optional<DType> scale, offset;  ///< Fwd: parameters; VjpCoef / VjpDx: scale
  bool mean_out = false, rstd_out = false;  ///< Fwd residual outputs
  std::optional<DType> dscale, doffset;     ///< VjpDx: partials wanted; Reduce: outputs
  int64_t block_rows = 1, block_cols = 1;
  int num_warps = 4;
  /// Fwd: programs along the rows (fewer than groups(): each loops over row groups and
  /// loads the parameters once); VjpDx: the same, each writing a row of partial sums;
  /// Reduce: partial rows.
  int64_t programs = 1;
  /// Fused Fwd on persistent programs: each iteration loads the program's next row group
  /// before working on the current one (carried in registers), so its loads are in
  /// flight through the current group's reductions and stores.
  bool prefetch = false;
  /// Staged VjpDx: adjacent programs that share a row, each staging (and writing dx and
  /// the partial sums of) its own 1 / parts of the row's column blocks; the statistics
  /// read the other parts from L2, where the partner programs' copies brought them.
  int64_t parts = 1;
  /// Looping VjpDx: each program adds its sums to its row of the partials (written by the
  /// call's first row chunk) instead of storing them.
  bool accumulate_partials = false;

  int64_t rows() const { return outer * inner; }
  bool strided() const { return inner > 1; }
  int64_t columnBlocks() const { return (n + block_cols - 1) / block_cols; }
  /// Row groups (programs of a Fwd / VjpCoef grid; iterations of VjpDx).
  int64_t groups() const;
  KernelKey key() const;
  std::string describe() const;
};

/// Builds the kernel (throws tokamax::Error on an inconsistent spec).
dsl::Kernel build_norm_kernel(const NormKernelSpec &spec);

/// Scalar parameters a kernel takes, after its tensors: Fwd takes "epsilon".
bool takes_epsilon(const NormKernelSpec &spec);

int64_t next_pow2(int64_t v);

} // namespace tokamax::norm_detail
