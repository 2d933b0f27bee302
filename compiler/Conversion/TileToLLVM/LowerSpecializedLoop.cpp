//===- LowerSpecializedLoop.cpp - A loop split between warp roles ----------===//
//
// A top-level scf.for marked tile.warp_specialize (DSL Kernel::specialized_loop) runs on
// two roles: a producer warpgroup added after the kernel's warps, and the kernel's own
// warps (the consumers). It is lowered twice, each copy in a branch on the warp's role:
//   - the producer's copy keeps only the ops marked tile.producer (TMA copies, mbarrier
//     waits and arrivals, the arithmetic they need) and the unmarked arithmetic it can
//     compute, and carries nothing; the producer's first thread alone runs it (waits
//     included: a thread that only waited could miss a phase) and issues each TMA copy;
//     the producer warps then skip the rest of the kernel;
//   - the consumers' copy drops the producer's mbarrier ops, keeps of each TMA copy only
//     its slot's address, and lowers everything else; the ops after the loop follow in
//     the same branch, their barriers among the consumer threads (bar.sync 1, N).
// The body may hold loops of steps split the same way (Kernel::specialized_steps: an
// unmarked scf.for holding marked ops): the producer's copy keeps such a loop with its
// marked ops, the consumers' the rest, so a loop over tiles can run each tile's K steps
// and then its epilogue on the consumers alone.
// Each role first sets its register limit (setmaxnreg): ptxas gives each straight-line
// region one register budget, and the producer needs few.
//
// The loop's initial carried values are the consumers': a value loaded before the loop
// only to enter it (a row statistic loaded a step ahead) is loaded in their branch, with
// the ops between it and the loop's operand. Lowered before the split, its registers would
// be live through the producer's region, whose register limit (24) spills them; constants
// (the zero accumulators) stay where they are, ptxas rematerializes them anywhere.
//
// Consumer warpgroups may take turns (tile.turn_wait / tile.turn_pass, ping-pong): turn
// barrier 2 + w belongs to warpgroup w, which waits on it (bar.sync of 256 threads: its
// own 128 and its predecessor's arrival); passing arrives on the successor's. Warpgroup 0
// arrives on its own barrier before the loop, so its first wait finds its turn given.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

// The producer only computes copy coordinates and waits: 24 (the least setmaxnreg
// allows) leaves 240 to each of two consumer warpgroups, which a VJP step's four
// accumulators and products need (at 232 the causal dk/dv kernel spilled).
constexpr int64_t kDefaultProducerRegisters = 24, kMaxConsumerRegisters = 240;

/// Scalar arithmetic either role may need: lowered in the producer's copy too wherever
/// its operands are there (what the consumers alone need is dead code in it). The passes
/// after the DSL (layouts, canonicalization) create such ops without marks. Tile-valued
/// ops stay the consumers': a layout conversion among them would put a barrier of the
/// whole block in the producer's copy, which the consumers never reach.
bool isSharedArithmetic(Operation *op) {
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         llvm::none_of(op->getResultTypes(), [](Type type) { return isa<ShapedType>(type); });
}

/// A loop of steps split between the roles inside the specialized loop's body (DSL
/// Kernel::specialized_steps): an unmarked scf.for holding marked ops.
bool isSplitSteps(Operation *op) {
  auto loop = dyn_cast<scf::ForOp>(op);
  return loop && !op->hasAttr(kProducerAttr) &&
         llvm::any_of(loop.getBody()->without_terminator(), [](Operation &inner) { return inner.hasAttr(kProducerAttr); });
}

