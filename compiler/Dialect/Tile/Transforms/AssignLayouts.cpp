//===- AssignLayouts.cpp - Give every tile a distributed layout -------------===//
//
// 1. Anchors: block loads, splats and aranges take the default blocked layout of their
//    tile (16-byte vectors along the fastest dimension).
// 2. Forward propagation in program order: elementwise ops take the layout of their
//    first operand not produced by a splat/arange (those can be rebuilt in any layout);
//    reductions give slice layouts; expand_dims of a slice gives its parent back;
//    broadcast keeps its operand's layout; trans permutes it; reshape re-anchors.
// 3. Loops and ifs: carried tiles keep their initial layout, yields are converted to it;
//    an if's results take its then-yield's layouts (also when predicting a loop's next
//    value through one).
// 4. Disagreeing operands get tile.convert_layout; canonicalization later folds the ones
//    whose producer is a splat or an arange. A broadcast (of an expand_dims) is rebuilt
//    in the wanted layout instead, so only its small source moves.
// 5. tile.tma_dot: the accumulator and result take the mma layout with every warp along
//    M (warpsPerCTA = [num_warps, 1]), which is wgmma's accumulator layout per warpgroup.
// 6. tile.dot on 16-bit or f32 tiles: the result and accumulator take the mma.sync
//    accumulator layout (every warp along M in kernels marked tile.mma_rows_per_warp), a and b the dot-operand layouts (the conversions into them are
//    the operands' trip through shared memory). Loop-carried accumulators take the mma
//    layout from the start, so k-loops never convert the accumulator.
// 7. tile.cp_async_dot: the accumulator and result take tile.dot's mma.sync layout.
// 8. tile.async_block_load results live in shared memory (#tile.shared, rows along the
//    last dim); tile.trans of one names the same bytes with the other dim contiguous;
//    a dot converts it into its operand layout (ldmatrix straight from it), any other
//    user into the default layout first.
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
MmaLayoutAttr mmaLayoutFor(DotOp dot, unsigned numWarps, bool rowsPerWarp) {
  auto acc = cast<RankedTensorType>(dot.getAcc().getType());
  if (!acc.getElementType().isF32() || !mmaKWidth(dot.getA().getType().getElementType()))
    return {};
  if (rowsPerWarp && acc.getDimSize(0) >= 16 * int64_t(numWarps))
    return MmaLayoutAttr::get(dot.getContext(), {numWarps, 1u});
  return getMmaLayout(acc, numWarps);
}

class LayoutAssigner {
public:
  LayoutAssigner(unsigned numWarps, bool rowsPerWarp) : numWarps(numWarps), rowsPerWarp(rowsPerWarp) {}

  void run(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block))
      visit(&op);
  }

