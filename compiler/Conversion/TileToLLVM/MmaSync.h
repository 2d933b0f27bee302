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
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>
#include <tuple>

namespace tokamax::tile {

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
  mlir::Value eq(mlir::Value x, int64_t k) {
    return b().create<mlir::arith::CmpIOp>(loc, mlir::arith::CmpIPredicate::eq, x, c(k));
  }
};

/// A 2-D tile in shared memory: `rows` x `cols` elements, cols contiguous, 16-byte chunks
/// of each row XOR-swizzled with the row's phase. Eight consecutive rows of one chunk
/// column (an ldmatrix) land in eight distinct 16-byte bank groups. Rows of 32, 64 and
/// 128 bytes are exactly the 32-, 64- and 128-byte swizzle atoms that TMA writes and
/// wgmma's shared-memory descriptors read (given a 1024-byte aligned base); with
/// `panels`, longer rows are stored as 128-byte wide panels ([cols / panelCols][rows]
/// [panelCols]), each such an atom.
struct Staging {
  int64_t rows, cols, chunk, perPhase, maxPhase, panelCols;

  Staging(int64_t rows, int64_t cols, unsigned bytes, bool panels = false) : rows(rows), cols(cols) {
    chunk = 16 / bytes;
    const int64_t rowBytes = cols * bytes;
    panelCols = panels && rowBytes > 128 && rowBytes % 128 == 0 ? 128 / bytes : cols;
    int64_t chunks = panelCols / chunk;
    perPhase = std::max<int64_t>(1, 8 / chunks);
    maxPhase = std::min<int64_t>(chunks, 8);
  }

  /// Bytes of one stored row (of one panel).
  int64_t rowBytes(unsigned bytes) const { return panelCols * bytes; }
  /// Bytes between panels.
  int64_t panelBytes(unsigned bytes) const { return rows * panelCols * bytes; }

