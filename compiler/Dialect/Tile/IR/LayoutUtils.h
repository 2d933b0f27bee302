//===- LayoutUtils.h - Layout attributes <-> layout algebra -------*- C++ -*-===//
#pragma once

#include "compiler/Dialect/Tile/IR/DTypes.h"
#include "compiler/Dialect/Tile/IR/TileDialect.h"
#include <tokamax/compiler/Layout.h>

#include <optional>
#include <vector>

namespace tokamax::tile {

/// Attribute name on kernels: warps per program.
inline constexpr llvm::StringLiteral kNumWarpsAttr = "tile.num_warps";
/// Unit attribute on kernels: tile.dot results put every warp along M where M allows.
inline constexpr llvm::StringLiteral kMmaRowsPerWarpAttr = "tile.mma_rows_per_warp";
/// Kernel attribute: dots reading B from a shared tile may run on wgmma (sm_90a), and
/// shared tiles are stored as wgmma swizzle atoms (128-byte panels).
inline constexpr llvm::StringLiteral kWgmmaDotsAttr = "tile.wgmma_dots";
/// Kernel attribute: the kernel's mbarriers, each one's arrivals per phase (i64 array);
/// tile.mbarrier_wait / tile.mbarrier_arrive and TMA copies name them by index.
inline constexpr llvm::StringLiteral kMbarriersAttr = "tile.mbarriers";
/// Kernel attribute (set by tile-allocate-shared): byte offset of the mbarriers in the
/// kernel's shared scratch, 8 bytes each.
inline constexpr llvm::StringLiteral kMbarrierOffsetAttr = "tile.mbarrier_offset";
/// Unit attribute on an scf.for at a kernel's top level: its body is split between warp
/// roles. Ops carrying kProducerAttr (TMA copies, mbarrier ops and pure arithmetic) run on
/// a producer warpgroup added to the kernel; the rest, and everything after the loop, on
/// the kernel's own warps (LowerSpecializedLoop.cpp).
inline constexpr llvm::StringLiteral kWarpSpecializeAttr = "tile.warp_specialize";
inline constexpr llvm::StringLiteral kProducerAttr = "tile.producer";
/// Attribute name on kernels: bytes of static shared memory scratch.
inline constexpr llvm::StringLiteral kSharedBytesAttr = "tile.shared_bytes";
/// Attribute name on kernels: marks a func.func as a tile kernel.
inline constexpr llvm::StringLiteral kKernelAttr = "tile.kernel";
/// Attribute name on kernels: the launch grid.
inline constexpr llvm::StringLiteral kGridAttr = "tile.grid";

compiler::BlockedLayout toBlockedLayout(BlockedLayoutAttr attr);
BlockedLayoutAttr toAttr(mlir::MLIRContext *ctx, const compiler::BlockedLayout &layout);

compiler::MmaLayout toMmaLayout(MmaLayoutAttr attr);
compiler::DotOperandLayout toDotOperandLayout(DotOperandLayoutAttr attr);

/// Elements along K per 32-bit mma.sync operand register: 2 (bf16, f16), 1 (f32 as
/// tf32), 0 when tensor cores cannot take the type.
unsigned mmaKWidth(mlir::Type elem);
/// The accumulator layout of a tile.dot result of `accType` on `numWarps` warps.
MmaLayoutAttr getMmaLayout(mlir::RankedTensorType accType, unsigned numWarps);
/// The layout operand `opIdx` (0: A, 1: B) of elements `elem` must have for `parent`.
DotOperandLayoutAttr getDotOperandLayout(unsigned opIdx, MmaLayoutAttr parent, mlir::Type elem);

/// Bytes of one element as stored in registers and memory (pointers: 8, i1: 1).
unsigned elementBytes(mlir::Type type);

/// The default (anchor) layout of a tile type for a kernel of `numWarps` warps.
BlockedLayoutAttr getDefaultLayout(mlir::RankedTensorType type, unsigned numWarps);

/// Whether `type` is a tile held in shared memory (#tile.shared) rather than registers:
/// its one "register" is the tile's shared-memory address (i32).
bool isSharedTile(mlir::Type type);

/// Distribution of a tensor whose type carries a blocked, mma, dot-operand or slice layout.
compiler::Distribution getDistribution(mlir::RankedTensorType type);

/// Warps per program of the kernel enclosing `op`.
unsigned getNumWarps(mlir::Operation *op);
/// Whether the kernel holding `op` carries tile.wgmma_dots.
bool hasWgmmaDots(mlir::Operation *op);
/// Blocks of the kernel enclosing `op` meant to share an SM (tile.blocks_per_sm; 1 when
/// absent).
unsigned getBlocksPerSm(mlir::Operation *op);

/// Shared memory of a tile.tma_dot: a ring of `stages` buffers, each holding A's
/// [BM, block_k] slice then B's [block_k, BN] slice on 1024-byte boundaries (where the
/// 128-byte swizzle pattern repeats), then a `full` and an `empty` mbarrier per stage;
/// `total` includes the slack that aligns the ring's start to 1024 bytes.
struct TmaDotSmem {
  int64_t aBytes, bBytes, stageBytes, barriers, total;
};
TmaDotSmem getTmaDotSmem(TmaDotOp op);

/// Shared memory of a tile.cp_async_dot: a ring of `stages` buffers, each A's slice
/// ([BM][block_k], or [block_k][BM] when transposed) then B's, rows of 16-byte chunks.
struct CpAsyncDotSmem {
  int64_t aBytes, bBytes, stageBytes, total;
};
CpAsyncDotSmem getCpAsyncDotSmem(CpAsyncDotOp op);

/// Attribute name on lowered kernels: [param, box inner, box outer, swizzle bytes] per
/// TMA tensor map the runtime encodes and appends to the launch parameters.
inline constexpr llvm::StringLiteral kTensorMapsAttr = "tile.tensor_maps";
/// Warps a lowered kernel runs beyond its `tile.num_warps` (a warp-specialized
/// tile.tma_dot's producer warpgroup); the launch adds them to the block.
inline constexpr llvm::StringLiteral kProducerWarpsAttr = "tile.producer_warps";
/// The producer: one warpgroup.
inline constexpr unsigned kProducerWarps = 4;
/// On a kernel: its warp-specialized loop's producer register limit (setmaxnreg), when
/// not the default 24.
inline constexpr llvm::StringLiteral kProducerRegistersAttr = "tile.producer_registers";
/// On a kernel: blocks meant to share an SM (1 when absent): a warp-specialized loop's
/// launch register limit divides the register file among them.
inline constexpr llvm::StringLiteral kBlocksPerSmAttr = "tile.blocks_per_sm";
/// CTAs per cluster along x (from tile.tma_dot's cluster_m), on the lowered kernel.
inline constexpr llvm::StringLiteral kClusterAttr = "tile.cluster";
/// Unit attribute on lowered kernels whose shared memory is dynamic (sized at launch).
inline constexpr llvm::StringLiteral kDynamicSharedAttr = "tile.dynamic_shared";

/// Bytes of one of tile.tma_store's two strip buffers ([BM][128 bytes], swizzled).
int64_t getTmaStoreBufferBytes(TmaStoreOp op);

/// For a layout conversion or reshape from `source` to `result` (both with layouts): the
/// source register each result register can take when every thread already holds its
/// elements (the same row-major element, for every lane and warp), else std::nullopt.
std::optional<std::vector<int64_t>> threadLocalRegisters(mlir::RankedTensorType source,
                                                         mlir::RankedTensorType result);

/// Whether a layout conversion from `source` to `result` moves an fp8 accumulator-layout
/// tile (an f32 product cast to fp8) into the A operand of the next fp8 dot with the same
/// accumulator layout, warps along M only, whole 16-row and 32-column instruction tiles:
/// each thread's four K elements come from two threads of its quad (two shuffles a
/// word), with no shared memory.
bool quadShuffleToFp8Operand(mlir::RankedTensorType source, mlir::RankedTensorType result);

/// The column of a 16-wide group that K index `k` of a tile.dot with `a_k_interleaved`
/// reads: the order in which an mma accumulator's quad thread t holds its columns (2t,
/// 2t + 1, 2t + 8, 2t + 9), which is the order the A operand's thread t holds K indices
/// 4t .. 4t + 3 (fp8, kWidth 4). Such a conversion renames registers instead of
/// shuffling them (lowerByRename).
inline int64_t interleavedColumn(int64_t k) {
  const int64_t group = k / 16 * 16, i = k % 16;
  return group + 2 * (i / 4) + i % 2 + 8 * (i % 4 / 2);
}

/// Shared-memory scratch bytes `op` needs while it runs (0 when it needs none).
int64_t getScratchBytes(mlir::Operation *op);

/// Attribute name on tile.async_block_load: bytes of one slot of its buffer (the
/// buffer's region starts at tile.scratch_offset; slot s at offset + s * slot bytes).
inline constexpr llvm::StringLiteral kSlotBytesAttr = "tile.slot_bytes";

/// Attribute name on scratch users placed away from offset 0 (tile-allocate-shared).
inline constexpr llvm::StringLiteral kScratchOffsetAttr = "tile.scratch_offset";
/// Unit attribute on a dot's B operand conversion staged together with the A operand's
/// conversion just before it: both write, one barrier, both read.
inline constexpr llvm::StringLiteral kScratchWithPreviousAttr = "tile.scratch_with_previous";
/// Attribute name on scratch users in a loop body that alternate between two buffers
/// `stride` bytes apart on even and odd iterations.
inline constexpr llvm::StringLiteral kScratchStrideAttr = "tile.scratch_stride";
/// Byte offset of `op`'s scratch region (0 unless tile-allocate-shared moved it).
int64_t getScratchOffset(mlir::Operation *op);
/// Second-buffer distance of a double-buffered scratch user, else 0.
int64_t getScratchStride(mlir::Operation *op);
/// Index of the tile dimension a 2-D conversion's source holds contiguously when the
/// conversion into a dot-operand layout can go through a swizzled shared tile (16-bit or
/// 32-bit elements, rows of at least 16 bytes); -1 otherwise.
int stagedDotOperandDim(ConvertLayoutOp op);

} // namespace tokamax::tile
