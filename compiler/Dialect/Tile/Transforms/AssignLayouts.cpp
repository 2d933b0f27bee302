//===- AssignLayouts.cpp - Give every tile a distributed layout -------------===//
//
// 1. Anchors: block loads, splats and aranges take the default blocked layout of their
//    tile (16-byte vectors along the fastest dimension).
// 2. Forward propagation in program order: elementwise ops take the layout of their
//    first operand not produced by a splat/arange (those can be rebuilt in any layout);
//    reductions give slice layouts; expand_dims of a slice gives its parent back;
//    broadcast keeps its operand's layout; trans permutes it; reshape re-anchors.
// 3. Loops and ifs: carried tiles keep their initial layout, yields are converted to it.
// 4. Disagreeing operands get tile.convert_layout; canonicalization later folds the ones
//    whose producer is a splat or an arange. A broadcast (of an expand_dims) is rebuilt
//    in the wanted layout instead, so only its small source moves.
// 5. tile.tma_dot: the accumulator and result take the mma layout with every warp along
//    M (warpsPerCTA = [num_warps, 1]), which is wgmma's accumulator layout per warpgroup.
// 6. tile.dot on 16-bit or f32 tiles: the result and accumulator take the mma.sync
//    accumulator layout, a and b the dot-operand layouts (the conversions into them are
//    the operands' trip through shared memory). Loop-carried accumulators take the mma
//    layout from the start, so k-loops never convert the accumulator.
// 7. tile.cp_async_dot: the accumulator and result take tile.dot's mma.sync layout.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tokamax::tile {
#define GEN_PASS_DEF_TILEASSIGNLAYOUTS
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {

bool isFreeProducer(Value value) {
  Operation *def = value.getDefiningOp();
  return def && isa<SplatOp, ArangeOp, arith::ConstantOp>(def);
}

bool isBroadcast(Value value) { return value.getDefiningOp<BroadcastOp>() != nullptr; }

/// The accumulator layout `dot` gets, or null when it stays off tensor cores (f64,
/// integers, fp8: the lowering reports those).
MmaLayoutAttr mmaLayoutFor(DotOp dot, unsigned numWarps) {
  auto acc = cast<RankedTensorType>(dot.getAcc().getType());
  if (!acc.getElementType().isF32() || !mmaKWidth(dot.getA().getType().getElementType()))
    return {};
  return getMmaLayout(acc, numWarps);
}

class LayoutAssigner {
public:
  explicit LayoutAssigner(unsigned numWarps) : numWarps(numWarps) {}

  void run(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block))
      visit(&op);
  }

