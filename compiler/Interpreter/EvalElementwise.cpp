//===- EvalElementwise.cpp - arith operations, constants, casts, tile construction -===//
//
// Float results are computed in double and rounded to the result's element type after
// every operation; integer results wrap to their bit width. Operands of one operation have
// one shape, except that arith.select may take a scalar condition.
//
//===----------------------------------------------------------------------===//
#include "compiler/Interpreter/HostTile.h"

#include <bit>
#include <cmath>
#include <limits>

namespace tokamax::interp {

using namespace mlir;

namespace {

using arith::CmpFPredicate;
using arith::CmpIPredicate;

template <typename F>
void floatBinary(Interpreter &in, Operation *op, F fn) {
  const HostTile &a = in.get(op->getOperand(0)), &b = in.get(op->getOperand(1));
  HostTile r = HostTile::of(op->getResult(0).getType());
  for (size_t k = 0; k < r.numel(); ++k)
    r.f[k] = roundFloat(r.elem, fn(a.f[a.at(k)], b.f[b.at(k)]));
  in.set(op->getResult(0), std::move(r));
}

/// `fn(a, b, bits)` gets the stored values and returns a value to wrap to the width.
template <typename F>
void intBinary(Interpreter &in, Operation *op, F fn) {
  const HostTile &a = in.get(op->getOperand(0)), &b = in.get(op->getOperand(1));
  HostTile r = HostTile::of(op->getResult(0).getType());
  unsigned bits = a.bits();
  for (size_t k = 0; k < r.numel(); ++k)
    r.i[k] = wrapInt(bits, fn(a.i[a.at(k)], b.i[b.at(k)], bits));
  in.set(op->getResult(0), std::move(r));
}

/// `fn(a, k)` gives element k of the float result from operand 0.
template <typename F>
void toFloat(Interpreter &in, Operation *op, F fn) {
  const HostTile &a = in.get(op->getOperand(0));
  HostTile r = HostTile::of(op->getResult(0).getType());
  for (size_t k = 0; k < r.numel(); ++k)
    r.f[k] = fn(a, k);
  in.set(op->getResult(0), std::move(r));
}

/// `fn(a, k)` gives element k of the integer result (wrapped to its width) from operand 0.
template <typename F>
void toInt(Interpreter &in, Operation *op, F fn) {
  const HostTile &a = in.get(op->getOperand(0));
  HostTile r = HostTile::of(op->getResult(0).getType());
  for (size_t k = 0; k < r.numel(); ++k)
    r.i[k] = wrapInt(r.bits(), fn(a, k));
  in.set(op->getResult(0), std::move(r));
}

int64_t add(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) + uint64_t(b)); }
int64_t sub(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) - uint64_t(b)); }
int64_t mul(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) * uint64_t(b)); }

// Division by zero has no defined result on the GPU; the interpreter gives 0 (masked-off
// lanes commonly divide garbage). MIN / -1 wraps.
int64_t divS(int64_t a, int64_t b) {
  if (b == 0)
    return 0;
  if (b == -1)
    return sub(0, a);
  return a / b;
}
int64_t remS(int64_t a, int64_t b) { return b == 0 || b == -1 ? 0 : a % b; }

double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

bool compareF(CmpFPredicate p, double a, double b) {
  bool unordered = std::isnan(a) || std::isnan(b);
  switch (p) {
  case CmpFPredicate::AlwaysFalse: return false;
  case CmpFPredicate::OEQ: return !unordered && a == b;
  case CmpFPredicate::OGT: return !unordered && a > b;
  case CmpFPredicate::OGE: return !unordered && a >= b;
  case CmpFPredicate::OLT: return !unordered && a < b;
  case CmpFPredicate::OLE: return !unordered && a <= b;
  case CmpFPredicate::ONE: return !unordered && a != b;
  case CmpFPredicate::ORD: return !unordered;
  case CmpFPredicate::UEQ: return unordered || a == b;
  case CmpFPredicate::UGT: return unordered || a > b;
  case CmpFPredicate::UGE: return unordered || a >= b;
  case CmpFPredicate::ULT: return unordered || a < b;
  case CmpFPredicate::ULE: return unordered || a <= b;
  case CmpFPredicate::UNE: return unordered || a != b;
  case CmpFPredicate::UNO: return unordered;
  case CmpFPredicate::AlwaysTrue: return true;
  }
  return false;
}

