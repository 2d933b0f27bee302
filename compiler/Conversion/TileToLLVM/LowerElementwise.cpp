//===- LowerElementwise.cpp - Per-register arithmetic, math, casts ----------===//
//
// Elementwise operations apply to each register independently: arith operations are
// re-created on scalars (later converted by arith-to-llvm); math functions become fast
// hardware approximations in f32 (half types go through f32), tile.exp2 a share of its
// registers polynomials on the FMA pipes; casts follow tile.cast's documented semantics.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace tokamax::tile {

namespace {


/// erf(x) for f32 from erfc's rational Chebyshev fit (fractional error < 1.2e-7):
/// erfc(|x|) = t * exp(-x^2 + P(t)), t = 1 / (1 + |x|/2).
Value erfF32(TileLowering &t, Location loc, Value x) {
  OpBuilder &b = t.builder();
  PtxBuilder ptx = t.ptx(loc);
  Type f32 = b.getF32Type();
  auto c = [&](double v) { return t.constant(f32, v); };
  Value ax = b.create<math::AbsFOp>(loc, x);
  Value tt = b.create<arith::DivFOp>(loc, c(1.0),
                                     b.create<arith::AddFOp>(loc, c(1.0), b.create<arith::MulFOp>(loc, c(0.5), ax)));
  static constexpr double coeffs[] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418,
                                      -0.18628806, 0.27886807, -1.13520398, 1.48851587,
                                      -0.82215223, 0.17087277};
  Value poly = c(coeffs[9]);
  for (int i = 8; i >= 0; --i)
    poly = b.create<arith::AddFOp>(loc, c(coeffs[i]), b.create<arith::MulFOp>(loc, tt, poly));
  Value exponent = b.create<arith::SubFOp>(loc, poly, b.create<arith::MulFOp>(loc, ax, ax));
  Value e = ptx.unaryF32("ex2.approx.ftz.f32",
                         b.create<arith::MulFOp>(loc, exponent, c(1.4426950408889634)));
  Value erfc = b.create<arith::MulFOp>(loc, tt, e);
  Value erfAbs = b.create<arith::SubFOp>(loc, c(1.0), erfc);
  return b.create<math::CopySignOp>(loc, erfAbs, x);
}

FailureOr<Value> mathF32(TileLowering &t, Operation *op, Value x) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  PtxBuilder ptx = t.ptx(loc);
  Type f32 = b.getF32Type();
  auto mul = [&](Value v, double k) -> Value { return b.create<arith::MulFOp>(loc, v, t.constant(f32, k)); };
  if (isa<math::ExpOp>(op))
    return ptx.unaryF32("ex2.approx.ftz.f32", mul(x, 1.4426950408889634));
  if (isa<math::Exp2Op>(op))
    return ptx.unaryF32("ex2.approx.ftz.f32", x);
  if (isa<math::LogOp>(op))
    return mul(ptx.unaryF32("lg2.approx.ftz.f32", x), 0.6931471805599453);
  if (isa<math::Log2Op>(op))
    return ptx.unaryF32("lg2.approx.ftz.f32", x);
  if (isa<math::SqrtOp>(op))
    return b.create<LLVM::SqrtOp>(loc, x).getResult();
  if (isa<math::RsqrtOp>(op))
    return ptx.unaryF32("rsqrt.approx.ftz.f32", x);
  if (isa<math::TanhOp>(op))
    return ptx.unaryF32("tanh.approx.f32", x);
  if (isa<math::ErfOp>(op))
    return erfF32(t, loc, x);
  if (isa<math::AbsFOp>(op))
    return b.create<math::AbsFOp>(loc, x).getResult();
  return failure();
}

FailureOr<Value> lowerMath(TileLowering &t, Operation *op, Value x) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  Type type = x.getType();
  if (type.isF64()) {
    if (isa<math::SqrtOp, math::AbsFOp>(op))
      return isa<math::SqrtOp>(op) ? b.create<LLVM::SqrtOp>(loc, x).getResult()
                                   : b.create<math::AbsFOp>(loc, x).getResult();
    if (isa<math::RsqrtOp>(op))
      return b.create<arith::DivFOp>(loc, t.constant(type, 1.0), b.create<LLVM::SqrtOp>(loc, x))
          .getResult();
    FailureOr<Value> expanded = lowerMathF64(b, op, x);
    if (succeeded(expanded))
      return expanded;
    op->emitOpError("on f64 runs on the interpreter only (the GPU backend has no f64 ")
        << op->getName() << ")";
    return failure();
  }
  Value wide = type.isF32() ? x : b.create<arith::ExtFOp>(loc, b.getF32Type(), x).getResult();
  FailureOr<Value> result = mathF32(t, op, wide);
  if (failed(result)) {
    op->emitOpError("has no GPU lowering");
    return failure();
  }
  if (type.isF32())
    return result;
  return b.create<arith::TruncFOp>(loc, type, *result).getResult();
}

} // namespace

