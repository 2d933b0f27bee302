//===- MathF64.cpp - exp, exp2, log, log2, tanh and erf in f64 on the GPU ---===//
//
// NVPTX has no f64 transcendental instructions and the pipeline links no libdevice, so
// f64 math is expanded here into IEEE arithmetic (all that f64 tiles need: attention's
// softmax and soft cap in f64). Relative errors stay near 1e-16 (a few ulp):
//   exp:  x = k ln2 + r (Cody-Waite, |r| <= ln2 / 2), e^r by its Taylor series to r^13,
//         times 2^k as two exact powers of two (so the result under- and overflows
//         gracefully);
//   exp2: x = k + f, e^(f ln2) the same way;
//   log:  x = 2^e m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled first),
//         log m = 2 atanh((m - 1) / (m + 1)) by its series to s^23;
//   tanh: (e^(2|x|) - 1) / (e^(2|x|) + 1) with the sign, its Taylor series below 1e-3;
//   erf:  its Taylor series to x^87 below |x| = 2, else 1 - erfc from erfc's continued
//         fraction (60 levels; erfc < 2e-17 past 6).
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <vector>

using namespace mlir;

namespace tokamax::tile {

namespace {

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 with its low bits zero
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kLog2e = 1.4426950408889634074;

struct F64 {
  OpBuilder &b;
  Location loc;

  Type f64() { return b.getF64Type(); }
  Type i64() { return b.getI64Type(); }
  Value c(double v) { return b.create<arith::ConstantOp>(loc, b.getF64FloatAttr(v)); }
  Value ci(int64_t v) { return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(v)); }
  Value add(Value x, Value y) { return b.create<arith::AddFOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<arith::SubFOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<arith::MulFOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<arith::DivFOp>(loc, x, y); }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) { return b.create<arith::CmpFOp>(loc, p, x, y); }
  Value select(Value cond, Value x, Value y) { return b.create<arith::SelectOp>(loc, cond, x, y); }
  /// x clamped to [lo, hi] by compares (NaN passes through: callers keep it).
  Value clamp(Value x, double lo, double hi) {
    Value low = select(cmp(arith::CmpFPredicate::OLT, x, c(lo)), c(lo), x);
    return select(cmp(arith::CmpFPredicate::OGT, low, c(hi)), c(hi), low);
  }

  /// 2^k for an integral f64 k in [-1100, 1100]: two exact normal powers of two.
  Value pow2(Value k) {
    Value ki = b.create<arith::FPToSIOp>(loc, i64(), k);
    Value k1 = b.create<arith::ShRSIOp>(loc, ki, ci(1));
    Value k2 = b.create<arith::SubIOp>(loc, ki, k1);
    auto power = [&](Value e) {
      Value bits = b.create<arith::ShLIOp>(loc, b.create<arith::AddIOp>(loc, e, ci(1023)), ci(52));
      return b.create<arith::BitcastOp>(loc, f64(), bits).getResult();
    };
    return mul(power(k1), power(k2));
  }

  /// e^r for |r| <= ln2 / 2 (Taylor series to r^13, Horner).
  Value expSmall(Value r) {
    double coeff = 1;
    std::vector<double> coeffs{1};
    for (int i = 1; i <= 13; ++i)
      coeffs.push_back(coeff /= i);
    Value p = c(coeffs.back());
    for (int i = 12; i >= 0; --i)
      p = add(c(coeffs[i]), mul(r, p));
    return p;
  }

  Value keepNaN(Value x, Value result) { return select(cmp(arith::CmpFPredicate::UNO, x, x), x, result); }

  Value exp(Value x) {
    Value xc = clamp(x, -800.0, 800.0);
    Value k = b.create<math::RoundEvenOp>(loc, mul(xc, c(kLog2e)));
    Value r = sub(sub(xc, mul(k, c(kLn2Hi))), mul(k, c(kLn2Lo)));
    return keepNaN(x, mul(expSmall(r), pow2(k)));
  }

  Value exp2(Value x) {
    Value xc = clamp(x, -1100.0, 1100.0);
    Value k = b.create<math::RoundEvenOp>(loc, xc);
    Value r = mul(sub(xc, k), c(kLn2Hi + kLn2Lo));
    return keepNaN(x, mul(expSmall(r), pow2(k)));
  }

