//===- EvalShape.cpp - Reductions, shape manipulation, dot, layout/barrier ops -===//
#include "compiler/Interpreter/HostTile.h"

#include "compiler/Dialect/Tile/IR/LayoutUtils.h"

#include <cmath>
#include <limits>
#include <vector>

namespace tokamax::interp {

using namespace mlir;

namespace {

/// A result tile whose element k copies element srcIndex(coords of k) of `src`.
template <typename F>
HostTile rearrange(const HostTile &src, Type resultType, F srcIndex) {
  HostTile r = HostTile::of(resultType);
  std::vector<int64_t> idx(r.shape.size(), 0);
  for (size_t k = 0; k < r.numel(); ++k) {
    r.copyElem(k, src, srcIndex(idx));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < r.shape[d])
        break;
      idx[d] = 0;
    }
  }
  return r;
}

size_t linear(const std::vector<int64_t> &coords, const std::vector<int64_t> &strides) {
  int64_t k = 0;
  for (size_t d = 0; d < coords.size(); ++d)
    k += coords[d] * strides[d];
  return static_cast<size_t>(k);
}

void evalReduce(Interpreter &in, tile::ReduceOp op) {
  const HostTile &src = in.get(op.getSource());
  HostTile r = HostTile::of(op.getType());
  size_t axis = op.getAxis();
  int64_t outer = 1, inner = 1, n = src.shape[axis];
  for (size_t d = 0; d < axis; ++d)
    outer *= src.shape[d];
  for (size_t d = axis + 1; d < src.shape.size(); ++d)
    inner *= src.shape[d];
  tile::ReduceKind kind = op.getKind();
  bool isFloat = src.kind == Kind::Float;
  unsigned bits = isFloat ? 0 : src.bits();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      size_t out = static_cast<size_t>(o * inner + j);
      auto at = [&](int64_t a) { return static_cast<size_t>((o * n + a) * inner + j); };
      if (kind == tile::ReduceKind::Argmax) {
        int64_t best = 0;
        for (int64_t a = 1; a < n; ++a) {
          bool greater = isFloat ? src.f[at(a)] > src.f[at(best)]
                                 : asSigned(bits, src.i[at(a)]) > asSigned(bits, src.i[at(best)]);
          if (greater)
            best = a;
        }
        r.i[out] = best;
        continue;
      }
      if (isFloat) {
        double acc = src.f[at(0)];
        for (int64_t a = 1; a < n; ++a) {
          double x = src.f[at(a)];
          if (kind == tile::ReduceKind::Sum)
            acc += x;
          else if (std::isnan(x) || std::isnan(acc))
            acc = std::numeric_limits<double>::quiet_NaN();
          else if (kind == tile::ReduceKind::Max)
            acc = x > acc || (x == acc && !std::signbit(x)) ? x : acc;
          else
            acc = x < acc || (x == acc && std::signbit(x)) ? x : acc;
        }
        r.f[out] = castFloat(r.elem, acc);
      } else {
        int64_t acc = src.i[at(0)];
        for (int64_t a = 1; a < n; ++a) {
          int64_t x = src.i[at(a)];
          if (kind == tile::ReduceKind::Sum)
            acc = wrapInt(bits, static_cast<int64_t>(uint64_t(acc) + uint64_t(x)));
          else if (kind == tile::ReduceKind::Max)
            acc = asSigned(bits, x) > asSigned(bits, acc) ? x : acc;
          else
            acc = asSigned(bits, x) < asSigned(bits, acc) ? x : acc;
        }
        r.i[out] = acc;
      }
    }
  in.set(op.getResult(), std::move(r));
}

void evalDot(Interpreter &in, tile::DotOp op) {
  const HostTile &a = in.get(op.getA()), &b = in.get(op.getB()), &acc = in.get(op.getAcc());
  const bool fresh = op.getFresh() && in.get(op.getFresh()).truth(0);  // start from zero
  HostTile r = HostTile::of(op.getType());
  int64_t m = a.shape[0], kk = a.shape[1], n = b.shape[1];
  // a_k_interleaved: K index k reads a's column interleavedColumn(k).
  std::vector<int64_t> aColumn(static_cast<size_t>(kk));
  for (int64_t k = 0; k < kk; ++k)
    aColumn[static_cast<size_t>(k)] = op.getAKInterleaved() ? tile::interleavedColumn(k) : k;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < kk; ++k)
        s += a.asDouble(static_cast<size_t>(i * kk + aColumn[static_cast<size_t>(k)])) *
             b.asDouble(static_cast<size_t>(k * n + j));
      size_t out = static_cast<size_t>(i * n + j);
      r.f[out] = castFloat(r.elem, (fresh ? 0.0 : acc.f[out]) + s);
    }
  in.set(op.getResult(), std::move(r));
}

} // namespace

bool evalShape(Interpreter &in, Operation *op) {
  if (auto reduce = dyn_cast<tile::ReduceOp>(op))
    return evalReduce(in, reduce), true;
  if (auto dot = dyn_cast<tile::DotOp>(op))
    return evalDot(in, dot), true;
  // Same elements in the same row-major order, new shape.
  if (isa<tile::ExpandDimsOp, tile::ReshapeOp, tile::ConvertLayoutOp, tile::DotWaitOp>(op)) {
    HostTile r = in.get(op->getOperand(0));
    r.elem = getElementTypeOrSelf(op->getResult(0).getType());
    r.shape = shapeOf(op->getResult(0).getType());
    in.set(op->getResult(0), std::move(r));
    return true;
  }
  if (auto bc = dyn_cast<tile::BroadcastOp>(op)) {
    const HostTile &src = in.get(bc.getSource());
    std::vector<int64_t> strides = rowMajorStrides(src.shape);
    for (size_t d = 0; d < strides.size(); ++d)
      if (src.shape[d] == 1)
        strides[d] = 0;
    HostTile r = rearrange(src, bc.getType(), [&](const std::vector<int64_t> &idx) {
      return linear(idx, strides);
    });
    in.set(bc.getResult(), std::move(r));
    return true;
  }
  if (auto trans = dyn_cast<tile::TransOp>(op)) {
    const HostTile &src = in.get(trans.getSource());
    std::vector<int64_t> srcStrides = rowMajorStrides(src.shape);
    ArrayRef<int32_t> order = trans.getOrder();
    // Result dimension i is source dimension order[i].
    std::vector<int64_t> strides(order.size());
    for (size_t i = 0; i < order.size(); ++i)
      strides[i] = srcStrides[order[i]];
    HostTile r = rearrange(src, trans.getType(), [&](const std::vector<int64_t> &idx) {
      return linear(idx, strides);
    });
    in.set(trans.getResult(), std::move(r));
    return true;
  }
  // Programs run one at a time and copies complete when issued: nothing to wait for.
  if (isa<tile::BarrierOp, tile::AsyncWaitOp, tile::MbarrierWaitOp, tile::MbarrierArriveOp,
          tile::TurnWaitOp, tile::TurnPassOp>(op))
    return true;
  return false;
}

} // namespace tokamax::interp