bool compareI(CmpIPredicate p, unsigned bits, int64_t a, int64_t b) {
  int64_t sa = asSigned(bits, a), sb = asSigned(bits, b);
  uint64_t ua = asUnsigned(bits, a), ub = asUnsigned(bits, b);
  switch (p) {
  case CmpIPredicate::eq: return ua == ub;
  case CmpIPredicate::ne: return ua != ub;
  case CmpIPredicate::slt: return sa < sb;
  case CmpIPredicate::sle: return sa <= sb;
  case CmpIPredicate::sgt: return sa > sb;
  case CmpIPredicate::sge: return sa >= sb;
  case CmpIPredicate::ult: return ua < ub;
  case CmpIPredicate::ule: return ua <= ub;
  case CmpIPredicate::ugt: return ua > ub;
  case CmpIPredicate::uge: return ua >= ub;
  }
  return false;
}

/// The bits of a float element (bitcast).
uint64_t floatBits(Type elem, double x) {
  if (elem.isF64())
    return std::bit_cast<uint64_t>(x);
  float f = static_cast<float>(x);
  if (elem.isF32())
    return std::bit_cast<uint32_t>(f);
  if (elem.isBF16())
    return float_to_bf16_bits(f);
  if (elem.isF16())
    return float_to_f16_bits(f);
  if (isa<Float8E4M3FNType>(elem))
    return float_to_f8e4m3_bits(f);
  if (isa<Float8E5M2Type>(elem))
    return float_to_f8e5m2_bits(f);
  throw Error("interpreter: arith.bitcast from unsupported type " + typeName(elem));
}

double floatFromBits(Type elem, uint64_t bits) {
  if (elem.isF64())
    return std::bit_cast<double>(bits);
  if (elem.isF32())
    return std::bit_cast<float>(static_cast<uint32_t>(bits));
  if (elem.isBF16())
    return bf16_bits_to_float(static_cast<uint16_t>(bits));
  if (elem.isF16())
    return f16_bits_to_float(static_cast<uint16_t>(bits));
  if (isa<Float8E4M3FNType>(elem))
    return f8e4m3_bits_to_float(static_cast<uint8_t>(bits));
  if (isa<Float8E5M2Type>(elem))
    return f8e5m2_bits_to_float(static_cast<uint8_t>(bits));
  throw Error("interpreter: arith.bitcast to unsupported type " + typeName(elem));
}

/// Sets element k of `t` from a scalar attribute.
void setFromAttr(HostTile &t, size_t k, Attribute attr) {
  if (auto f = dyn_cast<FloatAttr>(attr)) {
    t.f[k] = castFloat(t.elem, f.getValueAsDouble());
  } else if (auto i = dyn_cast<IntegerAttr>(attr)) {
    const APInt &v = i.getValue();
    t.i[k] = wrapInt(t.bits(), v.getBitWidth() == 1 ? static_cast<int64_t>(v.getZExtValue())
                                                     : v.getSExtValue());
  } else {
    throw Error("interpreter: unsupported constant attribute");
  }
}

void evalConstant(Interpreter &in, arith::ConstantOp op) {
  HostTile r = HostTile::of(op.getType());
  Attribute value = op.getValue();
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    if (dense.isSplat()) {
      setFromAttr(r, 0, dense.getSplatValue<Attribute>());
      for (size_t k = 1; k < r.numel(); ++k)
        r.copyElem(k, r, 0);
    } else {
      size_t k = 0;
      for (Attribute a : dense.getValues<Attribute>())
        setFromAttr(r, k++, a);
    }
  } else {
    setFromAttr(r, 0, value);
  }
  in.set(op.getResult(), std::move(r));
}

