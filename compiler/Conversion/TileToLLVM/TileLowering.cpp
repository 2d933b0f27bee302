//===- TileLowering.cpp - Per-thread lowering: shared machinery -------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <utility>

using namespace mlir;

namespace tokamax::tile {

TileLowering::TileLowering(OpBuilder &builder, const Arch &target, Block *entry, Value sharedBase)
    : b(builder), target_(target), arch_(target.name()), entry(entry), shared(sharedBase) {
  Location loc = b.getUnknownLoc();
  thread = b.create<NVVM::ThreadIdXOp>(loc, b.getI32Type());
  lane = b.create<arith::AndIOp>(loc, thread, i32(31));
  warp = b.create<arith::ShRUIOp>(loc, thread, i32(5));
}

void TileLowering::when(Location loc, Value cond, llvm::function_ref<void()> body) {
  auto branch = b.create<scf::IfOp>(loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
  body();
}

void TileLowering::asOwner(Location loc, RankedTensorType type, llvm::function_ref<void()> body) {
  if (getDistribution(type).has_thread_replicas())
    when(loc, threadOwns(type), body);
  else
    body();
}

bool TileLowering::hasFp8Conversions() const {
  // cvt between f32 and fp8 exists from sm_89.
  return target_.number() >= 89;
}

LogicalResult TileLowering::lowerBlock(Block &block) {
  if (failed(lowerOps(block.without_terminator())))
    return failure();
  return lowerOp(block.getTerminator());
}

LogicalResult TileLowering::lowerOps(llvm::iterator_range<Block::iterator> ops) {
  if (role_ == WarpRole::All)
    for (Operation &op : ops)
      if (auto loop = dyn_cast<scf::ForOp>(&op); loop && loop->hasAttr(kWarpSpecializeAttr))
        deferred_ = consumerInitOps(loop);
  for (auto it = ops.begin(); it != ops.end(); ++it) {
    if (auto loop = dyn_cast<scf::ForOp>(&*it); loop && role_ == WarpRole::All && loop->hasAttr(kWarpSpecializeAttr))
      return lowerSpecializedLoop(*this, loop, {std::next(it), ops.end()});
    if (role_ == WarpRole::All && llvm::is_contained(deferred_, &*it))
      continue;  // lowered in the consumers' branch
    if (failed(lowerOp(&*it)))
      return failure();
    if (std::exchange(skipRest_, false))
      return success();
    auto [cond, threads] = std::exchange(pendingGuard_, {});
    if (!cond)
      continue;
    auto guarded = b.create<scf::IfOp>(it->getLoc(), cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard insertion(b);
    b.setInsertionPointToStart(&guarded.getThenRegion().front());
    unsigned outer = std::exchange(barrierThreads_, threads);
    LogicalResult rest = lowerOps({std::next(it), ops.end()});
    barrierThreads_ = outer;
    return rest;
  }
  return success();
}

LogicalResult TileLowering::lowerOp(Operation *op) {
  if (splitByMark_ && !op->hasTrait<OpTrait::IsTerminator>()) {
    FailureOr<bool> done = lowerForRole(*this, op);
    if (failed(done))
      return failure();
    if (*done)
      return success();
  }
  using Lowering = LogicalResult (*)(TileLowering &, Operation *, bool &);
  static constexpr Lowering families[] = {lowerControlFlowOp, lowerMemoryOp, lowerReduceOp,
                                          lowerTmaDotOp, lowerTmaStoreOp, lowerCpAsyncDotOp, lowerAsyncCopyOp, lowerTurnOp, lowerDotOp, lowerShapeOp,
                                          lowerElementwiseOp};
  for (Lowering lower : families) {
    bool handled = false;
    LogicalResult result = lower(*this, op, handled);
    if (handled)
      return result;
  }
  return op->emitOpError("has no GPU lowering");
}

bool TileLowering::hasRegs(Value value) const { return values.count(value) != 0; }

const Registers &TileLowering::regs(Value value) const {
  auto it = values.find(value);
  assert(it != values.end() && "value used before it was lowered");
  return it->second;
}

void TileLowering::setRegs(Value value, Registers registers) {
  values[value] = std::move(registers);
}

Type TileLowering::registerType(Type elementType) {
  if (isa<PointerType>(elementType))
    return LLVM::LLVMPointerType::get(b.getContext(), 1);
  if (isFp8(elementType))
    return b.getI8Type();
  return elementType;
}

Value TileLowering::i32(int64_t v) {
  return b.create<arith::ConstantOp>(b.getUnknownLoc(), b.getI32IntegerAttr(v));
}

Value TileLowering::i64(int64_t v) {
  return b.create<arith::ConstantOp>(b.getUnknownLoc(), b.getI64IntegerAttr(v));
}

Value TileLowering::constant(Type type, double v) {
  Location loc = b.getUnknownLoc();
  if (auto ft = dyn_cast<FloatType>(type))
    return b.create<arith::ConstantOp>(loc, b.getFloatAttr(ft, v));
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, static_cast<int64_t>(v)));
}

Value TileLowering::scratchBase(Operation *op) {
  int64_t offset = getScratchOffset(op), stride = getScratchStride(op);
  auto loop = dyn_cast<scf::ForOp>(op->getParentOp());
  if (offset == 0 && (stride == 0 || !loop))
    return shared;
  Location loc = op->getLoc();
  Value bytes = i32(offset);
  if (stride > 0 && loop) {
    // Even iterations use the first buffer, odd ones the second.
    Value iv = regs(loop.getInductionVar())[0];
    Value trip = b.create<arith::DivSIOp>(loc, b.create<arith::SubIOp>(loc, iv, regs(loop.getLowerBound())[0]),
                                          regs(loop.getStep())[0]);
    Value parity = b.create<arith::AndIOp>(loc, trip, i32(1));
    bytes = b.create<arith::AddIOp>(loc, bytes, b.create<arith::MulIOp>(loc, parity, i32(stride)));
  }
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  return b.create<LLVM::GEPOp>(loc, ptrType, b.getI8Type(), shared, ValueRange{bytes});
}

const Registers &TileLowering::threadBase(RankedTensorType type) {
  compiler::Distribution dist = getDistribution(type);
  auto key = std::make_pair(type.getEncoding().getAsOpaquePointer(),
                            std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
  auto it = bases.find(key);
  if (it != bases.end())
    return it->second;
  // Bases are computed once at the kernel entry so that every region can use them.
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfter(warp.getDefiningOp());
  Location loc = b.getUnknownLoc();
  Registers base;
  for (const auto &dim : dist.dims()) {
    Value laneIdx = b.create<arith::RemUIOp>(
        loc, b.create<arith::DivUIOp>(loc, lane, i32(dim.lane_stride)), i32(dim.lanes));
    Value warpIdx = b.create<arith::RemUIOp>(
        loc, b.create<arith::DivUIOp>(loc, warp, i32(dim.warp_stride)), i32(dim.warps));
    Value v = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, laneIdx, i32(dim.lane_scale)),
                                      b.create<arith::MulIOp>(loc, warpIdx, i32(dim.warp_scale)));
    v = b.create<arith::RemUIOp>(loc, v, i32(dim.size));
    base.push_back(v);
  }
  return bases.emplace(key, std::move(base)).first->second;
}