/// Converts one register between element types with tile.cast's semantics.
static FailureOr<Value> castRegister(TileLowering &t, Operation *op, Value x, Type from, Type to) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  if (from == to)
    return x;
  if ((isFp8(from) || isFp8(to)) && !t.hasFp8Conversions()) {
    op->emitOpError("fp8 conversions need sm_89 or newer, the target is ") << t.arch();
    return failure();
  }
  Type f32 = b.getF32Type();
  // Sources: bring fp8 to f32 first.
  if (isFp8(from)) {
    x = t.ptx(loc).f8ToF32(x, isa<Float8E4M3FNType>(from));
    from = f32;
    if (from == to)
      return x;
  }
  if (isFp8(to)) {
    FailureOr<Value> asF32 = castRegister(t, op, x, from, f32);
    if (failed(asF32))
      return failure();
    return t.ptx(loc).f32ToF8(*asF32, isa<Float8E4M3FNType>(to));
  }
  bool fromFloat = isa<FloatType>(from), toFloat = isa<FloatType>(to);
  if (fromFloat && toFloat) {
    if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
      return b.create<arith::ExtFOp>(loc, to, x).getResult();
    if (from.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth() || from != to) {
      // f16 <-> bf16 have equal widths: go through f32.
      if (from.getIntOrFloatBitWidth() == to.getIntOrFloatBitWidth())
        x = b.create<arith::ExtFOp>(loc, f32, x);
      return b.create<arith::TruncFOp>(loc, to, x).getResult();
    }
  }
  if (!fromFloat && toFloat)
    return from.isInteger(1) ? b.create<arith::UIToFPOp>(loc, to, x).getResult()
                             : b.create<arith::SIToFPOp>(loc, to, x).getResult();
  if (fromFloat && !toFloat) {
    if (to.isInteger(1))
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, x, t.constant(from, 0.0))
          .getResult();
    return b.create<arith::FPToSIOp>(loc, to, x).getResult();
  }
  unsigned fw = from.getIntOrFloatBitWidth(), tw = to.getIntOrFloatBitWidth();
  if (tw == 1)
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, x, t.constant(from, 0))
        .getResult();
  if (fw == 1)
    return b.create<arith::ExtUIOp>(loc, to, x).getResult();
  if (fw < tw)
    return b.create<arith::ExtSIOp>(loc, to, x).getResult();
  return b.create<arith::TruncIOp>(loc, to, x).getResult();
}