private:
  unsigned numWarps;
  bool rowsPerWarp;

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

  /// Makes `operand` of `op` carry `layout`, inserting a conversion before `op`, or
  /// before the outermost loop around `op` the value is invariant in (a Q tile converted
  /// into a dot operand once, not per iteration) unless it reads a shared tile.
  void convertOperand(Operation *op, OpOperand &operand, Attribute layout) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type || type.getEncoding() == layout)
      return;
    Operation *at = op;
    // A read of a shared tile stays where its user is: only a tile.async_wait there (in
    // the loop, say) makes the copy visible.
    while (auto loop = isSharedTile(type) ? scf::ForOp() : at->getParentOfType<scf::ForOp>()) {
      if (!loop.isDefinedOutsideOfLoop(operand.get()))
        break;
      at = loop;
    }
    OpBuilder builder(at);
    operand.set(rebuild(builder, op->getLoc(), operand.get(), layout));
  }

  /// The layout `value` will get from the ops that make it, looking through elementwise
  /// ops to a tile.dot (its mma layout), a reduction of one (a slice of it) or a loop
  /// result; null when nothing decides it.
  Attribute predict(Value value, int depth = 0) {
    Operation *def = value.getDefiningOp();
    if (!def || depth > 32)
      return {};
    if (auto dot = dyn_cast<DotOp>(def))
      return mmaLayoutFor(dot, numWarps, rowsPerWarp);
    if (auto reduce = dyn_cast<ReduceOp>(def)) {
      if (!isa<RankedTensorType>(reduce.getResult().getType()))
        return {};
      if (Attribute parent = predict(reduce.getSource(), depth + 1))
        return SliceLayoutAttr::get(def->getContext(), reduce.getAxis(), parent);
      return {};
    }
    if (auto expand = dyn_cast<ExpandDimsOp>(def)) {
      auto slice = dyn_cast_or_null<SliceLayoutAttr>(predict(expand.getSource(), depth + 1));
      return slice && slice.getDim() == static_cast<unsigned>(expand.getAxis()) ? slice.getParent() : Attribute();
    }
    if (auto broadcast = dyn_cast<BroadcastOp>(def))
      return predict(broadcast.getSource(), depth + 1);
    if (auto wait = dyn_cast<DotWaitOp>(def))
      return predict(wait.getValue(), depth + 1);
    if (auto inner = dyn_cast<scf::ForOp>(def)) {
      auto yield = cast<scf::YieldOp>(inner.getBody()->getTerminator());
      return predict(yield.getOperand(cast<OpResult>(value).getResultNumber()), depth + 1);
    }
    if (auto branch = dyn_cast<scf::IfOp>(def)) {
      // A result takes its then-value's layout (visitIf).
      return predict(branch.thenYield().getOperand(cast<OpResult>(value).getResultNumber()), depth + 1);
    }
    bool elementwise = isa<CastOp, Exp2Op>(def) || def->getDialect()->getNamespace() == "arith" ||
                       def->getDialect()->getNamespace() == "math";
    if (!elementwise || isFreeProducer(value))
      return {};
    for (Value operand : def->getOperands())
      if (isa<RankedTensorType>(operand.getType()) && !isFreeProducer(operand))
        if (Attribute layout = predict(operand, depth + 1))
          return layout;
    return {};
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
    if (auto convert = value.getDefiningOp<ConvertLayoutOp>(); convert && isCheapToRebuild(convert.getSource(), 0))
      return rebuild(builder, loc, convert.getSource(), layout);
    if (isIndexMath(value)) {
      // Masks and indices computed from aranges and scalars: compute them again in the
      // wanted layout rather than move them.
      Operation *def = value.getDefiningOp();
      SmallVector<Value> operands;
      for (Value operand : def->getOperands())
        operands.push_back(isa<RankedTensorType>(operand.getType()) ? rebuild(builder, loc, operand, layout)
                                                                    : operand);
      Operation *copy = builder.clone(*def);
      copy->setOperands(operands);
      copy->getResult(0).setType(withLayout(type, layout));
      return copy->getResult(0);
    }
    return builder.create<ConvertLayoutOp>(loc, withLayout(type, layout), value);
  }

  /// An arith op over tiles made only of splats, aranges, constants and their
  /// broadcasts / expand_dims (and such ops again).
  bool isIndexMath(Value value, int depth = 0) {
    Operation *def = value.getDefiningOp();
    if (!def || depth > 16 || def->getNumResults() != 1 || def->getNumRegions() != 0 ||
        def->getDialect()->getNamespace() != "arith" || isFreeProducer(value))
      return false;
    for (Value operand : def->getOperands())
      if (isa<RankedTensorType>(operand.getType()) && !isCheapToRebuild(operand, depth + 1))
        return false;
    return true;
  }
  bool isCheapToRebuild(Value value, int depth) {
    if (isFreeProducer(value))
      return true;
    if (auto broadcast = value.getDefiningOp<BroadcastOp>())
      return isCheapToRebuild(broadcast.getSource(), depth + 1);
    if (auto expand = value.getDefiningOp<ExpandDimsOp>())
      return isCheapToRebuild(expand.getSource(), depth + 1);
    if (auto convert = value.getDefiningOp<ConvertLayoutOp>())
      return isCheapToRebuild(convert.getSource(), depth + 1);
    return isIndexMath(value, depth);
  }

  void assignElementwise(Operation *op) {
    Attribute chosen;
    // Prefer a product's mma layout (a mask or index built from aranges is cheaper to
    // rebuild than the product is to move), then an operand that is neither free to
    // rebuild nor a broadcast (cheap to rebuild).
    for (Value operand : op->getOperands())
      if (auto layout = getLayout(operand.getType()); layout && isa<MmaLayoutAttr>(layout)) {
        chosen = layout;
        break;
      }
    if (!chosen)
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
    if (auto copy = dyn_cast<AsyncBlockLoadOp>(op))
      return setLayout(copy.getResult(), SharedLayoutAttr::get(op->getContext(), 1));
    if (auto trans = dyn_cast<TransOp>(op); trans && isSharedTile(trans.getSource().getType())) {
      // Result dim i is source dim order[i]: the contiguous dim moves with it.
      unsigned cd = cast<SharedLayoutAttr>(getLayout(trans.getSource().getType())).getContiguousDim();
      unsigned moved = static_cast<unsigned>(llvm::find(trans.getOrder(), static_cast<int32_t>(cd)) -
                                             trans.getOrder().begin());
      return setLayout(trans.getResult(), SharedLayoutAttr::get(op->getContext(), moved));
    }
    // Only dots (and trans) read shared tiles as they are: others get registers first.
    if (!isa<DotOp>(op))
      for (OpOperand &operand : op->getOpOperands())
        if (isSharedTile(operand.get().getType()))
          convertOperand(op, operand, defaultFor(operand.get().getType()));
    if (auto dot = dyn_cast<DotOp>(op))
      if (MmaLayoutAttr mma = mmaLayoutFor(dot, numWarps, rowsPerWarp)) {
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
          if (isa<RankedTensorType>(operand.get().getType()))
            convertOperand(op, operand, defaultFor(operand.get().getType()));
      return;
    }
    if (isa<BlockStoreOp, TmaStoreOp, BlockAtomicAddOp>(op))
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
    // Elementwise: arith, math, tile.cast, tile.exp2, tile.addptr; tile.dot_wait keeps its value's.
    bool hasTensor = llvm::any_of(op->getResultTypes(),
                                  [](Type t) { return isa<RankedTensorType>(t); });
    if (hasTensor)
      assignElementwise(op);
  }

  void visitFor(scf::ForOp loop) {
    // Accumulators carried into a tile.dot start in its mma layout; other carried tiles
    // start in the layout their next value will have (a rescaled accumulator, a row max
    // of a product), so the body converts nothing back.
    auto nextValues = cast<scf::YieldOp>(loop.getBody()->getTerminator()).getOperands();
    for (auto [arg, next] : llvm::zip(loop.getRegionIterArgs(), nextValues)) {
      bool done = false;
      for (OpOperand &use : arg.getUses())
        if (auto dot = dyn_cast<DotOp>(use.getOwner()); dot && use.get() == dot.getAcc())
          if (MmaLayoutAttr mma = mmaLayoutFor(dot, numWarps, rowsPerWarp)) {
            convertOperand(loop, *loop.getTiedLoopInit(arg), mma);
            done = true;
            break;
          }
      if (!done && isa<RankedTensorType>(arg.getType()))
        if (Attribute layout = predict(next))
          convertOperand(loop, *loop.getTiedLoopInit(arg), layout);
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
        LayoutAssigner(warps, func->hasAttr(kMmaRowsPerWarpAttr)).run(func.getBody().front());
    });
  }
};

} // namespace
