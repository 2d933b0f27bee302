//===- LowerControlFlow.cpp - Loops and branches carrying tiles -------------===//
//
// scf.for and scf.if keep their structure; every carried tile becomes as many carried
// scalars as the thread has registers for it. Upstream scf-to-cf lowers them later.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

/// Registers per thread of a tile (a shared tile: its address), 1 for a scalar.
int64_t registerCount(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || isSharedTile(type))
    return 1;
  return getDistribution(type).num_registers();
}

SmallVector<Value> flatten(TileLowering &t, ValueRange values) {
  SmallVector<Value> flat;
  for (Value v : values)
    for (Value r : t.regs(v))
      flat.push_back(r);
  return flat;
}

/// Maps each of `values` to its slice of `flat` (same register counts as `like`).
void unflatten(TileLowering &t, ValueRange values, ValueRange like, ValueRange flat) {
  size_t pos = 0;
  for (auto [value, model] : llvm::zip(values, like)) {
    size_t n = t.regs(model).size();
    t.setRegs(value, Registers(flat.begin() + pos, flat.begin() + pos + n));
    pos += n;
  }
}

/// Lowers `from`'s operations (not its terminator) at the end of `to`, then yields.
LogicalResult lowerRegionBody(TileLowering &t, Block &from, Block &to) {
  OpBuilder &b = t.builder();
  OpBuilder::InsertionGuard guard(b);
  if (!to.empty() && to.back().hasTrait<OpTrait::IsTerminator>())
    to.back().erase();
  b.setInsertionPointToEnd(&to);
  if (failed(t.lowerOps(from.without_terminator())))
    return failure();
  b.create<scf::YieldOp>(from.getTerminator()->getLoc(),
                         flatten(t, from.getTerminator()->getOperands()));
  return success();
}

LogicalResult lowerFor(TileLowering &t, scf::ForOp loop) {
  OpBuilder &b = t.builder();
  SmallVector<Value> inits = flatten(t, loop.getInitArgs());
  auto lowered = b.create<scf::ForOp>(loop.getLoc(), t.regs(loop.getLowerBound())[0],
                                      t.regs(loop.getUpperBound())[0],
                                      t.regs(loop.getStep())[0], inits);
  t.mapScalar(loop.getInductionVar(), lowered.getInductionVar());
  unflatten(t, loop.getRegionIterArgs(), loop.getInitArgs(), lowered.getRegionIterArgs());
  if (failed(lowerRegionBody(t, *loop.getBody(), *lowered.getBody())))
    return failure();
  unflatten(t, loop.getResults(), loop.getInitArgs(), lowered.getResults());
  return success();
}

/// The loop's tile.tma_dot that asks for its warp roles' registers to be rebalanced
/// (the verifier made it the loop's only warp-specialized one, in a loop carrying
/// nothing), else null.
TmaDotOp rebalancingDot(scf::ForOp loop) {
  for (Operation &inner : loop.getBody()->without_terminator())
    if (auto dot = dyn_cast<TmaDotOp>(inner); dot && dot.getRebalanceRegisters())
      return dot;
  return {};
}

} // namespace

LogicalResult lowerControlFlowOp(TileLowering &t, Operation *op, bool &handled) {
  OpBuilder &b = t.builder();
  handled = true;
  if (auto loop = dyn_cast<scf::ForOp>(op)) {
    if (TmaDotOp dot = rebalancingDot(loop); dot && t.role() == TileLowering::WarpRole::All)
      return lowerWarpSpecializedLoop(t, loop, dot, [&] { return lowerFor(t, loop); });
    return lowerFor(t, loop);
  }
  if (auto branch = dyn_cast<scf::IfOp>(op)) {
    // Result register counts follow the then-branch's yielded values.
    Block &thenBlock = branch.getThenRegion().front();
    bool hasElse = !branch.getElseRegion().empty();
    // Types are only known after lowering the branch: lower into a scratch if first.
    SmallVector<Type> types;
    for (Value v : branch.getResults())
      for (int64_t i = 0, n = registerCount(v); i < n; ++i)
        types.push_back(isSharedTile(v.getType()) ? LLVM::LLVMPointerType::get(b.getContext(), 3)
                                                  : t.registerType(getElementTypeOrSelf(v.getType())));
    auto lowered = b.create<scf::IfOp>(branch.getLoc(), types, t.regs(branch.getCondition())[0],
                                       hasElse);
    if (failed(lowerRegionBody(t, thenBlock, lowered.getThenRegion().front())))
      return failure();
    if (hasElse &&
        failed(lowerRegionBody(t, branch.getElseRegion().front(), lowered.getElseRegion().front())))
      return failure();
    size_t pos = 0;
    for (Value v : branch.getResults()) {
      size_t n = registerCount(v);
      t.setRegs(v, Registers(lowered.getResults().begin() + pos, lowered.getResults().begin() + pos + n));
      pos += n;
    }
    return success();
  }
  if (isa<func::ReturnOp>(op)) {
    if (t.hasBulkStores())  // TMA may still read shared memory that the exit frees
      t.when(op->getLoc(), b.create<arith::CmpIOp>(op->getLoc(), arith::CmpIPredicate::eq, t.threadId(), t.i32(0)),
             [&] { t.ptx(op->getLoc()).bulkWaitGroup(0); });
    b.create<LLVM::ReturnOp>(op->getLoc(), ValueRange());
    return success();
  }
  handled = false;
  return success();
}

} // namespace tokamax::tile
