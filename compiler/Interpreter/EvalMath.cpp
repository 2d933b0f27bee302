//===- EvalMath.cpp - math dialect operations and tile.exp2 ---------------------===//
//
// Computed in double (exact libm results for f64) and rounded to the result's element
// type: the GPU's f32 approximations differ from these in the last bits.
//
//===----------------------------------------------------------------------===//
#include "compiler/Interpreter/HostTile.h"

#include <cmath>

namespace tokamax::interp {

using namespace mlir;

namespace {

template <typename F>
void floatMap(Interpreter &in, Operation *op, F fn) {
  std::vector<const HostTile *> operands;
  for (Value v : op->getOperands())
    operands.push_back(&in.get(v));
  HostTile r = HostTile::of(op->getResult(0).getType());
  for (size_t k = 0; k < r.numel(); ++k) {
    double x[3] = {0, 0, 0};
    for (size_t j = 0; j < operands.size() && j < 3; ++j)
      x[j] = operands[j]->f[operands[j]->at(k)];
    r.f[k] = roundFloat(r.elem, fn(x[0], x[1], x[2]));
  }
  in.set(op->getResult(0), std::move(r));
}

using Unary = double (*)(double);

/// The double function of a one-operand math operation, or null.
Unary unaryFn(Operation *op) {
  if (isa<math::ExpOp>(op)) return [](double x) { return std::exp(x); };
  if (isa<math::Exp2Op>(op)) return [](double x) { return std::exp2(x); };
  if (isa<math::ExpM1Op>(op)) return [](double x) { return std::expm1(x); };
  if (isa<math::LogOp>(op)) return [](double x) { return std::log(x); };
  if (isa<math::Log2Op>(op)) return [](double x) { return std::log2(x); };
  if (isa<math::Log10Op>(op)) return [](double x) { return std::log10(x); };
  if (isa<math::Log1pOp>(op)) return [](double x) { return std::log1p(x); };
  if (isa<math::SqrtOp>(op)) return [](double x) { return std::sqrt(x); };
  if (isa<math::RsqrtOp>(op)) return [](double x) { return 1.0 / std::sqrt(x); };
  if (isa<math::CbrtOp>(op)) return [](double x) { return std::cbrt(x); };
  if (isa<math::TanhOp>(op)) return [](double x) { return std::tanh(x); };
  if (isa<math::SinhOp>(op)) return [](double x) { return std::sinh(x); };
  if (isa<math::CoshOp>(op)) return [](double x) { return std::cosh(x); };
  if (isa<math::SinOp>(op)) return [](double x) { return std::sin(x); };
  if (isa<math::CosOp>(op)) return [](double x) { return std::cos(x); };
  if (isa<math::TanOp>(op)) return [](double x) { return std::tan(x); };
  if (isa<math::AtanOp>(op)) return [](double x) { return std::atan(x); };
  if (isa<math::AsinOp>(op)) return [](double x) { return std::asin(x); };
  if (isa<math::AcosOp>(op)) return [](double x) { return std::acos(x); };
  if (isa<math::ErfOp>(op)) return [](double x) { return std::erf(x); };
  if (isa<math::ErfcOp>(op)) return [](double x) { return std::erfc(x); };
  if (isa<math::AbsFOp>(op)) return [](double x) { return std::fabs(x); };
  if (isa<math::FloorOp>(op)) return [](double x) { return std::floor(x); };
  if (isa<math::CeilOp>(op)) return [](double x) { return std::ceil(x); };
  if (isa<math::TruncOp>(op)) return [](double x) { return std::trunc(x); };
  if (isa<math::RoundOp>(op)) return [](double x) { return std::round(x); };
  if (isa<math::RoundEvenOp>(op)) return [](double x) { return std::nearbyint(x); };
  return nullptr;
}

} // namespace

bool supportsMath(Operation *op) {
  return unaryFn(op) || isa<tile::Exp2Op>(op) ||
         isa<math::Atan2Op, math::PowFOp, math::CopySignOp, math::FmaOp, math::AbsIOp>(op);
}

bool evalMath(Interpreter &in, Operation *op) {
  // tile.exp2: exact, whichever registers the GPU computes by polynomial.
  if (isa<tile::Exp2Op>(op))
    return floatMap(in, op, [](double x, double, double) { return std::exp2(x); }), true;
  if (!op->getDialect() || !isa<math::MathDialect>(op->getDialect()))
    return false;
  if (Unary fn = unaryFn(op))
    return floatMap(in, op, [fn](double x, double, double) { return fn(x); }), true;
  if (isa<math::Atan2Op>(op))
    return floatMap(in, op, [](double y, double x, double) { return std::atan2(y, x); }), true;
  if (isa<math::PowFOp>(op))
    return floatMap(in, op, [](double x, double y, double) { return std::pow(x, y); }), true;
  if (isa<math::CopySignOp>(op))
    return floatMap(in, op, [](double x, double y, double) { return std::copysign(x, y); }), true;
  if (isa<math::FmaOp>(op))
    return floatMap(in, op, [](double a, double b, double c) { return std::fma(a, b, c); }), true;
  if (auto absi = dyn_cast<math::AbsIOp>(op)) {
    const HostTile &a = in.get(absi.getOperand());
    HostTile r = HostTile::of(absi.getType());
    unsigned bits = r.bits();
    for (size_t k = 0; k < r.numel(); ++k) {
      int64_t v = asSigned(bits, a.i[k]);
      r.i[k] = wrapInt(bits, v < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v)) : v);
    }
    in.set(absi.getResult(), std::move(r));
    return true;
  }
  return false;
}

} // namespace tokamax::interp
