//===- LowerReduce.cpp - Reductions over one tile axis ----------------------===//
//
// 1. In registers: each thread combines the registers that differ only along the axis.
// 2. Across lanes: butterfly shuffles over the lanes that hold distinct elements.
// 3. Across warps (only when warps split the axis): each warp's lane 0 of the axis writes
//    its partials to scratch, a barrier, then every thread combines all warps' partials
//    in warp order (so the result is deterministic and the same in every thread).
// Argmax carries (value, index) pairs and keeps the first maximum.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

struct Partial {
  Value value, index; // index only for argmax
};

class Reducer {
public:
  Reducer(TileLowering &t, ReduceOp op) : t(t), b(t.builder()), op(op), loc(op.getLoc()) {}

  LogicalResult run();

private:
  TileLowering &t;
  OpBuilder &b;
  ReduceOp op;
  Location loc;

  bool isArgmax() { return op.getKind() == ReduceKind::Argmax; }

  Partial combine(Partial x, Partial y) {
    if (!isArgmax())
      return {t.combine(op.getKind(), x.value, y.value), {}};
    bool isFloat = isa<FloatType>(x.value.getType());
    Value greater = isFloat ? b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, y.value, x.value).getResult()
                            : b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, y.value, x.value).getResult();
    Value equal = isFloat ? b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ, y.value, x.value).getResult()
                          : b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, y.value, x.value).getResult();
    Value earlier = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, y.index, x.index);
    Value takeY = b.create<arith::OrIOp>(loc, greater, b.create<arith::AndIOp>(loc, equal, earlier));
    return {b.create<arith::SelectOp>(loc, takeY, y.value, x.value),
            b.create<arith::SelectOp>(loc, takeY, y.index, x.index)};
  }

  Value shuffle(Value v, unsigned offset) {
    Type type = v.getType();
    unsigned bits = type.getIntOrFloatBitWidth();
    auto shfl = [&](Value word) {
      return b.create<NVVM::ShflOp>(loc, b.getI32Type(), t.i32(-1), word, t.i32(offset), t.i32(31),
                                    NVVM::ShflKind::bfly, UnitAttr()).getResult();
    };
    if (bits == 64) {
      Value wide = isa<FloatType>(type) ? b.create<arith::BitcastOp>(loc, b.getI64Type(), v).getResult() : v;
      Value lo = b.create<arith::TruncIOp>(loc, b.getI32Type(), wide);
      Value hi = b.create<arith::TruncIOp>(loc, b.getI32Type(), b.create<arith::ShRUIOp>(loc, wide, t.i64(32)));
      Value rlo = b.create<arith::ExtUIOp>(loc, b.getI64Type(), shfl(lo));
      Value rhi = b.create<arith::ExtUIOp>(loc, b.getI64Type(), shfl(hi));
      Value r = b.create<arith::OrIOp>(loc, rlo, b.create<arith::ShLIOp>(loc, rhi, t.i64(32)));
      return isa<FloatType>(type) ? b.create<arith::BitcastOp>(loc, type, r).getResult() : r;
    }
    Value word = v;
    if (isa<FloatType>(type))
      word = b.create<arith::BitcastOp>(loc, b.getIntegerType(bits), word);
    if (bits < 32)
      word = b.create<arith::ExtUIOp>(loc, b.getI32Type(), word);
    Value r = shfl(word);
    if (bits < 32)
      r = b.create<arith::TruncIOp>(loc, b.getIntegerType(bits), r);
    if (isa<FloatType>(type))
      r = b.create<arith::BitcastOp>(loc, type, r);
    return r;
  }

  Value scratchPtr(Value elementIndex, Type elem, int64_t byteOffset) {
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
    Value base = b.create<LLVM::GEPOp>(loc, ptrType, b.getI8Type(), t.sharedBase(),
                                       ValueRange{t.i32(byteOffset)});
    return b.create<LLVM::GEPOp>(loc, ptrType, elem, base, ValueRange{elementIndex});
  }
};

std::vector<int64_t> withoutAxis(const std::vector<int64_t> &offset, unsigned axis) {
  std::vector<int64_t> key = offset;
  key.erase(key.begin() + axis);
  return key;
}

