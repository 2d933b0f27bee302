//===- ValueOps.cpp - Arithmetic, math, shapes, pointer memory in the DSL ---===//
#include "dsl/lib/KernelBuilder.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <fmt/ranges.h>

#include <algorithm>

using namespace mlir;

namespace tokamax::dsl {

namespace {

void checkArithmetic(KernelBuilder &kb, mlir::Value v, const char *op) {
  Type elem = elementType(v);
  if (isa<tile::PointerType>(elem))
    kb.fail(fmt::format("{}: not defined on pointers", op));
  if (tile::isFp8(elem))
    kb.fail(fmt::format("{}: fp8 tiles hold data only; cast to f32 with .to() first", op));
}

Value binary(const char *op, const Value &a, const Value &b,
             function_ref<mlir::Value(OpBuilder &, Location, mlir::Value, mlir::Value, bool isFloat)> make) {
  KernelBuilder &kb = builderOf(op, {&a, &b});
  auto [x, y] = kb.unify(a, b, op);
  checkArithmetic(kb, x, op);
  return kb.wrap(make(kb.b(), kb.loc(), x, y, isa<FloatType>(elementType(x))));
}

Value compare(const char *op, const Value &a, const Value &b, arith::CmpFPredicate fp,
              arith::CmpIPredicate ip) {
  return binary(op, a, b, [&](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool isFloat) -> mlir::Value {
    if (isFloat)
      return bb.create<arith::CmpFOp>(loc, fp, x, y);
    return bb.create<arith::CmpIOp>(loc, ip, x, y);
  });
}

template <typename MathOp>
Value unaryMath(const char *op, const Value &x) {
  KernelBuilder &kb = builderOf(op, {&x});
  mlir::Value v = kb.materialize(x, {});
  checkArithmetic(kb, v, op);
  if (!isa<FloatType>(elementType(v)))
    kb.fail(fmt::format("{}: needs a floating-point operand, got {}", op, typeString(v.getType())));
  return kb.wrap(kb.b().create<MathOp>(kb.loc(), v));
}

Value reduce(const Value &x, int axis, tile::ReduceKind kind, const char *op) {
  KernelBuilder &kb = builderOf(op, {&x});
  mlir::Value v = kb.materialize(x, {});
  checkArithmetic(kb, v, op);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    kb.fail(fmt::format("{}: needs a tile, got a scalar", op));
  int given = axis;
  if (axis < 0)
    axis += type.getRank();
  if (axis < 0 || axis >= type.getRank())
    kb.fail(fmt::format("{}: axis {} is out of range for shape {}", op, given, shapeString(type)));
  Type elem = kind == tile::ReduceKind::Argmax ? Type(kb.b().getI32Type()) : type.getElementType();
  Type result = elem;
  if (type.getRank() > 1) {
    SmallVector<int64_t> shape(type.getShape());
    shape.erase(shape.begin() + axis);
    result = RankedTensorType::get(shape, elem);
  }
  return kb.wrap(kb.b().create<tile::ReduceOp>(kb.loc(), result,
                                               tile::ReduceKindAttr::get(&kb.context(), kind), v,
                                               kb.b().getI32IntegerAttr(axis)));
}

mlir::Value pointerTile(KernelBuilder &kb, const Value &ptrs, const char *op) {
  mlir::Value p = kb.materialize(ptrs, {});
  if (!isa<RankedTensorType>(p.getType()) || !isa<tile::PointerType>(elementType(p)))
    kb.fail(fmt::format("{}: needs a tile of pointers (x.ptr() + offsets), got {} {}", op,
                        typeString(p.getType()), shapeString(p.getType())));
  return p;
}

mlir::Value maskFor(KernelBuilder &kb, const Value &mask, ArrayRef<int64_t> shape, const char *op) {
  if (!mask.valid())
    return {};
  mlir::Value m = kb.materialize(mask, kb.b().getI1Type(), mask.is_literal() ? shape : ArrayRef<int64_t>{});
  if (elementType(m) != kb.b().getI1Type())
    kb.fail(fmt::format("{}: the mask must be bool, got {}", op, typeString(m.getType())));
  return kb.broadcastTo(m, shape, op);
}

Type pointee(mlir::Value ptrs) {
  return cast<tile::PointerType>(elementType(ptrs)).getPointeeType();
}

} // namespace

//===----------------------------------------------------------------------===//
// Value queries and methods
//===----------------------------------------------------------------------===//

bool Value::is_tile() const { return handle_ && isa<RankedTensorType>(KernelBuilder::raw(*this).getType()); }

bool Value::is_pointer() const {
  return handle_ && isa<tile::PointerType>(elementType(KernelBuilder::raw(*this)));
}

std::vector<int64_t> Value::shape() const {
  if (!handle_)
    return {};
  auto s = shapeOf(KernelBuilder::raw(*this));
  return {s.begin(), s.end()};
}

DType Value::dtype() const {
  if (!handle_)
    return literal_is_int_ ? DType::I32 : DType::F32;
  Type elem = elementType(KernelBuilder::raw(*this));
  if (auto ptr = dyn_cast<tile::PointerType>(elem))
    elem = ptr.getPointeeType();
  return *tile::fromMlirType(elem);
}

Value Value::to(DType dtype) const {
  KernelBuilder &kb = builderOf("to", {this});
  mlir::Value v = kb.materialize(*this, {});
  if (isa<tile::PointerType>(elementType(v)))
    kb.fail("to: pointers cannot be cast");
  Type target = tile::toMlirType(&kb.context(), dtype);
  if (elementType(v) == target)
    return *this;
  Type result = isa<RankedTensorType>(v.getType())
                    ? Type(RankedTensorType::get(shapeOf(v), target))
                    : target;
  return kb.wrap(kb.b().create<tile::CastOp>(kb.loc(), result, v));
}

Value Value::sum(int axis) const { return reduce(*this, axis, tile::ReduceKind::Sum, "sum"); }
Value Value::max(int axis) const { return reduce(*this, axis, tile::ReduceKind::Max, "max"); }
Value Value::min(int axis) const { return reduce(*this, axis, tile::ReduceKind::Min, "min"); }
Value Value::argmax(int axis) const { return reduce(*this, axis, tile::ReduceKind::Argmax, "argmax"); }

Value Value::expand(int axis) const {
  KernelBuilder &kb = builderOf("expand", {this});
  mlir::Value v = kb.materialize(*this, {});
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    kb.fail("expand: needs a tile, got a scalar");
  int given = axis;
  if (axis < 0)
    axis += type.getRank() + 1;
  if (axis < 0 || axis > type.getRank())
    kb.fail(fmt::format("expand: axis {} is out of range for shape {}", given, shapeString(type)));
  SmallVector<int64_t> shape(type.getShape());
  shape.insert(shape.begin() + axis, 1);
  return kb.wrap(kb.b().create<tile::ExpandDimsOp>(
      kb.loc(), RankedTensorType::get(shape, type.getElementType()), v, kb.b().getI32IntegerAttr(axis)));
}

Value Value::broadcast_to(std::vector<int64_t> shape) const {
  KernelBuilder &kb = builderOf("broadcast_to", {this});
  for (int64_t d : shape)
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("broadcast_to: tile dimensions must be powers of two, got [{}]", fmt::join(shape, ", ")));
  return kb.wrap(kb.broadcastTo(kb.materialize(*this, {}), shape, "broadcast_to"));
}