/// The producer's ops may hold TMA copies, mbarrier ops, branches and loops of them, and
/// side-effect-free arithmetic, and use only the induction variables (the loop's and a
/// split loop of steps' in it), values from before the loop, each other's results and
/// arithmetic on those.
LogicalResult checkProducerOps(scf::ForOp loop, llvm::DenseSet<Value> &available, Operation *top) {
  available.insert(loop.getInductionVar());
  auto usable = [&](Value v) {
    Operation *owner = v.getDefiningOp() ? v.getDefiningOp() : v.getParentBlock()->getParentOp();
    return !top->isAncestor(owner) || available.contains(v);
  };
  for (Operation &op : loop.getBody()->without_terminator()) {
    const bool allUsable = llvm::all_of(op.getOperands(), usable);
    if (isSplitSteps(&op)) {
      auto steps = cast<scf::ForOp>(op);
      if (!usable(steps.getLowerBound()) || !usable(steps.getUpperBound()) || !usable(steps.getStep()))
        return op.emitOpError("is a loop of steps split between warp roles whose bounds the producer cannot compute "
                              "(they use a value of the consumers)");
      if (failed(checkProducerOps(steps, available, top)))
        return failure();
      continue;
    }
    if (!op.hasAttr(kProducerAttr)) {
      if (isSharedArithmetic(&op) && allUsable)
        available.insert(op.result_begin(), op.result_end());
      continue;
    }
    if (!allUsable)
      return op.emitOpError("runs on the producer warpgroup but uses a value of the consumers (a carried value or "
                            "one of their results)");
    WalkResult walked = op.walk([&](Operation *inner) {
      auto copy = dyn_cast<AsyncBlockLoadOp>(inner);
      if ((copy && copy.isTma()) || isa<MbarrierWaitOp, MbarrierArriveOp, scf::IfOp, scf::ForOp, scf::YieldOp>(inner) ||
          isMemoryEffectFree(inner))
        return WalkResult::advance();
      inner->emitOpError("cannot run on the producer warpgroup of a warp-specialized loop, which may hold TMA "
                         "copies, mbarrier waits and arrivals, and arithmetic");
      return WalkResult::interrupt();
    });
    if (walked.wasInterrupted())
      return failure();
    available.insert(op.result_begin(), op.result_end());
  }
  return success();
}

LogicalResult checkProducerOps(scf::ForOp loop) {
  llvm::DenseSet<Value> available;
  return checkProducerOps(loop, available, loop);
}

constexpr unsigned kFirstTurnBarrier = 2;  // 0: the whole block, 1: the consumers' barrier
constexpr unsigned kWarpgroupThreads = 128;

/// The consumer warpgroups that take turns, and the executing warp's warpgroup.
struct Turns {
  unsigned warpgroups;
  Value warpgroup;
};

Turns turns(TileLowering &t, Operation *op) {
  OpBuilder &b = t.builder();
  Value warpgroup = b.create<arith::DivUIOp>(op->getLoc(), t.warpId(), t.i32(kWarpgroupThreads / 32));
  return {getNumWarps(op) * 32 / kWarpgroupThreads, warpgroup};
}

/// The producer's copy of the loop (or of a loop of steps in it): its marked ops only,
/// nothing carried.
LogicalResult lowerProducerCopy(TileLowering &t, scf::ForOp loop) {
  OpBuilder &b = t.builder();
  auto lowered = b.create<scf::ForOp>(loop.getLoc(), t.regs(loop.getLowerBound())[0],
                                      t.regs(loop.getUpperBound())[0], t.regs(loop.getStep())[0]);
  t.mapScalar(loop.getInductionVar(), lowered.getInductionVar());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(lowered.getBody()->getTerminator());
  return t.lowerOps(loop.getBody()->without_terminator());
}

} // namespace

SmallVector<Operation *> consumerInitOps(scf::ForOp loop) {
  Block *block = loop->getBlock();
  // Candidates: the tile-valued ops of the loop's block, before it, that its initial
  // values are built from: loads, and side-effect-free ops other than conversions (which
  // use the shared scratch where they stand).
  auto tileValued = [](Operation *op) {
    return llvm::any_of(op->getResultTypes(), [](Type type) { return isa<RankedTensorType>(type); }) &&
           llvm::none_of(op->getResultTypes(), [](Type type) { return isSharedTile(type); });
  };
  llvm::SetVector<Operation *> ops;
  SmallVector<Value> work(loop.getInitArgs().begin(), loop.getInitArgs().end());
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != block || ops.contains(def) || def->getNumRegions() != 0 || !tileValued(def) ||
        isa<ConvertLayoutOp>(def) || !(isa<BlockLoadOp>(def) || isMemoryEffectFree(def)))
      continue;
    ops.insert(def);
    work.append(def->operand_begin(), def->operand_end());
  }
  // A load moves past nothing with side effects.
  bool sideEffects = false;
  for (Operation *op = loop->getPrevNode(); op; op = op->getPrevNode()) {
    if (isa<BlockLoadOp>(op) && sideEffects)
      ops.remove(op);
    sideEffects |= !ops.contains(op) && !isMemoryEffectFree(op);
  }
  // Each used by the loop or the others alone, to a fixed point.
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : llvm::to_vector(ops))
      if (llvm::any_of(op->getUsers(), [&](Operation *user) { return user != loop && !ops.contains(user); }))
        changed = ops.remove(op);
  }
  if (llvm::none_of(ops, [](Operation *op) { return isa<BlockLoadOp>(op); }))
    return {};
  SmallVector<Operation *> deferred;
  for (Operation &op : llvm::make_range(block->begin(), loop->getIterator()))
    if (ops.contains(&op))
      deferred.push_back(&op);
  return deferred;
}

