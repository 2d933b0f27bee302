//===- LowerQuadShuffle.cpp - fp8 accumulators into dot operands by shuffles -===//
//
// An fp8 product's accumulator-layout tile (the f32 scores cast to fp8) into the next
// dot's A operand (quadShuffleToFp8Operand): thread t of a quad holds columns 2t, 2t + 1
// of each 8-wide accumulator tile and needs columns 4t .. 4t + 3 of each 16-wide half of
// an instruction's K. Each thread packs its four bytes of a 16-column group (tiles 0 and
// 1) into a word; thread t reads the words of quad threads 2t % 4 and 2t % 4 + 1 and
// keeps their low halves (t < 2: tile 0's columns) or their high halves (tile 1's). No
// shared memory and no barrier, so it runs inside warp-specialized loops. Read by dots
// with a_k_interleaved (b's rows stored in the accumulator's column order), the same
// conversion renames registers instead.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

/// Whether `op`'s users read it as a_k_interleaved dots' A (then its registers are
/// renamed, in the order interleavedColumn gives); every user must agree.
FailureOr<bool> readInterleaved(ConvertLayoutOp op) {
  unsigned interleaved = 0, plain = 0;
  for (Operation *user : op->getUsers()) {
    auto dot = dyn_cast<DotOp>(user);
    (dot && dot.getA() == op.getResult() && dot.getAKInterleaved() ? interleaved : plain) += 1;
  }
  if (interleaved && plain)
    return op.emitOpError("internal error: an fp8 operand read both with and without a_k_interleaved");
  return interleaved > 0;
}

/// The interleaved conversion: thread t's accumulator bytes at columns 2t, 2t + 1,
/// 2t + 8, 2t + 9 of a 16-column group are its operand bytes at K 4t .. 4t + 3, as they
/// are (interleavedColumn), so the registers are renamed.
LogicalResult lowerByRename(TileLowering &t, ConvertLayoutOp op) {
  auto srcType = cast<RankedTensorType>(op.getSource().getType());
  auto dstType = cast<RankedTensorType>(op.getResult().getType());
  compiler::Distribution in = getDistribution(srcType), out = getDistribution(dstType);
  const auto srcRegs = registersByOffset(in), dstRegs = registersByOffset(out);
  const Registers &regs = t.regs(op.getSource());
  Registers result(out.num_registers());
  for (const auto &[offset, r] : dstRegs) {
    auto from = srcRegs.find({offset[0], interleavedColumn(offset[1])});
    if (from == srcRegs.end())
      return op.emitOpError("internal error: no accumulator register at (")
             << offset[0] << ", " << interleavedColumn(offset[1]) << ")";
    result[r] = regs[from->second];
  }
  for (const Value &r : result)
    if (!r)
      return op.emitOpError("internal error: an operand register the renaming did not fill");
  t.setRegs(op.getResult(), std::move(result));
  return success();
}

} // namespace

LogicalResult lowerByQuadShuffle(TileLowering &t, ConvertLayoutOp op) {
  FailureOr<bool> interleaved = readInterleaved(op);
  if (failed(interleaved))
    return failure();
  if (*interleaved)
    return lowerByRename(t, op);
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto srcType = cast<RankedTensorType>(op.getSource().getType());
  auto dstType = cast<RankedTensorType>(op.getResult().getType());
  compiler::Distribution in = getDistribution(srcType), out = getDistribution(dstType);
  const auto srcRegs = registersByOffset(in), dstRegs = registersByOffset(out);
  const Registers &regs = t.regs(op.getSource());
  Type i32 = b.getI32Type(), elem = t.registerType(srcType.getElementType());
  I32 m{t, loc};
  Value lane = t.laneId(), inQuad = m.rem(lane, 4);
  Value fromA = m.add(m.mul(m.div(lane, 4), 4), m.rem(m.mul(inQuad, 2), 4));
  Value fromB = m.add(fromA, m.c(1));
  Value upper = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, inQuad, m.c(2));
  auto shuffle = [&](Value word, Value from) {
    return b.create<NVVM::ShflOp>(loc, i32, t.i32(-1), word, from, t.i32(31), NVVM::ShflKind::idx, UnitAttr())
        .getResult();
  };
  auto reg = [&](const std::map<std::vector<int64_t>, int64_t> &map, int64_t row, int64_t col) -> int64_t {
    auto it = map.find({row, col});
    return it == map.end() ? -1 : it->second;
  };
  Registers result(out.num_registers());
  const auto &rows = in.dims()[0];
  Value lowMask = m.c(0xFFFF), highMask = b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(int32_t(0xFFFF0000u)));
  for (int64_t rm = 0; rm < int64_t(rows.repeats); ++rm)
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t row = rm * rows.coverage + 8 * half;
      for (int64_t col = 0; col < srcType.getDimSize(1); col += 16) {
        SmallVector<Value> own;
        for (int64_t c : {col, col + 1, col + 8, col + 9}) {
          int64_t r = reg(srcRegs, row, c);
          if (r < 0)
            return op.emitOpError("internal error: no accumulator register at (") << row << ", " << c << ")";
          own.push_back(regs[r]);
        }
        Value word = packWord(b, loc, own);
        Value x = shuffle(word, fromA), y = shuffle(word, fromB);
        // Low halves: x's columns 2t', 2t' + 1 of tile 0, then y's; high halves: tile 1's.
        Value low = b.create<arith::OrIOp>(loc, b.create<arith::AndIOp>(loc, x, lowMask),
                                           b.create<arith::ShLIOp>(loc, y, m.c(16)));
        Value high = b.create<arith::OrIOp>(loc, b.create<arith::ShRUIOp>(loc, x, m.c(16)),
                                            b.create<arith::AndIOp>(loc, y, highMask));
        Value mine = b.create<arith::SelectOp>(loc, upper, high, low);
        SmallVector<Value> elems = unpackWord(b, loc, mine, elem, 4);
        for (int64_t e = 0; e < 4; ++e) {
          int64_t r = reg(dstRegs, row, col + e);
          if (r < 0)
            return op.emitOpError("internal error: no operand register at (") << row << ", " << col + e << ")";
          result[r] = elems[e];
        }
      }
    }
  for (const Value &r : result)
    if (!r)
      return op.emitOpError("internal error: an operand register the quad shuffle did not fill");
  t.setRegs(op.getResult(), std::move(result));
  return success();
}

} // namespace tokamax::tile
