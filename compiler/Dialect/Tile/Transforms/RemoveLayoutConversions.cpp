//===- RemoveLayoutConversions.cpp - Drop conversions that need not move data ===//
//
// tile-assign-layouts converts every operand whose layout disagrees with its user's; a
// conversion moves the tile through shared memory (store, barrier, load), yet many need
// not exist. Sweeping the kernel in program order until nothing changes, each
// tile.convert_layout
//
// 1. to the type its source already has is dropped; convert(convert(x)) is x when the
//    layouts round-trip, else one conversion of x;
// 2. is replaced by building its source in the wanted layout when fewer conversions
//    remain (or as many that move fewer bytes: one moved before a widening cast).
//    Splats, aranges, splat constants and short 1-D block loads in loops (each thread
//    reads the elements it holds there, from L1 where threads share them: a row
//    statistic broadcast over an mma tile, read at every step, then costs no barrier)
//    are recreated there; elementwise ops (arith,
//    math, tile.cast, tile.addptr) and broadcasts are cloned over operands built the
//    same way, expand_dims over its operand built in the slice of the wanted layout (a
//    store's pointer grid, [rows, 1] x stride + [1, cols], follows its values). Below
//    them, a conversion gives its source (which moves nothing when already in the
//    wanted layout, else is converted there directly) and any other tile (a load, an
//    argument) is converted right after its definition, reusing a conversion of it to
//    that layout from the same block when there is one; dot and reduction results stop
//    the search. Conversions thus move backward through elementwise ops. Clones sit
//    right after their originals, so what was outside a loop stays outside;
// 3. of a value that a dominating conversion already brings to the same layout is
//    replaced by that one;
// 4. inside loops, of a value defined outside them, moves before the outermost such
//    loop: it runs once instead of at every step (a row statistic loaded before a key
//    loop and broadcast over each step's scores).
// 5. of a tile a loop carries (an scf.for iter_arg), which the loop only converts, all
//    to one layout, makes the loop carry it in that layout when the value it enters with
//    and the one each step hands on are built there without moving data (as rule 2
//    builds them; a load before the loop is read in that layout too), or the entry value
//    is converted once before the loop: rule 2 stops at the argument, so a row statistic
//    loaded a step ahead and carried would otherwise cross shared memory at every step.
//
// Conversions whose layouts another op fixes (into or out of dot-operand layouts, into
// or out of tile.dot, tile.tma_dot, tile.cp_async_dot and tile.reduce) are left alone,
// except that rule 1 drops exact no-ops and round trips; reads of shared tiles
// (#tile.shared) stay where they are. Every replacement has exactly
// the type of the value it replaces, so no op ever sees a new operand type, except that
// rule 5 retypes a loop's argument, init, yielded value and result together (users of
// the result after the loop get a conversion back to the type they had).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace tokamax::tile {
#define GEN_PASS_DEF_TILEREMOVELAYOUTCONVERSIONS
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {

/// Ops cloned per rematerialization at most: duplicated work stays small next to the
/// shared-memory round trip it saves.
constexpr unsigned kMaxClonedOps = 24;
/// Sweeps over a kernel at most (each successful rewrite removes a conversion, so this
/// only bounds pathological inputs).
constexpr unsigned kMaxSweeps = 8;

/// Ops whose operand or result layouts are not free to choose.
bool fixesLayout(Operation *op) { return isa<DotOp, TmaDotOp, CpAsyncDotOp, ReduceOp>(op); }

/// A conversion into or out of a layout some op fixes: only exact no-ops may go.
bool isPinned(ConvertLayoutOp op) {
  if (isSharedTile(op.getSource().getType()) || isSharedTile(op.getType()))
    return true;  // a read of a shared tile: where it happens matters
  if (isa_and_nonnull<DotOperandLayoutAttr>(getLayout(op.getType())) ||
      isa_and_nonnull<DotOperandLayoutAttr>(getLayout(op.getSource().getType())))
    return true;
  if (Operation *def = op.getSource().getDefiningOp(); def && fixesLayout(def))
    return true;
  return llvm::any_of(op->getUsers(), fixesLayout);
}

/// Bytes a conversion of a tile of `type` moves through shared memory.
int64_t bytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() * elementBytes(tensor.getElementType());
}