Value Value::reshape(std::vector<int64_t> shape) const {
  KernelBuilder &kb = builderOf("reshape", {this});
  mlir::Value v = kb.materialize(*this, {});
  auto type = dyn_cast<RankedTensorType>(v.getType());
  int64_t n = 1;
  for (int64_t d : shape) {
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("reshape: tile dimensions must be powers of two, got [{}]", fmt::join(shape, ", ")));
    n *= d;
  }
  if (!type || type.getNumElements() != n)
    kb.fail(fmt::format("reshape: cannot reshape {} to [{}]", shapeString(v.getType()), fmt::join(shape, ", ")));
  return kb.wrap(kb.b().create<tile::ReshapeOp>(kb.loc(), RankedTensorType::get(shape, type.getElementType()), v));
}

Value Value::trans(std::vector<int> order) const {
  KernelBuilder &kb = builderOf("trans", {this});
  mlir::Value v = kb.materialize(*this, {});
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || static_cast<int64_t>(order.size()) != type.getRank())
    kb.fail(fmt::format("trans: order [{}] does not match shape {}", fmt::join(order, ", "), shapeString(v.getType())));
  std::vector<bool> seen(order.size());
  SmallVector<int64_t> shape;
  for (int d : order) {
    if (d < 0 || d >= type.getRank() || seen[d])
      kb.fail(fmt::format("trans: order [{}] is not a permutation", fmt::join(order, ", ")));
    seen[d] = true;
    shape.push_back(type.getDimSize(d));
  }
  SmallVector<int32_t> perm(order.begin(), order.end());
  return kb.wrap(kb.b().create<tile::TransOp>(kb.loc(), RankedTensorType::get(shape, type.getElementType()), v,
                                              kb.b().getDenseI32ArrayAttr(perm)));
}

