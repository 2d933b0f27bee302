//===- TileLowering.h - Per-thread lowering of tile kernels -------*- C++ -*-===//
//
// A tile value becomes the list of this thread's registers (one scalar SSA value per
// element the thread holds under the tile's layout); a scalar becomes a list of one.
// Each family of tile operations has a lowering function in its own file; the pass walks
// a kernel in program order and dispatches each operation to its family.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Conversion/TileToLLVM/PtxBuilder.h"
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"

#include <tokamax/runtime/Arch.h>

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <utility>

namespace tokamax::tile {

using Registers = llvm::SmallVector<mlir::Value, 8>;

class TileLowering {
public:
  TileLowering(mlir::OpBuilder &builder, const Arch &target, mlir::Block *entry,
               mlir::Value sharedBase);

  mlir::OpBuilder &builder() { return b; }
  /// The target and its name ("sm_90a", for diagnostics).
  const Arch &target() const { return target_; }
  const std::string &arch() const { return arch_; }
  bool hasFp8Conversions() const;

  /// Lowers every operation of `block` in order at the builder's insertion point.
  mlir::LogicalResult lowerBlock(mlir::Block &block);
  mlir::LogicalResult lowerOp(mlir::Operation *op);
  /// Lowers `ops` in order; after an op that called guardRest(), the remaining ones go
  /// inside an scf.if on its condition (with barriers among the guarded threads only).
  mlir::LogicalResult lowerOps(llvm::iterator_range<mlir::Block::iterator> ops);
  /// The rest of the current block runs only where `cond` holds, among `threads`
  /// threads (whole warps): a warp-specialized op's other warps skip it.
  void guardRest(mlir::Value cond, unsigned threads) { pendingGuard_ = {cond, threads}; }
  /// The rest of the current block is not lowered (a role whose warps never run it).
  void skipRest() { skipRest_ = true; }

  /// Which warps the code being lowered runs on: all of them, or one role of a
  /// warp-specialized loop that was lowered once per role (lowerWarpSpecializedLoop).
  enum class WarpRole { All, Producer, Consumer };
  WarpRole role() const { return role_; }
  void setRole(WarpRole role) { role_ = role; }
  /// Inside one role's copy of a loop marked tile.warp_specialize: ops are kept or
  /// dropped by their tile.producer mark (lowerOp asks roleKeeps).
  void setSplitByMark(bool split) { splitByMark_ = split; }
  bool splitByMark() const { return splitByMark_; }
  /// Per-thread register limit the kernel launches with when its warps re-balance
  /// registers (setmaxnreg); 0 when they do not.
  unsigned launchRegisters() const { return launchRegisters_; }
  void setLaunchRegisters(unsigned count) { launchRegisters_ = count; }

  const Registers &regs(mlir::Value value) const;
  bool hasRegs(mlir::Value value) const;
  void setRegs(mlir::Value value, Registers registers);
  void mapScalar(mlir::Value value, mlir::Value lowered) { setRegs(value, Registers{lowered}); }

  /// Register element type of a tile element type (fp8 is i8, pointers are global ptrs).
  mlir::Type registerType(mlir::Type elementType);

  mlir::Value i32(int64_t v);
  mlir::Value i64(int64_t v);
  mlir::Value constant(mlir::Type type, double v);
  /// This thread's index in the (1-D) block.
  mlir::Value threadId() const { return thread; }
  mlir::Value laneId() const { return lane; }
  mlir::Value warpId() const { return warp; }
  mlir::Value sharedBase() const { return shared; }
  /// Start of `op`'s scratch region: sharedBase plus its tile.scratch_offset, plus its
  /// tile.scratch_stride on odd iterations of the enclosing loop.
  mlir::Value scratchBase(mlir::Operation *op);

  /// This thread's base coordinate per tile dimension (i32, computed once per kernel).
  const Registers &threadBase(mlir::RankedTensorType type);
  /// Coordinates (i32) of register r of a tile of `type`.
  Registers coords(mlir::RankedTensorType type, int64_t r);
  /// i1: whether this thread's copy of its elements of `type` is the canonical one.
  mlir::Value threadOwns(mlir::RankedTensorType type);

  /// Combines two values of a reduction or an atomic.
  mlir::Value combine(ReduceKind kind, mlir::Value a, mlir::Value b);
  /// Block-wide barrier (among the guarded threads inside guardRest's region).
  void barrier();
  /// Barriers from now on are among `threads` threads (0: the whole block); returns the
  /// previous count.
  unsigned setBarrierThreads(unsigned threads) { return std::exchange(barrierThreads_, threads); }
  /// Between a tile.turn_wait and its tile.turn_pass (`begin`), then after it: returns
  /// whether a barrier was emitted inside the turn, where the other consumer warpgroups
  /// wait for the turn and never reach it (a deadlock the turn's pass then reports).
  bool setInTurn(bool begin) {
    bool barrierInside = barrierInTurn_;
    inTurn_ = begin;
    barrierInTurn_ = false;
    return barrierInside;
  }
  /// Emits `body` at the builder's point inside an scf.if on `cond` (no results).
  void when(mlir::Location loc, mlir::Value cond, llvm::function_ref<void()> body);
  /// Emits `body` (stores of this thread's elements of a tile of `type` to shared memory)
  /// for the owning thread of each element only, where other threads hold replicas of
  /// them (a layout larger than its tile, dims reduced away); as it is otherwise.
  void asOwner(mlir::Location loc, mlir::RankedTensorType type, llvm::function_ref<void()> body);
  /// Thread 0 has TMA stores in flight (bulk groups): it waits for them before the
  /// kernel returns.
  void noteBulkStores() { bulkStores_ = true; }
  bool hasBulkStores() const { return bulkStores_; }

