//===- PtxBuilder.h - The one place that writes inline PTX --------*- C++ -*-===//
//
// Everything the NVVM dialect does not offer directly (predicated vector accesses with
// a fallback value, approximate special functions, fp8 conversions, atomics with a
// predicate, ldmatrix and mma.sync for tile.dot, cp.async for tile.cp_async_dot;
// mbarriers, TMA and wgmma for tile.tma_dot) is emitted here as LLVM inline assembly.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

namespace tokamax::tile {

class PtxBuilder {
public:
  PtxBuilder(mlir::OpBuilder &builder, mlir::Location loc) : b(builder), loc(loc) {}

  /// Loads `words` registers of `wordBits` (8, 16, 32 or 64) from a global address if
  /// `pred` (i1) holds; else the registers are zero.
  llvm::SmallVector<mlir::Value> predicatedLoad(mlir::Value ptr, mlir::Value pred,
                                                unsigned words, unsigned wordBits);
  /// Stores `values` (all of one integer width) to a global address if `pred` holds.
  void predicatedStore(mlir::Value ptr, mlir::Value pred, mlir::ValueRange values);

  /// A unary f32 instruction such as "ex2.approx.ftz.f32".
  mlir::Value unaryF32(llvm::StringRef instruction, mlir::Value x);
  /// 2^x on the FMA pipes, not the special-function unit (tile.exp2's share): x
  /// clamped to [-127, 127] (NaN kept), split into floor j and fraction f, 2^f by a cubic
  /// and 2^j built from its exponent bits. Relative error below 1e-4; 0 from -127 down.
  mlir::Value exp2Polynomial(mlir::Value x);

  /// f32 -> fp8 (e4m3 or e5m2) bits as i8, round to nearest, saturating (sm_89+).
  mlir::Value f32ToF8(mlir::Value x, bool e4m3);
  /// fp8 bits (i8) -> f32 (sm_89+).
  mlir::Value f8ToF32(mlir::Value bits, bool e4m3);

  /// `atom.global.<op>.<type>` if `pred` holds; returns the old value (zero otherwise).
  mlir::Value atomic(llvm::StringRef op, llvm::StringRef type, mlir::Value ptr,
                     mlir::Value pred, mlir::ValueRange args, mlir::Type resultType);

  /// `red.global.<op>.<type>` if `pred` holds: the atomic whose old value nobody reads.
  void reduction(llvm::StringRef op, llvm::StringRef type, mlir::Value ptr, mlir::Value pred,
                 mlir::Value value);

  /// `ld.acquire.gpu.global.b32` of the i32 at global `ptr` (tile.semaphore_wait).
  mlir::Value loadAcquireGpu(mlir::Value ptr);
  /// `red.release.gpu.global.add.s32` of the i32 `value` to global `ptr`
  /// (tile.semaphore_signal).
  void reductionAddRelease(mlir::Value ptr, mlir::Value value);

  /// `ldmatrix.sync.aligned.m8n8.x<count>[.trans].shared.b16` from the 32-bit shared
  /// address `addr` (this lane's row); returns `count` i32 registers.
  llvm::SmallVector<mlir::Value> ldmatrix(mlir::Value addr, unsigned count, bool trans);
  /// `mma.sync.aligned.<shape>.row.col.f32.<ab>.<ab>.f32` (e.g. shape "m16n8k16", ab
  /// "bf16"): a and b are i32 fragments, c four f32; returns d (four f32).
  llvm::SmallVector<mlir::Value> mma(llvm::StringRef shape, llvm::StringRef ab,
                                     mlir::ValueRange a, mlir::ValueRange b, mlir::ValueRange c);
  /// f32 -> tf32 bits (i32), round to nearest, ties away from zero.
  mlir::Value f32ToTf32(mlir::Value x);

  // sm_80 asynchronous copies (tile.cp_async_dot).
  /// `cp.async.cg.shared.global` of 16 bytes from global `src` to the 32-bit shared
  /// address `dst`, where the i1 `pred` holds; elsewhere the 16 bytes are zero-filled
  /// (source size 0: nothing is read).
  void cpAsync16(mlir::Value dst, mlir::Value src, mlir::Value pred);
  void cpAsyncCommitGroup();
  /// Waits until at most `pending` of this thread's committed groups are in flight.
  void cpAsyncWaitGroup(unsigned pending);

  // Hopper (sm_90a): mbarriers, TMA and wgmma (PtxBuilderHopper.cpp). Shared-memory
  // addresses are 32-bit (i32) shared-window addresses.
  void mbarrierInit(mlir::Value bar, unsigned count);
  void mbarrierInval(mlir::Value bar);
  /// Arrives once and expects `bytes` more of asynchronous transactions this phase.
  void mbarrierArriveExpectTx(mlir::Value bar, unsigned bytes);
  /// Arrives once on `bar` where the i1 `pred` holds (predicated, no branch).
  void mbarrierArrive(mlir::Value bar, mlir::Value pred);
  /// Spins until the phase of parity `parity` (i32, 0 or 1) of `bar` has completed.
  void mbarrierWait(mlir::Value bar, mlir::Value parity);
  /// Orders this thread's generic-proxy shared accesses before later async-proxy ones.
  void fenceProxyAsyncShared();
  /// bar.warp.sync over the whole warp: reconverges it after a branch some of its
  /// threads took, before a .sync.aligned instruction (ldmatrix, wgmma) that needs all.
  void syncWarp();
  /// 2-D TMA load of one box at (inner, outer) through the tensor map at generic
  /// address `tensorMap` into `dst`, completing on `bar`.
  void tmaLoad2d(mlir::Value dst, mlir::Value tensorMap, mlir::Value inner, mlir::Value outer,
                 mlir::Value bar);
  /// The same box written at `dst` (and signalled on `bar`, both this CTA's shared
  /// offsets) in every CTA of the cluster whose bit is set in `ctaMask`.
  /// The same from a 3-D tensor map at (inner, row, batch).
  void tmaLoad3d(mlir::Value dst, mlir::Value tensorMap, mlir::Value inner, mlir::Value row, mlir::Value batch,
                 mlir::Value bar);
  void tmaLoad2dMulticast(mlir::Value dst, mlir::Value tensorMap, mlir::Value inner, mlir::Value outer,
                          mlir::Value bar, unsigned ctaMask);