FailureOr<bool> lowerForRole(TileLowering &t, Operation *op) {
  const bool producerOp = op->hasAttr(kProducerAttr);
  if (t.role() == TileLowering::WarpRole::Producer) {
    if (producerOp)
      return false;
    if (isSplitSteps(op)) {  // its marked ops, in a loop of their own
      if (failed(lowerProducerCopy(t, cast<scf::ForOp>(op))))
        return failure();
      return true;
    }
    if (isSharedArithmetic(op) && llvm::all_of(op->getOperands(), [&](Value v) { return t.hasRegs(v); }))
      return false;
    return true;  // the consumers' to run
  }
  if (!producerOp)
    return false;
  if (isa<MbarrierWaitOp, MbarrierArriveOp>(op))
    return true;  // the producer's own synchronization
  if (auto copy = dyn_cast<AsyncBlockLoadOp>(op)) {
    t.setRegs(copy.getResult(), {slotPointer(t, copy)});  // the producer issues it
    return true;
  }
  return false;
}

LogicalResult lowerSpecializedLoop(TileLowering &t, scf::ForOp loop, llvm::iterator_range<Block::iterator> rest) {
  OpBuilder &b = t.builder();
  Location loc = loop.getLoc();
  if (!t.target().has_wgmma())
    return loop.emitOpError("is split between warp roles, which needs sm_90a (setmaxnreg), compiling for ") << t.arch();
  if (!isa<func::FuncOp>(loop->getParentOp()))
    return loop.emitOpError("is split between warp roles and must sit at the kernel's top level");
  if (failed(checkProducerOps(loop)))
    return failure();
  const int64_t warps = getNumWarps(loop);
  if (warps % 4 != 0)
    return loop.emitOpError("is split between warp roles and needs whole warpgroups of consumers, got ")
           << warps << " warps";
  // The launch limit that fits every thread of the block, then what the producer's
  // decrease frees for the consumers (240 with 8 consumer warps: 2 x 128 x 240 + 128 x
  // 24 = 384 x 168).
  // With blocks_per_sm blocks meant to share the SM, each block's share of the register
  // file (232 for 4 consumer warps at 2 blocks: 2 x (128 x 232 + 128 x 24) = 2 x 256 x 128).
  int64_t producerRegisters = kDefaultProducerRegisters;
  if (auto func = loop->getParentOfType<func::FuncOp>())
    if (auto attr = func->getAttrOfType<IntegerAttr>(kProducerRegistersAttr))
      producerRegisters = attr.getInt();
  const int64_t blocks = getBlocksPerSm(loop);
  const int64_t producerThreads = 32 * int64_t(kProducerWarps), threads = 32 * warps + producerThreads;
  const int64_t launch = std::min<int64_t>(255, 65536 / (threads * blocks)) / 8 * 8;
  const int64_t consumers =
      std::min(kMaxConsumerRegisters, (launch * threads - producerRegisters * producerThreads) / (32 * warps) / 8 * 8);
  const bool rebalance = consumers > launch;
  if (rebalance || blocks > 1)  // (a block's share is a limit ptxas must know)
    t.setLaunchRegisters(static_cast<unsigned>(launch));
  // The warp index broadcast from lane 0, so ptxas knows each branch is warp-uniform.
  Value warp = b.create<NVVM::ShflOp>(loc, b.getI32Type(), t.i32(-1), t.warpId(), t.i32(0), t.i32(31),
                                      NVVM::ShflKind::idx, UnitAttr());
  Value isProducer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, warp, t.i32(warps));
  auto setRegisters = [&](bool producer) {
    if (rebalance)
      b.create<NVVM::SetMaxRegisterOp>(loc, static_cast<uint32_t>(producer ? producerRegisters : consumers),
                                       producer ? NVVM::SetMaxRegisterAction::decrease
                                                : NVVM::SetMaxRegisterAction::increase);
  };
  auto asRole = [&](TileLowering::WarpRole role, llvm::function_ref<LogicalResult()> lower) {
    t.setRole(role);
    t.setSplitByMark(true);
    LogicalResult lowered = lower();
    t.setSplitByMark(false);
    t.setRole(TileLowering::WarpRole::All);
    return lowered;
  };
  {
    auto producer = b.create<scf::IfOp>(loc, isProducer, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(producer.getThenRegion().front().getTerminator());
    setRegisters(true);
    // One thread runs the producer's loop: a thread that only waited could fall two
    // phases behind a slot's barrier (the issuing thread and the consumers move on
    // without it), wait on a parity that never returns and keep the block alive.
    LogicalResult lowered = success();
    t.when(loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, t.threadId(), t.i32(32 * warps)), [&] {
      lowered = asRole(TileLowering::WarpRole::Producer, [&] { return lowerProducerCopy(t, loop); });
    });
    if (failed(lowered))
      return failure();
  }
  Value isConsumer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, warp, t.i32(warps));
  auto consumer = b.create<scf::IfOp>(loc, isConsumer, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(consumer.getThenRegion().front().getTerminator());
  setRegisters(false);
  if (warps * 32 > int64_t(kWarpgroupThreads) && loop->walk([](TurnWaitOp) { return WalkResult::interrupt(); })
                                                       .wasInterrupted()) {
    // Warpgroup 0's first turn is given: it arrives on its own barrier.
    Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, warp, t.i32(kWarpgroupThreads / 32));
    auto arrive = b.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard inside(b);
    b.setInsertionPoint(arrive.getThenRegion().front().getTerminator());
    t.ptx(loc).namedBarrierArrive(t.i32(kFirstTurnBarrier), 2 * kWarpgroupThreads);
  }
  unsigned outer = t.setBarrierThreads(static_cast<unsigned>(32 * warps));
  for (Operation *op : t.deferredToConsumers())  // the initial values loaded for the loop
    if (failed(t.lowerOp(op)))
      return failure();
  LogicalResult lowered = asRole(TileLowering::WarpRole::Consumer, [&] { return t.lowerOp(loop); });
  if (succeeded(lowered))
    lowered = t.lowerOps(rest);
  t.setBarrierThreads(outer);
  return lowered;
}

LogicalResult lowerTurnOp(TileLowering &t, Operation *op, bool &handled) {
  handled = isa<TurnWaitOp, TurnPassOp>(op);
  if (!handled)
    return success();
  if (t.setInTurn(isa<TurnWaitOp>(op)) && isa<TurnPassOp>(op))
    return op->emitOpError("ends a turn with a barrier among the consumers inside it (a layout conversion or a "
                           "shared-memory tile): the other warpgroups wait for the turn and never reach it");
  Turns turn = turns(t, op);
  if (turn.warpgroups < 2)
    return success();  // one warpgroup: always its turn
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  Value own = turn.warpgroup;
  if (isa<TurnPassOp>(op)) {
    Value next = b.create<arith::AddIOp>(loc, own, t.i32(1));
    own = b.create<arith::RemUIOp>(loc, next, t.i32(turn.warpgroups));
  }
  Value id = b.create<arith::AddIOp>(loc, own, t.i32(kFirstTurnBarrier));
  if (isa<TurnWaitOp>(op))
    t.ptx(loc).namedBarrierSync(id, 2 * kWarpgroupThreads);
  else
    t.ptx(loc).namedBarrierArrive(id, 2 * kWarpgroupThreads);
  return success();
}

} // namespace tokamax::tile
