//===- TileDialect.cpp - Tile dialect registration and types ----------------===//
#include "compiler/Dialect/Tile/IR/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tokamax::tile;

#include "compiler/Dialect/Tile/IR/TileDialect.cpp.inc"
#include "compiler/Dialect/Tile/IR/TileEnums.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "compiler/Dialect/Tile/IR/TileTypes.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "compiler/Dialect/Tile/IR/TileAttrs.cpp.inc"

void TileDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "compiler/Dialect/Tile/IR/TileTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiler/Dialect/Tile/IR/TileAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "compiler/Dialect/Tile/IR/TileOps.cpp.inc"
      >();
}

namespace tokamax::tile {

Attribute getLayout(Type type) {
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    return tensor.getEncoding();
  return {};
}

RankedTensorType withLayout(RankedTensorType type, Attribute layout) {
  return RankedTensorType::get(type.getShape(), type.getElementType(), layout);
}

} // namespace tokamax::tile

static bool isPowerOfTwo(unsigned value) { return value && !(value & (value - 1)); }

LogicalResult BlockedLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                        ArrayRef<unsigned> sizePerThread,
                                        ArrayRef<unsigned> threadsPerWarp,
                                        ArrayRef<unsigned> warpsPerCTA,
                                        ArrayRef<unsigned> order) {
  size_t rank = sizePerThread.size();
  if (threadsPerWarp.size() != rank || warpsPerCTA.size() != rank || order.size() != rank)
    return emitError() << "blocked layout parameters must all have rank " << rank;
  unsigned lanes = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (!isPowerOfTwo(sizePerThread[d]) || !isPowerOfTwo(threadsPerWarp[d]) ||
        !isPowerOfTwo(warpsPerCTA[d]))
      return emitError() << "blocked layout sizes must be powers of two";
    lanes *= threadsPerWarp[d];
  }
  if (lanes != 32)
    return emitError() << "threadsPerWarp must multiply to 32, got " << lanes;
  SmallVector<bool> seen(rank, false);
  for (unsigned d : order) {
    if (d >= rank || seen[d])
      return emitError() << "order must be a permutation of 0.." << rank - 1;
    seen[d] = true;
  }
  return success();
}

LogicalResult SliceLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      unsigned dim, Attribute parent) {
  if (auto blocked = dyn_cast<BlockedLayoutAttr>(parent)) {
    if (dim >= blocked.getSizePerThread().size())
      return emitError() << "slice dim " << dim << " out of range of the parent layout";
    return success();
  }
  if (auto slice = dyn_cast<SliceLayoutAttr>(parent))
    return success();
  if (isa<MmaLayoutAttr>(parent)) {
    if (dim >= 2)
      return emitError() << "slice dim " << dim << " out of range of the parent layout";
    return success();
  }
  return emitError() << "slice parent must be a blocked or slice layout (or an mma layout)";
}

LogicalResult MmaLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    ArrayRef<unsigned> warpsPerCTA) {
  if (warpsPerCTA.size() != 2)
    return emitError() << "mma layout needs warpsPerCTA = [WM, WN], got " << warpsPerCTA.size()
                       << " entries";
  for (unsigned w : warpsPerCTA)
    if (!isPowerOfTwo(w))
      return emitError() << "mma layout warps must be powers of two";
  return success();
}

LogicalResult DotOperandLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                           unsigned opIdx, Attribute parent, unsigned kWidth) {
  if (opIdx > 1)
    return emitError() << "dot operand index must be 0 (A) or 1 (B), got " << opIdx;
  if (!isa<MmaLayoutAttr>(parent))
    return emitError() << "dot operand parent must be an mma layout";
  if (kWidth != 1 && kWidth != 2 && kWidth != 4)
    return emitError() << "dot operand kWidth must be 1 (tf32), 2 (16-bit) or 4 (fp8), got " << kWidth;
  return success();
}
