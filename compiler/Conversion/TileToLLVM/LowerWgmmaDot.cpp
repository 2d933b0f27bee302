//===- LowerWgmmaDot.cpp - tile.dot on wgmma when B is a shared tile --------===//
//
// On sm_90a, in kernels marked tile.wgmma_dots, a tile.dot whose B operand is read from a shared tile (a tile.async_block_load
// result, possibly transposed) and whose accumulator puts every warp along M runs on
// wgmma.mma_async with A from registers, or from shared memory too where A is also a
// shared tile read only by the dot (both operands through descriptors, no ldmatrix): the shared tile is already the swizzle atom
// wgmma's descriptors name (Staging: rows of 32, 64 or 128 bytes, longer rows as 128-byte
// panels, slots 1024-byte aligned), so B is read by the tensor cores straight from the
// copy, with no ldmatrix and no per-thread B fragments. Each warpgroup's 64-row slab is
// one wgmma m64nNk16 (m64nNk32 for fp8) per K step; A's words are mma.sync's
// (MmaFragments), which are wgmma's register A fragments. Registers flow through the fence before the wgmma and
// the wait after it (tied asm operands), so LLVM orders every write of the inputs before
// the fence and every read of the result after the wait. The dot waits for its group at
// once, so it is synchronous like the mma.sync lowering it replaces, unless it is async:
// then the group stays in flight until a tile.dot_wait.
//
// B stored K-major (the shared tile's rows run along K: q k^T reads k's rows) uses the
// tile's own swizzle and 32-byte K steps inside a row (the next panel every 128 bytes);
// B stored N-major (p v reads v's rows along N) needs 128-byte rows: 16-row K steps,
// 64-element panels along N at the leading byte offset, and the transpose immediate.
// fp8 operands (kWidth 4, k32 steps) are K-major only: wgmma has no transpose for them.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

/// The shared tile a dot operand is read from by the dot itself, if it is one.
std::optional<SharedTileView> sharedOperand(TileLowering &t, Value operand) {
  auto convert = operand.getDefiningOp<ConvertLayoutOp>();
  if (!convert || !readsSharedAtDot(convert))
    return std::nullopt;
  return sharedTileView(t, convert.getSource());
}

/// `shared` (elements of `bytes` bytes) where wgmma's descriptors can read it: stored
/// K-major (its contiguous dimension is the operand's K, `kDim`), rows of 32, 64 or 128
/// bytes swizzled by their own width in whole groups of `kMajorRows` rows; stored
/// MN-major (16-bit elements only), 128-byte rows where `mnMajorFits` (B: N a whole
/// number of 64-element panels).
std::optional<SharedTileView> wgmmaReadable(std::optional<SharedTileView> shared, unsigned bytes, int kDim,
                                            int64_t kMajorRows, bool mnMajorFits) {
  if (!shared)
    return std::nullopt;
  const SharedTileView &view = *shared;
  const int64_t rowBytes = view.staging.rowBytes(bytes);
  if (view.cd == kDim)
    return (rowBytes == 32 || rowBytes == 64 || rowBytes == 128) && view.staging.rows % kMajorRows == 0
               ? shared
               : std::nullopt;
  return rowBytes == 128 && mnMajorFits && bytes == 2 ? shared : std::nullopt;
}

} // namespace

std::optional<SharedTileView> wgmmaSharedB(TileLowering &t, DotOp op) {
  if (!t.target().has_wgmma() || !hasWgmmaDots(op))
    return std::nullopt;
  auto accType = op.getAcc().getType();
  auto aType = op.getA().getType();
  auto mma = dyn_cast_or_null<MmaLayoutAttr>(accType.getEncoding());
  auto aLayout = dyn_cast_or_null<DotOperandLayoutAttr>(aType.getEncoding());
  Type elem = aType.getElementType();
  const bool fp8 = isFp8(elem);
  if (!mma || !aLayout || aLayout.getParent() != mma || aLayout.getKWidth() != (fp8 ? 4u : 2u) ||
      !(elem.isBF16() || elem.isF16() || fp8) || !accType.getElementType().isF32())
    return std::nullopt;
  ArrayRef<unsigned> warps = mma.getWarpsPerCTA();
  const int64_t m = accType.getDimSize(0), n = accType.getDimSize(1), k = aType.getDimSize(1);
  if (warps.size() != 2 || warps[1] != 1 || warps[0] % 4 != 0 || m % (16 * int64_t(warps[0])) != 0 ||
      n % 8 != 0 || n > 256 || k % (fp8 ? 32 : 16) != 0)
    return std::nullopt;
  return wgmmaReadable(sharedOperand(t, op.getB()), elementBytes(elem), /*kDim=*/0, /*kMajorRows=*/8,
                       /*mnMajorFits=*/n % 64 == 0);
}

