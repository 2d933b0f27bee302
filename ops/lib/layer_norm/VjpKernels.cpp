//===- VjpKernels.cpp - The VJP kernels of layer_norm / rms_norm --------===//
//
// VjpCoef: each row group's coefficients (rows past the fused limit); VjpDx: dx and
// per-program partial sums of dscale / doffset (fused, looping or split rows, or staged:
// each row in shared memory); Reduce: the partial sums in a fixed order (deterministic
// dscale / doffset).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/KernelParts.h"


#include <tokamax/dsl/Pipeline.h>

#include <fmt/format.h>

#include <functional>
#include <optional>

namespace tokamax::norm_detail {

using namespace dsl;

namespace {

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

} // namespace

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
  Kernel k(fmt::format("{}_vjp_dx_{}", kindName(s.kind), modeName(s.mode)), {s.num_warps});
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
  // The partial rows, or (a later row chunk) the sums added to them in place: one
  // program a row, chunks in stream order, so the sums stay deterministic.
  auto partial = [&](const TensorArg &t, const Value &sum) {
    Value out = rows.sumToColumns(sum);
    if (s.accumulate_partials)
      out = t.load({program, col}, out.shape()) + out;
    t.store({program, col}, out);
  };
  size_t i = 0;
  if (pds)
    partial(*pds, acc[i++]);
  if (pdo)
    partial(*pdo, acc[i++]);
  return k;
}

Kernel vjpStagedKernel(const NormKernelSpec &s) {
  const bool layer = s.kind == NormKind::Layer;
  const DType f = s.compute;
  const int64_t bc = s.block_cols, blocks = s.columnBlocks();
  Kernel k(fmt::format("{}_vjp_dx_staged", kindName(s.kind)), {s.num_warps});
  Rows rows(k, s);
  VjpInputs in = declareVjpInputs(k, rows, s);
  TensorArg dx = rows.matrix("dx", s.x, true);
  std::optional<TensorArg> pds, pdo;
  if (s.dscale)
    pds = k.output("pdscale", f, {s.programs, s.n});
  if (s.doffset && layer)
    pdo = k.output("pdoffset", f, {s.programs, s.n});
  // Program p's parts run on adjacent ids: a row's parts run together, so the row leaves
  // DRAM once.
  const int64_t own = blocks / s.parts;
  k.grid(s.programs * s.parts);
  const Value program = s.parts == 1 ? k.program_id(0) : k.program_id(0) / Value(s.parts);
  const Value part = s.parts == 1 ? Value(0) : k.program_id(0) % Value(s.parts);
  // Column block b of the row, and the i-th of this program's own blocks.
  auto col = [&](int64_t b) { return Value(b * bc); };
  auto ownCol = [&](int64_t i) { return s.parts == 1 ? col(i) : (part * Value(own) + Value(i)) * Value(bc); };
  // A buffer of two slots (two rows) for each own column block of x, then of dy.
  std::vector<dsl::SharedBuffer> buffers;
  for (int64_t i = 0; i < 2 * own; ++i)
    buffers.push_back(k.shared_buffer(2));
  RingCopies copies = [&](const Value &g, const Value &slot) {
    std::vector<Value> tiles;
    for (int64_t i = 0; i < 2 * own; ++i)  // rows past the last read zeros, never used
      tiles.push_back((i < own ? in.x : in.dy).load_async({g, ownCol(i % own)}, {1, bc}, buffers[size_t(i)], slot));
    return tiles;
  };
  // The partial sums of each own block: dy * xhat (dscale), then dy (doffset).
  const size_t sums = size_t(bool(pds)) + size_t(bool(pdo));
  std::vector<Value> zeros(sums * size_t(own), k.full({1, bc}, 0.0, f));
  RingProducts products = [&](const Value &g, std::vector<Value> acc, std::vector<Value> tiles) {
    rows.at(g);
    const Value rstd = Rows::rowB(rows.loadRow(in.rstd).to(f));
    const Value mean = in.mean ? Rows::rowB(rows.loadRow(*in.mean).to(f)) : Value();
    // The block at column c from dy and x tiles; padding columns read dy = 0, so their
    // terms vanish.
    auto tile = [&](const Value &dyTile, const Value &xTile, const Value &c) {
      VjpTile t;
      t.g = dyTile.to(f);
      const Value xs = xTile.to(f);
      t.rstd = rstd;
      t.xhat = (mean.valid() ? xs - mean : xs) * rstd;
      // The scale is read again for each use (from L1): held, it would take as many
      // registers as the partial sums, and ptxas spilled.
      t.wdy = in.scale ? t.g * rows.loadCol(*in.scale, c, f) : t.g;
      return t;
    };
    auto ownTile = [&](int64_t i) { return tile(tiles[size_t(own + i)], tiles[size_t(i)], ownCol(i)); };
    // mean(wdy * xhat) and (layer) mean(wdy) over the whole row: each part's blocks
    // summed in order, then the parts in order (every part of a row gets the same sums);
    // this program's own part from shared memory, the others' from L2.
    auto partSums = [&](const std::function<VjpTile(int64_t)> &block) {
      Value a1, a2;
      for (int64_t i = 0; i < own; ++i) {
        const VjpTile t = block(i);
        a1 = i ? a1 + Rows::sumRow(t.wdy * t.xhat) : Rows::sumRow(t.wdy * t.xhat);
        if (layer)
          a2 = i ? a2 + Rows::sumRow(t.wdy) : Rows::sumRow(t.wdy);
      }
      return layer ? std::vector<Value>{a1, a2} : std::vector<Value>{a1};
    };
    Value m1, m2;
    for (int64_t q = 0; q < s.parts; ++q) {
      std::vector<Value> partial =
          s.parts == 1 ? partSums(ownTile)
                       : k.if_else(part == Value(q), [&] { return partSums(ownTile); },
                                   [&] {
                                     return partSums([&](int64_t i) {
                                       const Value c = col(q * own + i);
                                       return tile(rows.load(in.dy, c), rows.load(in.x, c), c);
                                     });
                                   });
      m1 = q ? m1 + partial[0] : partial[0];
      if (layer)
        m2 = q ? m2 + partial[1] : partial[1];
    }
    m1 = m1 / double(s.n);
    if (layer)
      m2 = m2 / double(s.n);
    for (int64_t b = 0; b < own; ++b) {
      const VjpTile t = ownTile(b);
      Value d = t.wdy - t.xhat * Rows::rowB(m1);
      if (layer)
        d = d - Rows::rowB(m2);
      rows.store(dx, ownCol(b), (d * rstd).to(s.x));
      size_t i = size_t(b) * sums;
      if (pds) {
        acc[i] = acc[i] + t.g * t.xhat;
        ++i;
      }
      if (pdo)
        acc[i] = acc[i] + t.g;
    }
    return acc;
  };
  // Program p takes rows p, p + programs, ...: each row's copies land while the row
  // before is worked on (a two-row ring).
  std::vector<Value> acc = ring_loop(k, program, Value(s.groups()), s.programs, 2, zeros, copies, products);
  for (int64_t b = 0; b < own; ++b) {
    size_t i = size_t(b) * sums;
    if (pds)
      pds->store({program, ownCol(b)}, rows.sumToColumns(acc[i++]));
    if (pdo)
      pdo->store({program, ownCol(b)}, rows.sumToColumns(acc[i]));
  }
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

} // namespace tokamax::norm_detail