/// tile.cast: see its description in TileOps.td.
void evalCast(Interpreter &in, tile::CastOp op) {
  const HostTile &a = in.get(op.getSource());
  HostTile r = HostTile::of(op.getType());
  unsigned fromBits = a.kind == Kind::Int ? a.bits() : 0;
  for (size_t k = 0; k < r.numel(); ++k) {
    if (a.kind == Kind::Float) {
      if (r.kind == Kind::Float)
        r.f[k] = castFloat(r.elem, a.f[k]);
      else
        r.i[k] = floatToInt(r.bits(), a.f[k]);
    } else {
      int64_t v = a.i[k]; // i1 is 0/1, wider types sign-extended
      if (r.kind == Kind::Float)
        r.f[k] = castFloat(r.elem, static_cast<double>(v));
      else
        r.i[k] = r.bits() == 1 ? (v != 0) : wrapInt(r.bits(), fromBits == 1 ? (v & 1) : v);
    }
  }
  in.set(op.getResult(), std::move(r));
}

bool evalArith(Interpreter &in, Operation *op) {
  if (auto c = dyn_cast<arith::ConstantOp>(op))
    return evalConstant(in, c), true;
  // Float arithmetic.
  if (isa<arith::AddFOp>(op))
    return floatBinary(in, op, [](double a, double b) { return a + b; }), true;
  if (isa<arith::SubFOp>(op))
    return floatBinary(in, op, [](double a, double b) { return a - b; }), true;
  if (isa<arith::MulFOp>(op))
    return floatBinary(in, op, [](double a, double b) { return a * b; }), true;
  if (isa<arith::DivFOp>(op))
    return floatBinary(in, op, [](double a, double b) { return a / b; }), true;
  if (isa<arith::RemFOp>(op))
    return floatBinary(in, op, [](double a, double b) { return std::fmod(a, b); }), true;
  if (isa<arith::MaximumFOp>(op))
    return floatBinary(in, op, maximum), true;
  if (isa<arith::MinimumFOp>(op))
    return floatBinary(in, op, minimum), true;
  if (isa<arith::MaxNumFOp>(op))
    return floatBinary(in, op, [](double a, double b) {
      return std::isnan(a) ? b : std::isnan(b) ? a : maximum(a, b);
    }), true;
  if (isa<arith::MinNumFOp>(op))
    return floatBinary(in, op, [](double a, double b) {
      return std::isnan(a) ? b : std::isnan(b) ? a : minimum(a, b);
    }), true;
  if (isa<arith::NegFOp>(op))
    return toFloat(in, op, [](const HostTile &a, size_t k) { return -a.f[k]; }), true;
  // Integer arithmetic.
  if (isa<arith::AddIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return add(a, b); }), true;
  if (isa<arith::SubIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return sub(a, b); }), true;
  if (isa<arith::MulIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return mul(a, b); }), true;
  if (isa<arith::DivSIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned w) {
      return divS(asSigned(w, a), asSigned(w, b));
    }), true;
  if (isa<arith::RemSIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned w) {
      return remS(asSigned(w, a), asSigned(w, b));
    }), true;
  if (isa<arith::DivUIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned w) -> int64_t {
      uint64_t d = asUnsigned(w, b);
      return d ? static_cast<int64_t>(asUnsigned(w, a) / d) : 0;
    }), true;
  if (isa<arith::RemUIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned w) -> int64_t {
      uint64_t d = asUnsigned(w, b);
      return d ? static_cast<int64_t>(asUnsigned(w, a) % d) : 0;
    }), true;
  if (isa<arith::FloorDivSIOp, arith::CeilDivSIOp>(op)) {
    bool floor = isa<arith::FloorDivSIOp>(op);
    return intBinary(in, op, [floor](int64_t a, int64_t b, unsigned w) {
      int64_t sa = asSigned(w, a), sb = asSigned(w, b);
      int64_t q = divS(sa, sb), r = remS(sa, sb);
      if (r != 0 && ((r < 0) != (sb < 0)) == floor)
        q += floor ? -1 : 1;
      return q;
    }), true;
  }
  if (isa<arith::AndIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return a & b; }), true;
  if (isa<arith::OrIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return a | b; }), true;
  if (isa<arith::XOrIOp>(op))
    return intBinary(in, op, [](int64_t a, int64_t b, unsigned) { return a ^ b; }), true;
  if (isa<arith::ShLIOp, arith::ShRSIOp, arith::ShRUIOp>(op)) {
    int which = isa<arith::ShLIOp>(op) ? 0 : isa<arith::ShRSIOp>(op) ? 1 : 2;
    return intBinary(in, op, [which](int64_t a, int64_t b, unsigned w) -> int64_t {
      uint64_t s = asUnsigned(w, b);
      if (which == 1)
        return asSigned(w, a) >> (s >= w ? w - 1 : s);
      if (s >= w)
        return 0;
      return which == 0 ? static_cast<int64_t>(asUnsigned(w, a) << s)
                        : static_cast<int64_t>(asUnsigned(w, a) >> s);
    }), true;
  }
  if (isa<arith::MaxSIOp, arith::MinSIOp, arith::MaxUIOp, arith::MinUIOp>(op)) {
    bool isMax = isa<arith::MaxSIOp, arith::MaxUIOp>(op);
    bool isSigned = isa<arith::MaxSIOp, arith::MinSIOp>(op);
    return intBinary(in, op, [=](int64_t a, int64_t b, unsigned w) {
      bool less = isSigned ? asSigned(w, a) < asSigned(w, b) : asUnsigned(w, a) < asUnsigned(w, b);
      return (less == isMax) ? b : a;
    }), true;
  }
  // Comparisons and select.
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    CmpFPredicate p = cmp.getPredicate();
    const HostTile &b = in.get(cmp.getRhs());
    return toInt(in, op, [&](const HostTile &a, size_t k) -> int64_t {
      return compareF(p, a.f[k], b.f[b.at(k)]);
    }), true;
  }
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    CmpIPredicate p = cmp.getPredicate();
    const HostTile &b = in.get(cmp.getRhs());
    return toInt(in, op, [&](const HostTile &a, size_t k) -> int64_t {
      return compareI(p, a.bits(), a.i[k], b.i[b.at(k)]);
    }), true;
  }
  if (auto sel = dyn_cast<arith::SelectOp>(op)) {
    const HostTile &c = in.get(sel.getCondition()), &t = in.get(sel.getTrueValue()),
                   &f = in.get(sel.getFalseValue());
    HostTile r = HostTile::of(sel.getType());
    for (size_t k = 0; k < r.numel(); ++k) {
      const HostTile &src = c.truth(c.at(k)) ? t : f;
      r.copyElem(k, src, src.at(k));
    }
    in.set(sel.getResult(), std::move(r));
    return true;
  }
  // Conversions.
  if (isa<arith::ExtFOp, arith::TruncFOp>(op)) {
    Type to = getElementTypeOrSelf(op->getResult(0).getType());
    return toFloat(in, op, [=](const HostTile &a, size_t k) { return castFloat(to, a.f[k]); }),
           true;
  }
  if (isa<arith::SIToFPOp, arith::UIToFPOp>(op)) {
    bool isSigned = isa<arith::SIToFPOp>(op);
    Type to = getElementTypeOrSelf(op->getResult(0).getType());
    return toFloat(in, op, [=](const HostTile &a, size_t k) {
      double v = isSigned ? static_cast<double>(asSigned(a.bits(), a.i[k]))
                          : static_cast<double>(asUnsigned(a.bits(), a.i[k]));
      return castFloat(to, v);
    }), true;
  }
  if (isa<arith::FPToSIOp>(op)) {
    unsigned bits = intBits(getElementTypeOrSelf(op->getResult(0).getType()));
    return toInt(in, op, [=](const HostTile &a, size_t k) {
      return floatToInt(bits == 1 ? 64 : bits, a.f[k]);
    }), true;
  }
  if (isa<arith::FPToUIOp>(op)) {
    unsigned bits = intBits(getElementTypeOrSelf(op->getResult(0).getType()));
    return toInt(in, op, [=](const HostTile &a, size_t k) -> int64_t {
      double x = std::trunc(a.f[k]);
      if (std::isnan(x) || x <= 0)
        return 0;
      if (bits >= 64)
        return x >= 18446744073709551616.0 ? -1 : static_cast<int64_t>(static_cast<uint64_t>(x));
      double hi = std::ldexp(1.0, static_cast<int>(bits));
      return x >= hi ? static_cast<int64_t>(hi) - 1 : static_cast<int64_t>(x);
    }), true;
  }
  if (isa<arith::ExtSIOp, arith::IndexCastOp>(op))
    return toInt(in, op, [](const HostTile &a, size_t k) { return asSigned(a.bits(), a.i[k]); }),
           true;
  if (isa<arith::ExtUIOp, arith::TruncIOp, arith::IndexCastUIOp>(op))
    return toInt(in, op, [](const HostTile &a, size_t k) {
      return static_cast<int64_t>(asUnsigned(a.bits(), a.i[k]));
    }), true;
  if (auto bc = dyn_cast<arith::BitcastOp>(op)) {
    const HostTile &a = in.get(bc.getIn());
    HostTile r = HostTile::of(bc.getType());
    for (size_t k = 0; k < r.numel(); ++k) {
      uint64_t bits = a.kind == Kind::Float ? floatBits(a.elem, a.f[k]) : asUnsigned(a.bits(), a.i[k]);
      if (r.kind == Kind::Float)
        r.f[k] = floatFromBits(r.elem, bits);
      else
        r.i[k] = wrapInt(r.bits(), static_cast<int64_t>(bits));
    }
    in.set(bc.getResult(), std::move(r));
    return true;
  }
  return false;
}

} // namespace