/// A splat constant (the only tensor constants the GPU lowering takes).
DenseElementsAttr splatConstant(Operation *op) {
  auto cst = dyn_cast<arith::ConstantOp>(op);
  if (!cst || !isa<RankedTensorType>(cst.getType()))
    return {};
  auto dense = dyn_cast<DenseElementsAttr>(cst.getValue());
  return dense && dense.isSplat() ? dense : DenseElementsAttr();
}

/// Producers rebuilt in any layout at no cost: no data moves between threads.
bool isCheapProducer(Operation *op) {
  return isa<SplatOp, ArangeOp>(op) || splatConstant(op);
}

/// Elements of a 1-D block load read again in another layout rather than converted.
constexpr int64_t kMaxRereadElements = 256;

/// A short 1-D block load inside a loop (or `anywhere`): its operands are scalars, so it
/// is rebuilt in any layout. (Outside loops a conversion runs once and may read fewer
/// bytes; a loop's initial value is read in the layout the loop carries instead of
/// converted, as its other values are.)
bool isRereadableLoad(Operation *op, bool anywhere = false) {
  auto load = dyn_cast<BlockLoadOp>(op);
  return load && load.getType().getRank() == 1 && load.getType().getNumElements() <= kMaxRereadElements &&
         (anywhere || op->getParentOfType<scf::ForOp>());
}

/// Pure ops computing each element of their one tensor result from the same element of
/// their tensor operands (scalar operands apply to every element).
bool isElementwise(Operation *op) {
  if (op->getNumResults() != 1 || op->getNumRegions() != 0 || !isMemoryEffectFree(op))
    return false;
  bool arithOrMath = isa<arith::ArithDialect, math::MathDialect>(op->getDialect());
  if (!isa<CastOp>(op) && !(op->hasTrait<OpTrait::Elementwise>() && (arithOrMath || isa<AddPtrOp, Exp2Op>(op))))
    return false;
  auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!result)
    return false;
  return llvm::all_of(op->getOperandTypes(), [&](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return !tensor || (tensor.getShape() == result.getShape() && tensor.getEncoding() == result.getEncoding());
  });
}

/// How to build a value in `layout`: the ops to clone (operands before users), the
/// conversions whose sources they read instead, and the values that must move, each with
/// the layout it is wanted in (the target's, or a slice of it below an expand_dims).
struct Remat {
  Attribute layout;
  llvm::MapVector<Operation *, Attribute> ops;
  llvm::MapVector<Operation *, Attribute> leaves;
  llvm::MapVector<Value, Attribute> moved;
  /// Short 1-D block loads outside loops are rebuilt too (a loop's initial value).
  bool loadsOutsideLoops = false;
};

/// Whether a plan builds its value without moving data between threads: nothing is
/// converted, and each conversion it reads through starts in the wanted layout.
bool movesNothing(const Remat &plan) {
  return plan.moved.empty() && llvm::all_of(plan.leaves, [](const auto &leaf) {
           return getLayout(leaf.first->getOperand(0).getType()) == leaf.second;
         });
}

/// Adds what building `value` in `layout` needs; false when it cannot be built (or is
/// wanted in two layouts).
bool collect(Value value, Attribute layout, Remat &plan) {
  if (getLayout(value.getType()) == layout)
    return true;
  Operation *def = value.getDefiningOp();
  auto wantedAs = [&](auto &map, auto key) -> std::optional<bool> {
    if (auto it = map.find(key); it != map.end())
      return it->second == layout;
    return std::nullopt;
  };
  std::optional<bool> known = def ? wantedAs(plan.ops, def) : std::nullopt;
  if (def && !known)
    known = wantedAs(plan.leaves, def);
  if (!known)
    known = wantedAs(plan.moved, value);
  if (known)
    return *known;
  if (auto convert = dyn_cast_or_null<ConvertLayoutOp>(def)) {
    if (isPinned(convert))
      return false;
    plan.leaves.insert({def, layout});
    return true;
  }
  if (def && plan.ops.size() < kMaxClonedOps) {
    // What each tensor operand must be built in: the same layout, except under an
    // expand_dims (its operand is the slice of the result's layout along the new axis).
    Attribute operandLayout;
    if (isCheapProducer(def) || isElementwise(def) || isRereadableLoad(def, plan.loadsOutsideLoops) ||
        isa<BroadcastOp>(def))
      operandLayout = layout;
    else if (auto expand = dyn_cast<ExpandDimsOp>(def); expand && isa<BlockedLayoutAttr, MmaLayoutAttr>(layout))
      operandLayout = SliceLayoutAttr::get(def->getContext(), expand.getAxis(), layout);
    if (operandLayout) {
      for (Value operand : def->getOperands())
        if (isa<RankedTensorType>(operand.getType()) && !collect(operand, operandLayout, plan))
          return false;
      plan.ops.insert({def, layout});
      return true;
    }
  }
  // Dot and reduction results are not converted anew: their layouts are fixed.
  if (def && fixesLayout(def))
    return false;
  plan.moved.insert({value, layout});
  return true;
}

