//===- LowerAsyncCopy.cpp - Shared tiles: cp.async copies and their readers ---===//
//
// A tile.async_block_load result lives in shared memory (#tile.shared): its one register
// is the address of its slot. The copy itself is every thread's 16-byte cp.async chunks
// of the block (zero-filled outside the tensor) stored as a swizzled tile (Staging, the
// layout tile.dot's operand staging and ldmatrix reads use), then one committed group.
// tile.async_wait is cp.async.wait_group plus a block barrier (and, where dots run on
// wgmma, the fence that shows the copies to its async proxy). A copy with a barrier is
// a TMA copy instead: one thread issues its boxes, which complete on that mbarrier
// (tile.mbarrier_wait); the kernel's mbarriers sit after its scratch and are
// initialized when it starts. tile.trans of a shared
// tile renames its address (the type says which dim is contiguous). A conversion out of
// a shared tile reads it: into a dot-operand layout with ldmatrix (readDotOperand; the
// dot itself reads one K step at a time when the conversion feeds only it), into any
// other layout one element per register.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace tokamax::tile {

Staging sharedTileStaging(Operation *op, int64_t rows, int64_t cols, unsigned bytes) {
  return Staging(rows, cols, bytes, /*panels=*/hasWgmmaDots(op));
}

SharedTileView sharedTileView(TileLowering &t, Value tile) {
  auto type = cast<RankedTensorType>(tile.getType());
  int cd = static_cast<int>(cast<SharedLayoutAttr>(type.getEncoding()).getContiguousDim());
  unsigned bytes = elementBytes(t.registerType(type.getElementType()));
  Operation *owner = tile.getDefiningOp() ? tile.getDefiningOp() : tile.getParentBlock()->getParentOp();
  return {cd, sharedTileStaging(owner, type.getDimSize(1 - cd), type.getDimSize(cd), bytes), t.regs(tile)[0]};
}

bool readsSharedAtDot(ConvertLayoutOp op) {
  if (!isSharedTile(op.getSource().getType()) || !isa_and_nonnull<DotOperandLayoutAttr>(getLayout(op.getType())) ||
      op->use_empty())
    return false;
  // Where dots may run on wgmma, each of several dots reads the tile itself (CSE merges
  // their conversions): wgmma reads it through a descriptor, so a shared x of two
  // products stays in shared memory for both. Elsewhere one dot reads it.
  if (!op->hasOneUse() && !hasWgmmaDots(op))
    return false;
  return llvm::all_of(op->getUsers(),
                      [&](Operation *user) { return isa<DotOp>(user) && user->getBlock() == op->getBlock(); });
}

Value slotPointer(TileLowering &t, AsyncBlockLoadOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  I32 m{t, loc};
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  int64_t slotBytes = op->getAttrOfType<IntegerAttr>(kSlotBytesAttr).getInt();
  Value slotOffset = b.create<arith::MulIOp>(loc, t.regs(op.getSlot())[0], m.c(slotBytes));
  return b.create<LLVM::GEPOp>(loc, ptrType, b.getI8Type(), t.scratchBase(op), ValueRange{slotOffset});
}

TmaBox tmaCopyBox(AsyncBlockLoadOp op) {
  auto type = op.getResult().getType();
  unsigned bytes = elementBytes(type.getElementType());
  Staging s(type.getDimSize(0), type.getDimSize(1), bytes, /*panels=*/true);
  return {s.panelCols, s.rows, s.rowBytes(bytes), op.getDims().size() == 3 ? op.getDims()[1] : 0};
}

Value mbarrierAddress(TileLowering &t, Operation *op, Value index) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op) : op->getParentOfType<func::FuncOp>();
  auto offset = func ? func->getAttrOfType<IntegerAttr>(kMbarrierOffsetAttr) : IntegerAttr();
  assert(offset && "tile-allocate-shared places the mbarriers first");
  I32 m{t, loc};
  Value base = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), t.sharedBase());
  return m.add(m.add(base, m.c(offset.getInt())), m.mul(index, 8));
}

