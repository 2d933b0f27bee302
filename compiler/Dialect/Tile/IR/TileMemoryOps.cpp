//===- TileMemoryOps.cpp - Verifiers of the TMA store and semaphore ops -----===//
#include "compiler/Dialect/Tile/IR/TileDialect.h"
#include "compiler/Dialect/Tile/IR/TileVerifiers.h"

using namespace mlir;
using namespace tokamax::tile;

// A store writes the tensor; an add also reads it (what it adds to).
void TmaStoreOp::getEffects(SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  if (isAdd())
    effects.emplace_back(MemoryEffects::Read::get());
  effects.emplace_back(MemoryEffects::Write::get());
}

namespace {
/// tile.semaphore_wait / tile.semaphore_signal: one i32 counter of a kernel tensor.
LogicalResult verifySemaphore(Operation *op, Type base, size_t numOffsets, ArrayRef<int64_t> dims,
                              ArrayRef<int64_t> strides) {
  if (!pointee(base).isSignlessInteger(32))
    return op->emitOpError("counts in an i32 tensor, got ") << pointee(base);
  if (dims.size() != strides.size())
    return op->emitOpError("has ") << dims.size() << " dims but " << strides.size() << " strides";
  if (numOffsets != dims.size())
    return op->emitOpError("needs one index per tensor dimension (") << dims.size() << "), got " << numOffsets;
  for (int64_t d : dims)
    if (d < 0)
      return op->emitOpError("tensor dims must be non-negative");
  return success();
}
} // namespace

LogicalResult SemaphoreWaitOp::verify() {
  return verifySemaphore(*this, getBase().getType(), getOffsets().size(), getDims(), getStrides());
}

LogicalResult SemaphoreSignalOp::verify() {
  return verifySemaphore(*this, getBase().getType(), getOffsets().size(), getDims(), getStrides());
}

LogicalResult TmaStoreOp::verify() {
  if (!isKernelParameter(getBase()))
    return emitOpError("base must be a kernel tensor parameter (TMA needs its tensor map)");
  auto type = getValue().getType();
  if (getDims().size() != 2)
    return emitOpError("stores 2-D blocks of 2-D tensors, got ") << getDims().size() << " dims";
  SmallVector<int64_t> strides{getDims()[1], 1};  // row-major
  if (failed(verifyBlockAccess(*this, getBase().getType(), getOffsets().size(), getDims(), strides, type)))
    return failure();
  Type elem = type.getElementType();
  if (!elem.isBF16() && !elem.isF16() && !elem.isF32())
    return emitOpError("stores bf16, f16 or f32, got ") << elem;
  if (isAdd() && !elem.isF32())
    return emitOpError("add accumulates f32 only (a 16-bit sum would round at every partial sum: add f32 and "
                       "convert once), got ")
           << elem;
  int64_t bytes = elem.getIntOrFloatBitWidth() / 8;
  if (getDims()[1] * bytes % 16 != 0)
    return emitOpError("rows of the tensor must be multiples of 16 bytes, got ") << getDims()[1] << " elements";
  if (type.getDimSize(0) > 256 || type.getDimSize(1) % getStripColumns() != 0)
    return emitOpError("the block must have at most 256 rows and whole 128-byte strips (")
           << getStripColumns() << " columns), got " << type;
  return success();
}
