//===- NormKernels.cpp - DSL kernels of layer_norm / rms_norm ---------------===//
//
// Parameter order (what the launchers pass, optional ones only when present):
//   Fwd:     x, scale, offset, y, mean, rstd, epsilon (scalar)
//   VjpCoef: dy, x, scale, mean (layer), rstd, c1, c2 (layer)
//   VjpDx:   dy, x, scale, mean (layer), rstd, [c1, c2 (layer): Looping], dx, pdscale, pdoffset
//   Reduce:  pdscale, pdoffset, dscale, doffset
//
//===----------------------------------------------------------------------===//
#include "ops/lib/norm/NormKernels.h"

#include "ops/lib/Dispatch.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <functional>

namespace tokamax::norm_detail {

using namespace dsl;

int64_t next_pow2(int64_t v) { return ops_detail::next_power_of_two(v); }

int64_t NormKernelSpec::groups() const {
  return strided() ? outer * cdiv(inner, block_rows) : cdiv(outer, block_rows);
}

KernelKey NormKernelSpec::key() const {
  auto opt = [](const std::optional<DType> &d) { return d ? uint64_t(*d) + 1 : 0; };
  uint64_t fields[] = {uint64_t(kernel), uint64_t(mode),      uint64_t(kind),      uint64_t(outer),
                       uint64_t(n),      uint64_t(inner),     uint64_t(x),         uint64_t(compute),
                       opt(scale),       opt(offset),         uint64_t(mean_out),  uint64_t(rstd_out),
                       opt(dscale),      opt(doffset),        uint64_t(block_rows), uint64_t(block_cols),
                       uint64_t(num_warps), uint64_t(programs), uint64_t(residual), uint64_t(prefetch)};
  KernelKey key("tokamax.norm.v2");
  for (uint64_t f : fields)
    key.add(f);
  return key;
}

std::string NormKernelSpec::describe() const {
  static const char *kernels[] = {"fwd", "vjp_coef", "vjp_dx", "reduce"};
  static const char *modes[] = {"fused", "looping", "shifted", "split"};
  return fmt::format("{}_norm {} {} [{}, {}, {}] {} block {}x{} warps {} programs {}",
                     kind == NormKind::Layer ? "layer" : "rms", kernels[int(kernel)], modes[int(mode)], outer, n,
                     inner, dtype_name(x), block_rows, block_cols, num_warps, programs);
}

bool takes_epsilon(const NormKernelSpec &spec) { return spec.kernel == KernelKind::Fwd; }

namespace {

/// Access to [outer, n, inner] tensors by row groups: tiles are [BR, BN] (rows) or
/// [1, BN, BR] (strided); row vectors [BR] or [1, BR]; reductions over n are axis 1 in
/// both, so `rowB(v)` = v.expand(1) broadcasts a row vector against a tile.
class Rows {
public:
  Rows(Kernel &k, const NormKernelSpec &s)
      : k_(k), strided_(s.strided()), outer_(s.outer), n_(s.n), inner_(s.inner), br_(s.block_rows),
        bn_(s.block_cols) {}

  TensorArg matrix(const char *name, DType dtype, bool output) {
    std::vector<int64_t> shape = strided_ ? std::vector<int64_t>{outer_, n_, inner_} : std::vector<int64_t>{outer_, n_};
    return output ? k_.output(name, dtype, shape) : k_.input(name, dtype, shape);
  }
  TensorArg rowVector(const char *name, DType dtype, bool output) {
    std::vector<int64_t> shape = strided_ ? std::vector<int64_t>{outer_, inner_} : std::vector<int64_t>{outer_};
    return output ? k_.output(name, dtype, shape) : k_.input(name, dtype, shape);
  }

  /// Positions the accessors on row group `g`.
  void at(const Value &g) {
    if (strided_) {
      int64_t blocks = cdiv(inner_, br_);
      o_ = g / Value(blocks);
      i_ = (g % Value(blocks)) * Value(br_);
    } else {
      row_ = g * Value(br_);
    }
  }