LogicalResult lowerElementwiseOp(TileLowering &t, Operation *op, bool &handled) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  handled = true;
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    Value v;
    switch (pid.getAxis()) {
    case 0: v = b.create<NVVM::BlockIdXOp>(loc, b.getI32Type()); break;
    case 1: v = b.create<NVVM::BlockIdYOp>(loc, b.getI32Type()); break;
    default: v = b.create<NVVM::BlockIdZOp>(loc, b.getI32Type()); break;
    }
    t.mapScalar(pid, v);
    return success();
  }
  if (auto num = dyn_cast<NumProgramsOp>(op)) {
    Value v;
    switch (num.getAxis()) {
    case 0: v = b.create<NVVM::GridDimXOp>(loc, b.getI32Type()); break;
    case 1: v = b.create<NVVM::GridDimYOp>(loc, b.getI32Type()); break;
    default: v = b.create<NVVM::GridDimZOp>(loc, b.getI32Type()); break;
    }
    t.mapScalar(num, v);
    return success();
  }
  if (auto splat = dyn_cast<SplatOp>(op)) {
    auto type = splat.getResult().getType();
    t.setRegs(splat, Registers(getDistribution(type).num_registers(), t.regs(splat.getValue())[0]));
    return success();
  }
  if (auto arange = dyn_cast<ArangeOp>(op)) {
    auto type = arange.getResult().getType();
    compiler::Distribution dist = getDistribution(type);
    Registers regs;
    for (int64_t r = 0; r < dist.num_registers(); ++r)
      regs.push_back(b.create<arith::AddIOp>(loc, t.coords(type, r)[0], t.i32(arange.getStart())));
    t.setRegs(arange, std::move(regs));
    return success();
  }
  if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
    // fp8 values live in i8 registers (TileLowering::registerType): their bits.
    auto scalarConstant = [&](TypedAttr value) -> Value {
      if (auto f = dyn_cast<FloatAttr>(value); f && isFp8(f.getType()))
        return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(b.getI8Type(), f.getValue().bitcastToAPInt()));
      return b.create<arith::ConstantOp>(loc, value);
    };
    auto tensor = dyn_cast<RankedTensorType>(cst.getType());
    if (!tensor) {
      t.mapScalar(cst, scalarConstant(cast<TypedAttr>(cst.getValue())));
      return success();
    }
    auto dense = dyn_cast<DenseElementsAttr>(cst.getValue());
    if (!dense || !dense.isSplat())
      return op->emitOpError("only splat tile constants are supported");
    Value scalar = scalarConstant(cast<TypedAttr>(dense.getSplatValue<Attribute>()));
    t.setRegs(cst, Registers(getDistribution(tensor).num_registers(), scalar));
    return success();
  }
  if (auto addptr = dyn_cast<AddPtrOp>(op)) {
    Type pointee = cast<PointerType>(getElementTypeOrSelf(addptr.getType())).getPointeeType();
    Type elem = t.registerType(pointee);
    const Registers &ptrs = t.regs(addptr.getPtr());
    const Registers &offs = t.regs(addptr.getOffset());
    Registers result;
    for (size_t i = 0; i < ptrs.size(); ++i)
      result.push_back(b.create<LLVM::GEPOp>(loc, ptrs[i].getType(), elem, ptrs[i],
                                             ValueRange{offs[i]}));
    t.setRegs(addptr, std::move(result));
    return success();
  }
  if (auto castOp = dyn_cast<CastOp>(op)) {
    Type from = getElementTypeOrSelf(castOp.getSource().getType());
    Type to = getElementTypeOrSelf(castOp.getType());
    Registers result;
    for (Value x : t.regs(castOp.getSource())) {
      FailureOr<Value> v = castRegister(t, op, x, from, to);
      if (failed(v))
        return failure();
      result.push_back(*v);
    }
    t.setRegs(castOp, std::move(result));
    return success();
  }
  if (auto exp = dyn_cast<Exp2Op>(op)) {
    // Registers r with r mod fma_period < fma_count take the polynomial; the rest the
    // special-function unit.
    const Registers &xs = t.regs(exp.getX());
    const int64_t count = exp.getFmaCount(), period = exp.getFmaPeriod();
    PtxBuilder ptx = t.ptx(loc);
    Registers result;
    for (size_t r = 0; r < xs.size(); ++r)
      result.push_back(static_cast<int64_t>(r) % period < count ? ptx.exp2Polynomial(xs[r])
                                                                : ptx.unaryF32("ex2.approx.ftz.f32", xs[r]));
    t.setRegs(exp, std::move(result));
    return success();
  }
  if (op->getDialect() && isa<math::MathDialect>(op->getDialect()) && op->getNumOperands() == 1) {
    Registers result;
    for (Value x : t.regs(op->getOperand(0))) {
      FailureOr<Value> v = lowerMath(t, op, x);
      if (failed(v))
        return failure();
      result.push_back(*v);
    }
    t.setRegs(op->getResult(0), std::move(result));
    return success();
  }
  if (op->getDialect() && isa<arith::ArithDialect, math::MathDialect>(op->getDialect())) {
    if (op->getNumResults() != 1)
      return op->emitOpError("has no GPU lowering");
    size_t count = 1;
    for (Value operand : op->getOperands())
      count = std::max(count, t.regs(operand).size());
    Type resultElem = t.registerType(getElementTypeOrSelf(op->getResult(0).getType()));
    Registers result;
    for (size_t i = 0; i < count; ++i) {
      OperationState state(loc, op->getName());
      for (Value operand : op->getOperands()) {
        const Registers &regs = t.regs(operand);
        state.addOperands(regs[regs.size() == 1 ? 0 : i]);
      }
      state.addTypes(resultElem);
      state.propertiesAttr = op->getPropertiesAsAttribute();
      state.addAttributes(llvm::to_vector(op->getDiscardableAttrs()));
      result.push_back(b.create(state)->getResult(0));
    }
    t.setRegs(op->getResult(0), std::move(result));
    return success();
  }
  handled = false;
  return success();
}

} // namespace tokamax::tile
