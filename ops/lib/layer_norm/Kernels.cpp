//===- Kernels.cpp - DSL kernels of layer_norm / rms_norm ---------------===//
//
// The spec, the forward kernel and the choice of kernel; the VJP kernels are in
// VjpKernels.cpp, what both use in KernelParts.h.
//
// Parameter order (what the launchers pass, optional ones only when present):
//   Fwd:     x, scale, offset, y, mean, rstd, epsilon (scalar)
//   VjpCoef: dy, x, scale, mean (layer), rstd, c1, c2 (layer)
//   VjpDx:   dy, x, scale, mean (layer), rstd, [c1, c2 (layer): Looping], dx, pdscale, pdoffset
//   Reduce:  pdscale, pdoffset, dscale, doffset
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/KernelParts.h"


#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <functional>

namespace tokamax::norm_detail {

using namespace dsl;

int64_t next_pow2(int64_t v) { return dsl::next_power_of_two(v); }

int64_t NormKernelSpec::groups() const {
  return strided() ? outer * cdiv(inner, block_rows) : cdiv(outer, block_rows);
}

KernelKey NormKernelSpec::key() const {
  auto opt = [](const std::optional<DType> &d) { return d ? uint64_t(*d) + 1 : 0; };
  uint64_t fields[] = {uint64_t(kernel), uint64_t(mode),      uint64_t(kind),      uint64_t(outer),
                       uint64_t(n),      uint64_t(inner),     uint64_t(x),         uint64_t(compute),
                       opt(scale),       opt(offset),         uint64_t(mean_out),  uint64_t(rstd_out),
                       opt(dscale),      opt(doffset),        uint64_t(block_rows), uint64_t(block_cols),
                       uint64_t(num_warps), uint64_t(programs), uint64_t(residual), uint64_t(prefetch),
                       uint64_t(parts)};
  KernelKey key("tokamax.norm.v2");
  for (uint64_t f : fields)
    key.add(f);
  if (accumulate_partials)  // (absent from every other kernel's key, which stays as it was)
    key.add(uint64_t(0xacc));
  return key;
}

std::string NormKernelSpec::describe() const {
  static const char *kernels[] = {"fwd", "vjp_coef", "vjp_dx", "reduce"};
  return fmt::format("{}_norm {} {} [{}, {}, {}] {} block {}x{} warps {} programs {}",
                     kind == NormKind::Layer ? "layer" : "rms", kernels[int(kernel)], modeName(mode), outer, n,
                     inner, dtype_name(x), block_rows, block_cols, num_warps, programs);
}

bool takes_epsilon(const NormKernelSpec &spec) { return spec.kernel == KernelKind::Fwd; }

Kernel forwardKernel(const NormKernelSpec &s) {
  const bool layer = s.kind == NormKind::Layer;
  const DType f = s.compute;
  Kernel k(fmt::format("{}_fwd_{}", kindName(s.kind), modeName(s.mode)), {s.num_warps});
  Rows rows(k, s);
  TensorArg x = rows.matrix("x", s.x, false);
  std::optional<TensorArg> scale, offset, meanOut, rstdOut;
  if (s.scale)
    scale = rows.parameter("scale", *s.scale);
  if (s.offset && layer)
    offset = rows.parameter("offset", *s.offset);
  TensorArg y = rows.matrix("y", s.x, true);
  if (s.mean_out && layer)
    meanOut = rows.rowVector("mean", s.residual, true);
  if (s.rstd_out)
    rstdOut = rows.rowVector("rstd", s.residual, true);
  Value eps = k.scalar("epsilon", f);
  const bool split = s.mode == Mode::Split;
  Placement at = place(k, s, split);
  const double n = double(s.n);

  // Parameters of the block a Fused / Split program writes: loaded (and brought to x's
  // layout) once, before its row groups.
  const bool heldParams = s.mode == Mode::Fused || split;
  Value scaleHeld, offsetHeld;
  if (heldParams && scale)
    scaleHeld = rows.loadCol(*scale, at.col, f);
  if (heldParams && offset)
    offsetHeld = rows.loadCol(*offset, at.col, f);
  auto normalise = [&](const Value &col, const Value &xs, const Value &mean, const Value &rstd, const Value &sc,
                       const Value &off) {
    Value out = (layer ? xs - Rows::rowB(mean) : xs) * Rows::rowB(rstd);
    if (sc.valid())
      out = out * sc;
    if (off.valid())
      out = out + off;
    rows.store(y, col, out.to(s.x));
  };
  auto looseParams = [&](const Value &col) {
    return std::pair{scale ? rows.loadCol(*scale, col, f) : Value(), offset ? rows.loadCol(*offset, col, f) : Value()};
  };
  auto writeAll = [&](const Value &mean, const Value &rstd) {
    k.loop(0, Value(s.n), Value(s.block_cols), {}, [&](Value col, std::vector<Value>) {
      auto [sc, off] = looseParams(col);
      normalise(col, rows.load(x, col).to(f), mean, rstd, sc, off);
      return std::vector<Value>{};
    });
  };

  auto group = [&](const Value &g, const Value &prefetched) {
    rows.at(g);
    Value mean, rstd;
    if (s.mode == Mode::Fused) {
      Value xs = (prefetched.valid() ? prefetched : rows.load(x, Value(0))).to(f);
      Value centred = xs;
      if (layer) {
        mean = Rows::sumRow(xs) / n;
        centred = xs - Rows::rowB(mean);
        if (s.block_cols != s.n)  // padding columns read 0 but must not count as -mean
          centred = centred * rows.colMask(Value(0), f);
      }
      rstd = rsqrt(Rows::sumRow(centred * centred) / n + eps);
      Value out = centred * Rows::rowB(rstd);
      if (scaleHeld.valid())
        out = out * scaleHeld;
      if (offsetHeld.valid())
        out = out + offsetHeld;
      rows.store(y, Value(0), out.to(s.x));
    } else if (s.mode == Mode::Looping) {  // exact mean, then the variance, then y
      if (layer) {
        Value sum = accumulate(k, Value(0), s.n, s.block_cols, [&](Value col) {
          return std::vector<Value>{rows.load(x, col).to(f)};  // padding reads 0
        })[0];
        mean = Rows::sumRow(sum) / n;
      }
      Value squares = addColumns(k, {}, 0, s.n, s.block_cols, [&](Value col, bool tail) {
        Value d = rows.load(x, col).to(f);
        if (layer)
          d = d - Rows::rowB(mean);
        if (layer && tail)
          d = d * rows.colMask(col, f);
        return std::vector<Value>{d * d};
      })[0];
      rstd = rsqrt(Rows::sumRow(squares) / n + eps);
      writeAll(mean, rstd);
    } else {
      std::tie(mean, rstd) = shiftedStatistics(k, rows, x, s, eps);
      if (split)  // its own block again: the program has just read it (L1 / L2)
        normalise(at.col, rows.load(x, at.col).to(f), mean, rstd, scaleHeld, offsetHeld);
      else
        writeAll(mean, rstd);
    }
    // A Split row group's programs hold the same statistics (one summation order); the
    // first one writes them.
    auto residuals = [&] {
      if (meanOut)
        rows.storeRow(*meanOut, mean.to(s.residual));
      if (rstdOut)
        rows.storeRow(*rstdOut, rstd.to(s.residual));
    };
    if (split && (meanOut || rstdOut))
      k.when(at.col == Value(0), residuals);
    else
      residuals();
  };
  if (s.prefetch) {
    forEachGroupPrefetched(
        k, s, at.program,
        [&](Value g) {
          rows.at(g);
          return rows.load(x, Value(0));
        },
        group);
  } else {
    forEachGroup(k, s, at.program, [&](Value g) { group(g, Value()); });
  }
  return k;
}

Kernel build_norm_kernel(const NormKernelSpec &spec) {
  checkSpec(spec);
  switch (spec.kernel) {
  case KernelKind::Fwd:
    return forwardKernel(spec);
  case KernelKind::VjpCoef:
    return vjpCoefKernel(spec);
  case KernelKind::VjpDx:
    return spec.mode == Mode::Staged ? vjpStagedKernel(spec) : vjpDxKernel(spec);
  case KernelKind::Reduce:
    return reduceKernel(spec);
  }
  throw Error("norm kernel: unknown kernel kind");
}

} // namespace tokamax::norm_detail
