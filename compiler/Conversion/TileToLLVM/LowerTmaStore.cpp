//===- LowerTmaStore.cpp - tile.tma_store: registers -> shared -> TMA ------===//
//
// A block of C leaves the SM through the TMA engine instead of the threads' own global
// stores, so the threads go on (to the next tile's main loop) while it is written out.
// The block goes in strips of 128 bytes of columns ([BM][64] 16-bit, [BM][32] f32), the
// TMA box of the tensor map the pass appends for the store's tensor, each written into
// one of two alternating shared buffers with the 128-byte swizzle (16-byte chunk c of row
// r at chunk c ^ (r % 8): the eight rows a warp's quads write at once hit distinct banks):
//
//   for strip j:
//     thread 0: wait until at most one bulk group (at most none before strip 0 when the
//               strip count is odd) still reads shared memory: strip j's buffer is free
//     barrier
//     every thread: its pairs of strip j -> buffer j % 2; fence.proxy.async
//     barrier
//     thread 0: TMA store of the buffer at (n0 + 64 j, m0) (rows and columns outside the
//               tensor are dropped by TMA); commit the bulk group
//
// The add kind differs in the last step only: TMA adds the strip into the tensor
// (cp.reduce.async.bulk.tensor .add, in the same bulk groups).
//
// f32 strips rotate their pairs by row: a thread of an odd row writes, in its k-th store,
// the pair 16 columns on (mod 32) from the k-th. Without it each 8-byte store (served
// half a warp at a time) has lanes 4g + c (g = 0-3) reach only 8 of the 16 slots of 8
// bytes a 128-byte row's banks hold: two-way conflicts on every store. With it rows g
// and g + 1 write opposite halves of the swizzle's 4-chunk groups, so the half-warp
// covers all 16 (an exhaustive search of per-row rotations finds this one among those
// that do). 16-bit strips, 4-byte stores over the whole warp, are conflict-free as they
// are.
//
// Nothing waits for the writes themselves: thread 0 waits for every bulk group before the
// kernel returns (TileLowering::noteBulkStores). The value must be in the mma layout
// with every warp along M: each thread's columns of a strip are then known statically
// (2 (lane % 4) + the register's offset), and its rows are its own.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <map>

using namespace mlir;