  PtxBuilder ptx(mlir::Location loc) { return PtxBuilder(b, loc); }

  /// The generic address of the TMA tensor map the launcher passes for kernel tensor
  /// parameter `param` (null when it has none).
  mlir::Value tensorMap(mlir::Value param) const { return tensorMaps.lookup(param); }
  void setTensorMap(mlir::Value param, mlir::Value map) { tensorMaps[param] = map; }
  /// Ops before a warp-specialized loop that lowerOps skips there: the consumers' branch
  /// lowers them (consumerInitOps).
  void deferToConsumers(llvm::SmallVector<mlir::Operation *> ops) { deferred_ = std::move(ops); }
  const llvm::SmallVector<mlir::Operation *> &deferredToConsumers() const { return deferred_; }

private:
  mlir::OpBuilder &b;
  Arch target_;
  std::string arch_;
  mlir::Block *entry;
  mlir::Value thread, lane, warp, shared;
  llvm::DenseMap<mlir::Value, Registers> values;
  llvm::DenseMap<mlir::Value, mlir::Value> tensorMaps;
  unsigned barrierThreads_ = 0;  // 0: every thread of the block
  bool inTurn_ = false, barrierInTurn_ = false;
  bool bulkStores_ = false;
  bool skipRest_ = false;
  WarpRole role_ = WarpRole::All;
  bool splitByMark_ = false;
  unsigned launchRegisters_ = 0;
  std::pair<mlir::Value, unsigned> pendingGuard_;
  llvm::SmallVector<mlir::Operation *> deferred_;
  std::map<std::pair<const void *, std::vector<int64_t>>, Registers> bases;
};

// Families of lowerings; each returns failure() with a diagnostic, or success().
// `handled` is set when the operation belongs to the family.
mlir::LogicalResult lowerMemoryOp(TileLowering &t, mlir::Operation *op, bool &handled);
mlir::LogicalResult lowerElementwiseOp(TileLowering &t, mlir::Operation *op, bool &handled);
mlir::LogicalResult lowerReduceOp(TileLowering &t, mlir::Operation *op, bool &handled);
mlir::LogicalResult lowerShapeOp(TileLowering &t, mlir::Operation *op, bool &handled);
/// exp, exp2, log, log2, tanh and erf of one f64 value in IEEE arithmetic (MathF64.cpp);
/// failure for other ops.
mlir::FailureOr<mlir::Value> lowerMathF64(mlir::OpBuilder &b, mlir::Operation *op, mlir::Value x);
/// tile.dot on tensor cores, and conversions into dot-operand layouts (before lowerShapeOp).
mlir::LogicalResult lowerDotOp(TileLowering &t, mlir::Operation *op, bool &handled);
/// tile.tma_dot: the TMA + mbarrier + wgmma main loop (sm_90a).
mlir::LogicalResult lowerTmaDotOp(TileLowering &t, mlir::Operation *op, bool &handled);
/// A loop (no carried values) whose body holds a tile.tma_dot with rebalance_registers,
/// lowered once per role inside a branch on the warp's role: the producer warpgroup's
/// copy keeps only the loads, the consumers' the rest, and each role sets its register
/// limit (setmaxnreg) for its whole loop. `lowerLoop` lowers the loop under the current
/// role.
mlir::LogicalResult lowerWarpSpecializedLoop(TileLowering &t, mlir::Operation *loop, mlir::Operation *dot,
                                             llvm::function_ref<mlir::LogicalResult()> lowerLoop);
/// A top-level loop marked tile.warp_specialize and the ops after it (`rest`): the
/// producer warpgroup runs the loop's producer ops, the kernel's warps the rest of it and
/// then `rest`, each role with its own register limit (LowerSpecializedLoop.cpp).
mlir::LogicalResult lowerSpecializedLoop(TileLowering &t, mlir::scf::ForOp loop,
                                         llvm::iterator_range<mlir::Block::iterator> rest);
/// The ops before such a loop (in order) that compute only its initial carried values
/// from a load: its consumers' branch lowers them (LowerSpecializedLoop.cpp).
llvm::SmallVector<mlir::Operation *> consumerInitOps(mlir::scf::ForOp loop);
/// Inside a role's copy of such a loop: lowers `op` as `t.role()` sees it, or returns
/// false when the role does not run it at all.
mlir::FailureOr<bool> lowerForRole(TileLowering &t, mlir::Operation *op);
/// tile.turn_wait / tile.turn_pass: named barriers between the consumer warpgroups.
mlir::LogicalResult lowerTurnOp(TileLowering &t, mlir::Operation *op, bool &handled);

/// tile.tma_store: registers -> swizzled shared strips -> TMA stores (sm_90a).
mlir::LogicalResult lowerTmaStoreOp(TileLowering &t, mlir::Operation *op, bool &handled);
/// tile.cp_async_dot: the cp.async ring + ldmatrix + mma.sync main loop (sm_80+).
mlir::LogicalResult lowerCpAsyncDotOp(TileLowering &t, mlir::Operation *op, bool &handled);
mlir::LogicalResult lowerControlFlowOp(TileLowering &t, mlir::Operation *op, bool &handled);
/// tile.async_block_load / tile.async_wait, and trans of and conversions out of shared
/// tiles (before lowerDotOp and lowerShapeOp).
mlir::LogicalResult lowerAsyncCopyOp(TileLowering &t, mlir::Operation *op, bool &handled);

/// Known power-of-two divisor of an i32 scalar (program ids and loop variables: 1).
int64_t knownMultipleOf(mlir::Value value);

/// This thread's register of `dist` holding each element offset (per dim) it holds.
std::map<std::vector<int64_t>, int64_t> registersByOffset(const compiler::Distribution &dist);

} // namespace tokamax::tile