LogicalResult initMbarriers(TileLowering &t, func::FuncOp func) {
  auto arrivals = func->getAttrOfType<DenseI64ArrayAttr>(kMbarriersAttr);
  if (!arrivals || arrivals.empty())
    return success();
  Location loc = func.getLoc();
  if (t.target().number() < 90)
    return func.emitOpError("uses mbarriers, which need sm_90, compiling for ") << t.arch();
  if (!t.sharedBase() || !func->hasAttr(kMbarrierOffsetAttr))
    return func.emitOpError("needs its mbarriers placed (run tile-allocate-shared first)");
  I32 m{t, loc};
  PtxBuilder ptx = t.ptx(loc);
  t.when(loc, m.eq(t.threadId(), 0), [&] {
    for (auto [i, count] : llvm::enumerate(arrivals.asArrayRef()))
      ptx.mbarrierInit(mbarrierAddress(t, func, m.c(static_cast<int64_t>(i))), static_cast<unsigned>(count));
    // The inits are visible to the async proxy (TMA's complete_tx) before any copy.
    ptx.fenceMbarrierInitCluster();
  });
  t.barrier();
  return success();
}

namespace {

/// One thread arrives on the barrier expecting the block's bytes, then issues one TMA
/// box per 128-byte panel of the block's rows into the slot (the tensor map's box is a
/// panel: TileToLLVMPass registered it).
LogicalResult lowerTmaCopy(TileLowering &t, AsyncBlockLoadOp op, Value slotAddr, const Staging &s, unsigned bytes) {
  Location loc = op.getLoc();
  if (!t.target().has_wgmma())
    return op.emitOpError("a TMA copy needs sm_90a, compiling for ") << t.arch();
  Value map = t.tensorMap(op.getBase());
  if (!map)
    return op.emitOpError("has no tensor map for its tensor");
  I32 m{t, loc};
  Value bar = mbarrierAddress(t, op, t.regs(op.getBarrier())[0]);
  // 2-D (row, col), or 3-D (batch, row within it, col): a box stays within its batch.
  const bool batched = op.getOffsets().size() == 3;
  Value batch = batched ? t.regs(op.getOffsets()[0])[0] : Value();
  Value row = t.regs(op.getOffsets()[batched ? 1 : 0])[0], col = t.regs(op.getOffsets()[batched ? 2 : 1])[0];
  const int64_t panels = s.cols / s.panelCols;
  auto issue = [&] {
    PtxBuilder ptx = t.ptx(loc);
    ptx.mbarrierArriveExpectTx(bar, static_cast<unsigned>(s.rows * s.cols * bytes));
    for (int64_t p = 0; p < panels; ++p) {
      Value dst = m.add(slotAddr, m.c(p * s.panelBytes(bytes))), inner = m.add(col, m.c(p * s.panelCols));
      if (batched)
        ptx.tmaLoad3d(dst, map, inner, row, batch, bar);
      else
        ptx.tmaLoad2d(dst, map, inner, row, bar);
    }
  };
  // A warp-specialized loop's producer copy already runs on its one issuing thread
  // (lowerSpecializedLoop); elsewhere thread 0 issues.
  if (t.role() == TileLowering::WarpRole::Producer)
    issue();
  else
    t.when(loc, m.eq(t.threadId(), 0), issue);
  return success();
}

LogicalResult lowerCopy(TileLowering &t, AsyncBlockLoadOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  if (t.target().number() < 80 && !op.isTma())
    return op.emitOpError("needs cp.async (sm_80 or newer), compiling for ") << t.arch();
  if (!t.sharedBase() || !op->hasAttr(kSlotBytesAttr))
    return op.emitOpError("needs its shared buffer (run tile-allocate-shared first)");
  auto type = op.getResult().getType();
  Type elem = t.registerType(type.getElementType());
  unsigned bytes = elementBytes(elem);
  ArrayRef<int64_t> dims = op.getDims(), strides = op.getStrides(), block = op.getBlock();
  const int64_t last = static_cast<int64_t>(dims.size()) - 1;
  Staging s = sharedTileStaging(op, type.getDimSize(0), type.getDimSize(1), bytes);
  if (!op.isTma() && knownMultipleOf(t.regs(op.getOffsets()[last])[0]) % s.chunk != 0)
    return op.emitOpError("the last offset must be a known multiple of ") << s.chunk
                                                                          << " elements (16-byte chunks)";
  // The tensor dim the tile's rows run along (none for a single row).
  int64_t rowDim = -1;
  for (int64_t d = 0; d < last; ++d)
    if (block[d] != 1)
      rowDim = d;

  I32 m{t, loc};
  Value slot = slotPointer(t, op);
  Value slotAddr = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), slot);
  if (op.isTma()) {
    t.setRegs(op.getResult(), {slot});
    return lowerTmaCopy(t, op, slotAddr, s, bytes);
  }
  // The block's origin (sign-extended offsets: a negative one is fine where the row
  // it reaches is inside) and whether its unit dims are inside, once per copy; per
  // chunk only its row and column, which depend on the thread alone (hoisted from loops).
  Value global = t.regs(op.getBase())[0];
  Value origin = t.i64(0);
  Value unitDimsInside = b.create<arith::ConstantOp>(loc, b.getBoolAttr(true));
  auto ult = [&](Value x, int64_t bound) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, x, m.c(bound));
  };
  for (int64_t d = 0; d <= last; ++d) {
    Value offset = t.regs(op.getOffsets()[d])[0];
    Value term = b.create<arith::MulIOp>(loc, b.create<arith::ExtSIOp>(loc, b.getI64Type(), offset), t.i64(strides[d]));
    origin = b.create<arith::AddIOp>(loc, origin, term);
    if (d != rowDim && d != last)
      unitDimsInside = b.create<arith::AndIOp>(loc, unitDimsInside, ult(offset, dims[d]));
  }
  Value blockBase = b.create<LLVM::GEPOp>(loc, global.getType(), elem, global, ValueRange{origin});
  Value rowOffset = rowDim >= 0 ? t.regs(op.getOffsets()[rowDim])[0] : Value();
  Value colOffset = t.regs(op.getOffsets()[last])[0];
  const int64_t rowStride = rowDim >= 0 ? strides[rowDim] : 0;
  const int64_t perRow = s.cols / s.chunk, chunks = s.rows * perRow, threads = 32 * getNumWarps(op);
  Value tid = t.threadId();
  // Thread tid copies chunks tid, tid + threads, ...: when a row holds a whole number of
  // the threads' chunks, each next one is `rowStep` rows further down the same column,
  // at constant distances from the first in global and (where the swizzle phase repeats)
  // shared memory: one address computation per thread instead of one per chunk.
  const bool regular = threads % perRow == 0;
  const int64_t rowStep = regular ? threads / perRow : 0;
  const bool samePhase = regular && rowStep % (s.perPhase * s.maxPhase) == 0;
  Value row0 = m.div(tid, perRow), col0 = m.mul(m.rem(tid, perRow), s.chunk);
  auto elementOffset = [&](Value row, Value col) {
    return b.create<arith::AddIOp>(
        loc, b.create<arith::MulIOp>(loc, b.create<arith::ExtUIOp>(loc, b.getI64Type(), row), t.i64(rowStride)),
        b.create<arith::ExtUIOp>(loc, b.getI64Type(), col));
  };
  Value within0 = elementOffset(row0, col0);
  Value dst0 = m.add(slotAddr, m.mul(s.index(m, row0, col0), bytes));
  for (int64_t first = 0, i = 0; first < chunks; first += threads, ++i) {
    auto copyChunk = [&] {
      Value row, col, within, dst;
      if (regular) {
        row = m.add(row0, m.c(i * rowStep));
        col = col0;
        within = b.create<arith::AddIOp>(loc, within0, t.i64(i * rowStep * rowStride));
        dst = samePhase ? m.add(dst0, m.c(i * rowStep * s.rowBytes(bytes)))
                        : m.add(slotAddr, m.mul(s.index(m, row, col), bytes));
      } else {
        Value c = m.add(tid, m.c(first));
        row = m.div(c, perRow);
        col = m.mul(m.rem(c, perRow), s.chunk);
        within = elementOffset(row, col);
        dst = m.add(slotAddr, m.mul(s.index(m, row, col), bytes));
      }
      Value inside = b.create<arith::AndIOp>(loc, unitDimsInside, ult(m.add(colOffset, col), dims[last]));
      if (rowOffset)
        inside = b.create<arith::AndIOp>(loc, inside, ult(m.add(rowOffset, row), dims[rowDim]));
      Value src = b.create<LLVM::GEPOp>(loc, global.getType(), elem, blockBase, ValueRange{within});
      // Outside the tensor nothing is read (zero fill): point at its first element.
      src = b.create<LLVM::SelectOp>(loc, inside, src, global);
      t.ptx(loc).cpAsync16(dst, src, inside);
    };
    if (first + threads <= chunks) {
      copyChunk();
      continue;
    }
    auto guard = b.create<scf::IfOp>(loc, ult(m.add(tid, m.c(first)), chunks), /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&guard.getThenRegion().front());
    copyChunk();
  }
  t.ptx(loc).cpAsyncCommitGroup();
  t.setRegs(op.getResult(), {slot});
  return success();
}