bool supportsElementwise(Operation *op) {
  return isa<tile::ProgramIdOp, tile::NumProgramsOp, tile::ArangeOp, tile::SplatOp, tile::CastOp,
             arith::ConstantOp, arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
             arith::RemFOp, arith::MaximumFOp, arith::MinimumFOp, arith::MaxNumFOp,
             arith::MinNumFOp, arith::NegFOp, arith::AddIOp, arith::SubIOp, arith::MulIOp,
             arith::DivSIOp, arith::RemSIOp, arith::DivUIOp, arith::RemUIOp, arith::FloorDivSIOp,
             arith::CeilDivSIOp, arith::AndIOp, arith::OrIOp, arith::XOrIOp, arith::ShLIOp,
             arith::ShRSIOp, arith::ShRUIOp, arith::MaxSIOp, arith::MinSIOp, arith::MaxUIOp,
             arith::MinUIOp, arith::CmpFOp, arith::CmpIOp, arith::SelectOp, arith::ExtFOp,
             arith::TruncFOp, arith::SIToFPOp, arith::UIToFPOp, arith::FPToSIOp, arith::FPToUIOp,
             arith::ExtSIOp, arith::IndexCastOp, arith::ExtUIOp, arith::TruncIOp,
             arith::IndexCastUIOp, arith::BitcastOp>(op);
}

