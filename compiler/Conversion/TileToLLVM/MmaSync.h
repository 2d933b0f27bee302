//===- MmaSync.h - Shared pieces of the mma.sync lowerings ---------*- C++ -*-===//
//
// tile.dot (operands staged per dot, or read from shared tiles) and tile.cp_async_dot
// (operands streamed through a ring) share the swizzled shared-memory tile, the ldmatrix reads of dot-operand
// registers from it, and the mma.sync issue over a whole K range.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace tokamax::tile {

/// Compute capability of "sm_XY[a]" as XY (0 when it does not parse).
int smVersion(const std::string &arch);

/// Small i32 arithmetic on values and constants.
struct I32 {
  TileLowering &t;
  mlir::Location loc;
  mlir::OpBuilder &b() { return t.builder(); }
  mlir::Value c(int64_t v) { return t.i32(v); }
  mlir::Value add(mlir::Value x, mlir::Value y) { return b().create<mlir::arith::AddIOp>(loc, x, y); }
  mlir::Value mul(mlir::Value x, int64_t k) { return b().create<mlir::arith::MulIOp>(loc, x, c(k)); }
  mlir::Value div(mlir::Value x, int64_t k) { return b().create<mlir::arith::DivUIOp>(loc, x, c(k)); }
  mlir::Value rem(mlir::Value x, int64_t k) { return b().create<mlir::arith::RemUIOp>(loc, x, c(k)); }
  mlir::Value xor_(mlir::Value x, mlir::Value y) { return b().create<mlir::arith::XOrIOp>(loc, x, y); }
};

/// A 2-D tile in shared memory: `rows` x `cols` elements, cols contiguous, 16-byte chunks
/// of each row XOR-swizzled with the row's phase. Eight consecutive rows of one chunk
/// column (an ldmatrix) land in eight distinct 16-byte bank groups.
struct Staging {
  int64_t rows, cols, chunk, perPhase, maxPhase;

  Staging(int64_t rows, int64_t cols, unsigned bytes) : rows(rows), cols(cols) {
    chunk = 16 / bytes;
    int64_t chunks = cols / chunk;
    perPhase = std::max<int64_t>(1, 8 / chunks);
    maxPhase = std::min<int64_t>(chunks, 8);
  }

  /// Element index of (row, col) (both already inside the tile).
  mlir::Value index(I32 &m, mlir::Value row, mlir::Value col) const {
    mlir::Value phase = m.rem(m.div(row, perPhase), maxPhase);
    mlir::Value chunkIdx = m.xor_(m.div(col, chunk), phase);
    return m.add(m.add(m.mul(row, cols), m.mul(chunkIdx, chunk)), m.rem(col, chunk));
  }
};

/// A range of mma K steps (16 elements for 16-bit operands, 8 for tf32): a main loop
/// reads and multiplies one step at a time to keep few operand registers live.
struct KSteps {
  unsigned begin = 0, end = ~0u;
  bool contains(int64_t step) const { return step >= begin && step < end; }
};

/// The registers of a dot-operand tile of `dstType` (#tile.dot_op) read from `tile`, a
/// swizzled copy in shared memory at `base` (an llvm pointer into address space 3)
/// whose contiguous dimension is `cd`: ldmatrix (.trans when the stored rows run along
/// the wrong dimension) where it applies, else one load per element. Only registers of
/// the K steps `steps` are read (the others stay null). `op` names errors.
mlir::FailureOr<Registers> readDotOperand(TileLowering &t, mlir::Operation *op, mlir::RankedTensorType dstType,
                                          int cd, const Staging &tile, mlir::Value base, KSteps steps = {});

/// A shared tile (#tile.shared, LowerAsyncCopy.cpp): its swizzled storage, the tile
/// dim along a stored row, and its address (an llvm pointer into address space 3).
struct SharedTileView {
  int cd;
  Staging staging;
  mlir::Value base;
};
SharedTileView sharedTileView(TileLowering &t, mlir::Value tile);
/// Whether `op` reads a shared tile into a dot-operand layout for the one dot right
/// after it in its block: that dot reads the tile itself, one K step at a time.
bool readsSharedAtDot(ConvertLayoutOp op);

/// acc + a @ b on mma.sync (m16n8k16 for bf16/f16, m16n8k8 on tf32 for f32) from the
/// registers of a and b in their dot-operand layouts and acc in the mma layout, over the
/// K steps `steps`; K shorter than one instruction is zero-padded. Returns the result
/// registers.
mlir::FailureOr<Registers> emitMmaSync(TileLowering &t, mlir::Operation *op, mlir::RankedTensorType aType,
                                       mlir::RankedTensorType bType, mlir::RankedTensorType accType,
                                       const Registers &a, const Registers &b, const Registers &acc,
                                       KSteps steps = {});

} // namespace tokamax::tile