/// A conversion of `value` to `type` in the block that defines `value`, which can move
/// up to right after the definition.
ConvertLayoutOp existingConversion(Value value, Type type) {
  Block *block = value.getParentBlock();
  for (Operation *user : value.getUsers())
    if (auto convert = dyn_cast<ConvertLayoutOp>(user);
        convert && convert.getType() == type && convert->getBlock() == block && !isPinned(convert))
      return convert;
  return {};
}

/// Right after the definition of `value` (at the start of its block for an argument).
void setInsertionPointAfterValue(OpBuilder &builder, Value value) {
  if (Operation *def = value.getDefiningOp())
    builder.setInsertionPointAfter(def);
  else
    builder.setInsertionPointToStart(value.getParentBlock());
}

/// A side-effect-free op (no terminator, no regions) whose results only ops of `dead`
/// and such ops use, down to none, a few deep: it goes with them (rewrites leave such
/// ops behind for canonicalize).
bool isUnusedOnceGone(Operation *op, const llvm::DenseSet<Operation *> &dead, unsigned depth = 0);

/// Whether every user of `values` is an op of `dead` or one that goes with them.
bool diesWith(ValueRange values, const llvm::DenseSet<Operation *> &dead, unsigned depth = 0) {
  return llvm::all_of(values, [&](Value value) {
    return llvm::all_of(value.getUsers(),
                        [&](Operation *user) { return dead.contains(user) || isUnusedOnceGone(user, dead, depth); });
  });
}

bool isUnusedOnceGone(Operation *op, const llvm::DenseSet<Operation *> &dead, unsigned depth) {
  return depth < kMaxClonedOps && op->getNumResults() > 0 && op->getNumRegions() == 0 &&
         !op->hasTrait<OpTrait::IsTerminator>() && isMemoryEffectFree(op) &&
         diesWith(op->getResults(), dead, depth + 1);
}

class ConversionRemover {
public:
  explicit ConversionRemover(func::FuncOp func) : func(func), dominance(func) {}

  /// Sweeps until nothing changes; returns whether anything did.
  bool run() {
    bool any = false;
    for (unsigned sweep = 0; sweep < kMaxSweeps; ++sweep) {
      bool changed = false;
      SmallVector<ConvertLayoutOp> converts;
      func.walk([&](ConvertLayoutOp op) { converts.push_back(op); });
      erased.clear();
      for (ConvertLayoutOp op : converts) {
        if (erased.contains(op))
          continue;
        changed |= removeNoOp(op) || rematerialize(op) || retypeCarried(op) || mergeDuplicates(op) || hoistInvariant(op);
      }
      if (!changed)
        break;
      any = true;
    }
    return any;
  }

private:
  func::FuncOp func;
  DominanceInfo dominance;
  /// Ops erased during the current sweep (the sweep's list still names them).
  llvm::DenseSet<Operation *> erased;

  void erase(Operation *op) {
    erased.insert(op);
    op->erase();
  }

  void replace(ConvertLayoutOp op, Value with) {
    op.getResult().replaceAllUsesWith(with);
    erase(op);
  }

  void eraseIfDead(Operation *op) {
    if (op && op->use_empty())
      erase(op);
  }