Registers TileLowering::coords(RankedTensorType type, int64_t r) {
  compiler::Distribution dist = getDistribution(type);
  const Registers &base = threadBase(type);
  Location loc = b.getUnknownLoc();
  Registers result;
  for (size_t d = 0; d < dist.rank(); ++d) {
    Value c = b.create<arith::AddIOp>(loc, base[d], i32(dist.register_offset(r)[d]));
    if (dist.needs_wrap(d))
      c = b.create<arith::RemUIOp>(loc, c, i32(dist.dims()[d].size));
    result.push_back(c);
  }
  return result;
}

Value TileLowering::threadOwns(RankedTensorType type) {
  compiler::Distribution dist = getDistribution(type);
  Location loc = b.getUnknownLoc();
  Value owns = b.create<arith::ConstantOp>(loc, b.getBoolAttr(true));
  auto index = [&](Value id, unsigned stride, unsigned count) {
    return b.create<arith::RemUIOp>(loc, b.create<arith::DivUIOp>(loc, id, i32(stride)),
                                    i32(count));
  };
  for (const auto &dim : dist.dims()) {
    Value start = b.create<arith::AddIOp>(
        loc, b.create<arith::MulIOp>(loc, index(lane, dim.lane_stride, dim.lanes), i32(dim.lane_scale)),
        b.create<arith::MulIOp>(loc, index(warp, dim.warp_stride, dim.warps), i32(dim.warp_scale)));
    owns = b.create<arith::AndIOp>(
        loc, owns, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, start, i32(dim.size)));
  }
  for (const auto &dim : dist.dropped()) {
    Value zero = i32(0);
    owns = b.create<arith::AndIOp>(
        loc, owns,
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                index(lane, dim.lane_stride, dim.lanes), zero));
    owns = b.create<arith::AndIOp>(
        loc, owns,
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                index(warp, dim.warp_stride, dim.warps), zero));
  }
  return owns;
}