std::optional<SharedTileView> wgmmaSharedA(TileLowering &t, DotOp op) {
  if (!wgmmaSharedB(t, op))
    return std::nullopt;
  return wgmmaReadable(sharedOperand(t, op.getA()), elementBytes(op.getA().getType().getElementType()), /*kDim=*/1,
                       /*kMajorRows=*/64, /*mnMajorFits=*/true);
}

namespace {

/// The descriptor of one wgmma operand's K step `kk` read from its shared tile, starting
/// `mn` (i32, a multiple of 64) rows or columns into M or N. K-major (`kMajor`: stored
/// rows run along K): 32 bytes of K per step (16 16-bit or 32 8-bit elements) inside a
/// row of the step's panel, `mn` stored rows down. MN-major (16-bit only): 16 stored rows
/// per step, 64-element panels along M or N at the leading byte offset, `mn` / 64 panels
/// in.
Value operandDescriptor(PtxBuilder &ptx, I32 &i32, Value base, const Staging &s, unsigned bytes, bool kMajor,
                        int64_t kk, Value mn) {
  const int64_t rowBytes = s.rowBytes(bytes), panelBytes = s.panelBytes(bytes);
  if (kMajor) {
    Value start = i32.add(base, i32.c(kk * 32 / rowBytes * panelBytes + kk * 32 % rowBytes));
    return ptx.wgmmaDescriptor(mn ? i32.add(start, i32.mul(mn, rowBytes)) : start, 16, 8 * rowBytes, rowBytes);
  }
  Value start = i32.add(base, i32.c(kk * 16 * rowBytes));
  if (mn)
    start = i32.add(start, i32.mul(i32.div(mn, s.panelCols), panelBytes));
  return ptx.wgmmaDescriptor(start, panelBytes, 8 * rowBytes, rowBytes);
}

} // namespace