  /// 2-D TMA store of the box at shared `src` to (inner, outer) of the tensor map's
  /// tensor, in the current bulk group (out-of-range parts are dropped).
  void tmaStore2d(mlir::Value tensorMap, mlir::Value inner, mlir::Value outer, mlir::Value src);
  /// The same box added element-wise into the tensor (cp.reduce.async.bulk.tensor .add).
  void tmaReduceAdd2d(mlir::Value tensorMap, mlir::Value inner, mlir::Value outer, mlir::Value src);
  void bulkCommitGroup();
  /// Waits until at most `pending` bulk groups still read their shared source.
  void bulkWaitGroupRead(unsigned pending);
  /// Waits until at most `pending` bulk groups are incomplete (writes included).
  void bulkWaitGroup(unsigned pending);

  // Clusters (sm_90).
  /// This CTA's rank in its cluster (i32).
  mlir::Value clusterCtaRank();
  /// Makes this thread's mbarrier.init visible to the other CTAs of the cluster.
  void fenceMbarrierInitCluster();
  /// Every thread of the cluster arrives (release) and waits (acquire).
  void clusterBarrier();
  /// Arrives once (release, CTA scope) on the barrier at this CTA's shared offset
  /// `bar` in the cluster's CTA `rank`, where the i1 `pred` holds.
  void mbarrierArriveRemote(mlir::Value bar, mlir::Value rank, mlir::Value pred);

  /// `bar.sync id, threads`: a barrier among `threads` threads (whole warps).
  void namedBarrier(unsigned id, unsigned threads);
  /// The same with the barrier's id an i32 value (warp-uniform), and `bar.arrive`: the
  /// warp counts its threads toward the barrier without waiting.
  void namedBarrierSync(mlir::Value id, unsigned threads);
  void namedBarrierArrive(mlir::Value id, unsigned threads);
  void wgmmaFence();
  void wgmmaCommitGroup();
  void wgmmaWaitGroup(unsigned pending);
  /// `wgmma.wait_group.sync.aligned pending` with the f32 `values` flowing through it
  /// (tied operands): returns them, so no use of them is scheduled before the wait.
  llvm::SmallVector<mlir::Value> wgmmaWaitGroupFor(unsigned pending, mlir::ValueRange values);
  /// The same wait, the values then copied into fresh registers inside the asm: for
  /// values that stay live past the wait (a loop-carried accumulator read in a branch),
  /// which a tied wait would make LLVM copy before it, reading registers in flight.
  llvm::SmallVector<mlir::Value> wgmmaWaitGroupCopy(unsigned pending, mlir::ValueRange values);
  /// `wgmma.fence.sync.aligned` with the f32 accumulator and i32 A-fragment `values`
  /// flowing through it: returns them, so every write of them is ordered before the fence
  /// and the wgmma that reads the returned values after it.
  llvm::SmallVector<mlir::Value> wgmmaFenceFor(mlir::ValueRange values);
  /// 64-bit wgmma shared-memory matrix descriptor of the operand at shared address `addr`
  /// (i32): leading and stride byte offsets and the swizzle (rows of 128, 64 or 32 bytes).
  mlir::Value wgmmaDescriptor(mlir::Value addr, int64_t leading, int64_t stride, int64_t swizzleBytes);
  /// `wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<ab>.<ab>` (k32 for ab = e4m3 / e5m2)
  /// with both operands in shared memory (64-bit matrix descriptors); acc holds n / 2
  /// f32 and is accumulated where `scaleD` (an i32: 0 starts from zero) is nonzero; a
  /// null scaleD accumulates.
  llvm::SmallVector<mlir::Value> wgmma(unsigned n, llvm::StringRef ab, mlir::Value descA,
                                       mlir::Value descB, mlir::ValueRange acc, bool transA,
                                       bool transB, mlir::Value scaleD = {});
  /// The same with A from registers: `aRegs` are the four 32-bit words of this thread's
  /// A fragment (rows 16 w .. 16 w + 15 of the 64-row slab for warp w of the warpgroup,
  /// as ldmatrix.x4 reads them), B from shared memory.
  llvm::SmallVector<mlir::Value> wgmmaRegisterA(unsigned n, llvm::StringRef ab, mlir::ValueRange aRegs,
                                                mlir::Value descB, mlir::ValueRange acc, bool transB,
                                                mlir::Value scaleD = {});

private:
  llvm::SmallVector<mlir::Value> throughAsm(llvm::StringRef text, mlir::ValueRange values);
  llvm::SmallVector<mlir::Value> wgmmaAsm(unsigned n, llvm::StringRef ab, mlir::ValueRange a, bool aInRegisters,
                                          mlir::Value descB, mlir::ValueRange acc, bool transA, bool transB,
                                          mlir::Value scaleD);
  mlir::Value asmCall(mlir::Type resultType, mlir::ValueRange operands, llvm::StringRef text,
                      llvm::StringRef constraints, bool sideEffects);
  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace tokamax::tile