//===----------------------------------------------------------------------===//
// Operators and free functions
//===----------------------------------------------------------------------===//

Value operator+(const Value &a, const Value &b) {
  // Pointer arithmetic: ptr + offsets.
  for (auto [p, o] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    if (!p->is_pointer())
      continue;
    KernelBuilder &kb = *p->builder();
    mlir::Value ptr = KernelBuilder::raw(*p);
    mlir::Value off = kb.materialize(*o, kb.b().getI32Type());
    if (!isa<IntegerType>(elementType(off)) || elementType(off).getIntOrFloatBitWidth() < 32)
      kb.fail(fmt::format("pointer + offset: offsets must be i32 or i64, got {}", typeString(off.getType())));
    ArrayRef<int64_t> shape = shapeOf(off).empty() ? shapeOf(ptr) : shapeOf(off);
    ptr = kb.broadcastTo(ptr, shape, "pointer + offset");
    off = kb.broadcastTo(off, shape, "pointer + offset");
    return kb.wrap(kb.b().create<tile::AddPtrOp>(kb.loc(), ptr.getType(), ptr, off));
  }
  return binary("+", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::AddFOp>(loc, x, y).getResult() : bb.create<arith::AddIOp>(loc, x, y).getResult();
  });
}

Value operator-(const Value &a, const Value &b) {
  return binary("-", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::SubFOp>(loc, x, y).getResult() : bb.create<arith::SubIOp>(loc, x, y).getResult();
  });
}

Value operator*(const Value &a, const Value &b) {
  return binary("*", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::MulFOp>(loc, x, y).getResult() : bb.create<arith::MulIOp>(loc, x, y).getResult();
  });
}

Value operator/(const Value &a, const Value &b) {
  return binary("/", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::DivFOp>(loc, x, y).getResult() : bb.create<arith::DivSIOp>(loc, x, y).getResult();
  });
}

Value operator%(const Value &a, const Value &b) {
  return binary("%", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::RemFOp>(loc, x, y).getResult() : bb.create<arith::RemSIOp>(loc, x, y).getResult();
  });
}

Value operator-(const Value &a) {
  KernelBuilder &kb = builderOf("-", {&a});
  mlir::Value v = kb.materialize(a, {});
  checkArithmetic(kb, v, "-");
  if (isa<FloatType>(elementType(v)))
    return kb.wrap(kb.b().create<arith::NegFOp>(kb.loc(), v)); // keeps -0.0
  return Value(0) - a;
}