private:
  unsigned numWarps;

  void setLayout(Value value, Attribute layout) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      return;
    value.setType(withLayout(type, layout));
    // A tensor constant's value attribute carries the type too.
    if (auto constant = value.getDefiningOp<arith::ConstantOp>())
      if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue()))
        constant.setValueAttr(dense.reshape(cast<ShapedType>(value.getType())));
  }

  Attribute defaultFor(Type type) {
    return getDefaultLayout(cast<RankedTensorType>(type), numWarps);
  }

  /// Makes `operand` of `op` carry `layout`, inserting a conversion before `op`.
  void convertOperand(Operation *op, OpOperand &operand, Attribute layout) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type || type.getEncoding() == layout)
      return;
    OpBuilder builder(op);
    operand.set(rebuild(builder, op->getLoc(), operand.get(), layout));
  }

  /// `value` in `layout`: broadcasts and expand_dims are rebuilt from their (smaller)
  /// sources, anything else is converted.
  Value rebuild(OpBuilder &builder, Location loc, Value value, Attribute layout) {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getEncoding() == layout)
      return value;
    if (auto broadcast = value.getDefiningOp<BroadcastOp>()) {
      Value source = rebuild(builder, loc, broadcast.getSource(), layout);
      return builder.create<BroadcastOp>(loc, withLayout(type, layout), source);
    }
    auto expand = value.getDefiningOp<ExpandDimsOp>();
    if (expand && !isa<DotOperandLayoutAttr>(layout)) {
      auto sliced = SliceLayoutAttr::get(layout.getContext(), expand.getAxis(), layout);
      Value source = rebuild(builder, loc, expand.getSource(), sliced);
      return builder.create<ExpandDimsOp>(loc, withLayout(type, layout), source,
                                          expand.getAxisAttr());
    }
    return builder.create<ConvertLayoutOp>(loc, withLayout(type, layout), value);
  }

  void assignElementwise(Operation *op) {
    Attribute chosen;
    // Prefer an operand that is neither free to rebuild nor a broadcast (cheap to rebuild).
    for (Value operand : op->getOperands())
      if (auto layout = getLayout(operand.getType());
          layout && !isFreeProducer(operand) && !isBroadcast(operand)) {
        chosen = layout;
        break;
      }
    if (!chosen)
      for (Value operand : op->getOperands())
        if (auto layout = getLayout(operand.getType()); layout && !isFreeProducer(operand)) {
          chosen = layout;
          break;
        }
    if (!chosen)
      for (Value operand : op->getOperands())
        if ((chosen = getLayout(operand.getType())))
          break;
    if (!chosen) {
      for (Value result : op->getResults())
        if (isa<RankedTensorType>(result.getType()))
          setLayout(result, defaultFor(result.getType()));
      return;
    }
    for (OpOperand &operand : op->getOpOperands())
      convertOperand(op, operand, chosen);
    for (Value result : op->getResults())
      setLayout(result, chosen);
  }

  void visit(Operation *op) {
    if (auto loop = dyn_cast<scf::ForOp>(op))
      return visitFor(loop);
    if (auto branch = dyn_cast<scf::IfOp>(op))
      return visitIf(branch);
    if (isa<scf::YieldOp>(op))
      return; // handled by the parent
    if (isa<ConvertLayoutOp>(op))
      return;
    if (auto dot = dyn_cast<DotOp>(op))
      if (MmaLayoutAttr mma = mmaLayoutFor(dot, numWarps)) {
        Type elem = dot.getA().getType().getElementType();
        convertOperand(op, dot.getAMutable(), getDotOperandLayout(0, mma, elem));
        convertOperand(op, dot.getBMutable(), getDotOperandLayout(1, mma, elem));
        convertOperand(op, dot.getAccMutable(), mma);
        setLayout(dot.getResult(), mma);
        return;
      }
    if (auto dot = dyn_cast<TmaDotOp>(op)) {
      // Every warp along M: each warpgroup owns 64-row slabs, as wgmma writes them.
      auto mma = MmaLayoutAttr::get(op->getContext(), {numWarps, 1u});
      convertOperand(op, dot.getAccMutable(), mma);
      setLayout(dot.getResult(), mma);
      return;
    }
    if (auto dot = dyn_cast<CpAsyncDotOp>(op)) {
      // mma.sync tiles over the kernel's warps, as tile.dot's accumulator.
      MmaLayoutAttr mma = getMmaLayout(dot.getAcc().getType(), numWarps);
      convertOperand(op, dot.getAccMutable(), mma);
      setLayout(dot.getResult(), mma);
      return;
    }
    if (isa<BlockLoadOp, SplatOp, ArangeOp, ReshapeOp, DotOp, arith::ConstantOp>(op)) {
      for (Value result : op->getResults())
        if (isa<RankedTensorType>(result.getType()))
          setLayout(result, defaultFor(result.getType()));
      if (auto dot = dyn_cast<DotOp>(op))
        for (OpOperand &operand : op->getOpOperands())
          convertOperand(op, operand, defaultFor(operand.get().getType()));
      return;
    }
    if (isa<BlockStoreOp, TmaStoreOp>(op))
      return; // stores take the layout their value has
    if (isa<StoreOp, LoadOp, AtomicRMWOp, AtomicCASOp>(op))
      return assignElementwise(op);
    if (auto reduce = dyn_cast<ReduceOp>(op)) {
      Attribute source = getLayout(reduce.getSource().getType());
      if (isa<RankedTensorType>(reduce.getResult().getType()))
        setLayout(reduce.getResult(),
                  SliceLayoutAttr::get(op->getContext(), reduce.getAxis(), source));
      return;
    }
    if (auto expand = dyn_cast<ExpandDimsOp>(op)) {
      auto slice = dyn_cast<SliceLayoutAttr>(getLayout(expand.getSource().getType()));
      if (slice && slice.getDim() == static_cast<unsigned>(expand.getAxis())) {
        setLayout(expand.getResult(), slice.getParent());
        return;
      }
      Attribute parent = defaultFor(expand.getResult().getType());
      convertOperand(op, op->getOpOperand(0),
                     SliceLayoutAttr::get(op->getContext(), expand.getAxis(), parent));
      setLayout(expand.getResult(), parent);
      return;
    }
    if (auto broadcast = dyn_cast<BroadcastOp>(op)) {
      setLayout(broadcast.getResult(), getLayout(broadcast.getSource().getType()));
      return;
    }
    if (auto trans = dyn_cast<TransOp>(op)) {
      auto blocked = dyn_cast<BlockedLayoutAttr>(getLayout(trans.getSource().getType()));
      if (!blocked) {
        blocked = cast<BlockedLayoutAttr>(defaultFor(trans.getSource().getType()));
        convertOperand(op, op->getOpOperand(0), blocked);
      }
      tokamax::compiler::BlockedLayout source = toBlockedLayout(blocked), result = source;
      ArrayRef<int32_t> perm = trans.getOrder();
      for (size_t i = 0; i < perm.size(); ++i) {
        result.size_per_thread[i] = source.size_per_thread[perm[i]];
        result.threads_per_warp[i] = source.threads_per_warp[perm[i]];
        result.warps_per_cta[i] = source.warps_per_cta[perm[i]];
      }
      for (unsigned &d : result.order)
        d = static_cast<unsigned>(llvm::find(perm, static_cast<int32_t>(d)) - perm.begin());
      setLayout(trans.getResult(), toAttr(op->getContext(), result));
      return;
    }
    // Elementwise: arith, math, tile.cast, tile.addptr.
    bool hasTensor = llvm::any_of(op->getResultTypes(),
                                  [](Type t) { return isa<RankedTensorType>(t); });
    if (hasTensor)
      assignElementwise(op);
  }

  void visitFor(scf::ForOp loop) {
    // Accumulators carried into a tile.dot start in its mma layout.
    for (BlockArgument arg : loop.getRegionIterArgs())
      for (OpOperand &use : arg.getUses())
        if (auto dot = dyn_cast<DotOp>(use.getOwner()); dot && use.get() == dot.getAcc())
          if (MmaLayoutAttr mma = mmaLayoutFor(dot, numWarps)) {
            convertOperand(loop, *loop.getTiedLoopInit(arg), mma);
            break;
          }
    for (auto [init, arg, result] :
         llvm::zip(loop.getInitArgs(), loop.getRegionIterArgs(), loop.getResults())) {
      arg.setType(init.getType());
      result.setType(init.getType());
    }
    run(*loop.getBody());
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    for (auto [operand, arg] : llvm::zip(yield->getOpOperands(), loop.getRegionIterArgs()))
      if (auto layout = getLayout(arg.getType()))
        convertOperand(yield, operand, layout);
  }

  void visitIf(scf::IfOp branch) {
    run(branch.getThenRegion().front());
    if (!branch.getElseRegion().empty())
      run(branch.getElseRegion().front());
    auto thenYield = branch.thenYield();
    for (auto [value, result] : llvm::zip(thenYield.getOperands(), branch.getResults()))
      result.setType(value.getType());
    if (branch.getElseRegion().empty())
      return;
    auto elseYield = branch.elseYield();
    for (auto [operand, result] : llvm::zip(elseYield->getOpOperands(), branch.getResults()))
      if (auto layout = getLayout(result.getType()))
        convertOperand(elseYield, operand, layout);
  }
};

struct AssignLayoutsPass : tokamax::tile::impl::TileAssignLayoutsBase<AssignLayoutsPass> {
  using TileAssignLayoutsBase::TileAssignLayoutsBase;
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      unsigned warps = numWarps;
      if (auto attr = func->getAttrOfType<IntegerAttr>(kNumWarpsAttr))
        warps = static_cast<unsigned>(attr.getInt());
      else
        func->setAttr(kNumWarpsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), warps));
      if (!func.isExternal())
        LayoutAssigner(warps).run(func.getBody().front());
    });
  }
};

} // namespace