LogicalResult Reducer::run() {
  auto source = op.getSource().getType();
  unsigned axis = op.getAxis();
  compiler::Distribution dist = getDistribution(source);
  const Registers &regs = t.regs(op.getSource());
  const auto &axisDim = dist.dims()[axis];

  // 1. In registers, keyed by the register's offsets along the other dimensions.
  std::map<std::vector<int64_t>, Partial> partials;
  std::vector<std::vector<int64_t>> keyOrder;
  for (int64_t r = 0; r < dist.num_registers(); ++r) {
    const auto &offset = dist.register_offset(r);
    if (offset[axis] >= axisDim.size)
      continue; // a duplicate of a lower register
    Partial p{regs[r], {}};
    if (isArgmax())
      p.index = t.coords(source, r)[axis];
    auto key = withoutAxis(offset, axis);
    auto it = partials.find(key);
    if (it == partials.end()) {
      partials.emplace(key, p);
      keyOrder.push_back(key);
    } else {
      it->second = combine(it->second, p);
    }
  }

  // 2. Across the lanes that hold distinct elements along the axis.
  for (unsigned k = dist.distinct_lanes(axis) / 2; k >= 1; k /= 2)
    for (auto &key : keyOrder) {
      Partial &p = partials[key];
      Partial other{shuffle(p.value, k * axisDim.lane_stride), {}};
      if (isArgmax())
        other.index = shuffle(p.index, k * axisDim.lane_stride);
      p = combine(p, other);
    }

  // 3. Across warps, through scratch: [warp][output element] values, then indices.
  unsigned warps = dist.distinct_warps(axis);
  if (warps > 1) {
    Type elem = t.registerType(source.getElementType());
    int64_t outputs = source.getNumElements() / source.getDimSize(axis);
    int64_t indexOffset = warps * outputs * elementBytes(source.getElementType());
    Value warpIdx = b.create<arith::RemUIOp>(
        loc, b.create<arith::DivUIOp>(loc, t.warpId(), t.i32(axisDim.warp_stride)), t.i32(warps));
    Value laneIdx = b.create<arith::RemUIOp>(
        loc, b.create<arith::DivUIOp>(loc, t.laneId(), t.i32(axisDim.lane_stride)), t.i32(axisDim.lanes));
    Value writer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, laneIdx, t.i32(0));
    // Linear index of each output element among the other dimensions.
    auto outputIndex = [&](const std::vector<int64_t> &key) {
      const Registers &base = t.threadBase(source);
      Value linear = t.i32(0);
      for (size_t d = 0, k = 0; d < dist.rank(); ++d) {
        if (d == axis)
          continue;
        Value c = b.create<arith::AddIOp>(loc, base[d], t.i32(key[k++]));
        if (dist.needs_wrap(d))
          c = b.create<arith::RemUIOp>(loc, c, t.i32(dist.dims()[d].size));
        linear = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, linear, t.i32(dist.dims()[d].size)), c);
      }
      return linear;
    };
    std::vector<Value> outIdx;
    for (auto &key : keyOrder)
      outIdx.push_back(outputIndex(key));
    for (auto [i, key] : llvm::enumerate(keyOrder)) {
      Value slot = b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, warpIdx, t.i32(outputs)), outIdx[i]);
      auto store = [&](Value v, Type ty, int64_t off) {
        b.create<scf::IfOp>(loc, writer, [&](OpBuilder &nb, Location l) {
          nb.create<LLVM::StoreOp>(l, v, scratchPtr(slot, ty, off));
          nb.create<scf::YieldOp>(l);
        });
      };
      store(partials[key].value, elem, 0);
      if (isArgmax())
        store(partials[key].index, b.getI32Type(), indexOffset);
    }
    t.barrier();
    for (auto [i, key] : llvm::enumerate(keyOrder)) {
      Partial acc;
      for (unsigned w = 0; w < warps; ++w) {
        Value slot = b.create<arith::AddIOp>(loc, t.i32(w * outputs), outIdx[i]);
        Partial p{b.create<LLVM::LoadOp>(loc, elem, scratchPtr(slot, elem, 0)), {}};
        if (isArgmax())
          p.index = b.create<LLVM::LoadOp>(loc, b.getI32Type(), scratchPtr(slot, b.getI32Type(), indexOffset));
        acc = w == 0 ? p : combine(acc, p);
      }
      partials[key] = acc;
    }
  }

  auto pick = [&](const Partial &p) { return isArgmax() ? p.index : p.value; };
  if (source.getRank() == 1) {
    t.mapScalar(op.getResult(), pick(partials.begin()->second));
    return success();
  }
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  compiler::Distribution out = getDistribution(resultType);
  Registers result;
  for (int64_t r = 0; r < out.num_registers(); ++r) {
    auto it = partials.find(out.register_offset(r));
    if (it == partials.end())
      return op.emitOpError("internal error: reduction result register without partial");
    result.push_back(pick(it->second));
  }
  t.setRegs(op.getResult(), std::move(result));
  return success();
}

} // namespace

LogicalResult lowerReduceOp(TileLowering &t, Operation *op, bool &handled) {
  auto reduce = dyn_cast<ReduceOp>(op);
  handled = static_cast<bool>(reduce);
  if (!reduce)
    return success();
  return Reducer(t, reduce).run();
}

} // namespace tokamax::tile