  /// Element index of (row, col) (both already inside the tile).
  mlir::Value index(I32 &m, mlir::Value row, mlir::Value col) const {
    mlir::Value phase = m.rem(m.div(row, perPhase), maxPhase);
    mlir::Value inPanel = panelCols == cols ? col : m.rem(col, panelCols);
    mlir::Value chunkIdx = m.xor_(m.div(inPanel, chunk), phase);
    mlir::Value index = m.add(m.add(m.mul(row, panelCols), m.mul(chunkIdx, chunk)), m.rem(col, chunk));
    return panelCols == cols ? index : m.add(index, m.mul(m.div(col, panelCols), rows * panelCols));
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

/// The storage of a shared tile (#tile.shared) of `rows` x `cols` in the kernel of `op`:
/// 128-byte panels in kernels whose dots may run on wgmma.
Staging sharedTileStaging(mlir::Operation *op, int64_t rows, int64_t cols, unsigned bytes);
/// A shared tile (#tile.shared, LowerAsyncCopy.cpp): its swizzled storage, the tile
/// dim along a stored row, and its address (an llvm pointer into address space 3).
struct SharedTileView {
  int cd;
  Staging staging;
  mlir::Value base;
};
SharedTileView sharedTileView(TileLowering &t, mlir::Value tile);
/// The address (llvm pointer into address space 3) of the slot a copy writes.
mlir::Value slotPointer(TileLowering &t, AsyncBlockLoadOp op);
/// The 32-bit shared address of mbarrier `index` (i32) of the kernel holding `op`.
mlir::Value mbarrierAddress(TileLowering &t, mlir::Operation *op, mlir::Value index);
/// Thread 0 initializes the kernel's mbarriers (tile.mbarriers), then a block barrier.
mlir::LogicalResult initMbarriers(TileLowering &t, mlir::func::FuncOp func);
/// A tensor parameter's TMA box as its tensor map describes it: inner elements, rows,
/// swizzle bytes, and for a 3-D tensor [batches, batch_rows, cols] the rows of a batch
/// (boxes stay within one; 0 for 2-D tensors).
struct TmaBox {
  int64_t inner = 0, rows = 0, swizzle = 128, batchRows = 0;
  bool operator==(const TmaBox &) const = default;
};
/// The TMA box of a TMA copy (tile.async_block_load with a barrier): one 128-byte panel
/// of the block's rows, or the whole row where it is 32 or 64 bytes.
TmaBox tmaCopyBox(AsyncBlockLoadOp op);
/// Whether `op` reads a shared tile into a dot-operand layout for the dots after it in
/// its block (one, or several in wgmma kernels): each reads the tile itself (one K step
/// at a time on mma.sync, through a descriptor on wgmma).
bool readsSharedAtDot(ConvertLayoutOp op);

/// One 32-bit register holding `elems` (two 16-bit or four 8-bit values, the first in
/// the low bits).
mlir::Value packWord(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<mlir::Value> elems);
/// The `kWidth` elements of type `elem` held by one 32-bit register (packWord's inverse).
llvm::SmallVector<mlir::Value> unpackWord(mlir::OpBuilder &b, mlir::Location loc, mlir::Value word, mlir::Type elem,
                                          unsigned kWidth);
/// The PTX name of a tensor-core operand type: bf16, f16, e4m3 or e5m2.
llvm::StringRef mmaTypeName(mlir::Type elem);
/// A conversion for which quadShuffleToFp8Operand holds (LowerQuadShuffle.cpp): the fp8
/// accumulator tile's bytes into the next dot's A registers by warp shuffles.
mlir::LogicalResult lowerByQuadShuffle(TileLowering &t, ConvertLayoutOp op);

/// The 32-bit words of mma.sync fragments, from the registers of dot operands in their
/// dot-operand layouts: A's four at (M repeat, K step) and B's two at (N repeat, K step),
/// K shorter than one instruction zero-padded. wgmma with A from registers takes the
/// same four A words for each warp's 16 rows of a 64-row slab.
class MmaFragments {
public:
  MmaFragments(TileLowering &t, mlir::Operation *op, mlir::RankedTensorType aType, mlir::RankedTensorType bType,
               mlir::RankedTensorType accType);
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> a(const Registers &regs, unsigned rm, unsigned rk);
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> b(const Registers &regs, unsigned rn, unsigned rk);

  unsigned kw, kpi;  ///< K elements per 32-bit word and per instruction

private:
  using ByOffset = std::map<std::vector<int64_t>, int64_t>;
  mlir::FailureOr<mlir::Value> element(const Registers &regs, const ByOffset &map, std::vector<int64_t> offset,
                                       unsigned kDim);
  mlir::FailureOr<mlir::Value> word(const Registers &regs, const ByOffset &map, std::vector<int64_t> offset,
                                    unsigned kDim);
  TileLowering &t;
  mlir::Operation *op;
  int64_t kSize;
  compiler::Distribution da, db, dc;
  ByOffset aRegs, bRegs;
  mlir::Value laneK;
};

/// On sm_90a: the shared tile a tile.dot reads its B operand from when the dot runs on
/// wgmma (LowerWgmmaDot.cpp): 16-bit or fp8 (K-major) operands, every warp of the
/// accumulator along M, B a shared tile whose storage is a wgmma swizzle atom; nullopt
/// when mma.sync runs it.
std::optional<SharedTileView> wgmmaSharedB(TileLowering &t, DotOp op);
/// Where wgmmaSharedB applies and A is a shared tile too, read only by the dot (K-major
/// with rows of 32, 64 or 128 bytes and 64-row multiples, or M-major with 128-byte rows):
/// its view, for wgmma with both operands from shared memory; else nullopt.
std::optional<SharedTileView> wgmmaSharedA(TileLowering &t, DotOp op);
/// acc + a @ b on wgmma with B read from `b` (wgmmaSharedB's view) and A from `aView`
/// (wgmmaSharedA's) or, without one, from A's registers `a` in their dot-operand layout.
/// Returns the result registers.
mlir::FailureOr<Registers> emitWgmma(TileLowering &t, DotOp op, const Registers &a, const SharedTileView &b,
                                     const Registers &acc, const std::optional<SharedTileView> &aView = {});
/// tile.dot_wait: wgmma.wait_group where dots run on wgmma, else the identity.
mlir::LogicalResult lowerDotWait(TileLowering &t, DotWaitOp op);

/// acc + a @ b on mma.sync (m16n8k16 for bf16/f16, m16n8k8 on tf32 for f32) from the
/// registers of a and b in their dot-operand layouts and acc in the mma layout, over the
/// K steps `steps`; K shorter than one instruction is zero-padded. Returns the result
/// registers.
mlir::FailureOr<Registers> emitMmaSync(TileLowering &t, mlir::Operation *op, mlir::RankedTensorType aType,
                                       mlir::RankedTensorType bType, mlir::RankedTensorType accType,
                                       const Registers &a, const Registers &b, const Registers &acc,
                                       KSteps steps = {});

} // namespace tokamax::tile