  /// Erases the users of `values` that go with nothing else (isUnusedOnceGone, outside
  /// `keep`), and theirs: all are found first, then erased users first.
  void eraseUnusedUsers(ValueRange values, const llvm::DenseSet<Operation *> &keep) {
    llvm::SetVector<Operation *> doomed;
    SmallVector<Value> work(values.begin(), values.end());
    while (!work.empty())
      for (Operation *user : work.pop_back_val().getUsers())
        if (!keep.contains(user) && !doomed.contains(user) && isUnusedOnceGone(user, keep)) {
          doomed.insert(user);
          work.append(user->result_begin(), user->result_end());
        }
    for (bool progress = true; progress;) {
      progress = false;
      for (Operation *op : llvm::to_vector(doomed))
        if (op->use_empty()) {
          doomed.remove(op);
          erase(op);
          progress = true;
        }
    }
  }

  /// Rule 1: conversions to the type the tile has, and chains of conversions.
  bool removeNoOp(ConvertLayoutOp op) {
    if (op.getSource().getType() == op.getType()) {
      replace(op, op.getSource());
      return true;
    }
    auto inner = op.getSource().getDefiningOp<ConvertLayoutOp>();
    if (!inner)
      return false;
    if (inner.getSource().getType() == op.getType()) { // a round trip
      replace(op, inner.getSource());
      eraseIfDead(inner);
      return true;
    }
    if (isPinned(op) || isPinned(inner))
      return false;
    op.getSourceMutable().assign(inner.getSource());
    eraseIfDead(inner);
    return true;
  }

  /// Rule 2: build the source in the wanted layout when fewer conversions remain.
  bool rematerialize(ConvertLayoutOp op) {
    if (isPinned(op))
      return false;
    Remat plan{getLayout(op.getType()), {}, {}, {}};
    if (!plan.layout || !collect(op.getSource(), plan.layout, plan) || plan.ops.empty())
      return false;

    // Count: this conversion goes, so does each leaf conversion nothing else uses; each
    // leaf whose source is not in the wanted layout needs a new conversion, and so does
    // each moved value that is not converted to it already. As many conversions as
    // before are worth it only when they move fewer bytes (before a widening cast).
    llvm::DenseSet<Operation *> dead{op};
    auto onlyDeadUsers = [&](Operation *o) {
      return llvm::all_of(o->getUsers(), [&](Operation *user) { return dead.contains(user); });
    };
    for (auto &[o, layout] : llvm::reverse(plan.ops)) // users before their operands
      if (onlyDeadUsers(o))
        dead.insert(o);
    unsigned removed = 1, added = 0;
    int64_t bytesRemoved = bytes(op.getType()), bytesAdded = 0;
    for (auto &[leaf, layout] : plan.leaves) {
      if (onlyDeadUsers(leaf)) {
        ++removed;
        bytesRemoved += bytes(leaf->getResult(0).getType());
      }
      if (getLayout(leaf->getOperand(0).getType()) != layout) {
        ++added;
        bytesAdded += bytes(leaf->getOperand(0).getType());
      }
    }
    for (auto &[value, layout] : plan.moved)
      if (!existingConversion(value, withLayout(cast<RankedTensorType>(value.getType()), layout))) {
        ++added;
        bytesAdded += bytes(value.getType());
      }
    if (added > removed || (added == removed && bytesAdded >= bytesRemoved))
      return false;

    replace(op, materialize(op.getSource(), plan));
    eraseOriginals({&plan});
    return true;
  }

