//===- LowerCpAsyncDot.cpp - tile.cp_async_dot: cp.async ring + mma.sync ----===//
//
// The main loop of an sm_80-style matrix product, per program, all warps alike:
//
//   for s in [0, stages - 1): copy K slice s into stage s; commit a group
//   for kt in [0, K / block_k):
//     wait until slice kt's group has landed (at most stages - 2 pending); barrier
//     copy K slice kt + stages - 1 (if any) into the stage slice kt - 1 used; commit
//     per mma K step of stage kt % stages: ldmatrix A and B fragments, mma.sync
//
// One barrier per slice: after it every warp has finished reading slice kt - 1 (so its
// stage may be refilled) and every thread's copies of slice kt are visible. Groups are
// committed even when empty, so the count of pending groups stays stages - 2.
//
// Each stage holds A's slice then B's as swizzled tiles (Staging, as tile.dot's operand
// staging): a stored row is the operand's contiguous global row, 16-byte chunks XOR-
// swizzled by row phase. Each thread copies whole 16-byte chunks (cp.async.cg); chunks
// outside the tensors are zero-filled (source size 0), so ragged M, N and K need no
// masking: the verifier requires rows of whole chunks. ldmatrix then reads fragments
// of one mma K step at a time (readDotOperand), and emitMmaSync multiplies them.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace tokamax::tile {

namespace {

/// One operand's slice per stage: stored [rows][cols] (cols contiguous, as in global
/// memory), read as the dot-operand tile of `type` whose dimension `cd` is contiguous.
struct OperandRing {
  Value global;               ///< the kernel tensor (global pointer)
  int64_t globalRows, globalCols;
  bool kAlongRows;            ///< stored rows run along K (else along M or N)
  int64_t offset;             ///< byte offset of this operand inside a stage
  RankedTensorType type;      ///< [BM, block_k] (A) or [block_k, BN] (B), dot-operand layout
  int cd;
  Staging staging;
};

struct CpAsyncDotLowering {
  TileLowering &t;
  CpAsyncDotOp op;
  Location loc;
  OpBuilder &b;
  CpAsyncDotSmem smem;
  int64_t bm, bn, bk, stages, kTiles;
  unsigned bytes, threads;
  Value ring, tid;

  CpAsyncDotLowering(TileLowering &t, CpAsyncDotOp op)
      : t(t), op(op), loc(op.getLoc()), b(t.builder()), smem(getCpAsyncDotSmem(op)), bm(op.getBlockM()),
        bn(op.getBlockN()), bk(op.getBlockK()), stages(op.getStages()) {
    kTiles = (op.getK() + bk - 1) / bk;
    bytes = elementBytes(elemType());
    threads = 32 * getNumWarps(op);
  }