Value TileLowering::combine(ReduceKind kind, Value x, Value y) {
  Location loc = b.getUnknownLoc();
  bool isFloat = isa<FloatType>(x.getType());
  switch (kind) {
  case ReduceKind::Sum:
    return isFloat ? b.create<arith::AddFOp>(loc, x, y).getResult()
                   : b.create<arith::AddIOp>(loc, x, y).getResult();
  case ReduceKind::Max:
    return isFloat ? b.create<arith::MaximumFOp>(loc, x, y).getResult()
                   : b.create<arith::MaxSIOp>(loc, x, y).getResult();
  case ReduceKind::Min:
    return isFloat ? b.create<arith::MinimumFOp>(loc, x, y).getResult()
                   : b.create<arith::MinSIOp>(loc, x, y).getResult();
  case ReduceKind::Argmax:
    break;
  }
  llvm_unreachable("argmax combines pairs");
}

void TileLowering::barrier() {
  barrierInTurn_ |= inTurn_;
  if (barrierThreads_)
    ptx(b.getUnknownLoc()).namedBarrier(1, barrierThreads_);
  else
    b.create<NVVM::Barrier0Op>(b.getUnknownLoc());
}

int64_t knownMultipleOf(Value value) {
  if (auto cst = value.getDefiningOp<arith::ConstantOp>()) {
    if (auto attr = dyn_cast<IntegerAttr>(cst.getValue())) {
      int64_t v = attr.getInt();
      return v == 0 ? (int64_t(1) << 30) : (v & -v);
    }
  }
  if (auto mul = value.getDefiningOp<arith::MulIOp>())
    return std::min<int64_t>(knownMultipleOf(mul.getLhs()) * knownMultipleOf(mul.getRhs()),
                             int64_t(1) << 30);
  if (auto add = value.getDefiningOp<arith::AddIOp>())
    return std::min(knownMultipleOf(add.getLhs()), knownMultipleOf(add.getRhs()));
  if (auto arg = dyn_cast<BlockArgument>(value))
    if (auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()))
      if (arg == loop.getInductionVar())
        return std::min(knownMultipleOf(loop.getLowerBound()), knownMultipleOf(loop.getStep()));
  return 1;
}

std::map<std::vector<int64_t>, int64_t> registersByOffset(const compiler::Distribution &dist) {
  std::map<std::vector<int64_t>, int64_t> map;
  for (int64_t r = 0; r < dist.num_registers(); ++r)
    map.emplace(dist.register_offset(r), r);
  return map;
}

} // namespace tokamax::tile