  Value log(Value x) {
    // Subnormals: scale by 2^54 first.
    Value tiny = cmp(arith::CmpFPredicate::OLT, x, c(0x1p-1022));
    Value xs = select(tiny, mul(x, c(0x1p54)), x);
    Value bits = b.create<arith::BitcastOp>(loc, i64(), xs);
    Value e = b.create<arith::SubIOp>(loc, b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, bits, ci(52)),
                                                                  ci(0x7ff)),
                                      ci(1023));
    Value mBits = b.create<arith::OrIOp>(loc, b.create<arith::AndIOp>(loc, bits, ci((int64_t(1) << 52) - 1)),
                                         ci(int64_t(1023) << 52));
    Value m = b.create<arith::BitcastOp>(loc, f64(), mBits);
    Value big = cmp(arith::CmpFPredicate::OGT, m, c(1.4142135623730951));
    m = select(big, mul(m, c(0.5)), m);
    Value ef = b.create<arith::SIToFPOp>(loc, f64(), e);
    ef = add(ef, select(big, c(1.0), c(0.0)));
    ef = sub(ef, select(tiny, c(54.0), c(0.0)));
    Value s = div(sub(m, c(1.0)), add(m, c(1.0)));
    Value z = mul(s, s);
    Value p = c(1.0 / 23);
    for (int n = 21; n >= 1; n -= 2)
      p = add(c(1.0 / n), mul(z, p));
    Value logm = mul(mul(c(2.0), s), p);
    Value result = add(mul(ef, c(kLn2Hi)), add(logm, mul(ef, c(kLn2Lo))));
    // log 0 = -inf, log of a negative = NaN, log inf = inf, NaN stays.
    result = select(cmp(arith::CmpFPredicate::OEQ, x, c(0.0)), c(-INFINITY), result);
    result = select(cmp(arith::CmpFPredicate::OLT, x, c(0.0)), c(NAN), result);
    result = select(cmp(arith::CmpFPredicate::OEQ, x, c(INFINITY)), x, result);
    return keepNaN(x, result);
  }

  Value erf(Value x) {
    Value ax = b.create<math::AbsFOp>(loc, x);
    Value x2 = mul(ax, ax);
    // sum (-1)^n x^(2n+1) / (n! (2n+1)), Horner in x^2.
    constexpr int kTerms = 44;
    std::vector<double> coeffs(kTerms);
    double factorial = 1;
    for (int n = 0; n < kTerms; ++n) {
      if (n)
        factorial *= n;
      coeffs[n] = (n % 2 ? -1.0 : 1.0) / (factorial * (2 * n + 1));
    }
    Value p = c(coeffs.back());
    for (int n = kTerms - 2; n >= 0; --n)
      p = add(c(coeffs[n]), mul(x2, p));
    Value series = mul(c(1.1283791670955126), mul(ax, p));  // 2 / sqrt(pi)
    Value xc = clamp(ax, 2.0, 6.0);
    Value f = xc;
    for (int k = 60; k >= 1; --k)
      f = add(xc, div(c(k / 2.0), f));
    Value erfc = div(exp(mul(c(-1.0), mul(xc, xc))), mul(c(1.7724538509055160), f));  // sqrt(pi)
    Value result = select(cmp(arith::CmpFPredicate::OLT, ax, c(2.0)), series, sub(c(1.0), erfc));
    return keepNaN(x, b.create<math::CopySignOp>(loc, result, x));
  }

  Value tanh(Value x) {
    Value ax = b.create<math::AbsFOp>(loc, x);
    Value e = exp(mul(c(2.0), clamp(ax, 0.0, 40.0)));
    Value big = div(sub(e, c(1.0)), add(e, c(1.0)));
    Value x2 = mul(ax, ax);
    // |x| < 1e-3: x - x^3/3 + 2 x^5 / 15 (no cancellation).
    Value small = mul(ax, add(c(1.0), mul(x2, add(c(-1.0 / 3), mul(x2, c(2.0 / 15))))));
    Value result = select(cmp(arith::CmpFPredicate::OLT, ax, c(1e-3)), small, big);
    return keepNaN(x, b.create<math::CopySignOp>(loc, result, x));
  }
};

} // namespace

FailureOr<Value> lowerMathF64(OpBuilder &b, Operation *op, Value x) {
  F64 m{b, op->getLoc()};
  if (isa<math::ExpOp>(op))
    return m.exp(x);
  if (isa<math::Exp2Op>(op))
    return m.exp2(x);
  if (isa<math::LogOp>(op))
    return m.log(x);
  if (isa<math::Log2Op>(op))
    return m.mul(m.log(x), m.c(kLog2e));
  if (isa<math::TanhOp>(op))
    return m.tanh(x);
  if (isa<math::ErfOp>(op))
    return m.erf(x);
  return failure();
}

} // namespace tokamax::tile
