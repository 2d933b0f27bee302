//===- KernelParts.h - What the norm kernels share -------*- C++ -*-===//
//
// The row-group accessors and the loops the forward (Kernels.cpp) and the VJP
// (VjpKernels.cpp) kernels are built from. Internal to the norm op.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/layer_norm/Kernels.h"

#include <tokamax/dsl/Kernel.h>

#include <functional>
#include <utility>
#include <vector>

namespace tokamax::norm_detail {

using dsl::cdiv;
using dsl::Kernel;
using dsl::TensorArg;
using dsl::Value;

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
                              const std::function<std::vector<Value>(Value)> &contribution);

using Terms = std::function<std::vector<Value>(Value col, bool tail)>;

/// acc (the sums over the columns before `start`; empty when there are none) plus the terms
/// of the column blocks at start, start + bn, ...: whole blocks in a loop without masks,
/// then the partial last block (tail = true: the terms must mask its padding).
std::vector<Value> addColumns(Kernel &k, std::vector<Value> acc, int64_t start, int64_t n, int64_t bn,
                              const Terms &terms);

const char *kindName(NormKind kind);
const char *modeName(Mode mode);
/// Throws tokamax::Error on an inconsistent spec.
void checkSpec(const NormKernelSpec &s);

/// Mean (layer) and rstd of the current row group from sums of (x - shift) and their
/// squares over every column block in order (shift: the mean of the first block, close to
/// the row's mean, so the squares do not cancel): one pass over x.
std::pair<Value, Value> shiftedStatistics(Kernel &k, const Rows &rows, const TensorArg &x, const NormKernelSpec &s,
                                          const Value &eps);

/// Programs along the rows and the column block each writes: a Split kernel's grid puts
/// a row group's blocks on adjacent program ids.
struct Placement {
  Value program, col;
};
Placement place(Kernel &k, const NormKernelSpec &s, bool split);

/// body(g) for the row groups of `program`: just its own, or (persistent programs) g =
/// program, program + programs, ...
void forEachGroup(Kernel &k, const NormKernelSpec &s, const Value &program, const std::function<void(Value)> &body);

/// forEachGroup for persistent programs that carry their next group's tile (`load(g)`,
/// issued before body(g, tile of g) runs; past the last group the load reads nothing).
void forEachGroupPrefetched(Kernel &k, const NormKernelSpec &s, const Value &program,
                            const std::function<Value(Value)> &load,
                            const std::function<void(Value, Value)> &body);

/// The kernels, by KernelKind (build_norm_kernel picks one).
Kernel forwardKernel(const NormKernelSpec &s);
Kernel vjpCoefKernel(const NormKernelSpec &s);
Kernel vjpDxKernel(const NormKernelSpec &s);
Kernel vjpStagedKernel(const NormKernelSpec &s);
Kernel reduceKernel(const NormKernelSpec &s);

} // namespace tokamax::norm_detail