Value operator<(const Value &a, const Value &b) { return compare("<", a, b, arith::CmpFPredicate::OLT, arith::CmpIPredicate::slt); }
Value operator<=(const Value &a, const Value &b) { return compare("<=", a, b, arith::CmpFPredicate::OLE, arith::CmpIPredicate::sle); }
Value operator>(const Value &a, const Value &b) { return compare(">", a, b, arith::CmpFPredicate::OGT, arith::CmpIPredicate::sgt); }
Value operator>=(const Value &a, const Value &b) { return compare(">=", a, b, arith::CmpFPredicate::OGE, arith::CmpIPredicate::sge); }
Value operator==(const Value &a, const Value &b) { return compare("==", a, b, arith::CmpFPredicate::OEQ, arith::CmpIPredicate::eq); }
Value operator!=(const Value &a, const Value &b) { return compare("!=", a, b, arith::CmpFPredicate::UNE, arith::CmpIPredicate::ne); }

Value operator&(const Value &a, const Value &b) {
  return binary("&", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    if (f)
      throw Error("&: needs bool or integer operands");
    return bb.create<arith::AndIOp>(loc, x, y);
  });
}

Value operator|(const Value &a, const Value &b) {
  return binary("|", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    if (f)
      throw Error("|: needs bool or integer operands");
    return bb.create<arith::OrIOp>(loc, x, y);
  });
}

Value exp(const Value &x) { return unaryMath<math::ExpOp>("exp", x); }
Value exp2(const Value &x) { return unaryMath<math::Exp2Op>("exp2", x); }
Value exp2(const Value &x, int fma_count, int fma_period) {
  KernelBuilder &kb = builderOf("exp2", {&x});
  mlir::Value v = kb.materialize(x, {});
  if (!isa<RankedTensorType>(v.getType()) || !elementType(v).isF32())
    kb.fail(fmt::format("exp2 with a share on the FMA pipes: needs an f32 tile, got a {} of {}",
                        isa<RankedTensorType>(v.getType()) ? "tile" : "scalar", typeString(v.getType())));
  if (fma_period < 1 || fma_period > 64 || fma_count < 0 || fma_count > fma_period)
    kb.fail(fmt::format("exp2: fma_count {} of every fma_period {} registers: need 1 <= fma_period <= 64 and 0 <= "
                        "fma_count <= fma_period",
                        fma_count, fma_period));
  if (fma_count == 0)
    return exp2(x);
  return kb.wrap(kb.b().create<tile::Exp2Op>(kb.loc(), v, fma_count, fma_period));
}
Value log(const Value &x) { return unaryMath<math::LogOp>("log", x); }
Value sqrt(const Value &x) { return unaryMath<math::SqrtOp>("sqrt", x); }
Value rsqrt(const Value &x) { return unaryMath<math::RsqrtOp>("rsqrt", x); }
Value tanh(const Value &x) { return unaryMath<math::TanhOp>("tanh", x); }
Value erf(const Value &x) { return unaryMath<math::ErfOp>("erf", x); }
Value abs(const Value &x) { return unaryMath<math::AbsFOp>("abs", x); }

Value maximum(const Value &a, const Value &b) {
  return binary("maximum", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::MaximumFOp>(loc, x, y).getResult() : bb.create<arith::MaxSIOp>(loc, x, y).getResult();
  });
}

Value minimum(const Value &a, const Value &b) {
  return binary("minimum", a, b, [](OpBuilder &bb, Location loc, mlir::Value x, mlir::Value y, bool f) -> mlir::Value {
    return f ? bb.create<arith::MinimumFOp>(loc, x, y).getResult() : bb.create<arith::MinSIOp>(loc, x, y).getResult();
  });
}

Value where(const Value &cond, const Value &a, const Value &b) {
  KernelBuilder &kb = builderOf("where", {&cond, &a, &b});
  auto [x, y] = kb.unify(a, b, "where");
  mlir::Value c = kb.materialize(cond, kb.b().getI1Type());
  if (elementType(c) != kb.b().getI1Type())
    kb.fail("where: the condition must be bool, got " + typeString(c.getType()));
  ArrayRef<int64_t> sc = shapeOf(c), sx = shapeOf(x);
  if (sc.size() > sx.size() || (sc.size() == sx.size() && sc != sx)) {
    SmallVector<int64_t> shape(sc.size() >= sx.size() ? sc : sx);
    for (size_t d = 0; d < shape.size() && sx.size() == sc.size(); ++d)
      shape[d] = std::max(sc[d], sx[d]);
    x = kb.broadcastTo(x, shape, "where");
    y = kb.broadcastTo(y, shape, "where");
  }
  c = kb.broadcastTo(c, shapeOf(x), "where");
  return kb.wrap(kb.b().create<arith::SelectOp>(kb.loc(), c, x, y));
}

