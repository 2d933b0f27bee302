//===- Kernels.cpp - Cross-entropy kernels over logit tiles never stored -===//
//
// The kernels that need logits recompute a [block_b, block_v] tile from x and w over one
// loop on D (tensor cores, or exact multiply-adds for reference): the forward folds it
// into an online log-sum-exp in registers and picks the label's logit; the VJP turns it
// into dlogits with the saved lse, one chunk of V columns at a time ([B, chunk_v] in a
// bounded buffer, never [B, V]), which the dx and dw kernels multiply as small matmuls:
// dx accumulates over the chunks in an f32 buffer, dw's chunk columns are written once.
// The small kernels (the reduction, the VJP's row scales) run one program over B in a
// fixed order; nothing uses atomics, so results do not depend on scheduling.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/cross_entropy/Common.h"

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Pipeline.h>

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

namespace tokamax::xent_detail {

using namespace dsl;

namespace {

const char *kindName(KernelKind kind) {
  switch (kind) {
  case KernelKind::Rows: return "xent_rows";
  case KernelKind::Combine: return "xent_combine";
  case KernelKind::Reduce: return "xent_reduce";
  case KernelKind::RowScale: return "xent_row_scale";
  case KernelKind::DLogits: return "xent_dlogits";
  case KernelKind::Dx: return "xent_dx";
  case KernelKind::Dw: return "xent_dw";
  case KernelKind::DxRound: return "xent_dx_round";
  }
  return "xent";
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
/// The small one-program kernels' block of rows.
constexpr int64_t kRowBlock = 256;

struct Operands {
  TensorArg x, w, labels;
};

/// x's [bb, bk] and w's [bk, bv] blocks of one D step by TMA into the rings.
struct TmaBlocks {
  TmaRing ring;
  SharedBuffer x, w;

  TmaBlocks(Kernel &k, const XentKernelSpec &s)
      : ring(TmaRing::make(k, s.stages, 2, s.num_warps)), x(k.shared_buffer(s.stages)), w(k.shared_buffer(s.stages)) {}
  std::vector<Value> copies(const XentKernelSpec &s, const Operands &o, const Value &m0, const Value &n0,
                            const Value &k0, const Value &slot) const {
    return {o.x.load_tma({m0, k0}, {s.block_b, s.block_k}, x, slot, ring.full, slot),
            o.w.load_tma({k0, n0}, {s.block_k, s.block_v}, w, slot, ring.full, slot)};
  }
};

/// The [bb, bv] logit tile at rows m0, columns n0 in the accumulation dtype (rows past
/// B and columns past V come out 0: their loads are padded). The tma kernels walk their
/// tiles through tma_tile_loop instead.
Value logitTile(Kernel &k, const XentKernelSpec &s, const Operands &o, const Value &m0, const Value &n0) {
  const Problem &p = s.p;
  Value zero = k.full({s.block_b, s.block_v}, 0.0, p.compute);
  return k.loop(0, p.D, s.block_k, {zero}, [&](Value k0, std::vector<Value> acc) {
    Value a = o.x.load({m0, k0}, {s.block_b, s.block_k});
    Value b = o.w.load({k0, n0}, {s.block_k, s.block_v});
    return std::vector<Value>{s.exact ? exact_product(a.to(p.compute), b.to(p.compute), acc[0])
                                      : dot(a, b, acc[0])};
  })[0];
}

/// The column ids n0 .. n0 + bv of a tile, as [1, bv].
Value columns(Kernel &k, const XentKernelSpec &s, const Value &n0) { return (n0 + k.arange(0, s.block_v)).expand(0); }

/// Rows whose label is ignore_index, and rows whose label is outside [0, V) otherwise.
struct LabelKinds {
  Value ignored, outOfRange;
};

LabelKinds classify(const Problem &p, const Value &label) {
  Value ignored = label == Value(p.ignore_index);
  Value outside = (label < Value(0)) | (label >= Value(p.V));
  return {ignored, outside & (label != Value(p.ignore_index))};
}

/// A row's loss from its lse and picked logit: 0 ignored, NaN for labels out of range.
Value rowLoss(const Problem &p, const Value &label, const Value &lse, const Value &picked) {
  LabelKinds kinds = classify(p, label);
  return where(kinds.ignored, 0.0, where(kinds.outOfRange, kNaN, lse - picked));
}

/// An online log-sum-exp over the V tiles of one split (all of V unless split_v > 1), the
/// label's logit picked from the tile that holds it: each row's loss and lse, or with
/// split_v > 1 the split's partial (max, sum of exp, picked) for the combine kernel.
void rowsKernel(Kernel &k, const XentKernelSpec &s, const Operands &o) {
  const Problem &p = s.p;
  const bool split = s.split_v > 1;
  std::optional<TensorArg> rows, lse, partials;
  if (split) {
    partials = k.output("partials", p.compute, {3, s.split_v, p.B});
  } else {
    rows = k.output("rows", p.compute, {p.B});
    lse = k.output("lse", p.compute, {p.B});
  }
  const int64_t gridB = cdiv(p.B, s.block_b);
  const int64_t span = cdiv(cdiv(p.V, s.block_v), s.split_v) * s.block_v;  // V columns per split
  k.grid(gridB * s.split_v);
  Value pid = k.program_id(0);
  Value m0 = pid % Value(gridB) * Value(s.block_b), part = pid / Value(gridB);
  Value lo = part * Value(span), hi = minimum(lo + Value(span), Value(p.V));
  Value label = o.labels.load({m0}, {s.block_b}, double(p.ignore_index));
  Value labelColumn = label.expand(1);
  Value init = k.full({s.block_b}, -INFINITY, p.compute), zero = k.full({s.block_b}, 0.0, p.compute);
  // The online update with the logit tile of columns n0 .. n0 + bv: (max, sum, picked).
  auto update = [&](const Value &n0, const Value &tile, const std::vector<Value> &c) {
    Value cols = columns(k, s, n0);
    Value logits = where(cols < Value(p.V), tile, -INFINITY);
    Value mNew = maximum(c[0], logits.max(1));
    Value sum = c[1] * exp(c[0] - mNew) + exp(logits - mNew.expand(1)).sum(1);
    Value picked = c[2] + where(cols == labelColumn, logits, 0.0).sum(1);
    return std::vector<Value>{mNew, sum, picked};
  };
  std::vector<Value> r;
  if (s.tma) {  // the split's V tiles, each holding its D steps
    const TmaBlocks blocks(k, s);
    TmaTileLoop body;
    body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
      return blocks.copies(s, o, m0, lo + tile * Value(s.block_v), k0, slot);
    };
    body.products = [](const std::vector<Value> &b, const std::vector<Value> &accs, const Value &fresh) {
      return std::vector<Value>{dot_async(b[0], b[1], accs[0], fresh)};
    };
    body.done = [&](const Value &tile, const std::vector<Value> &accs, std::vector<Value> c) {
      return update(lo + tile * Value(s.block_v), accs[0], c);
    };
    r = tma_tile_loop(k, (hi - lo + Value(s.block_v - 1)) / Value(s.block_v), cdiv(p.D, s.block_k), s.block_k,
                      blocks.ring, {k.full({s.block_b, s.block_v}, 0.0, p.compute)}, {init, zero, zero}, body);
  } else {
    r = k.loop(lo, hi, s.block_v, {init, zero, zero}, [&](Value n0, std::vector<Value> c) {
      return update(n0, logitTile(k, s, o, m0, n0), c);
    });
  }
  if (split) {
    for (int i = 0; i < 3; ++i)
      partials->store({Value(i), part, m0}, r[size_t(i)].reshape({1, 1, s.block_b}));
    return;
  }
  Value rowLse = r[0] + log(r[1]);
  rows->store({m0}, rowLoss(p, label, rowLse, r[2]));
  lse->store({m0}, rowLse);
}

/// Each row's loss and lse from the splits' partials, merged in split order.
void combineKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  TensorArg partials = k.input("partials", p.compute, {3, s.split_v, p.B});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg rows = k.output("rows", p.compute, {p.B});
  TensorArg lse = k.output("lse", p.compute, {p.B});
  k.grid(cdiv(p.B, kRowBlock));
  Value m0 = k.program_id(0) * Value(kRowBlock);
  auto part = [&](int i, int64_t split) {
    return partials.load({Value(i), Value(split), m0}, {1, 1, kRowBlock}).reshape({kRowBlock});
  };
  Value m = part(0, 0);
  for (int64_t j = 1; j < s.split_v; ++j)
    m = maximum(m, part(0, j));
  Value sum = part(1, 0) * exp(part(0, 0) - m), picked = part(2, 0);
  for (int64_t j = 1; j < s.split_v; ++j) {
    sum = sum + part(1, j) * exp(part(0, j) - m);
    picked = picked + part(2, j);
  }
  Value rowLse = m + log(sum);
  Value label = labels.load({m0}, {kRowBlock}, double(p.ignore_index));
  rows.store({m0}, rowLoss(p, label, rowLse, picked));
  lse.store({m0}, rowLse);
}

/// Counts the rows that are not ignored, over B in blocks, as [1].
Value countRows(Kernel &k, const Problem &p, const TensorArg &labels) {
  Value zero = k.full({1, kRowBlock}, 0.0, p.compute), one = k.full({1, kRowBlock}, 1.0, p.compute);
  Value count = k.loop(0, p.B, kRowBlock, {zero}, [&](Value m0, std::vector<Value> c) {
    Value label = labels.load({m0}, {kRowBlock}, double(p.ignore_index)).reshape({1, kRowBlock});
    return std::vector<Value>{c[0] + where(label != Value(p.ignore_index), one, 0.0)};
  })[0];
  return count.sum(1);
}

/// loss [1] = the sum of the row losses (over the counted rows for mean), one program.
void reduceKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  TensorArg rows = k.input("rows", p.compute, {p.B});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg loss = k.output("loss", p.compute, {1});
  k.grid(1);
  Value zero = k.full({1, kRowBlock}, 0.0, p.compute);
  Value total = k.loop(0, p.B, kRowBlock, {zero}, [&](Value m0, std::vector<Value> c) {
    return std::vector<Value>{c[0] + rows.load({m0}, {kRowBlock}).reshape({1, kRowBlock})};
  })[0].sum(1);
  loss.store({0}, p.reduction == LossReduction::Mean ? total / countRows(k, p, labels) : total);
}

