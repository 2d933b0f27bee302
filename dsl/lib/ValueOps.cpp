//===- ValueOps.cpp - Arithmetic, math, shapes, memory in the DSL -----------===//
#include "dsl/lib/KernelBuilder.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <fmt/ranges.h>

#include <algorithm>

using namespace mlir;

namespace tokamax::dsl {

namespace {

bool isPowerOfTwo(int64_t v) { return v > 0 && !(v & (v - 1)); }
bool isFp8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }

void checkArithmetic(KernelBuilder &kb, mlir::Value v, const char *op) {
  Type elem = elementType(v);
  if (isa<tile::PointerType>(elem))
    kb.fail(fmt::format("{}: not defined on pointers", op));
  if (isFp8(elem))
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

Value dot(const Value &a, const Value &b, const Value &acc) {
  KernelBuilder &kb = builderOf("dot", {&a, &b, &acc});
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
  return kb.wrap(kb.b().create<tile::DotOp>(kb.loc(), x, y, c));
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

//===----------------------------------------------------------------------===//
// TensorArg
//===----------------------------------------------------------------------===//

Value TensorArg::ptr() const {
  return builder_->wrap(builder_->func().getArgument(index_));
}

static SmallVector<mlir::Value> blockOffsets(KernelBuilder &kb, const std::string &name, size_t rank,
                                             const std::vector<Value> &offsets, const char *op) {
  if (offsets.size() != rank)
    kb.fail(fmt::format("{} {}: needs {} offsets (one per dimension), got {}", op, name, rank, offsets.size()));
  SmallVector<mlir::Value> result;
  for (const Value &o : offsets)
    result.push_back(kb.index(o, op));
  return result;
}

Value TensorArg::load(std::vector<Value> offsets, std::vector<int64_t> block, double padding) const {
  KernelBuilder &kb = *builder_;
  if (block.size() != shape_.size())
    kb.fail(fmt::format("load {}: block [{}] must have the tensor's rank {}", name_, fmt::join(block, ", "),
                        shape_.size()));
  for (int64_t d : block)
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("load {}: block dimensions must be powers of two, got [{}]", name_, fmt::join(block, ", ")));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "load");
  mlir::Value base = kb.func().getArgument(index_);
  auto type = RankedTensorType::get(block, tile::toMlirType(&kb.context(), dtype_));
  auto op = kb.b().create<tile::BlockLoadOp>(kb.loc(), type, base, offs, kb.b().getDenseI64ArrayAttr(shape_),
                                             kb.b().getDenseI64ArrayAttr(strides_), kb.b().getF64FloatAttr(padding));
  return kb.wrap(op);
}

Value TensorArg::load_async(std::vector<Value> offsets, std::vector<int64_t> block, const SharedBuffer &buffer,
                            const Value &slot) const {
  KernelBuilder &kb = *builder_;
  if (buffer.id < 0 || buffer.id >= kb.sharedBuffers)
    kb.fail(fmt::format("load_async {}: the buffer does not come from this kernel's shared_buffer()", name_));
  if (block.size() != shape_.size())
    kb.fail(fmt::format("load_async {}: block [{}] must have the tensor's rank {}", name_, fmt::join(block, ", "),
                        shape_.size()));
  std::vector<int64_t> kept;
  for (int64_t d : block) {
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("load_async {}: block dimensions must be powers of two, got [{}]", name_,
                          fmt::join(block, ", ")));
    if (d != 1)
      kept.push_back(d);
  }
  if (kept.size() > 2 || block.back() == 1)
    kb.fail(fmt::format("load_async {}: the block [{}] must have at most two non-unit dims, the last one of them",
                        name_, fmt::join(block, ", ")));
  while (kept.size() < 2)
    kept.insert(kept.begin(), 1);
  const int64_t bytes = static_cast<int64_t>(dtype_size(dtype_));
  if (bytes != 2 && bytes != 4)
    kb.fail(fmt::format("load_async {}: copies 16- or 32-bit elements, got {}", name_, dtype_name(dtype_)));
  const int64_t chunk = 16 / bytes;
  if (block.back() % chunk != 0 || shape_.back() % chunk != 0)
    kb.fail(fmt::format("load_async {}: the block's and the tensor's last dims must be multiples of {} (16 bytes), "
                        "got {} and {}",
                        name_, chunk, block.back(), shape_.back()));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "load_async");
  mlir::Value slotValue = kb.index(slot, "load_async");
  auto type = RankedTensorType::get(kept, tile::toMlirType(&kb.context(), dtype_));
  auto op = kb.b().create<tile::AsyncBlockLoadOp>(
      kb.loc(), type, kb.func().getArgument(index_), offs, slotValue, kb.b().getDenseI64ArrayAttr(shape_),
      kb.b().getDenseI64ArrayAttr(strides_), kb.b().getDenseI64ArrayAttr(block), kb.b().getI64IntegerAttr(buffer.id),
      kb.b().getI64IntegerAttr(buffer.slots));
  return kb.wrap(op);
}