namespace {

Value buildDot(const Value &a, const Value &b, const Value &acc, bool async, const Value *fresh = nullptr,
               bool aKInterleaved = false) {
  KernelBuilder &kb = builderOf(async ? "dot_async" : "dot", {&a, &b, &acc});
  mlir::Value x = kb.materialize(a, {}), y = kb.materialize(b, {});
  auto ta = dyn_cast<RankedTensorType>(x.getType()), tb = dyn_cast<RankedTensorType>(y.getType());
  if (!ta || !tb || ta.getRank() != 2 || tb.getRank() != 2 || ta.getDimSize(1) != tb.getDimSize(0))
    kb.fail(fmt::format("dot: needs 2-D tiles [M, K] @ [K, N], got {} @ {}", shapeString(x.getType()),
                        shapeString(y.getType())));
  if (ta.getElementType() != tb.getElementType())
    kb.fail(fmt::format("dot: a and b dtypes differ ({} and {})", typeString(x.getType()), typeString(y.getType())));
  SmallVector<int64_t> shape{ta.getDimSize(0), tb.getDimSize(1)};
  Type accElem = ta.getElementType().isF64() ? kb.b().getF64Type() : kb.b().getF32Type();
  mlir::Value c = kb.materialize(acc, accElem, acc.is_literal() ? ArrayRef<int64_t>(shape) : ArrayRef<int64_t>{});
  if (c.getType() != RankedTensorType::get(shape, accElem))
    kb.fail(fmt::format("dot: the accumulator must be {} [{}], got {} {}", typeString(accElem),
                        fmt::join(shape, ", "), typeString(c.getType()), shapeString(c.getType())));
  mlir::Value restart;
  if (fresh) {
    restart = kb.materialize(*fresh, kb.b().getI1Type());
    if (restart.getType() != kb.b().getI1Type())
      kb.fail("dot_async: fresh must be a bool scalar, got " + typeString(restart.getType()) + " " +
              shapeString(restart.getType()));
  }
  if (aKInterleaved && ta.getDimSize(1) % 16 != 0)
    kb.fail(fmt::format("dot: a_k_interleaved permutes K within 16-wide groups: K must be a multiple of 16, got {}",
                        ta.getDimSize(1)));
  auto op = kb.b().create<tile::DotOp>(kb.loc(), x, y, c, restart);
  if (async)
    op.setAsync(true);
  if (aKInterleaved)
    op.setAKInterleaved(true);
  return kb.wrap(op);
}

} // namespace

Value dot(const Value &a, const Value &b, const Value &acc, const DotOptions &options) {
  return buildDot(a, b, acc, options.async, nullptr, options.a_k_interleaved);
}

Value dot(const Value &a, const Value &b, const Value &acc) { return buildDot(a, b, acc, false); }

Value dot_async(const Value &a, const Value &b, const Value &acc) { return buildDot(a, b, acc, true); }

Value dot_async(const Value &a, const Value &b, const Value &acc, const Value &fresh) {
  return buildDot(a, b, acc, true, &fresh);
}

Value dot_wait(const Value &value, int pending) {
  KernelBuilder &kb = builderOf("dot_wait", {&value});
  if (pending < 0 || pending > 7)
    kb.fail(fmt::format("dot_wait: pending must be in [0, 7], got {}", pending));
  mlir::Value v = kb.materialize(value, {});
  if (!isa<RankedTensorType>(v.getType()))
    kb.fail(fmt::format("dot_wait: needs the tile of an async dot, got {}", typeString(v.getType())));
  return kb.wrap(kb.b().create<tile::DotWaitOp>(kb.loc(), v, pending));
}