/// scale [B]: each row's factor on softmax - onehot (dloss_i, dloss or dloss / count; 0
/// for ignored rows, NaN for labels out of range).
void rowScaleKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  const bool perRow = p.reduction == LossReduction::None;
  TensorArg dloss = k.input("dloss", p.compute, {perRow ? p.B : 1});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg scale = k.output("scale", p.compute, {p.B});
  k.grid(1);
  Value shared;  // sum / mean: one factor for every row, [1, 1]
  if (!perRow) {
    shared = dloss.load({0}, {1});
    if (p.reduction == LossReduction::Mean)
      shared = shared / countRows(k, p, labels);
    shared = shared.expand(1);
  }
  k.loop(0, p.B, kRowBlock, {}, [&](Value m0, std::vector<Value>) {
    Value label = labels.load({m0}, {kRowBlock}, double(p.ignore_index)).reshape({1, kRowBlock});
    Value g = perRow ? dloss.load({m0}, {kRowBlock}).reshape({1, kRowBlock}) : shared.broadcast_to({1, kRowBlock});
    LabelKinds kinds = classify(p, label);
    scale.store({m0}, where(kinds.ignored, 0.0, where(kinds.outOfRange, kNaN, g)).reshape({kRowBlock}));
    return std::vector<Value>{};
  });
}