namespace tokamax::tile {

namespace {

constexpr int64_t kStripBytes = 128;

LogicalResult lowerTmaStore(TileLowering &t, TmaStoreOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  if (!t.target().has_wgmma())
    return op.emitOpError("needs sm_90a (TMA), compiling for ") << t.arch();
  auto type = op.getValue().getType();
  compiler::Distribution dist = getDistribution(type);
  if (!isa_and_nonnull<MmaLayoutAttr>(type.getEncoding()) || dist.distinct_warps(1) != 1 || dist.needs_wrap(0) ||
      dist.needs_wrap(1))
    return op.emitOpError("stores tiles in the mma layout with every warp along M (dot products' results), got ")
           << type;
  Value map = t.tensorMap(op.getBase());
  if (!map)
    return op.emitOpError("has no tensor map for its tensor (the kernel lowering must add it)");

  Type elem = t.registerType(type.getElementType());
  const int64_t bytes = elementBytes(elem), columns = kStripBytes / bytes;
  const int64_t strips = type.getDimSize(1) / columns, bufferBytes = getTmaStoreBufferBytes(op);
  // Registers by (strip, row offset, column offset): pairs of adjacent columns share
  // one 4- or 8-byte store.
  std::map<int64_t, std::map<std::pair<int64_t, int64_t>, int64_t>> byStrip;
  for (int64_t r = 0; r < dist.num_registers(); ++r) {
    std::vector<int64_t> at = dist.register_offset(r);
    byStrip[at[1] / columns][{at[0], at[1]}] = r;
  }
  const Registers &values = t.regs(op.getValue());
  PtxBuilder ptx = t.ptx(loc);
  auto c32 = [&](int64_t v) { return t.i32(v); };
  auto add = [&](Value x, Value y) { return b.create<arith::AddIOp>(loc, x, y).getResult(); };
  Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, t.threadId(), c32(0));
  Value raw = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), t.scratchBase(op));
  Value buffers = b.create<arith::AndIOp>(loc, add(raw, c32(1023)), c32(~int64_t(1023)));
  Value m0 = t.regs(op.getOffsets()[0])[0], n0 = t.regs(op.getOffsets()[1])[0];
  auto sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), 3);
  VectorType pairType = VectorType::get({2}, elem);

  // The register of (row offset, column offset) in strip j, or -1.
  auto registerAt = [&](int64_t j, int64_t rowOff, int64_t colOff) -> int64_t {
    auto found = byStrip[j].find({rowOff, colOff});
    return found == byStrip[j].end() ? -1 : found->second;
  };
  // The column offset 16 on from `colOff` in its strip (the rotation's partner).
  auto halfStripOn = [&](int64_t j, int64_t colOff) { return j * columns + (colOff - j * columns + 16) % columns; };
  for (int64_t j = 0; j < strips; ++j) {
    Value buffer = add(buffers, c32((j % 2) * bufferBytes));
    // Rotate (f32) where every pair has its partner 16 columns on: the mma layout's four
    // pairs a row of a strip.
    bool rotate = bytes == 4;
    for (auto &[offset, r] : byStrip[j])
      rotate = rotate && registerAt(j, offset.first, halfStripOn(j, offset.second)) >= 0;
    t.when(loc, first, [&] { ptx.bulkWaitGroupRead(j == 0 && strips % 2 ? 0 : 1); });
    t.barrier();
    for (auto &[offset, r0] : byStrip[j]) {
      auto [rowOff, colOff] = offset;
      if (colOff % 2)
        continue;  // the second of a pair
      const int64_t r1 = registerAt(j, rowOff, colOff + 1);
      if (r1 < 0)
        return op.emitOpError("expects pairs of adjacent columns per thread (mma layout), got ") << type;
      Registers coords = t.coords(type, r0);
      Value row = coords[0];
      Value lo = values[r0], hi = values[r1];
      // Byte of the pair in its 128-byte strip row, then the 16-byte chunk swizzled by the row.
      Value byte = b.create<arith::MulIOp>(loc, b.create<arith::RemUIOp>(loc, coords[1], c32(columns)), c32(bytes));
      if (rotate) {  // odd rows: the partner's values at the partner's byte
        const int64_t partner = halfStripOn(j, colOff);
        Value odd = b.create<arith::AndIOp>(loc, row, c32(1));
        Value isOdd = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, odd, c32(0));
        lo = b.create<arith::SelectOp>(loc, isOdd, values[registerAt(j, rowOff, partner)], lo);
        hi = b.create<arith::SelectOp>(loc, isOdd, values[registerAt(j, rowOff, partner + 1)], hi);
        byte = b.create<arith::AndIOp>(loc, add(byte, b.create<arith::MulIOp>(loc, odd, c32(kStripBytes / 2))),
                                       c32(kStripBytes - 1));
      }
      Value chunk = b.create<arith::XOrIOp>(loc, b.create<arith::ShRUIOp>(loc, byte, c32(4)),
                                            b.create<arith::AndIOp>(loc, row, c32(7)));
      Value at = add(add(buffer, b.create<arith::MulIOp>(loc, row, c32(kStripBytes))),
                     add(b.create<arith::ShLIOp>(loc, chunk, c32(4)), b.create<arith::AndIOp>(loc, byte, c32(15))));
      Value pair = b.create<LLVM::UndefOp>(loc, pairType);
      pair = b.create<LLVM::InsertElementOp>(loc, pair, lo, c32(0));
      pair = b.create<LLVM::InsertElementOp>(loc, pair, hi, c32(1));
      Value ptr = b.create<LLVM::IntToPtrOp>(loc, sharedPtr, at);
      b.create<LLVM::StoreOp>(loc, pair, ptr, /*alignment=*/2 * bytes);
    }
    // The strip's generic-proxy writes come before TMA's (async-proxy) reads.
    ptx.fenceProxyAsyncShared();
    t.barrier();
    t.when(loc, first, [&] {
      if (op.isAdd())
        ptx.tmaReduceAdd2d(map, add(n0, c32(j * columns)), m0, buffer);
      else
        ptx.tmaStore2d(map, add(n0, c32(j * columns)), m0, buffer);
      ptx.bulkCommitGroup();
    });
  }
  t.noteBulkStores();
  return success();
}

} // namespace

LogicalResult lowerTmaStoreOp(TileLowering &t, Operation *op, bool &handled) {
  auto store = dyn_cast<TmaStoreOp>(op);
  if (!store)
    return success();
  handled = true;
  return lowerTmaStore(t, store);
}

} // namespace tokamax::tile