/// A conversion out of a shared tile: ldmatrix into a dot-operand layout, else one load
/// per register.
LogicalResult lowerRead(TileLowering &t, ConvertLayoutOp op) {
  if (readsSharedAtDot(op))
    return success();  // lowerDot reads it, one K step at a time
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  SharedTileView view = sharedTileView(t, op.getSource());
  auto dstType = cast<RankedTensorType>(op.getType());
  if (isSharedTile(dstType))
    return op.emitOpError("cannot move a shared tile to another shared layout");
  if (isa<DotOperandLayoutAttr>(dstType.getEncoding())) {
    FailureOr<Registers> regs = readDotOperand(t, op, dstType, view.cd, view.staging, view.base);
    if (failed(regs))
      return failure();
    t.setRegs(op.getResult(), std::move(*regs));
    return success();
  }
  I32 m{t, loc};
  Type elem = t.registerType(dstType.getElementType());
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Registers result;
  for (int64_t r = 0, n = getDistribution(dstType).num_registers(); r < n; ++r) {
    Registers coords = t.coords(dstType, r);
    Value index = view.staging.index(m, coords[1 - view.cd], coords[view.cd]);
    Value ptr = b.create<LLVM::GEPOp>(loc, ptrType, elem, view.base, ValueRange{index});
    result.push_back(b.create<LLVM::LoadOp>(loc, elem, ptr));
  }
  t.setRegs(op.getResult(), std::move(result));
  return success();
}

} // namespace