  Type elemType() { return cast<PointerType>(op.getA().getType()).getPointeeType(); }
  Value c32(int64_t v) { return t.i32(v); }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(loc, x, y); }
  Value mul(Value x, int64_t y) { return b.create<arith::MulIOp>(loc, x, c32(y)); }
  Value lt(Value x, Value y) { return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, x, y); }
  Value ptrAt(Value base, Value byteOffset) {
    return b.create<LLVM::GEPOp>(loc, base.getType(), b.getI8Type(), base, ValueRange{byteOffset});
  }

  /// Operand `opIdx`'s ring: A is stored [BM][bk] (or [bk][BM] when transposed), B
  /// [bk][BN] (or [BN][bk]); either way a stored row is a global row.
  OperandRing operand(unsigned opIdx, MmaLayoutAttr mma) {
    bool trans = opIdx == 0 ? op.getTransA() : op.getTransB();
    ArrayRef<int64_t> dims = opIdx == 0 ? op.getADims() : op.getBDims();
    int64_t other = opIdx == 0 ? bm : bn;
    // A: K is global dim 1 unless transposed. B: K is global dim 0 unless transposed.
    bool kAlongRows = (opIdx == 0) == trans;
    int64_t rows = kAlongRows ? bk : other, cols = kAlongRows ? other : bk;
    SmallVector<int64_t> shape = opIdx == 0 ? SmallVector<int64_t>{bm, bk} : SmallVector<int64_t>{bk, bn};
    auto type = RankedTensorType::get(shape, elemType(), getDotOperandLayout(opIdx, mma, elemType()));
    // The tile dimension that runs along a stored row.
    int cd = opIdx == 0 ? (kAlongRows ? 0 : 1) : (kAlongRows ? 1 : 0);
    return OperandRing{t.regs(opIdx == 0 ? op.getA() : op.getB())[0], dims[0], dims[1], kAlongRows,
                       opIdx == 0 ? 0 : smem.aBytes, type, cd, Staging(rows, cols, bytes)};
  }

  /// Every thread's cp.async chunks of K slice `kt` of `ring` into the stage at `stage`.
  void copySlice(const OperandRing &ring, Value stage, Value kt, Value m0OrN0) {
    I32 m{t, loc};
    const Staging &s = ring.staging;
    int64_t perRow = s.cols / s.chunk, chunks = s.rows * perRow;
    Value k0 = mul(kt, bk);
    Value rowOrigin = ring.kAlongRows ? k0 : m0OrN0, colOrigin = ring.kAlongRows ? m0OrN0 : k0;
    for (int64_t first = 0; first < chunks; first += threads) {
      auto body = [&] {
        Value c = add(tid, c32(first));
        Value row = m.div(c, perRow), col = mul(m.rem(c, perRow), s.chunk);
        Value gRow = add(rowOrigin, row), gCol = add(colOrigin, col);
        Value inside = b.create<arith::AndIOp>(loc, lt(gRow, c32(ring.globalRows)), lt(gCol, c32(ring.globalCols)));
        // Outside the tensor nothing is read: point at its first element anyway.
        Value index = b.create<arith::AddIOp>(
            loc, b.create<arith::MulIOp>(loc, b.create<arith::ExtUIOp>(loc, b.getI64Type(), gRow), t.i64(ring.globalCols)),
            b.create<arith::ExtUIOp>(loc, b.getI64Type(), gCol));
        index = b.create<arith::SelectOp>(loc, inside, index, t.i64(0));
        Value src = b.create<LLVM::GEPOp>(loc, ring.global.getType(), t.registerType(elemType()), ring.global,
                                          ValueRange{index});
        Value dst = add(add(stage, c32(ring.offset)), mul(s.index(m, row, col), bytes));
        t.ptx(loc).cpAsync16(dst, src, inside);
      };
      if (first + threads <= chunks) {
        body();
        continue;
      }
      auto guard = b.create<scf::IfOp>(loc, lt(add(tid, c32(first)), c32(chunks)), /*withElseRegion=*/false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&guard.getThenRegion().front());
      body();
    }
  }

  LogicalResult run() {
    if (t.target().number() < 80)
      return op.emitOpError("needs cp.async and mma.sync (sm_80 or newer), compiling for ") << t.arch();
    auto accType = cast<RankedTensorType>(op.getResult().getType());
    auto mma = dyn_cast_or_null<MmaLayoutAttr>(accType.getEncoding());
    if (!mma)
      return op.emitOpError("needs the mma accumulator layout (run tile-assign-layouts first)");
    if (!t.sharedBase())
      return op.emitOpError("needs shared-memory scratch but the kernel has none (run tile-allocate-shared first)");
    OperandRing a = operand(0, mma), bOp = operand(1, mma);
    Value m0 = t.regs(op.getM0())[0], n0 = t.regs(op.getN0())[0];
    tid = t.threadId();
    Value base = t.scratchBase(op);
    ring = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), base);
    auto stageAddr = [&](Value s) { return add(ring, mul(s, smem.stageBytes)); };
    auto copy = [&](Value s, Value kt) {
      copySlice(a, stageAddr(s), kt, m0);
      copySlice(bOp, stageAddr(s), kt, n0);
    };
    PtxBuilder ptx = t.ptx(loc);
    for (int64_t s = 0; s + 1 < stages; ++s) {
      if (s < kTiles)
        copy(c32(s), c32(s));
      ptx.cpAsyncCommitGroup();
    }

    const Registers &accIn = t.regs(op.getAcc());
    SmallVector<Value> inits(accIn.begin(), accIn.end());
    auto loop = b.create<scf::ForOp>(loc, c32(0), c32(kTiles), c32(1), inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kt = loop.getInductionVar();
      ptx.cpAsyncWaitGroup(static_cast<unsigned>(stages - 2));
      t.barrier();
      Value next = add(kt, c32(stages - 1));
      auto refill = b.create<scf::IfOp>(loc, lt(next, c32(kTiles)), /*withElseRegion=*/false);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&refill.getThenRegion().front());
        copy(b.create<arith::RemUIOp>(loc, next, c32(stages)), next);
      }
      ptx.cpAsyncCommitGroup();
      Value stage = b.create<arith::RemUIOp>(loc, kt, c32(stages));
      Value stageBase = ptrAt(base, mul(stage, smem.stageBytes));
      Registers acc(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
      unsigned kStep = 8 * mmaKWidth(elemType());
      for (unsigned step = 0; step < bk / kStep; ++step) {
        KSteps steps{step, step + 1};
        FailureOr<Registers> ra = readDotOperand(t, op, a.type, a.cd, a.staging, stageBase, steps);
        FailureOr<Registers> rb =
            readDotOperand(t, op, bOp.type, bOp.cd, bOp.staging, ptrAt(stageBase, c32(smem.aBytes)), steps);
        if (failed(ra) || failed(rb))
          return failure();
        FailureOr<Registers> out = emitMmaSync(t, op, a.type, bOp.type, accType, *ra, *rb, acc, steps);
        if (failed(out))
          return failure();
        acc = std::move(*out);
      }
      b.create<scf::YieldOp>(loc, ValueRange(acc));
    }
    // Every real copy was waited for inside the loop; nothing may land after the op.
    ptx.cpAsyncWaitGroup(0);
    t.setRegs(op.getResult(), Registers(loop.getResults().begin(), loop.getResults().end()));
    return success();
  }
};

} // namespace

LogicalResult lowerCpAsyncDotOp(TileLowering &t, Operation *op, bool &handled) {
  auto dot = dyn_cast<CpAsyncDotOp>(op);
  if (!dot)
    return success();
  handled = true;
  return CpAsyncDotLowering(t, dot).run();
}

} // namespace tokamax::tile
