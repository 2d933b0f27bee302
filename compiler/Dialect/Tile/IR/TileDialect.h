//===- TileDialect.h - The tile dialect -------------------------*- C++ -*-===//
#pragma once

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/Dialect/Tile/IR/TileDialect.h.inc"
#include "compiler/Dialect/Tile/IR/TileEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "compiler/Dialect/Tile/IR/TileTypes.h.inc"
#define GET_ATTRDEF_CLASSES
#include "compiler/Dialect/Tile/IR/TileAttrs.h.inc"
#define GET_OP_CLASSES
#include "compiler/Dialect/Tile/IR/TileOps.h.inc"

namespace tokamax::tile {

/// The layout encoding of a tensor type, or null.
mlir::Attribute getLayout(mlir::Type type);

/// `type` with its layout encoding replaced.
mlir::RankedTensorType withLayout(mlir::RankedTensorType type, mlir::Attribute layout);

} // namespace tokamax::tile
