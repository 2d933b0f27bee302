//===- LowerShape.cpp - expand_dims, broadcast, trans, layout moves ---------===//
//
// expand_dims, broadcast and trans only rename registers: their result layouts are
// chosen so every thread already holds the elements it needs. convert_layout and reshape
// rename registers too when every thread already holds the elements the new layout gives
// it (e.g. an mma accumulator with warps along M is, element for element, the A operand
// layout of the next mma; a reshape that only drops unit dims); otherwise they move data:
// each thread writes its canonical elements to scratch at their row-major index, a
// barrier, then reads the elements of the new layout.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

LogicalResult renameRegisters(TileLowering &t, Operation *op, Value source, Value result,
                              llvm::function_ref<std::vector<int64_t>(std::vector<int64_t>)> toSource) {
  compiler::Distribution in = getDistribution(cast<RankedTensorType>(source.getType()));
  compiler::Distribution out = getDistribution(cast<RankedTensorType>(result.getType()));
  auto byOffset = registersByOffset(in);
  const Registers &regs = t.regs(source);
  Registers renamed;
  for (int64_t r = 0; r < out.num_registers(); ++r) {
    auto it = byOffset.find(toSource(out.register_offset(r)));
    if (it == byOffset.end())
      return op->emitOpError("internal error: no source register for a result register");
    renamed.push_back(regs[it->second]);
  }
  t.setRegs(result, std::move(renamed));
  return success();
}

Value linearIndex(TileLowering &t, Location loc, RankedTensorType type, const Registers &coords) {
  OpBuilder &b = t.builder();
  Value linear = t.i32(0);
  for (int64_t d = 0; d < type.getRank(); ++d)
    linear = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, linear, t.i32(type.getDimSize(d))),
                                     coords[d]);
  return linear;
}

} // namespace

namespace {

/// Renames registers when every thread already holds its elements of the new layout.
bool renameThreadLocal(TileLowering &t, Value source, Value result) {
  auto map = threadLocalRegisters(cast<RankedTensorType>(source.getType()), cast<RankedTensorType>(result.getType()));
  if (!map)
    return false;
  const Registers &regs = t.regs(source);
  Registers renamed;
  for (int64_t r : *map)
    renamed.push_back(regs[r]);
  t.setRegs(result, std::move(renamed));
  return true;
}

/// Moves a tile into another layout (and shape, same element count) through scratch.
LogicalResult moveThroughScratch(TileLowering &t, Operation *op, Value source, Value result) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  auto inType = cast<RankedTensorType>(source.getType());
  auto outType = cast<RankedTensorType>(result.getType());
  Type elem = t.registerType(inType.getElementType());
  Type memElem = elem.isInteger(1) ? b.getI8Type() : elem;
  if (!t.sharedBase())
    return op->emitOpError("needs shared-memory scratch but the kernel has none (run tile-allocate-shared first)");
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Value base = t.scratchBase(op);
  auto slot = [&](Value index) {
    return b.create<LLVM::GEPOp>(loc, ptrType, memElem, base, ValueRange{index});
  };
  compiler::Distribution in = getDistribution(inType);
  const Registers &regs = t.regs(source);
  auto store = [&] {
    for (int64_t r = 0; r < in.num_registers(); ++r) {
      if (!in.register_owns(r))
        continue;
      Value v = regs[r];
      if (elem.isInteger(1))
        v = b.create<arith::ExtUIOp>(loc, memElem, v);
      b.create<LLVM::StoreOp>(loc, v, slot(linearIndex(t, loc, inType, t.coords(inType, r))));
    }
  };
  t.asOwner(loc, inType, store);  // replicas in other threads hold the same values
  t.barrier();
  compiler::Distribution out = getDistribution(outType);
  Registers moved;
  for (int64_t r = 0; r < out.num_registers(); ++r) {
    Value v = b.create<LLVM::LoadOp>(loc, memElem, slot(linearIndex(t, loc, outType, t.coords(outType, r))));
    if (elem.isInteger(1))
      v = b.create<arith::TruncIOp>(loc, elem, v);
    moved.push_back(v);
  }
  t.setRegs(result, std::move(moved));
  return success();
}

} // namespace

LogicalResult lowerShapeOp(TileLowering &t, Operation *op, bool &handled) {
  handled = true;
  if (auto expand = dyn_cast<ExpandDimsOp>(op)) {
    unsigned axis = expand.getAxis();
    return renameRegisters(t, op, expand.getSource(), expand.getResult(), [&](std::vector<int64_t> o) {
      o.erase(o.begin() + axis);
      return o;
    });
  }
  if (auto broadcast = dyn_cast<BroadcastOp>(op)) {
    auto sourceType = broadcast.getSource().getType();
    compiler::Distribution in = getDistribution(sourceType);
    return renameRegisters(t, op, broadcast.getSource(), broadcast.getResult(), [&](std::vector<int64_t> o) {
      for (size_t d = 0; d < o.size(); ++d)
        if (sourceType.getDimSize(d) == 1)
          o[d] = 0;
      return o;
    });
  }
  if (auto trans = dyn_cast<TransOp>(op)) {
    ArrayRef<int32_t> perm = trans.getOrder();
    return renameRegisters(t, op, trans.getSource(), trans.getResult(), [&](std::vector<int64_t> o) {
      std::vector<int64_t> source(o.size());
      for (size_t i = 0; i < o.size(); ++i)
        source[perm[i]] = o[i];
      return source;
    });
  }
  if (isa<ConvertLayoutOp, ReshapeOp>(op)) {
    Value source = op->getOperand(0), result = op->getResult(0);
    if (renameThreadLocal(t, source, result))
      return success();
    return moveThroughScratch(t, op, source, result);
  }
  if (isa<BarrierOp>(op)) {
    t.barrier();
    return success();
  }
  handled = false;
  return success();
}

} // namespace tokamax::tile