/// The dtype of the VJP's products and of the dlogits chunk: x's on tensor cores, the
/// accumulation dtype for exact products.
DType operandDtype(const XentKernelSpec &s) { return s.exact ? s.p.compute : s.p.dtype; }

/// dlogits [B, chunk_v] of the columns c0 .. c0 + chunk_v: (softmax - onehot) * scale
/// from a logit tile recomputed with the saved lse (columns past V give 0).
void dlogitsKernel(Kernel &k, const XentKernelSpec &s, const Operands &o) {
  const Problem &p = s.p;
  TensorArg lseIn = k.input("lse", p.compute, {p.B}), scaleIn = k.input("scale", p.compute, {p.B});
  TensorArg dl = k.output("dlogits", operandDtype(s), {p.B, s.chunk_v});
  Value c0 = k.scalar("c0", DType::I32);
  const int64_t gridV = s.chunk_v / s.block_v, tiles = cdiv(p.B, s.block_b) * gridV;
  // The tile at (m0, j0) of the chunk from its logits.
  auto write = [&](const Value &m0, const Value &j0, const Value &logits) {
    Value n0 = c0 + j0;
    Value cols = columns(k, s, n0);
    Value lse = lseIn.load({m0}, {s.block_b}).expand(1);
    Value scale = scaleIn.load({m0}, {s.block_b}).expand(1);
    Value label = o.labels.load({m0}, {s.block_b}, double(p.ignore_index)).expand(1);
    Value prob = where(cols < Value(p.V), exp(logits - lse), 0.0);
    Value tile = (where(cols == label, prob - 1.0, prob) * scale).to(operandDtype(s));
    // On TMA rings the tile leaves through shared memory by TMA stores: the consumers
    // go on to the next tile's products while it is written out.
    if (s.tma)
      dl.tma_store({m0, j0}, tile);
    else
      dl.store({m0, j0}, tile);
  };
  if (!s.tma) {
    k.grid(tiles);
    Value pid = k.program_id(0);
    Value m0 = pid / Value(gridV) * Value(s.block_b), j0 = pid % Value(gridV) * Value(s.block_v);
    write(m0, j0, logitTile(k, s, o, m0, c0 + j0));
    return;
  }
  // TMA rings: programs walk tiles pid, pid + programs, ... (tma_tile_loop), each D
  // step's product in flight until the next is issued; the producer loads the next
  // tile's blocks while the consumers write this one.
  const int64_t programs = s.programs > 0 ? std::min(s.programs, tiles) : tiles;
  k.grid(programs);
  Value pid = k.program_id(0);
  auto origin = [&](const Value &tile) {
    Value t = pid + tile * Value(programs);
    return std::pair{t / Value(gridV) * Value(s.block_b), t % Value(gridV) * Value(s.block_v)};
  };
  const TmaBlocks blocks(k, s);
  TmaTileLoop body;
  body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
    auto [m0, j0] = origin(tile);
    return blocks.copies(s, o, m0, c0 + j0, k0, slot);
  };
  body.products = [](const std::vector<Value> &b, const std::vector<Value> &accs, const Value &fresh) {
    return std::vector<Value>{dot_async(b[0], b[1], accs[0], fresh)};
  };
  body.done = [&](const Value &tile, const std::vector<Value> &accs, std::vector<Value>) {
    auto [m0, j0] = origin(tile);
    write(m0, j0, accs[0]);
    return std::vector<Value>{};
  };
  Value count = (Value(tiles) - pid + Value(programs - 1)) / Value(programs);
  tma_tile_loop(k, count, cdiv(p.D, s.block_k), s.block_k, blocks.ring,
                {k.full({s.block_b, s.block_v}, 0.0, p.compute)}, {}, body);
}

