//===- Norm.h - layer_norm and rms_norm, forward and VJP -----------*- C++ -*-===//
//
// x in bf16, f16, f32 or f64, any rank, normalised over one axis (default the last);
// math in f32 (f64 for f64 x). scale and offset are optional, 1-D of x's axis length,
// each in f32 or in x's dtype.
//
//   layer_norm: y = (x - mean) * rstd * scale + offset,  rstd = 1 / sqrt(var + epsilon)
//   rms_norm:   y = x * rstd * scale,                      rstd = 1 / sqrt(mean(x^2) + epsilon)
//
// Residuals for the VJP (mean, rstd): one value per normalised row, in f32 (for f64 x also
// f64, which keeps the VJP exact to f64), of any shape holding `rows` elements (x's shape
// without the axis, or flat [rows]); row order is x's with the axis removed.
//
// Implementations, in the order auto tries them:
//   "tile":      one fused kernel per call, rows held in registers (block_rows rows per
//                program; up to 16384 columns forward, 8192 for the VJP); longer rows (up
//                to 65536) loop over column blocks ("block_cols"). Last axis only; bf16,
//                f16, f32; sm_80+.
//   "reference": simple looping kernels for any row length, any axis (a non-last axis is
//                read in place through a [outer, n, inner] view of x: no transpose), every
//                dtype including f64.
// The VJP's dscale / doffset (sums over rows) use a deterministic two-stage reduction:
// each of `programs` programs writes the column sums of its rows to an f32 workspace
// [programs, cols], then one kernel adds them up in a fixed order. No atomics.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

struct TOKAMAX_API NormOptions {
  int axis = -1;
  double epsilon = 1e-6;  ///< Tokamax's default, so ported code computes the same numbers
  /// "tile" or "reference"; std::nullopt: the first that can serve the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

TOKAMAX_API void layer_norm(const TensorView &x, const TensorView *scale, const TensorView *offset,
                            const TensorView &y, Stream &stream, const NormOptions &options = {},
                            const TensorView *mean_out = nullptr, const TensorView *rstd_out = nullptr);

/// dx (and dscale / doffset when given) from dy and the forward's residuals.
TOKAMAX_API void layer_norm_vjp(const TensorView &dy, const TensorView &x, const TensorView *scale,
                                const TensorView &mean, const TensorView &rstd, const TensorView &dx,
                                const TensorView *dscale, const TensorView *doffset, Stream &stream,
                                const NormOptions &options = {});

TOKAMAX_API void rms_norm(const TensorView &x, const TensorView *scale, const TensorView &y, Stream &stream,
                          const NormOptions &options = {}, const TensorView *rstd_out = nullptr);

TOKAMAX_API void rms_norm_vjp(const TensorView &dy, const TensorView &x, const TensorView *scale,
                              const TensorView &rstd, const TensorView &dx, const TensorView *dscale,
                              Stream &stream, const NormOptions &options = {});

// ---- Host tensors (host_view(...)), run on the CPU interpreter through the same
// implementations and kernels (`arch` only steers implementation choice). ----

TOKAMAX_API void layer_norm_host(const TensorView &x, const TensorView *scale, const TensorView *offset,
                                 const TensorView &y, const NormOptions &options = {},
                                 const TensorView *mean_out = nullptr, const TensorView *rstd_out = nullptr);
TOKAMAX_API void layer_norm_vjp_host(const TensorView &dy, const TensorView &x, const TensorView *scale,
                                     const TensorView &mean, const TensorView &rstd, const TensorView &dx,
                                     const TensorView *dscale, const TensorView *doffset,
                                     const NormOptions &options = {});
TOKAMAX_API void rms_norm_host(const TensorView &x, const TensorView *scale, const TensorView &y,
                               const NormOptions &options = {}, const TensorView *rstd_out = nullptr);
TOKAMAX_API void rms_norm_vjp_host(const TensorView &dy, const TensorView &x, const TensorView *scale,
                                   const TensorView &rstd, const TensorView &dx, const TensorView *dscale,
                                   const NormOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs; absent optional arguments are std::nullopt):
//   layer_norm:     x, scale?, offset? | y, mean?, rstd?
//   layer_norm_vjp: dy, x, scale?, mean, rstd | dx, dscale?, doffset?
//   rms_norm:       x, scale? | y, rstd?
//   rms_norm_vjp:   dy, x, scale?, rstd | dx, dscale?
// Attributes: "axis" (non-negative, canonical) and, forward only, "epsilon" (shortest
// round-trip form, e.g. "1e-05"); the VJPs need no epsilon (they take rstd).

TOKAMAX_API const Op &layer_norm_op();
TOKAMAX_API const Op &layer_norm_vjp_op();
TOKAMAX_API const Op &rms_norm_op();
TOKAMAX_API const Op &rms_norm_vjp_op();

/// Binds a call from specs (no tensors needed); throws Error naming the bad argument.
TOKAMAX_API BoundArgs bind_layer_norm(const ArgSpec &x, const std::optional<ArgSpec> &scale,
                                      const std::optional<ArgSpec> &offset, const ArgSpec &y,
                                      const std::optional<ArgSpec> &mean_out,
                                      const std::optional<ArgSpec> &rstd_out, int axis, double epsilon);
TOKAMAX_API BoundArgs bind_layer_norm_vjp(const ArgSpec &dy, const ArgSpec &x, const std::optional<ArgSpec> &scale,
                                          const ArgSpec &mean, const ArgSpec &rstd, const ArgSpec &dx,
                                          const std::optional<ArgSpec> &dscale,
                                          const std::optional<ArgSpec> &doffset, int axis);
TOKAMAX_API BoundArgs bind_rms_norm(const ArgSpec &x, const std::optional<ArgSpec> &scale, const ArgSpec &y,
                                    const std::optional<ArgSpec> &rstd_out, int axis, double epsilon);
TOKAMAX_API BoundArgs bind_rms_norm_vjp(const ArgSpec &dy, const ArgSpec &x, const std::optional<ArgSpec> &scale,
                                        const ArgSpec &rstd, const ArgSpec &dx,
                                        const std::optional<ArgSpec> &dscale, int axis);

/// Row length above which the tile forward loops over column blocks (the fused kernel
/// holds a whole row in registers up to this length).
inline constexpr int64_t kNormTileMaxFusedCols = 16384;
/// The same for the tile VJP (it also carries the partial column sums in registers).
inline constexpr int64_t kNormTileMaxFusedVjpCols = 8192;
/// Longest row the tile implementation serves.
inline constexpr int64_t kNormTileMaxCols = 65536;

} // namespace tokamax