  /// Builds `value` in the plan's layout: moved values are converted right after their
  /// definitions, leaves give their sources, and the ops are cloned right after their
  /// originals (which stay until eraseOriginals).
  Value materialize(Value value, const Remat &plan) {
    IRMapping map;
    OpBuilder builder(value.getContext());
    auto convertTo = [&](Value source, Attribute layout) -> Value {
      return builder.create<ConvertLayoutOp>(source.getLoc(),
                                             withLayout(cast<RankedTensorType>(source.getType()), layout), source);
    };
    for (auto &[leaf, layout] : plan.leaves) {
      Value source = leaf->getOperand(0);
      builder.setInsertionPointAfter(leaf);
      map.map(leaf->getResult(0), getLayout(source.getType()) == layout ? source : convertTo(source, layout));
    }
    // Moved values are converted right after their definition, so every clone sees them.
    for (auto &[moved, layout] : plan.moved) {
      setInsertionPointAfterValue(builder, moved);
      ConvertLayoutOp existing = existingConversion(moved, withLayout(cast<RankedTensorType>(moved.getType()), layout));
      if (existing && builder.getInsertionPoint() != existing->getIterator())
        existing->moveBefore(builder.getInsertionBlock(), builder.getInsertionPoint());
      map.map(moved, existing ? existing.getResult() : convertTo(moved, layout));
    }
    for (auto &[original, layout] : plan.ops) {
      // Right after the original: its operands' clones come before it, and a producer
      // outside a loop is not rebuilt on every iteration.
      builder.setInsertionPointAfter(original);
      auto type = withLayout(cast<RankedTensorType>(original->getResult(0).getType()), layout);
      Operation *clone;
      if (DenseElementsAttr dense = splatConstant(original)) {
        clone = builder.create<arith::ConstantOp>(original->getLoc(), type,
                                                  DenseElementsAttr::get(type, dense.getSplatValue<Attribute>()));
      } else {
        clone = builder.clone(*original, map);
        clone->getResult(0).setType(type);
      }
      map.map(original->getResult(0), clone->getResult(0));
    }
    return map.lookupOrDefault(value);
  }

  /// Erases the originals that materialized plans left unused (users before their
  /// operands; an op two plans name is visited once).
  void eraseOriginals(std::initializer_list<const Remat *> plans) {
    llvm::DenseSet<Operation *> visited;
    for (const Remat *plan : plans) {
      for (auto &[original, layout] : llvm::reverse(plan->ops))
        if (visited.insert(original).second)
          eraseIfDead(original);
      for (auto &[leaf, layout] : plan->leaves)
        if (visited.insert(leaf).second)
          eraseIfDead(leaf);
    }
  }

  /// Rule 5: a conversion that only a loop's argument keeps (its source, or the one value
  /// rule 2 would still have to convert to rebuild its source) goes by carrying that
  /// argument in the wanted layout, when the loop uses the argument nowhere else (but in
  /// conversions to that layout) and both the value it enters with and the one each step
  /// hands on are built there (as rule 2 builds them) without moving data. Rule 2 alone
  /// stops at the argument and converts it at every step: a row statistic loaded a step
  /// ahead and carried (its next value a short load, rebuilt in any layout) would cross
  /// shared memory at every step. A load before the loop is read in the layout too; any
  /// other initial value is converted once, before the loop. The loop keeps its ops and
  /// attributes, so a warp-specialized loop (tile.warp_specialize) stays one: its carried
  /// values are its consumers', and nothing marked for its producer (tile.producer) is
  /// rebuilt. The loop's result, where used after it, is converted back there.
  bool retypeCarried(ConvertLayoutOp op) {
    // A conversion that only feeds conversions is first merged into them (rule 1).
    auto feedsConversion = [](Operation *user) {
      auto convert = dyn_cast<ConvertLayoutOp>(user);
      return convert && !isPinned(convert);
    };
    if (isPinned(op) || (!op->use_empty() && llvm::all_of(op->getUsers(), feedsConversion)))
      return false;
    Remat plan{getLayout(op.getType()), {}, {}, {}};
    if (!plan.layout || !collect(op.getSource(), plan.layout, plan) || plan.moved.size() != 1)
      return false;
    auto [moved, layout] = plan.moved.front();
    auto arg = dyn_cast<BlockArgument>(moved);
    auto loop = arg ? dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()) : scf::ForOp();
    if (!loop || !loop.getTiedLoopYieldedValue(arg) || isSharedTile(arg.getType()))
      return false;
    plan.moved.clear();
    auto unmarked = [](const Remat &p) {
      return llvm::none_of(p.ops, [](const auto &entry) { return entry.first->hasAttr(kProducerAttr); });
    };
    if (!movesNothing(plan) || !unmarked(plan))
      return false;
    // Every other use of the argument is a conversion to the layout (a no-op then) or an
    // op that is rebuilt here and dies with this conversion.
    const auto type = withLayout(cast<RankedTensorType>(arg.getType()), layout);
    llvm::DenseSet<Operation *> dead{op};
    for (auto &[o, opLayout] : llvm::reverse(plan.ops)) // users before their operands
      if (diesWith(o->getResults(), dead))
        dead.insert(o);
    for (Operation *user : arg.getUsers()) {
      auto convert = dyn_cast<ConvertLayoutOp>(user);
      if (!dead.contains(user) && !(isUnusedOnceGone(user, dead)) &&
          (!convert || convert.getType() != type || isPinned(convert)))
        return false;
    }
    // The value each step hands on: built in the layout with no data moved (else the
    // conversion would only move to the end of the step).
    OpOperand &next = *loop.getTiedLoopYieldedValue(arg);
    Remat nextPlan{layout, {}, {}, {}};
    const bool passedOn = next.get() == arg;
    if (!passedOn && (!collect(next.get(), layout, nextPlan) || !movesNothing(nextPlan) || !unmarked(nextPlan)))
      return false;
    // The initial value: likewise where it can be, else converted once before the loop.
    OpOperand &init = *loop.getTiedLoopInit(arg);
    Remat initPlan{layout, {}, {}, {}, /*loadsOutsideLoops=*/true};
    const bool initBuilt = collect(init.get(), layout, initPlan) && movesNothing(initPlan) && unmarked(initPlan);
    // A plan that reads the argument through a conversion would read it in its old type.
    for (const Remat *p : {&plan, &nextPlan})
      if (llvm::any_of(p->leaves, [&](const auto &leaf) { return leaf.first->getOperand(0) == arg; }))
        return false;

