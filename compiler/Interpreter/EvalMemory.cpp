//===- EvalMemory.cpp - Pointers, gathers/scatters, block accesses, atomics ----===//
//
// Pointers are (argument, element offset) pairs. Gathers, scatters and atomics honour
// their masks and throw on an unmasked access outside the parameter; block accesses mask
// every element whose coordinates fall outside `dims` (loads read `padding`), and throw if
// an in-bounds coordinate still lands outside the parameter (inconsistent dims/strides).
//
//===----------------------------------------------------------------------===//
#include "compiler/Interpreter/HostTile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <type_traits>

namespace tokamax::interp {

using namespace mlir;

namespace {

bool maskOn(const HostTile *mask, size_t k) { return !mask || mask->truth(mask->at(k)); }

const HostTile *optional(Interpreter &in, Value v) { return v ? &in.get(v) : nullptr; }

/// Visits every element of a block: fn(k, inBounds, elementOffset).
template <typename F>
void forEachBlockElement(Interpreter &in, Value base, ValueRange offsets,
                         ArrayRef<int64_t> dims, ArrayRef<int64_t> strides,
                         const std::vector<int64_t> &shape, F fn) {
  const HostTile &b = in.get(base);
  int64_t origin = b.i[0];
  size_t rank = dims.size();
  std::vector<int64_t> start(rank);
  for (size_t d = 0; d < rank; ++d) {
    const HostTile &o = in.get(offsets[d]);
    start[d] = asSigned(o.bits(), o.i[0]);
  }
  std::vector<int64_t> idx(rank, 0);
  size_t n = 1;
  for (int64_t s : shape)
    n *= static_cast<size_t>(s);
  for (size_t k = 0; k < n; ++k) {
    bool inBounds = true;
    int64_t offset = origin;
    for (size_t d = 0; d < rank; ++d) {
      int64_t c = start[d] + idx[d];
      inBounds = inBounds && c >= 0 && c < dims[d];
      offset += c * strides[d];
    }
    fn(k, inBounds, offset);
    for (size_t d = rank; d-- > 0;) { // next row-major index
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/// dst[0] = a[ia] + b[ib], rounded (floats) or wrapped (integers) to a's element type.
void addElements(HostTile &dst, const HostTile &a, size_t ia, const HostTile &b, size_t ib) {
  if (a.kind == Kind::Float)
    dst.f[0] = roundFloat(a.elem, a.f[ia] + b.f[ib]);
  else
    dst.i[0] = wrapInt(a.bits(), static_cast<int64_t>(uint64_t(a.i[ia]) + uint64_t(b.i[ib])));
}

void evalAtomicRMW(Interpreter &in, tile::AtomicRMWOp op) {
  const HostTile &ptrs = in.get(op.getPtrs()), &val = in.get(op.getValue());
  const HostTile *mask = optional(in, op.getMask());
  HostTile old = HostTile::of(op.getType()); // masked-off lanes return 0
  HostTile updated = HostTile::make(old.elem, {});
  bool isAdd = op.getKind() == tile::AtomicKind::Add;
  for (size_t k = 0; k < old.numel(); ++k) {
    if (!maskOn(mask, k))
      continue;
    int32_t arg = ptrs.arg[k];
    int64_t offset = ptrs.i[k];
    in.checkAccess("tile.atomic_rmw", arg, offset);
    in.readElem(arg, offset, old, k);
    if (isAdd)
      addElements(updated, old, k, val, k);
    else if (old.kind == Kind::Float)
      updated.f[0] = val.f[k] > old.f[k] || std::isnan(old.f[k]) ? val.f[k] : old.f[k];
    else
      updated.i[0] = std::max(old.i[k], val.i[k]);
    in.writeElem(arg, offset, updated, 0);
  }
  in.set(op.getResult(), std::move(old));
}

void evalAtomicCAS(Interpreter &in, tile::AtomicCASOp op) {
  const HostTile &ptrs = in.get(op.getPtrs()), &cmp = in.get(op.getCompare()),
                 &val = in.get(op.getValue());
  HostTile old = HostTile::of(op.getType());
  for (size_t k = 0; k < old.numel(); ++k) {
    int32_t arg = ptrs.arg[k];
    int64_t offset = ptrs.i[k];
    in.checkAccess("tile.atomic_cas", arg, offset);
    in.readElem(arg, offset, old, k);
    if (old.i[k] == cmp.i[k])
      in.writeElem(arg, offset, val, k);
  }
  in.set(op.getResult(), std::move(old));
}

/// acc + op(a) @ op(b) over all of K, out-of-range elements read as zero (what TMA's
/// and cp.async's zero fill give on the GPU); products and sums in double, rounded to
/// f32 at the end.
template <class MainLoopDot> void evalMainLoopDot(Interpreter &in, MainLoopDot op) {
  const HostTile &acc = in.get(op.getAcc());
  const HostTile &pa = in.get(op.getA()), &pb = in.get(op.getB());
  int64_t m0 = in.get(op.getM0()).asInt(0), n0 = in.get(op.getN0()).asInt(0);
  int64_t M = op.getM(), N = op.getN(), K = op.getK(), bm = op.getBlockM(), bn = op.getBlockN();
  bool ta = op.getTransA(), tb = op.getTransB();
  // Gather the in-range part of both operand blocks once, as doubles.
  // An operand's K runs from k0 in its stored K extent kExtent (b's window, tma_dot's b_k0).
  auto gather = [&](const HostTile &base, int64_t rows, int64_t first, int64_t extent, bool kMajor, const char *what,
                    int64_t k0, int64_t kExtent) {
    std::vector<double> block(static_cast<size_t>(rows * K), 0.0);
    HostTile one = HostTile::make(cast<tile::PointerType>(op.getA().getType()).getPointeeType(), {});
    for (int64_t r = 0; r < rows; ++r) {
      int64_t row = first + r;
      if (row < 0 || row >= extent)
        continue;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t kk = k0 + k;
        if (kk < 0 || kk >= kExtent)
          continue;
        int64_t offset = base.i[0] + (kMajor ? row * kExtent + kk : kk * extent + row);
        in.checkAccess(what, base.arg[0], offset);
        in.readElem(base.arg[0], offset, one, 0);
        block[static_cast<size_t>(r * K + k)] = one.asDouble(0);
      }
    }
    return block;
  };
  std::string name = op->getName().getStringRef().str();
  int64_t bK0 = 0;
  if constexpr (std::is_same_v<MainLoopDot, tile::TmaDotOp>)
    if (op.getBK0())
      bK0 = in.get(op.getBK0()).asInt(0);
  const int64_t bK = tb ? op.getBDims()[1] : op.getBDims()[0];
  std::vector<double> a = gather(pa, bm, m0, M, !ta, (name + " (a)").c_str(), 0, K);
  std::vector<double> b = gather(pb, bn, n0, N, tb, (name + " (b)").c_str(), bK0, bK);
  HostTile r = HostTile::of(op.getType());
  for (int64_t i = 0; i < bm; ++i)
    for (int64_t j = 0; j < bn; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += a[static_cast<size_t>(i * K + k)] * b[static_cast<size_t>(j * K + k)];
      size_t out = static_cast<size_t>(i * bn + j);
      r.setFromDouble(out, acc.f[acc.at(out)] + s);
    }
  in.set(op.getResult(), std::move(r));
}

/// Writes `value` into the block at `offsets` of the tensor behind `base` (`dims`,
/// `strides`), dropping what falls outside it.
/// The block of `type` at `offsets` of the tensor behind `base`; elements outside it read
/// as `padding`.
HostTile loadBlock(Interpreter &in, const char *name, Value base, ValueRange offsets, ArrayRef<int64_t> dims,
                   ArrayRef<int64_t> strides, RankedTensorType type, double padding) {
  HostTile r = HostTile::of(type);
  int32_t arg = in.get(base).arg[0];
  forEachBlockElement(in, base, offsets, dims, strides, r.shape, [&](size_t k, bool inBounds, int64_t offset) {
    if (!inBounds)
      return r.setFromDouble(k, padding);
    in.checkAccess(name, arg, offset);
    in.readElem(arg, offset, r, k);
  });
  return r;
}

/// `limitDim` >= 0: elements at or past `limit` along that dimension are dropped too.
void storeBlock(Interpreter &in, const char *name, Value base, ValueRange offsets, ArrayRef<int64_t> dims,
                ArrayRef<int64_t> strides, Value value, int64_t limitDim = -1, int64_t limit = 0) {
  const HostTile &val = in.get(value);
  int32_t arg = in.get(base).arg[0];
  // The index along limitDim of element k: the offset plus k's coordinate there.
  int64_t start = 0, inner = 1;
  if (limitDim >= 0) {
    const HostTile &o = in.get(offsets[limitDim]);
    start = asSigned(o.bits(), o.i[0]);
    for (size_t d = size_t(limitDim) + 1; d < val.shape.size(); ++d)
      inner *= val.shape[d];
  }
  forEachBlockElement(in, base, offsets, dims, strides, val.shape, [&](size_t k, bool inBounds, int64_t offset) {
    if (!inBounds || (limitDim >= 0 && start + int64_t(k) / inner % val.shape[limitDim] >= limit))
      return;
    in.checkAccess(name, arg, offset);
    in.writeElem(arg, offset, val, k);
  });
}

/// Adds `value`, the block of extents `block` (its unit dims dropped), into the tensor
/// behind `base`, element by element, dropping what falls outside it. Each element is
/// added once, so the order of the adds within one block changes nothing.
void addBlock(Interpreter &in, const char *name, Value base, ValueRange offsets, ArrayRef<int64_t> dims,
              ArrayRef<int64_t> strides, ArrayRef<int64_t> block, Value value) {
  const HostTile &val = in.get(value);
  int32_t arg = in.get(base).arg[0];
  HostTile sum = HostTile::make(val.elem, {});
  forEachBlockElement(in, base, offsets, dims, strides, std::vector<int64_t>(block.begin(), block.end()),
                      [&](size_t k, bool inBounds, int64_t offset) {
                        if (!inBounds)
                          return;
                        in.checkAccess(name, arg, offset);
                        in.readElem(arg, offset, sum, 0);
                        addElements(sum, sum, 0, val, val.at(k));
                        in.writeElem(arg, offset, sum, 0);
                      });
}

/// tile.tma_store: a row-major block store, or add.
void tmaStore(Interpreter &in, tile::TmaStoreOp op) {
  const std::vector<int64_t> strides{op.getDims()[1], 1};
  if (op.isAdd())
    return addBlock(in, "tile.tma_store add", op.getBase(), op.getOffsets(), op.getDims(), strides,
                    op.getValue().getType().getShape(), op.getValue());
  storeBlock(in, "tile.tma_store", op.getBase(), op.getOffsets(), op.getDims(), strides, op.getValue());
}

/// tile.semaphore_wait / tile.semaphore_signal on one i32 counter. Programs run one at a
/// time (Interpreter::run): a wait whose counter does not hold its value yet would wait
/// for a program that runs later (or never), which no one-at-a-time run reaches.
template <typename Op>
void evalSemaphore(Interpreter &in, Op op, bool wait) {
  const char *name = wait ? "tile.semaphore_wait" : "tile.semaphore_signal";
  const HostTile &b = in.get(op.getBase());
  int64_t offset = b.i[0];
  ArrayRef<int64_t> dims = op.getDims(), strides = op.getStrides();
  std::vector<int64_t> index;
  for (size_t d = 0; d < dims.size(); ++d) {
    const HostTile &o = in.get(op.getOffsets()[d]);
    int64_t c = asSigned(o.bits(), o.i[0]);
    index.push_back(c);
    if (c < 0 || c >= dims[d])
      throw Error(fmt::format("interpreter: {} index {} of dim {} is outside the counters' [0, {}) in {}", name, c, d,
                              dims[d], in.where()));
    offset += c * strides[d];
  }
  in.checkAccess(name, b.arg[0], offset);
  HostTile counter = HostTile::make(IntegerType::get(op.getContext(), 32), {});
  in.readElem(b.arg[0], offset, counter, 0);
  const HostTile &v = in.get(op.getValue());
  const int64_t value = asSigned(32, v.i[0]), now = asSigned(32, counter.i[0]);
  if (wait) {
    if (now != value)
      throw Error(fmt::format("interpreter: tile.semaphore_wait on counter [{}] waits for {} but it holds {} in {}: "
                              "a deadlock (programs run one at a time in grid order, x fastest; no program that "
                              "ran before this one signalled the value)",
                              fmt::join(index, ", "), value, now, in.where()));
    return;
  }
  counter.i[0] = static_cast<int32_t>(static_cast<uint32_t>(now) + static_cast<uint32_t>(value));
  in.writeElem(b.arg[0], offset, counter, 0);
}

} // namespace

bool evalMemory(Interpreter &in, Operation *op) {
  if (auto addptr = dyn_cast<tile::AddPtrOp>(op)) {
    const HostTile &p = in.get(addptr.getPtr()), &off = in.get(addptr.getOffset());
    HostTile r = HostTile::of(addptr.getType());
    unsigned bits = off.bits();
    for (size_t k = 0; k < r.numel(); ++k) {
      r.arg[k] = p.arg[p.at(k)];
      r.i[k] = p.i[p.at(k)] + asSigned(bits, off.i[off.at(k)]);
    }
    in.set(addptr.getResult(), std::move(r));
    return true;
  }
  if (auto load = dyn_cast<tile::LoadOp>(op)) {
    const HostTile &ptrs = in.get(load.getPtrs());
    const HostTile *mask = optional(in, load.getMask()), *other = optional(in, load.getOther());
    HostTile r = HostTile::of(load.getType());
    for (size_t k = 0; k < r.numel(); ++k) {
      if (!maskOn(mask, k)) {
        if (other)
          r.copyElem(k, *other, other->at(k));
        continue;
      }
      in.checkAccess("tile.load", ptrs.arg[k], ptrs.i[k]);
      in.readElem(ptrs.arg[k], ptrs.i[k], r, k);
    }
    in.set(load.getResult(), std::move(r));
    return true;
  }
  if (auto store = dyn_cast<tile::StoreOp>(op)) {
    const HostTile &ptrs = in.get(store.getPtrs()), &val = in.get(store.getValue());
    const HostTile *mask = optional(in, store.getMask());
    for (size_t k = 0; k < ptrs.numel(); ++k) {
      if (!maskOn(mask, k))
        continue;
      in.checkAccess("tile.store", ptrs.arg[k], ptrs.i[k]);
      in.writeElem(ptrs.arg[k], ptrs.i[k], val, val.at(k));
    }
    return true;
  }
  if (auto load = dyn_cast<tile::BlockLoadOp>(op)) {
    in.set(load.getResult(), loadBlock(in, "tile.block_load", load.getBase(), load.getOffsets(), load.getDims(),
                                       load.getStrides(), load.getType(), load.getPadding().convertToDouble()));
    return true;
  }
  if (auto copy = dyn_cast<tile::AsyncBlockLoadOp>(op)) {
    // The block, then its unit dims dropped (the same elements in the same order).
    auto type = copy.getResult().getType();
    HostTile r = loadBlock(in, "tile.async_block_load", copy.getBase(), copy.getOffsets(), copy.getDims(),
                           copy.getStrides(), RankedTensorType::get(copy.getBlock(), type.getElementType()), 0.0);
    r.shape.assign(type.getShape().begin(), type.getShape().end());
    in.set(copy.getResult(), std::move(r));
    return true;
  }
  if (auto store = dyn_cast<tile::BlockStoreOp>(op)) {
    int64_t limitDim = -1, limit = 0;
    if (store.getLimit()) {
      const HostTile &l = in.get(store.getLimit());
      limitDim = *store.getLimitDim(), limit = asSigned(l.bits(), l.i[0]);
    }
    storeBlock(in, "tile.block_store", store.getBase(), store.getOffsets(), store.getDims(), store.getStrides(),
               store.getValue(), limitDim, limit);
    return true;
  }
  if (auto store = dyn_cast<tile::TmaStoreOp>(op))
    return tmaStore(in, store), true;
  if (auto wait = dyn_cast<tile::SemaphoreWaitOp>(op))
    return evalSemaphore(in, wait, /*wait=*/true), true;
  if (auto signal = dyn_cast<tile::SemaphoreSignalOp>(op))
    return evalSemaphore(in, signal, /*wait=*/false), true;
  if (auto rmw = dyn_cast<tile::AtomicRMWOp>(op))
    return evalAtomicRMW(in, rmw), true;
  if (auto add = dyn_cast<tile::BlockAtomicAddOp>(op))
    return addBlock(in, "tile.block_atomic_add", add.getBase(), add.getOffsets(), add.getDims(), add.getStrides(),
                    add.getBlock(), add.getValue()),
           true;
  if (auto dot = dyn_cast<tile::TmaDotOp>(op))
    return evalMainLoopDot(in, dot), true;
  if (auto dot = dyn_cast<tile::CpAsyncDotOp>(op))
    return evalMainLoopDot(in, dot), true;
  if (auto cas = dyn_cast<tile::AtomicCASOp>(op))
    return evalAtomicCAS(in, cas), true;
  return false;
}

} // namespace tokamax::interp