Value load(const Value &ptrs, const Value &mask, const Value &other) {
  KernelBuilder &kb = builderOf("load", {&ptrs});
  mlir::Value p = pointerTile(kb, ptrs, "load");
  ArrayRef<int64_t> shape = shapeOf(p);
  auto resultType = RankedTensorType::get(shape, pointee(p));
  mlir::Value m = maskFor(kb, mask, shape, "load");
  mlir::Value o;
  if (other.valid()) {
    o = kb.broadcastTo(kb.materialize(other, pointee(p)), shape, "load");
    if (o.getType() != resultType)
      kb.fail("load: `other` must have the pointee dtype " + typeString(pointee(p)));
  }
  return kb.wrap(kb.b().create<tile::LoadOp>(kb.loc(), resultType, p, m, o));
}

void store(const Value &ptrs, const Value &value, const Value &mask) {
  KernelBuilder &kb = builderOf("store", {&ptrs});
  mlir::Value p = pointerTile(kb, ptrs, "store");
  ArrayRef<int64_t> shape = shapeOf(p);
  mlir::Value v = kb.broadcastTo(kb.materialize(value, pointee(p)), shape, "store");
  if (elementType(v) != pointee(p))
    kb.fail(fmt::format("store: value dtype {} does not match the pointee dtype {}; cast with .to()",
                        typeString(v.getType()), typeString(pointee(p))));
  kb.b().create<tile::StoreOp>(kb.loc(), p, v, maskFor(kb, mask, shape, "store"));
}

static Value atomicRmw(tile::AtomicKind kind, const char *op, const Value &ptrs, const Value &value,
                       const Value &mask) {
  KernelBuilder &kb = builderOf(op, {&ptrs});
  mlir::Value p = pointerTile(kb, ptrs, op);
  ArrayRef<int64_t> shape = shapeOf(p);
  mlir::Value v = kb.broadcastTo(kb.materialize(value, pointee(p)), shape, op);
  Type elem = elementType(v);
  if (elem != pointee(p))
    kb.fail(fmt::format("{}: value dtype {} does not match the pointee dtype {}", op, typeString(elem),
                        typeString(pointee(p))));
  if (!elem.isF32() && !elem.isF64() && !elem.isInteger(32) && !elem.isInteger(64))
    kb.fail(fmt::format("{}: supports f32, f64, i32 and i64, got {}", op, typeString(elem)));
  if (kind == tile::AtomicKind::Max && elem.isF64())
    kb.fail(fmt::format("{}: f64 is not supported", op));
  return kb.wrap(kb.b().create<tile::AtomicRMWOp>(kb.loc(), v.getType(),
                                                  tile::AtomicKindAttr::get(&kb.context(), kind), p, v,
                                                  maskFor(kb, mask, shape, op)));
}

Value atomic_add(const Value &ptrs, const Value &value, const Value &mask) {
  return atomicRmw(tile::AtomicKind::Add, "atomic_add", ptrs, value, mask);
}

Value atomic_max(const Value &ptrs, const Value &value, const Value &mask) {
  return atomicRmw(tile::AtomicKind::Max, "atomic_max", ptrs, value, mask);
}

Value atomic_cas(const Value &ptrs, const Value &compare, const Value &value) {
  KernelBuilder &kb = builderOf("atomic_cas", {&ptrs});
  mlir::Value p = pointerTile(kb, ptrs, "atomic_cas");
  ArrayRef<int64_t> shape = shapeOf(p);
  Type elem = pointee(p);
  if (!elem.isInteger(32) && !elem.isInteger(64))
    kb.fail("atomic_cas: supports i32 and i64 tensors, got " + typeString(elem));
  mlir::Value c = kb.broadcastTo(kb.materialize(compare, elem), shape, "atomic_cas");
  mlir::Value v = kb.broadcastTo(kb.materialize(value, elem), shape, "atomic_cas");
  if (elementType(c) != elem || elementType(v) != elem)
    kb.fail("atomic_cas: compare and value must have the pointee dtype " + typeString(elem));
  return kb.wrap(kb.b().create<tile::AtomicCASOp>(kb.loc(), p, c, v));
}

} // namespace tokamax::dsl