    // What earlier rewrites left unused on the way goes first (it reads the argument's
    // old type).
    eraseUnusedUsers(arg, dead);
    for (auto &[o, opLayout] : plan.ops)
      eraseUnusedUsers(o->getResults(), dead);
    OpBuilder builder(loop);
    if (initBuilt)
      init.set(materialize(init.get(), initPlan));
    else
      init.set(builder.create<ConvertLayoutOp>(loop.getLoc(), type, init.get()));
    if (!passedOn)
      next.set(materialize(next.get(), nextPlan));
    const Type carried = arg.getType();
    arg.setType(type);
    OpResult result = loop.getTiedLoopResult(arg);
    result.setType(type);
    if (!result.use_empty()) {
      builder.setInsertionPointAfter(loop);
      auto back = builder.create<ConvertLayoutOp>(loop.getLoc(), carried, result);
      result.replaceAllUsesExcept(back, back);
    }
    // The clones read the argument in its new type; its conversions are no-ops now.
    replace(op, materialize(op.getSource(), plan));
    for (Operation *user : llvm::to_vector(arg.getUsers()))
      if (auto convert = dyn_cast<ConvertLayoutOp>(user); convert && convert.getType() == type)
        replace(convert, arg);
    if (initBuilt)
      eraseOriginals({&plan, &initPlan, &nextPlan});
    else
      eraseOriginals({&plan, &nextPlan});
    return true;
  }

  /// Rule 4: out of the loops its source is defined outside of.
  bool hoistInvariant(ConvertLayoutOp op) {
    if (isPinned(op))
      return false;
    Region *sourceRegion = op.getSource().getParentRegion();
    Operation *outermost = nullptr;
    for (auto loop = op->getParentOfType<scf::ForOp>(); loop; loop = loop->getParentOfType<scf::ForOp>()) {
      if (loop.getRegion().isAncestor(sourceRegion))
        break;
      outermost = loop;
    }
    if (!outermost)
      return false;
    op->moveBefore(outermost);
    return true;
  }

  /// Rule 3: later conversions of the same value to the same type use this one.
  bool mergeDuplicates(ConvertLayoutOp op) {
    if (isPinned(op))
      return false;
    SmallVector<ConvertLayoutOp> duplicates;
    for (Operation *user : op.getSource().getUsers())
      if (auto other = dyn_cast<ConvertLayoutOp>(user);
          other && other != op && other.getType() == op.getType() && !isPinned(other) &&
          dominance.properlyDominates(op.getOperation(), other.getOperation()))
        duplicates.push_back(other);
    for (ConvertLayoutOp other : duplicates)
      replace(other, op.getResult());
    return !duplicates.empty();
  }
};

struct RemoveLayoutConversionsPass
    : tokamax::tile::impl::TileRemoveLayoutConversionsBase<RemoveLayoutConversionsPass> {
  void runOnOperation() override {
    getOperation().walk([](func::FuncOp func) {
      if (!func.isExternal())
        ConversionRemover(func).run();
    });
  }
};

} // namespace
