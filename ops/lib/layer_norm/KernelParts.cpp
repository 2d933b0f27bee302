//===- KernelParts.cpp - What the norm kernels share --------------------===//
#include "ops/lib/layer_norm/KernelParts.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

namespace tokamax::norm_detail {

using namespace dsl;

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

const char *modeName(Mode mode) {
  static const char *names[] = {"fused", "looping", "shifted", "split", "staged"};
  return names[int(mode)];
}

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
  if (s.mode == Mode::Staged &&
      (s.strided() || s.kernel != KernelKind::VjpDx || s.block_rows != 1 || dtype_size(s.x) > 4 || s.n % 8 != 0))
    throw Error(fmt::format("norm kernel: the staged mode is a dx mode of the row case with one row a program and "
                            "16- or 32-bit rows of whole 16-byte chunks (block_rows {}, {} columns of {})",
                            s.block_rows, s.n, dtype_name(s.x)));
  if (s.parts < 1 || (s.parts > 1 && (s.mode != Mode::Staged || s.columnBlocks() % s.parts != 0)))
    throw Error(fmt::format("norm kernel: {} parts of a row need the staged mode and a multiple of {} column blocks, "
                            "got {}",
                            s.parts, s.parts, s.columnBlocks()));
  if (s.programs < 1)
    throw Error(fmt::format("norm kernel: programs must be positive, got {}", s.programs));
  if (s.prefetch && (s.kernel != KernelKind::Fwd || s.mode != Mode::Fused || s.programs >= s.groups()))
    throw Error("norm kernel: prefetch is a mode of the fused forward on persistent programs");
  if ((s.kernel == KernelKind::VjpDx || s.kernel == KernelKind::Fwd) && s.programs > s.groups())
    throw Error(fmt::format("norm kernel: {} programs for {} row groups", s.programs, s.groups()));
}

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

Placement place(Kernel &k, const NormKernelSpec &s, bool split) {
  const int64_t blocks = s.columnBlocks();
  k.grid(split ? s.programs * blocks : s.programs);
  Value pid = k.program_id(0);
  if (!split || blocks == 1)
    return {pid, Value(0)};
  return {pid / Value(blocks), (pid % Value(blocks)) * Value(s.block_cols)};
}

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

} // namespace tokamax::norm_detail