void TensorArg::store(std::vector<Value> offsets, const Value &tile) const {
  KernelBuilder &kb = *builder_;
  Type elem = tile::toMlirType(&kb.context(), dtype_);
  mlir::Value v = kb.materialize(tile, elem);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != static_cast<int64_t>(shape_.size()))
    kb.fail(fmt::format("store {}: needs a tile of rank {}, got {}", name_, shape_.size(), shapeString(v.getType())));
  if (type.getElementType() != elem)
    kb.fail(fmt::format("store {}: tile dtype {} does not match the tensor dtype {}; cast with .to()", name_,
                        typeString(type), dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "store");
  kb.b().create<tile::BlockStoreOp>(kb.loc(), kb.func().getArgument(index_), offs, v,
                                    kb.b().getDenseI64ArrayAttr(shape_), kb.b().getDenseI64ArrayAttr(strides_));
}

void TensorArg::tma_store(std::vector<Value> offsets, const Value &tile) const {
  KernelBuilder &kb = *builder_;
  Type elem = tile::toMlirType(&kb.context(), dtype_);
  if (dtype_ != DType::BF16 && dtype_ != DType::F16 && dtype_ != DType::F32)
    kb.fail(fmt::format("tma_store {}: stores bf16, f16 or f32 tensors, got {}", name_, dtype_name(dtype_)));
  if (shape_.size() != 2)
    kb.fail(fmt::format("tma_store {}: needs a 2-D tensor, got [{}]", name_, fmt::join(shape_, ", ")));
  const int64_t bytes = static_cast<int64_t>(dtype_size(dtype_)), columns = 128 / bytes;
  if (shape_[1] * bytes % 16 != 0)
    kb.fail(fmt::format("tma_store {}: rows must be multiples of 16 bytes ({} elements), got [{}]", name_, 16 / bytes,
                        fmt::join(shape_, ", ")));
  mlir::Value v = kb.materialize(tile, elem);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != 2 || type.getDimSize(0) > 256 || type.getDimSize(1) % columns != 0)
    kb.fail(fmt::format("tma_store {}: needs a [BM, BN] tile with BM <= 256 and BN a multiple of {} (128 bytes), "
                        "got {}",
                        name_, columns, shapeString(v.getType())));
  if (type.getElementType() != elem)
    kb.fail(fmt::format("tma_store {}: tile dtype {} does not match the tensor dtype {}; cast with .to()", name_,
                        typeString(type), dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, 2, offsets, "tma_store");
  kb.b().create<tile::TmaStoreOp>(kb.loc(), kb.func().getArgument(index_), offs, v,
                                  kb.b().getDenseI64ArrayAttr(shape_));
}

/// Checks shared by the main-loop dots (tma_dot, cp_async_dot): 2-D tensors of one
/// kernel and one of `dtypes`, rows of 16-byte multiples, matching K, stages in [2, 8],
/// an f32 [BM, BN] accumulator with BM and BN powers of two in [lo, 256].
struct MainLoopDotArgs {
  KernelBuilder &kb;
  mlir::Value acc;
  RankedTensorType type;