bool evalElementwise(Interpreter &in, Operation *op) {
  if (auto pid = dyn_cast<tile::ProgramIdOp>(op)) {
    HostTile r = HostTile::of(pid.getType());
    r.i[0] = in.pid[pid.getAxis()];
    in.set(pid.getResult(), std::move(r));
    return true;
  }
  if (auto num = dyn_cast<tile::NumProgramsOp>(op)) {
    HostTile r = HostTile::of(num.getType());
    r.i[0] = in.grid[num.getAxis()];
    in.set(num.getResult(), std::move(r));
    return true;
  }
  if (auto arange = dyn_cast<tile::ArangeOp>(op)) {
    HostTile r = HostTile::of(arange.getType());
    for (size_t k = 0; k < r.numel(); ++k)
      r.i[k] = arange.getStart() + static_cast<int64_t>(k);
    in.set(arange.getResult(), std::move(r));
    return true;
  }
  if (auto splat = dyn_cast<tile::SplatOp>(op)) {
    const HostTile &s = in.get(splat.getValue());
    HostTile r = HostTile::of(splat.getType());
    for (size_t k = 0; k < r.numel(); ++k)
      r.copyElem(k, s, 0);
    in.set(splat.getResult(), std::move(r));
    return true;
  }
  if (auto c = dyn_cast<tile::CastOp>(op))
    return evalCast(in, c), true;
  if (op->getDialect() && isa<arith::ArithDialect>(op->getDialect()))
    return evalArith(in, op);
  return false;
}

} // namespace tokamax::interp