/// dx [bb, bd] at (m0, d0): the f32 accumulator plus dlogits [bb, chunk] @ w[d0:, c0:]^T
/// over the chunk's tiles, written back, and rounded into dx (the last chunk's stays).
void dxKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  TensorArg dl = k.input("dlogits", operandDtype(s), {p.B, s.chunk_v});
  TensorArg w = k.input("w", p.dtype, {p.D, p.V});
  TensorArg acc = k.output("dx_acc", p.compute, {p.B, p.D});
  TensorArg dx = k.output("dx", p.dtype, {p.B, p.D});
  Value c0 = k.scalar("c0", DType::I32);
  const int64_t gridD = cdiv(p.D, s.block_d);
  k.grid(cdiv(p.B, s.block_b) * gridD);
  Value pid = k.program_id(0);
  Value m0 = pid / Value(gridD) * Value(s.block_b), d0 = pid % Value(gridD) * Value(s.block_d);
  Value start = acc.load({m0, d0}, {s.block_b, s.block_d});
  Value sum = k.loop(0, s.chunk_v, s.block_v, {start}, [&](Value j0, std::vector<Value> c) {
    Value a = dl.load({m0, j0}, {s.block_b, s.block_v});
    Value wT = w.load({d0, c0 + j0}, {s.block_d, s.block_v}).trans().to(operandDtype(s));
    return std::vector<Value>{s.exact ? exact_product(a, wT, c[0]) : dot(a, wT, c[0])};
  })[0];
  acc.store({m0, d0}, sum);
  dx.store({m0, d0}, sum.to(p.dtype));
}