LogicalResult lowerAsyncCopyOp(TileLowering &t, Operation *op, bool &handled) {
  handled = true;
  if (auto copy = dyn_cast<AsyncBlockLoadOp>(op))
    return lowerCopy(t, copy);
  if (auto wait = dyn_cast<AsyncWaitOp>(op)) {
    PtxBuilder ptx = t.ptx(op->getLoc());
    ptx.cpAsyncWaitGroup(wait.getPending());
    // wgmma reads shared tiles through the async proxy: make this thread's copies
    // visible to it before the barrier publishes them.
    if (t.target().number() >= 90 && hasWgmmaDots(op))
      ptx.fenceProxyAsyncShared();
    t.barrier();
    return success();
  }
  if (auto wait = dyn_cast<MbarrierWaitOp>(op)) {
    t.ptx(op->getLoc()).mbarrierWait(mbarrierAddress(t, op, t.regs(wait.getIndex())[0]), t.regs(wait.getPhase())[0]);
    return success();
  }
  if (auto arrive = dyn_cast<MbarrierArriveOp>(op)) {
    OpBuilder &b = t.builder();
    Value always = b.create<arith::ConstantOp>(op->getLoc(), b.getBoolAttr(true));
    t.ptx(op->getLoc()).mbarrierArrive(mbarrierAddress(t, op, t.regs(arrive.getIndex())[0]), always);
    return success();
  }
  if (auto trans = dyn_cast<TransOp>(op); trans && isSharedTile(trans.getSource().getType())) {
    t.setRegs(trans.getResult(), t.regs(trans.getSource()));
    return success();
  }
  if (auto convert = dyn_cast<ConvertLayoutOp>(op); convert && isSharedTile(convert.getSource().getType()))
    return lowerRead(t, convert);
  handled = false;
  return success();
}

} // namespace tokamax::tile