  MainLoopDotArgs(const char *op, const TensorArg &a, const TensorArg &b, const Value &accValue, bool transA,
                  bool transB, int64_t stages, const std::vector<DType> &dtypes, int64_t lo)
      : kb(builderOf(op, a, b)) {
    std::string names;  // "bf16, f16 or f32"
    for (size_t i = 0; i < dtypes.size(); ++i)
      names += fmt::format("{}{}", i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ", dtype_name(dtypes[i]));
    for (const TensorArg *t : {&a, &b}) {
      if (t->shape_.size() != 2)
        kb.fail(fmt::format("{}: {} must be 2-D, got [{}]", op, t->name_, fmt::join(t->shape_, ", ")));
      if (std::find(dtypes.begin(), dtypes.end(), t->dtype_) == dtypes.end())
        kb.fail(fmt::format("{}: {} must be {}, got {}", op, t->name_, names, dtype_name(t->dtype_)));
      int64_t bytes = static_cast<int64_t>(dtype_size(t->dtype_));
      if (t->shape_[1] * bytes % 16 != 0)
        kb.fail(fmt::format("{}: rows of {} must be multiples of 16 bytes ({} elements), got [{}]", op, t->name_,
                            16 / bytes, fmt::join(t->shape_, ", ")));
    }
    if (a.dtype_ != b.dtype_)
      kb.fail(fmt::format("{}: a is {} but b is {}", op, dtype_name(a.dtype_), dtype_name(b.dtype_)));
    int64_t ka = transA ? a.shape_[0] : a.shape_[1];
    int64_t kb2 = transB ? b.shape_[1] : b.shape_[0];
    if (ka != kb2)
      kb.fail(fmt::format("{}: op({}) has K = {} but op({}) has K = {}", op, a.name_, ka, b.name_, kb2));
    if (stages < 2 || stages > 8)
      kb.fail(fmt::format("{}: stages must be in [2, 8], got {}", op, stages));
    acc = kb.materialize(accValue, kb.b().getF32Type());
    type = dyn_cast<RankedTensorType>(acc.getType());
    auto valid = [&](int64_t d) { return d >= lo && d <= 256 && (d & (d - 1)) == 0; };
    if (!type || type.getRank() != 2 || !valid(type.getDimSize(0)) || !valid(type.getDimSize(1)))
      kb.fail(fmt::format("{}: the accumulator must be an f32 [BM, BN] tile with BM, BN powers of two in [{}, 256], "
                          "got {}",
                          op, lo, shapeString(acc.getType())));
  }

  static KernelBuilder &builderOf(const char *op, const TensorArg &a, const TensorArg &b) {
    if (!a.builder_ || a.builder_ != b.builder_)
      throw Error(fmt::format("{}: a and b must be tensor parameters of one kernel", op));
    return *a.builder_;
  }

  /// The operands every main-loop dot op takes, then its own trailing attributes.
  template <class Op, class... Extra>
  Value create(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, bool transA, bool transB,
               int64_t blockK, int64_t stages, Extra... extra) {
    const char *name = Op::getOperationName().data();
    auto op = kb.b().create<Op>(kb.loc(), type, kb.func().getArgument(a.index_), kb.func().getArgument(b.index_),
                                kb.index(m0, name), kb.index(n0, name), acc, kb.b().getDenseI64ArrayAttr(a.shape_),
                                kb.b().getDenseI64ArrayAttr(b.shape_), kb.b().getBoolAttr(transA),
                                kb.b().getBoolAttr(transB), kb.b().getI64IntegerAttr(blockK),
                                kb.b().getI64IntegerAttr(stages), extra...);
    return kb.wrap(op);
  }
};

Value tma_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, const Value &acc,
              const TmaDotOptions &options) {
  MainLoopDotArgs args("tma_dot", a, b, acc, options.trans_a, options.trans_b, options.stages,
                       {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}, 64);
  const bool fp8 = is_fp8(a.dtype_);
  const int64_t bytes = fp8 ? 1 : 2;
  if (fp8 && (options.trans_a || !options.trans_b))
    args.kb.fail("tma_dot: 8-bit operands must both be K-major: a as [M, K] (trans_a = false) and b as [N, K] "
                 "(trans_b = true)");
  if (options.block_k * bytes != 32 && options.block_k * bytes != 64 && options.block_k * bytes != 128)
    args.kb.fail(fmt::format("tma_dot: block_k must be {}, {} or {} (one 32-, 64- or 128-byte swizzle row), got {}",
                             32 / bytes, 64 / bytes, 128 / bytes, options.block_k));
  if (options.a_in_registers && options.trans_a)
    args.kb.fail("tma_dot: a_in_registers needs a as [M, K] (trans_a = false)");
  if (options.cluster_m != 1 && options.cluster_m != 2)
    args.kb.fail(fmt::format("tma_dot: cluster_m must be 1 or 2, got {}", options.cluster_m));
  if (options.cluster_m == 2 && !options.warp_specialize)
    args.kb.fail("tma_dot: cluster_m = 2 needs warp_specialize");
  if (options.rebalance_registers && !options.warp_specialize)
    args.kb.fail("tma_dot: rebalance_registers needs warp_specialize (it moves registers from the producer "
                 "warpgroup to the kernel's warps)");
  if (options.cluster_m == 2 && !options.trans_b && args.type.getDimSize(1) < 128)
    args.kb.fail(fmt::format("tma_dot: cluster_m = 2 with b as [K, N] needs block N >= 128 (two 64-column boxes to "
                             "multicast), got {}",
                             args.type.getDimSize(1)));
  return args.create<tile::TmaDotOp>(a, b, m0, n0, options.trans_a, options.trans_b, options.block_k,
                                     options.stages, args.kb.b().getBoolAttr(options.warp_specialize),
                                     args.kb.b().getI64IntegerAttr(options.cluster_m),
                                     args.kb.b().getBoolAttr(options.a_in_registers),
                                     args.kb.b().getBoolAttr(options.rebalance_registers));
}

Value cp_async_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, const Value &acc,
                   const CpAsyncDotOptions &options) {
  MainLoopDotArgs args("cp_async_dot", a, b, acc, options.trans_a, options.trans_b, options.stages,
                       {DType::BF16, DType::F16, DType::F32}, 16);
  const int64_t bytes = static_cast<int64_t>(dtype_size(a.dtype_));
  if (options.block_k < 1 || options.block_k * bytes % 32 != 0 || options.block_k * bytes > 256)
    args.kb.fail(fmt::format("cp_async_dot: block_k must be a multiple of {} up to {} ({} operands), got {}",
                             32 / bytes, 256 / bytes, dtype_name(a.dtype_), options.block_k));
  return args.create<tile::CpAsyncDotOp>(a, b, m0, n0, options.trans_a, options.trans_b, options.block_k,
                                         options.stages);
}

} // namespace tokamax::dsl
