//===- TileVerifiers.h - Checks shared by tile op verifiers -------*- C++ -*-===//
//
// Internal to compiler/Dialect/Tile/IR: the checks that TileOps.cpp defines and the
// verifiers of TileMemoryOps.cpp use too.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Dialect/Tile/IR/TileDialect.h"

namespace tokamax::tile {

/// The pointee type of a !tile.ptr or of a tile of them.
mlir::Type pointee(mlir::Type ptrLike);

/// Whether `v` is an argument of the kernel function itself: the runtime encodes TMA
/// tensor maps for those only.
bool isKernelParameter(mlir::Value v);

/// A block `tile` of a tensor at `base` (`dims`, `strides`) named by `numOffsets`
/// offsets: one offset and one stride per dim, dims non-negative, the tile of the
/// tensor's rank and element type, its dims powers of two.
mlir::LogicalResult verifyBlockAccess(mlir::Operation *op, mlir::Type base, size_t numOffsets,
                                      llvm::ArrayRef<int64_t> dims, llvm::ArrayRef<int64_t> strides,
                                      mlir::RankedTensorType tile);

} // namespace tokamax::tile