FailureOr<Registers> emitWgmma(TileLowering &t, DotOp op, const Registers &a, const SharedTileView &bView,
                               const Registers &acc, const std::optional<SharedTileView> &aView) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto accType = op.getAcc().getType();
  auto aType = op.getA().getType();
  auto bType = cast<RankedTensorType>(op.getB().getType());
  const int64_t warps = cast<MmaLayoutAttr>(accType.getEncoding()).getWarpsPerCTA()[0];
  const unsigned bytes = elementBytes(aType.getElementType());
  const int64_t m = accType.getDimSize(0), n = accType.getDimSize(1), kSteps = aType.getDimSize(1) * bytes / 32;
  const int64_t slabs = m / (16 * warps), perSlab = n / 2;
  StringRef ab = mmaTypeName(aType.getElementType());

  // Accumulator register of wgmma output i of slab r: (row 8 (i % 4 / 2), col 8 (i / 4) +
  // i % 2) of the thread's 16-row block, as the mma layout orders c0..c3.
  compiler::Distribution dist = getDistribution(accType);
  const std::map<std::vector<int64_t>, int64_t> byOffset = registersByOffset(dist);
  if (dist.num_registers() != slabs * perSlab)
    return op.emitOpError("accumulator layout does not match wgmma's fragments: ") << accType;
  std::vector<int64_t> regOf;
  for (int64_t r = 0; r < slabs; ++r)
    for (int64_t i = 0; i < perSlab; ++i) {
      auto it = byOffset.find({16 * warps * r + 8 * ((i % 4) / 2), 8 * (i / 4) + i % 2});
      if (it == byOffset.end())
        return op.emitOpError("accumulator layout does not match wgmma's fragments: ") << accType;
      regOf.push_back(it->second);
    }

  MmaFragments fragments(t, op, aType, bType, accType);
  std::vector<std::vector<SmallVector<Value>>> aWords(static_cast<size_t>(slabs));
  for (int64_t r = 0; r < slabs && !aView; ++r)
    for (int64_t kk = 0; kk < kSteps; ++kk) {
      auto words = fragments.a(a, static_cast<unsigned>(r), static_cast<unsigned>(kk));
      if (failed(words))
        return failure();
      aWords[r].push_back(*words);
    }

  I32 i32{t, loc};
  Value base = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), bView.base);
  const bool kMajor = bView.cd == 0;
  PtxBuilder ptx = t.ptx(loc);
  // A from shared memory: each warpgroup's slab r starts 16 warps r + 64 g rows in.
  Value aBase, warpgroupRows;
  if (aView) {
    aBase = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), aView->base);
    warpgroupRows = i32.mul(i32.div(t.warpId(), 4), 64);
  }

  // The fence orders every write of A's and the accumulator's registers before the
  // wgmma that reads them: they flow through it.
  SmallVector<Value> fenced(acc.begin(), acc.end());
  for (auto &slab : aWords)
    for (auto &words : slab)
      fenced.append(words.begin(), words.end());
  fenced = ptx.wgmmaFenceFor(fenced);
  Registers result(fenced.begin(), fenced.begin() + acc.size());
  size_t next = acc.size();
  for (auto &slab : aWords)
    for (auto &words : slab)
      for (Value &word : words)
        word = fenced[next++];
  // A fresh product's first K step starts from zero (scale-d 0), the rest accumulate.
  Value restart;
  if (Value fresh = op.getFresh())
    restart = b.create<arith::ExtUIOp>(loc, b.getI32Type(),
                                       b.create<arith::XOrIOp>(loc, t.regs(fresh)[0], b.create<arith::ConstantOp>(
                                                                                           loc, b.getBoolAttr(true))));
  for (int64_t kk = 0; kk < kSteps; ++kk) {
    Value scaleD = kk == 0 ? restart : Value();
    Value descB = operandDescriptor(ptx, i32, base, bView.staging, bytes, kMajor, kk, Value());
    for (int64_t r = 0; r < slabs; ++r) {
      SmallVector<Value> in;
      for (int64_t i = 0; i < perSlab; ++i)
        in.push_back(result[regOf[r * perSlab + i]]);
      SmallVector<Value> out;
      if (aView) {
        const bool aKMajor = aView->cd == 1;
        Value descA = operandDescriptor(ptx, i32, aBase, aView->staging, bytes, aKMajor, kk,
                                        i32.add(warpgroupRows, i32.c(16 * warps * r)));
        out = ptx.wgmma(static_cast<unsigned>(n), ab, descA, descB, in, /*transA=*/!aKMajor, /*transB=*/!kMajor,
                        scaleD);
      } else {
        out = ptx.wgmmaRegisterA(static_cast<unsigned>(n), ab, aWords[r][kk], descB, in, /*transB=*/!kMajor, scaleD);
      }
      for (int64_t i = 0; i < perSlab; ++i)
        result[regOf[r * perSlab + i]] = out[i];
    }
  }
  ptx.wgmmaCommitGroup();
  if (op.getAsync())
    return result;
  SmallVector<Value> done = ptx.wgmmaWaitGroupFor(0, result);
  return Registers(done.begin(), done.end());
}

LogicalResult lowerDotWait(TileLowering &t, DotWaitOp op) {
  const Registers &in = t.regs(op.getValue());
  if (!t.target().has_wgmma() || !hasWgmmaDots(op)) {
    t.setRegs(op.getResult(), in);  // every dot completed when it was issued
    return success();
  }
  if (!op.getValue().getType().getElementType().isF32())
    return op.emitOpError("waits for wgmma accumulators, which are f32, got ") << op.getValue().getType();
  // A value with other users stays live past the wait: copy it after the wait instead
  // of tying (LLVM would copy the registers in flight before it).
  PtxBuilder ptx = t.ptx(op.getLoc());
  SmallVector<Value> out = op.getValue().hasOneUse() ? ptx.wgmmaWaitGroupFor(static_cast<unsigned>(op.getPending()), in)
                                                     : ptx.wgmmaWaitGroupCopy(static_cast<unsigned>(op.getPending()), in);
  t.setRegs(op.getResult(), Registers(out.begin(), out.end()));
  return success();
}

} // namespace tokamax::tile