  std::vector<int64_t> tileShape() const {
    return strided_ ? std::vector<int64_t>{1, bn_, br_} : std::vector<int64_t>{br_, bn_};
  }

  Value load(const TensorArg &t, const Value &col) const {
    return strided_ ? t.load({o_, col, i_}, {1, bn_, br_}) : t.load({row_, col}, {br_, bn_});
  }
  void store(const TensorArg &t, const Value &col, const Value &tile) const {
    if (strided_)
      t.store({o_, col, i_}, tile);
    else
      t.store({row_, col}, tile);
  }
  Value loadRow(const TensorArg &t) const { return strided_ ? t.load({o_, i_}, {1, br_}) : t.load({row_}, {br_}); }
  void storeRow(const TensorArg &t, const Value &v) const {
    if (strided_)
      t.store({o_, i_}, v);
    else
      t.store({row_}, v);
  }
  static Value rowB(const Value &v) { return v.expand(1); }
  /// A [BN] column vector broadcast against tiles.
  Value colB(const Value &v) const { return strided_ ? v.expand(0).expand(2) : v.expand(0); }
  /// scale / offset: [1, n] tensors when one row per program (a [1, BN] block load takes
  /// exactly the layout of x's tiles: no layout conversion), else [n].
  TensorArg parameter(const char *name, DType dtype) {
    return paramRow() ? k_.input(name, dtype, {1, n_}) : k_.input(name, dtype, {n_});
  }
  Value loadCol(const TensorArg &t, const Value &col, DType compute) const {
    if (paramRow())
      return t.load({Value(0), col}, {1, bn_}).to(compute);
    return colB(t.load({col}, {bn_})).to(compute);  // broadcast in the stored dtype's layout
  }
  bool paramRow() const { return !strided_ && br_ == 1; }
  /// 1 where column col + j is inside the row, else 0, in `dtype`, broadcastable against
  /// tiles. Used as a factor (not in where()), so the data keeps its layout and only this
  /// vector moves.
  Value colMask(const Value &col, DType dtype) const {
    return colB(((k_.arange(0, bn_) + col) < Value(n_)).to(dtype));
  }
  static Value sumRow(const Value &tile) { return tile.sum(1); }
  /// Column sums of a tile as a [1, BN] tile (for [programs, n] partials).
  Value sumToColumns(const Value &tile) const { return strided_ ? tile.sum(2) : tile.sum(0).expand(0); }

private:
  Kernel &k_;
  bool strided_;
  int64_t outer_, n_, inner_, br_, bn_;
  Value row_, o_, i_;
};

/// Sums contribution(i) over i = lo, lo + step, ... < hi (at least one term). The first
/// term initialises the sums, so the carried tiles take the layout of the values summed
/// (a zero tile would take a default layout and cost a conversion every iteration).
std::vector<Value> accumulate(Kernel &k, const Value &lo, int64_t hi, int64_t step,
                              const std::function<std::vector<Value>(Value)> &contribution) {
  std::vector<Value> init = contribution(lo);
  Value next = lo.is_literal() ? Value(int64_t(*lo.literal()) + step) : lo + Value(step);
  return k.loop(next, Value(hi), Value(step), init, [&](Value i, std::vector<Value> acc) {
    std::vector<Value> terms = contribution(i);
    for (size_t j = 0; j < acc.size(); ++j)
      acc[j] = acc[j] + terms[j];
    return acc;
  });
}

using Terms = std::function<std::vector<Value>(Value col, bool tail)>;

/// acc (the sums over the columns before `start`; empty when there are none) plus the terms
/// of the column blocks at start, start + bn, ...: whole blocks in a loop without masks,
/// then the partial last block (tail = true: the terms must mask its padding).
std::vector<Value> addColumns(Kernel &k, std::vector<Value> acc, int64_t start, int64_t n, int64_t bn,
                              const Terms &terms) {
  const int64_t full = n / bn * bn;
  auto add = [](std::vector<Value> a, const std::vector<Value> &t) {
    if (a.empty())
      return t;
    for (size_t j = 0; j < a.size(); ++j)
      a[j] = a[j] + t[j];
    return a;
  };
  if (start < full) {
    if (acc.empty())
      acc = accumulate(k, Value(start), full, bn, [&](Value c) { return terms(c, false); });
    else
      acc = k.loop(Value(start), Value(full), Value(bn), acc,
                   [&](Value c, std::vector<Value> a) { return add(a, terms(c, false)); });
  }
  if (full < n && start <= full)
    acc = add(acc, terms(Value(full), true));
  return acc;
}

const char *kindName(NormKind kind) { return kind == NormKind::Layer ? "layer_norm" : "rms_norm"; }

void checkSpec(const NormKernelSpec &s) {
  auto pow2 = [](int64_t v) { return v > 0 && !(v & (v - 1)); };
  if (s.outer < 1 || s.n < 1 || s.inner < 1)
    throw Error(fmt::format("norm kernel: empty geometry [{}, {}, {}]", s.outer, s.n, s.inner));
  if (!pow2(s.block_rows) || !pow2(s.block_cols))
    throw Error(fmt::format("norm kernel: block_rows {} and block_cols {} must be powers of two", s.block_rows,
                            s.block_cols));
  if (s.mode == Mode::Fused && s.block_cols < s.n && s.kernel != KernelKind::Reduce)
    throw Error(fmt::format("norm kernel: a fused kernel needs block_cols >= {} columns, got {}", s.n, s.block_cols));
  if (s.mode == Mode::Shifted && (s.strided() || s.kernel != KernelKind::Fwd))
    throw Error("norm kernel: the shifted mode is a forward mode of the row case");
  if (s.mode == Mode::Split &&
      (s.strided() || (s.kernel != KernelKind::Fwd && s.kernel != KernelKind::VjpDx) || s.block_cols >= s.n))
    throw Error(fmt::format("norm kernel: the split mode is a forward / dx mode of the row case with several "
                            "column blocks (block_cols {} for {} columns)",
                            s.block_cols, s.n));
  if (s.programs < 1)
    throw Error(fmt::format("norm kernel: programs must be positive, got {}", s.programs));
  if (s.prefetch && (s.kernel != KernelKind::Fwd || s.mode != Mode::Fused || s.programs >= s.groups()))
    throw Error("norm kernel: prefetch is a mode of the fused forward on persistent programs");
  if ((s.kernel == KernelKind::VjpDx || s.kernel == KernelKind::Fwd) && s.programs > s.groups())
    throw Error(fmt::format("norm kernel: {} programs for {} row groups", s.programs, s.groups()));
}

/// Mean (layer) and rstd of the current row group from sums of (x - shift) and their
/// squares over every column block in order (shift: the mean of the first block, close to
/// the row's mean, so the squares do not cancel): one pass over x.
std::pair<Value, Value> shiftedStatistics(Kernel &k, const Rows &rows, const TensorArg &x, const NormKernelSpec &s,
                                          const Value &eps) {
  const bool layer = s.kind == NormKind::Layer;
  const DType f = s.compute;
  const double n = double(s.n);
  Value first = rows.load(x, Value(0)).to(f);
  const bool firstIsTail = s.n < s.block_cols;
  Value shift;
  std::vector<Value> sums;
  if (layer) {
    shift = Rows::sumRow(first) / double(std::min(s.n, s.block_cols));
    Value d = first - Rows::rowB(shift);
    if (firstIsTail)
      d = d * rows.colMask(Value(0), f);
    sums = {d, d * d};
  } else {
    sums = {first * first};  // rms: only the squares (padding reads 0)
  }
  sums = addColumns(k, sums, s.block_cols, s.n, s.block_cols, [&](Value col, bool tail) {
    Value d = rows.load(x, col).to(f);
    if (!layer)
      return std::vector<Value>{d * d};
    d = d - Rows::rowB(shift);
    if (tail)
      d = d * rows.colMask(col, f);
    return std::vector<Value>{d, d * d};
  });
  if (!layer)
    return {Value(), rsqrt(Rows::sumRow(sums[0]) / n + eps)};
  Value m1 = Rows::sumRow(sums[0]) / n;  // mean of (x - shift)
  Value var = maximum(Rows::sumRow(sums[1]) / n - m1 * m1, 0.0);
  return {shift + m1, rsqrt(var + eps)};
}

/// Programs along the rows and the column block each writes: a Split kernel's grid puts
/// a row group's blocks on adjacent program ids.
struct Placement {
  Value program, col;
};

Placement place(Kernel &k, const NormKernelSpec &s, bool split) {
  const int64_t blocks = s.columnBlocks();
  k.grid(split ? s.programs * blocks : s.programs);
  Value pid = k.program_id(0);
  if (!split || blocks == 1)
    return {pid, Value(0)};
  return {pid / Value(blocks), (pid % Value(blocks)) * Value(s.block_cols)};
}

/// body(g) for the row groups of `program`: just its own, or (persistent programs) g =
/// program, program + programs, ...
void forEachGroup(Kernel &k, const NormKernelSpec &s, const Value &program, const std::function<void(Value)> &body) {
  if (s.programs >= s.groups()) {
    body(program);
    return;
  }
  k.loop(program, Value(s.groups()), Value(s.programs), {}, [&](Value g, std::vector<Value>) {
    body(g);
    return std::vector<Value>{};
  });
}

/// forEachGroup for persistent programs that carry their next group's tile (`load(g)`,
/// issued before body(g, tile of g) runs; past the last group the load reads nothing).
void forEachGroupPrefetched(Kernel &k, const NormKernelSpec &s, const Value &program,
                            const std::function<Value(Value)> &load,
                            const std::function<void(Value, Value)> &body) {
  Value first = load(program);
  k.loop(program, Value(s.groups()), Value(s.programs), {first}, [&](Value g, std::vector<Value> carried) {
    Value next = load(g + Value(s.programs));
    body(g, carried[0]);
    return std::vector<Value>{next};
  });
}

Kernel forwardKernel(const NormKernelSpec &s) {
  const bool layer = s.kind == NormKind::Layer;
  const DType f = s.compute;
  static const char *modes[] = {"fused", "looping", "shifted", "split"};
  Kernel k(fmt::format("{}_fwd_{}", kindName(s.kind), modes[int(s.mode)]), {s.num_warps});
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

/// The inputs every VJP kernel reads: dy, x, scale, mean (layer), rstd.
struct VjpInputs {
  TensorArg dy, x;
  std::optional<TensorArg> scale, mean;
  TensorArg rstd;
};

VjpInputs declareVjpInputs(Kernel &k, Rows &rows, const NormKernelSpec &s) {
  VjpInputs in;
  in.dy = rows.matrix("dy", s.x, false);
  in.x = rows.matrix("x", s.x, false);
  if (s.scale)
    in.scale = rows.parameter("scale", *s.scale);
  if (s.kind == NormKind::Layer)
    in.mean = rows.rowVector("mean", s.residual, false);
  in.rstd = rows.rowVector("rstd", s.residual, false);
  return in;
}

/// xhat and dy * scale for the tile at `col` of the current row group.
struct VjpTile {
  Value g, xhat, wdy, rstd;
};

VjpTile vjpTile(const Rows &rows, const VjpInputs &in, const NormKernelSpec &s, const Value &col,
                const Value &scaleCol) {
  const DType f = s.compute;
  VjpTile t;
  t.g = rows.load(in.dy, col).to(f);
  Value xs = rows.load(in.x, col).to(f);
  t.rstd = Rows::rowB(rows.loadRow(in.rstd).to(f));
  t.xhat = (in.mean ? xs - Rows::rowB(rows.loadRow(*in.mean).to(f)) : xs) * t.rstd;
  t.wdy = scaleCol.valid() ? t.g * scaleCol : t.g;
  return t;
}

/// mean(wdy * xhat) and (layer) mean(wdy) of the current row group, summed over every
/// column block in order.
std::pair<Value, Value> rowCoefficients(Kernel &k, const Rows &rows, const VjpInputs &in, const NormKernelSpec &s) {
  const DType f = s.compute;
  auto acc = accumulate(k, Value(0), s.n, s.block_cols, [&](Value col) {
    Value scaleCol = in.scale ? rows.loadCol(*in.scale, col, f) : Value();
    VjpTile t = vjpTile(rows, in, s, col, scaleCol);  // padding columns have dy = 0
    if (s.kind == NormKind::Rms)
      return std::vector<Value>{t.wdy * t.xhat};
    return std::vector<Value>{t.wdy * t.xhat, t.wdy};
  });
  const double n = double(s.n);
  return {Rows::sumRow(acc[0]) / n, s.kind == NormKind::Layer ? Rows::sumRow(acc[1]) / n : Value()};
}

Kernel vjpCoefKernel(const NormKernelSpec &s) {
  const bool layer = s.kind == NormKind::Layer;
  const DType f = s.compute;
  Kernel k(fmt::format("{}_vjp_coef", kindName(s.kind)), {s.num_warps});
  Rows rows(k, s);
  VjpInputs in = declareVjpInputs(k, rows, s);
  TensorArg c1 = rows.rowVector("c1", f, true);
  std::optional<TensorArg> c2;
  if (layer)
    c2 = rows.rowVector("c2", f, true);
  k.grid(s.groups());
  rows.at(k.program_id(0));
  auto [m1, m2] = rowCoefficients(k, rows, in, s);
  rows.storeRow(c1, m1);
  if (c2)
    rows.storeRow(*c2, m2);
  return k;
}

Kernel vjpDxKernel(const NormKernelSpec &s) {
  const bool layer = s.kind == NormKind::Layer;
  const bool fused = s.mode == Mode::Fused, split = s.mode == Mode::Split;
  const DType f = s.compute;
  static const char *modes[] = {"fused", "looping", "shifted", "split"};
  Kernel k(fmt::format("{}_vjp_dx_{}", kindName(s.kind), modes[int(s.mode)]), {s.num_warps});
  Rows rows(k, s);
  VjpInputs in = declareVjpInputs(k, rows, s);
  std::optional<TensorArg> c1, c2, pds, pdo;
  if (!fused && !split) {
    c1 = rows.rowVector("c1", f, false);
    if (layer)
      c2 = rows.rowVector("c2", f, false);
  }
  TensorArg dx = rows.matrix("dx", s.x, true);
  if (s.dscale)
    pds = k.output("pdscale", f, {s.programs, s.n});
  if (s.doffset && layer)
    pdo = k.output("pdoffset", f, {s.programs, s.n});
  Value program, col;
  if (split) {
    Placement at = place(k, s, true);
    program = at.program;
    col = at.col;
  } else {
    int64_t columnBlocks = s.columnBlocks();
    k.grid(s.programs, columnBlocks);
    program = k.program_id(0);
    col = columnBlocks == 1 ? Value(0) : k.program_id(1) * Value(s.block_cols);
  }
  // Held across the row groups, except in the split kernel: the registers go to the
  // whole-row sums there, and its own block's scale has just been read with them (L1).
  Value heldScale = in.scale && !split ? rows.loadCol(*in.scale, col, f) : Value();
  const double n = double(s.n);
  // One row group: dx, and the terms of the partial column sums.
  auto group = [&](Value g) {
    rows.at(g);
    Value m1, m2;  // mean(wdy * xhat), mean(wdy)
    if (split)  // the whole row (its own block too: the tile below comes from L1 / L2)
      std::tie(m1, m2) = rowCoefficients(k, rows, in, s);
    Value scaleCol = in.scale && split ? rows.loadCol(*in.scale, col, f) : heldScale;
    VjpTile t = vjpTile(rows, in, s, col, scaleCol);
    if (fused) {
      m1 = Rows::sumRow(t.wdy * t.xhat) / n;
      if (layer)
        m2 = Rows::sumRow(t.wdy) / n;
    } else if (!split) {
      m1 = rows.loadRow(*c1);
      if (layer)
        m2 = rows.loadRow(*c2);
    }
    Value d = t.wdy - t.xhat * Rows::rowB(m1);
    if (layer)
      d = d - Rows::rowB(m2);
    rows.store(dx, col, (d * t.rstd).to(s.x));
    std::vector<Value> terms;
    if (pds)
      terms.push_back(t.g * t.xhat);
    if (pdo)
      terms.push_back(t.g);
    return terms;
  };
  // Program p takes row groups p, p + programs, ... (at least one: programs <= groups).
  std::vector<Value> acc;
  if (pds || pdo)
    acc = accumulate(k, program, s.groups(), s.programs, group);
  else
    k.loop(program, Value(s.groups()), Value(s.programs), {}, [&](Value g, std::vector<Value>) {
      group(g);
      return std::vector<Value>{};
    });
  size_t i = 0;
  if (pds)
    pds->store({program, col}, rows.sumToColumns(acc[i++]));
  if (pdo)
    pdo->store({program, col}, rows.sumToColumns(acc[i++]));
  return k;
}

Kernel reduceKernel(const NormKernelSpec &s) {
  const DType f = s.compute;
  Kernel k(fmt::format("{}_vjp_reduce", kindName(s.kind)), {s.num_warps});
  std::optional<TensorArg> pds, pdo, ds, dof;
  if (s.dscale)
    pds = k.input("pdscale", f, {s.programs, s.n});
  if (s.doffset)
    pdo = k.input("pdoffset", f, {s.programs, s.n});
  if (s.dscale)
    ds = k.output("dscale", *s.dscale, {s.n});
  if (s.doffset)
    dof = k.output("doffset", *s.doffset, {s.n});
  if (!ds && !dof)
    throw Error("norm reduce kernel: nothing to reduce");
  k.grid(cdiv(s.n, s.block_cols));
  Value col = k.program_id(0) * Value(s.block_cols);
  Value zero = k.full({s.block_rows, s.block_cols}, 0.0, f);
  std::vector<Value> init;
  for (size_t i = 0; i < size_t(bool(ds)) + size_t(bool(dof)); ++i)
    init.push_back(zero);
  // Fixed order: program rows block by block, then a tree over the block's rows.
  auto acc = k.loop(0, Value(s.programs), Value(s.block_rows), init, [&](Value r, std::vector<Value> a) {
    std::vector<Value> next;
    size_t i = 0;
    if (pds)
      next.push_back(a[i++] + pds->load({r, col}, {s.block_rows, s.block_cols}));
    if (pdo)
      next.push_back(a[i++] + pdo->load({r, col}, {s.block_rows, s.block_cols}));
    return next;
  });
  size_t i = 0;
  if (ds)
    ds->store({col}, acc[i++].sum(0).to(*s.dscale));
  if (dof)
    dof->store({col}, acc[i++].sum(0).to(*s.doffset));
  return k;
}

} // namespace

Kernel build_norm_kernel(const NormKernelSpec &spec) {
  checkSpec(spec);
  switch (spec.kernel) {
  case KernelKind::Fwd:
    return forwardKernel(spec);
  case KernelKind::VjpCoef:
    return vjpCoefKernel(spec);
  case KernelKind::VjpDx:
    return vjpDxKernel(spec);
  case KernelKind::Reduce:
    return reduceKernel(spec);
  }
  throw Error("norm kernel: unknown kernel kind");
}

} // namespace tokamax::norm_detail