/// dw [bd, bv] at (d0, c0 + j0) = sum over B tiles of x[m0:, d0:]^T @ dlogits[m0:, j0:].
void dwKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  TensorArg x = k.input("x", p.dtype, {p.B, p.D});
  TensorArg dl = k.input("dlogits", operandDtype(s), {p.B, s.chunk_v});
  TensorArg dw = k.output("dw", p.dtype, {p.D, p.V});
  Value c0 = k.scalar("c0", DType::I32);
  const int64_t gridV = s.chunk_v / s.block_v;
  k.grid(cdiv(p.D, s.block_d) * gridV);
  Value pid = k.program_id(0);
  Value d0 = pid / Value(gridV) * Value(s.block_d), j0 = pid % Value(gridV) * Value(s.block_v);
  Value zero = k.full({s.block_d, s.block_v}, 0.0, p.compute);
  Value sum = k.loop(0, p.B, s.block_b, {zero}, [&](Value m0, std::vector<Value> c) {
    Value xT = x.load({m0, d0}, {s.block_b, s.block_d}).trans().to(operandDtype(s));
    Value b = dl.load({m0, j0}, {s.block_b, s.block_v});
    return std::vector<Value>{s.exact ? exact_product(xT, b, c[0]) : dot(xT, b, c[0])};
  })[0];
  dw.store({d0, c0 + j0}, sum.to(p.dtype));
}

/// dx = the f32 accumulator in x's dtype, [64, 128] blocks on 4 warps.
void dxRoundKernel(Kernel &k, const XentKernelSpec &s) {
  const Problem &p = s.p;
  constexpr int64_t br = 64, bc = 128;
  TensorArg acc = k.input("dx_acc", p.compute, {p.B, p.D});
  TensorArg dx = k.output("dx", p.dtype, {p.B, p.D});
  const int64_t gridD = cdiv(p.D, bc);
  k.grid(cdiv(p.B, br) * gridD);
  Value pid = k.program_id(0);
  Value m0 = pid / Value(gridD) * Value(br), d0 = pid % Value(gridD) * Value(bc);
  dx.store({m0, d0}, acc.load({m0, d0}, {br, bc}).to(p.dtype));
}

} // namespace

KernelKey XentKernelSpec::key() const {
  return ops_detail::specializationKey(kindName(kind),
                                       {p.B, p.D, p.V, int64_t(p.dtype), int64_t(p.compute), int64_t(p.reduction),
                                        p.ignore_index, exact, block_b, block_v, block_k, block_d, chunk_v, split_v, num_warps,
                                        tma, stages, programs});
}

Kernel xent_kernel(const XentKernelSpec &s) {
  const Problem &p = s.p;
  if (p.B < 1 || p.V < 1)
    throw Error(fmt::format("linear_softmax_cross_entropy_loss: a kernel needs B, V >= 1, got B {}, V {}", p.B, p.V));
  // The tma rows kernel's producer computes each step's tile and D coordinates in its
  // nested tile / step loops (LLVM unrolls and hoists): ptxas, 8 warps, 2-4 stages:
  // spills at 24 and 40 registers, none at 56 (the consumers keep 224); the dlogits
  // kernel's one producer thread spilled at 24, not at 40 (the consumers keep 232).
  const int producerRegisters = !s.tma ? 24 : s.kind == KernelKind::Rows ? 56 : 40;
  Kernel k(kindName(s.kind), {.num_warps = s.num_warps,
                              .mma_rows_per_warp = s.tma,
                              .wgmma_dots = s.tma,
                              .producer_registers = producerRegisters});
  if (s.kind == KernelKind::Reduce) {
    reduceKernel(k, s);
    return k;
  }
  if (s.kind == KernelKind::Combine) {
    combineKernel(k, s);
    return k;
  }
  if (s.kind == KernelKind::RowScale) {
    rowScaleKernel(k, s);
    return k;
  }
  if (s.kind == KernelKind::Dx) {
    dxKernel(k, s);
    return k;
  }
  if (s.kind == KernelKind::Dw) {
    dwKernel(k, s);
    return k;
  }
  if (s.kind == KernelKind::DxRound) {
    dxRoundKernel(k, s);
    return k;
  }
  Operands o{k.input("x", p.dtype, {p.B, p.D}), k.input("w", p.dtype, {p.D, p.V}),
             k.input("labels", DType::I32, {p.B})};
  if (s.kind == KernelKind::Rows)
    rowsKernel(k, s, o);
  else
    dlogitsKernel(k, s, o);
  return k;
}

} // namespace tokamax::xent_detail
