//===- LayoutUtils.h - Layout attributes <-> layout algebra -------*- C++ -*-===//
#pragma once

#include "compiler/Dialect/Tile/IR/TileDialect.h"
#include <tokamax/compiler/Layout.h>

namespace tokamax::tile {

/// Attribute name on kernels: warps per program.
inline constexpr llvm::StringLiteral kNumWarpsAttr = "tile.num_warps";
/// Attribute name on kernels: bytes of static shared memory scratch.
inline constexpr llvm::StringLiteral kSharedBytesAttr = "tile.shared_bytes";
/// Attribute name on kernels: marks a func.func as a tile kernel.
inline constexpr llvm::StringLiteral kKernelAttr = "tile.kernel";
/// Attribute name on kernels: the launch grid.
inline constexpr llvm::StringLiteral kGridAttr = "tile.grid";

compiler::BlockedLayout toBlockedLayout(BlockedLayoutAttr attr);
BlockedLayoutAttr toAttr(mlir::MLIRContext *ctx, const compiler::BlockedLayout &layout);

/// Bytes of one element as stored in registers and memory (pointers: 8, i1: 1).
unsigned elementBytes(mlir::Type type);

/// The default (anchor) layout of a tile type for a kernel of `numWarps` warps.
BlockedLayoutAttr getDefaultLayout(mlir::RankedTensorType type, unsigned numWarps);

/// Distribution of a tensor whose type carries a blocked or slice layout.
compiler::Distribution getDistribution(mlir::RankedTensorType type);

/// Warps per program of the kernel enclosing `op`.
unsigned getNumWarps(mlir::Operation *op);

/// Shared-memory scratch bytes `op` needs while it runs (0 when it needs none).
int64_t getScratchBytes(mlir::Operation *op);

} // namespace tokamax::tile
