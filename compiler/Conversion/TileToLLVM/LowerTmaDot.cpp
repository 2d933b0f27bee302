//===- LowerTmaDot.cpp - tile.tma_dot: TMA + mbarrier ring + wgmma ----------===//
//
// The main loop of a Hopper matrix product, per program. Two schedules share the ring,
// the descriptors and the wgmma issue:
//
// In order (warp_specialize = false), the kernel's own warps do everything:
//   thread 0: init full[s] (1 arrival + the TMA bytes) and empty[s] (one arrival per
//             warp) for every stage; barrier
//   thread 0: fill the first `stages` stages (expect_tx, then TMA of A's and B's slices)
//   for kt in [0, K / block_k):
//     s = kt % stages; wait full[s] with parity (kt / stages) & 1
//     wgmma.fence; per 16-wide K step and 64-row slab: wgmma (descriptors into stage s)
//     commit; wait until at most one group is pending: stage (kt - 1) is no longer read
//     lane 0 of every warp: arrive on empty[(kt - 1) % stages]
//     thread 0: once empty completes, refill that stage with K slice kt - 1 + stages
//   wait for every group; barrier; thread 0 invalidates the barriers
//
// Warp-specialized, one more warpgroup (the producer, warps num_warps ..) joins. The
// ring and its barriers are set up once: before the op, or before the loop holding it
// (a persistent kernel, one tile per iteration). Slices are numbered across the whole
// run (iteration i uses i * kTiles ..), so stage and phase follow from the number alone.
// The producer's first thread runs the loads (wait empty[s], expect_tx, TMA); the
// consumers run the loop above without the refill and also release the last slice. The
// rest of the op's block (the epilogue) is the consumers' alone (TileLowering::guardRest,
// barriers among 32 * num_warps threads), so the producer goes straight on to the next
// tile's loads while the consumers store this one.
//
// With rebalance_registers (LowerControlFlow hands the loop holding the op to
// lowerWarpSpecializedLoop), the ring is set up before the loop and the loop is lowered
// twice inside one branch on the warp's role: the producer's copy, after setmaxnreg.dec,
// keeps only the loads (TileLowering::skipRest drops the epilogue); the consumers' copy,
// after setmaxnreg.inc, everything else. A loop shared by both roles would be one
// region for ptxas, which allots it one register budget.
//
// Clusters (cluster_m = 2, warp-specialized): CTAs 2c and 2c + 1 share n0. Each loads its
// own A slices and half of B's, multicast into the same ring offsets of both CTAs, whose
// full barriers expect the whole stage as before. A stage may be refilled only once the
// consumers of both CTAs are done with it, so every consumer warp arrives on the empty
// barrier of each CTA (2 x num_warps arrivals), and each producer finally waits for the
// last releases so that no remote arrival targets a CTA that has exited.
//
// Shared memory (getTmaDotSmem) is the op's scratch region, at a 1024-byte aligned offset
// (the scratch buffer itself is 1024-byte aligned in kernels that use TMA).
// TMA writes each box swizzled and the wgmma descriptors name the same swizzle. K-major
// operands (A, or B given as [N, K]) are [rows][block_k] boxes whose rows (block_k
// elements: 32, 64 or 128 bytes) are the swizzle's rows (stride between 8-row groups
// 8 x that); MN-major operands (A given as [K, M], B as [K, N]) are [block_k K rows]
// [128 bytes] boxes with the 128-byte swizzle, side by side along M or N.
// Out-of-range rows and columns of a box are zero-filled by TMA, so ragged M, N and K
// need no masking. The accumulator layout (#tile.mma, every warp along M) puts warp w's
// rows at 16 w + 16 W r: warpgroup g's slab r is rows 64 g + 16 W r .. + 63, exactly what
// one wgmma m64 writes.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <map>

using namespace mlir;

namespace tokamax::tile {

namespace {

constexpr int64_t kMnRowBytes = 128;  // an MN-major box row: 128 bytes of M or N, 128-byte swizzle

struct TmaDotLowering {
  TileLowering &t;
  TmaDotOp op;
  Location loc;
  OpBuilder &b;
  TmaDotSmem smem;
  int64_t bm, bn, bk, stages, kTiles, elemBytes, cluster;
  int64_t kRowBytes;    ///< a K-major box row (block_k elements): its swizzle
  int64_t mnBoxBytes;   ///< one MN-major [block_k][128 bytes] box
  int64_t mnBoxCols;    ///< elements of M or N in one MN-major box row
  unsigned warps;
  bool transA, transB;
  Value ring, tid, rank, mapA, mapB, m0, n0;
  Value bK0;  ///< b's window start along K (b_k0), or null

  TmaDotLowering(TileLowering &t, TmaDotOp op)
      : t(t), op(op), loc(op.getLoc()), b(t.builder()), smem(getTmaDotSmem(op)), bm(op.getBlockM()),
        bn(op.getBlockN()), bk(op.getBlockK()), stages(op.getStages()), warps(getNumWarps(op)),
        transA(op.getTransA()), transB(op.getTransB()) {
    cluster = static_cast<int64_t>(op.getClusterM());
    kTiles = (op.getK() + bk - 1) / bk;
    elemBytes = elementBytes(elemType());
    kRowBytes = bk * elemBytes;
    mnBoxBytes = bk * kMnRowBytes;
    mnBoxCols = kMnRowBytes / elemBytes;
  }

  Value c32(int64_t v) { return t.i32(v); }
  Type elemType() { return cast<PointerType>(op.getA().getType()).getPointeeType(); }
  StringRef wgmmaType() {
    return mmaTypeName(elemType());
  }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(loc, x, y); }
  Value add(Value x, int64_t y) { return y ? add(x, c32(y)) : x; }
  Value mul(Value x, int64_t y) { return b.create<arith::MulIOp>(loc, x, c32(y)); }
  Value eq(Value x, int64_t y) { return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, x, c32(y)); }
  Value full(Value s) { return add(add(ring, smem.barriers), mul(s, 8)); }
  Value empty(Value s) { return add(add(ring, smem.barriers + 8 * stages), mul(s, 8)); }
  Value stageBase(Value s) { return add(ring, mul(s, smem.stageBytes)); }

  void when(Value cond, llvm::function_ref<void()> body) { t.when(loc, cond, body); }
  /// `body` on the producer warpgroup's first thread (the one that loads and drains).
  void onProducerLead(llvm::function_ref<void()> body) { when(eq(tid, 32 * int64_t(warps)), body); }

  /// Thread 0: expect the stage's bytes, then the TMA boxes of K slice `kt` into stage `s`.
  void issue(Value s, Value kt) {
    PtxBuilder ptx = t.ptx(loc);
    Value bar = full(s), base = stageBase(s), k0 = mul(kt, bk);
    Value bK = bK0 ? add(k0, bK0) : k0;  // b's K coordinate (its window's start added)
    ptx.mbarrierArriveExpectTx(bar, static_cast<unsigned>(smem.aBytes + smem.bBytes));
    // K-major: one [rows][block_k] box at (k, row0). MN-major: [block_k][mnBoxCols]
    // boxes at (col, k).
    auto load = [&](Value map, Value dst, bool kMajor, Value first, int64_t extent, Value k) {
      if (kMajor)
        return ptx.tmaLoad2d(dst, map, k, first, bar);
      for (int64_t j = 0; j < extent / mnBoxCols; ++j)
        ptx.tmaLoad2d(add(dst, j * mnBoxBytes), map, add(first, mnBoxCols * j), k, bar);
    };
    load(mapA, base, !transA, m0, bm, k0);
    if (cluster == 1)
      return load(mapB, add(base, smem.aBytes), transB, n0, bn, bK);
    // This CTA's half of b's slice (rows n0 + rank * bn / 2 ..), written into both CTAs.
    unsigned everyCta = (1u << cluster) - 1;
    int64_t half = bn / cluster;
    Value first = add(n0, mul(rank, half));
    if (transB)
      return ptx.tmaLoad2dMulticast(add(add(base, smem.aBytes), mul(rank, half * kRowBytes)), mapB, bK, first,
                                    bar, everyCta);
    Value dst = add(add(base, smem.aBytes), mul(rank, (half / mnBoxCols) * mnBoxBytes));
    for (int64_t j = 0; j < half / mnBoxCols; ++j)
      ptx.tmaLoad2dMulticast(add(dst, j * mnBoxBytes), mapB, add(first, mnBoxCols * j), bK, bar, everyCta);
  }

  /// Lane 0 of each warp where `pred` holds: stage `s` is free again, in every CTA of
  /// the cluster (their producers multicast into this CTA's copy of it).
  void release(Value s, Value pred) {
    PtxBuilder ptx = t.ptx(loc);
    if (cluster == 1)
      return ptx.mbarrierArrive(empty(s), pred);
    for (int64_t r = 0; r < cluster; ++r)
      ptx.mbarrierArriveRemote(empty(s), c32(r), pred);
  }

  /// Producer, last: waits until the consumers of every CTA in the cluster have released
  /// the last `stages` of the `total` slices, so that no arrival from the other CTA is
  /// still on its way to this CTA's barriers when it exits.
  void drain(Value total) {
    for (int64_t j = 0; j < stages; ++j) {
      Value slice = b.create<arith::SubIOp>(loc, total, c32(stages - j));
      when(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, slice, c32(0)),
           [&] { t.ptx(loc).mbarrierWait(empty(stageOf(slice)), parityOf(slice)); });
    }
  }

  /// At the builder's point, after the lowered tile loop `loop`: the producer's first
  /// thread drains the ring of every slice the loop's trips used.
  void drainAfter(scf::ForOp loop) {
    Value span = b.create<arith::SubIOp>(loc, loop.getUpperBound(), loop.getLowerBound());
    Value trips = b.create<arith::MaxSIOp>(loc, b.create<arith::CeilDivSIOp>(loc, span, loop.getStep()), c32(0));
    onProducerLead([&] { drain(mul(trips, kTiles)); });
  }

  Value descriptor(Value addr, int64_t leading, int64_t stride, int64_t swizzleBytes) {
    return t.ptx(loc).wgmmaDescriptor(addr, leading, stride, swizzleBytes);
  }

  /// Descriptor of operand `opIdx` for K step `kk` (32 bytes of K) in the stage at
  /// `base`; `rows` is the slab's first row (A) and is 0 for B.
  Value operandDesc(Value base, bool kMajor, int64_t rows, int64_t kk) {
    if (kMajor)  // swizzled rows of block_k elements; K step = 32 bytes inside the row
      return descriptor(add(base, rows * kRowBytes + kk * 32), 16, 8 * kRowBytes, kRowBytes);
    // [block_k][128-byte] boxes along M/N: the slab's box, K step = 16 rows of 128 bytes.
    return descriptor(add(base, (rows / mnBoxCols) * mnBoxBytes + kk * 16 * kMnRowBytes), mnBoxBytes,
                      8 * kMnRowBytes, kMnRowBytes);
  }

  /// This thread's A fragment (four 32-bit words) for K step `kk` (32 bytes of K) of
  /// slab `r`: warp w's 16 rows 16 w + 16 W r .. of the K-major slice at `stage`, read
  /// with one ldmatrix.x4 (matrices: rows 0-7 / 8-15 by the step's first / second 16
  /// bytes, wgmma's register order) through the slice's swizzle, which XORs an offset's
  /// 16-byte chunk bits (4 ..) with its bits from 7 up (the row within 8 for 128-byte
  /// rows, within 4 pairs or 2 quads of rows for 64- and 32-byte ones).
  SmallVector<Value> readAFragment(Value stage, int64_t r, int64_t kk) {
    I32 m{t, loc};
    Value lane = t.laneId(), matrix = m.div(lane, 8);
    Value row = add(add(mul(t.warpId(), 16), 16 * int64_t(warps) * r),
                    add(mul(m.rem(matrix, 2), 8), m.rem(lane, 8)));
    Value chunk = add(m.div(matrix, 2), 2 * kk);
    Value offset = add(mul(row, kRowBytes), mul(chunk, 16));
    Value phase = b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, offset, c32(7)), c32(kRowBytes / 16 - 1));
    Value swizzled = b.create<arith::XOrIOp>(loc, offset, b.create<arith::ShLIOp>(loc, phase, c32(4)));
    return t.ptx(loc).ldmatrix(add(stage, swizzled), 4, /*trans=*/false);
  }

  Value parityOf(Value slice, int64_t lap = 0) {
    Value laps = b.create<arith::DivUIOp>(loc, slice, c32(stages));
    return b.create<arith::AndIOp>(loc, add(laps, lap), c32(1));
  }
  Value stageOf(Value slice) { return b.create<arith::RemUIOp>(loc, slice, c32(stages)); }

  /// Producer (one thread): K slices base .. base + kTiles - 1 of the ring, in order,
  /// each once the consumers have released the slice `stages` before it.
  void produce(Value base) {
    auto loop = b.create<scf::ForOp>(loc, c32(0), c32(kTiles), c32(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar(), slice = add(base, kt), s = stageOf(slice);
    // Lap n >= 1 of stage s waits for the consumers' n-th release (phase n - 1).
    when(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, slice, c32(stages)),
         [&] { t.ptx(loc).mbarrierWait(empty(s), parityOf(slice, 1)); });
    issue(s, kt);
  }

  /// Consumers: wgmma over K slices base .. base + kTiles - 1, releasing each slice once
  /// the next one's group is issued. In order (`refill`), thread 0 also reloads the
  /// released stage. Returns the accumulator registers.
  FailureOr<SmallVector<Value>> consume(Value base, ValueRange inits, bool refill) {
    // Accumulator registers per (slab, wgmma output index).
    auto accType = cast<RankedTensorType>(op.getResult().getType());
    compiler::Distribution dist = getDistribution(accType);
    std::map<std::vector<int64_t>, int64_t> byCoords;
    for (int64_t r = 0; r < dist.num_registers(); ++r)
      byCoords.emplace(dist.coords(0, 0, r), r);
    int64_t slabs = bm / (16 * warps), perSlab = bn / 2;
    std::vector<int64_t> regOf(static_cast<size_t>(slabs * perSlab));
    for (int64_t r = 0; r < slabs; ++r)
      for (int64_t i = 0; i < perSlab; ++i) {
        std::vector<int64_t> at{16 * int64_t(warps) * r + 8 * ((i % 4) / 2), 8 * (i / 4) + i % 2};
        auto it = byCoords.find(at);
        if (it == byCoords.end() || dist.num_registers() != slabs * perSlab)
          return op.emitOpError("accumulator layout does not match wgmma's fragments: ") << accType;
        regOf[static_cast<size_t>(r * perSlab + i)] = it->second;
      }

    PtxBuilder ptx = t.ptx(loc);
    Value lane0 = eq(t.laneId(), 0);
    auto loop = b.create<scf::ForOp>(loc, c32(0), c32(kTiles), c32(1), inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kt = loop.getInductionVar(), slice = add(base, kt), s = stageOf(slice);
      SmallVector<Value> acc(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
      ptx.mbarrierWait(full(s), parityOf(slice));
      if (!op.getAInRegisters())
        ptx.wgmmaFence();
      Value stage = stageBase(s), stageB = add(stage, smem.aBytes);
      // Each wgmma takes 32 bytes of K: k16 for 16-bit operands, k32 for fp8.
      const int64_t kSteps = bk * elemBytes / 32;
      Value group = b.create<arith::DivUIOp>(loc, t.warpId(), c32(4));
      Value slabBase = add(stage, Value(mul(group, transA ? mnBoxBytes : 64 * kRowBytes)));
      for (int64_t kk = 0; kk < kSteps; ++kk) {
        // A from registers: the step's fragments, then the fence that orders these
        // register writes before the wgmma reads (one step at a time keeps few live).
        SmallVector<SmallVector<Value>> aFragments;
        if (op.getAInRegisters()) {
          for (int64_t r = 0; r < slabs; ++r)
            aFragments.push_back(readAFragment(stage, r, kk));
          ptx.wgmmaFence();
        }
        Value descB = operandDesc(stageB, transB, 0, kk);
        for (int64_t r = 0; r < slabs; ++r) {
          SmallVector<Value> in;
          for (int64_t i = 0; i < perSlab; ++i)
            in.push_back(acc[regOf[r * perSlab + i]]);
          SmallVector<Value> out =
              op.getAInRegisters()
                  ? ptx.wgmmaRegisterA(static_cast<unsigned>(bn), wgmmaType(), aFragments[r], descB, in, !transB)
                  : ptx.wgmma(static_cast<unsigned>(bn), wgmmaType(), operandDesc(slabBase, !transA, 16 * warps * r, kk),
                              descB, in, transA, !transB);
          for (int64_t i = 0; i < perSlab; ++i)
            acc[regOf[r * perSlab + i]] = out[i];
        }
      }
      ptx.wgmmaCommitGroup();
      ptx.wgmmaWaitGroup(1);
      // The previous slice's group has completed in this warp: release its stage.
      Value notFirst = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, kt, c32(0));
      Value prevStage = stageOf(add(slice, stages - 1));
      release(prevStage, b.create<arith::AndIOp>(loc, notFirst, lane0));
      if (refill) {
        Value prev = add(kt, -1);
        Value more = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, add(prev, stages), c32(kTiles));
        when(b.create<arith::AndIOp>(loc, b.create<arith::AndIOp>(loc, notFirst, more), eq(tid, 0)), [&] {
          ptx.mbarrierWait(empty(prevStage), parityOf(prev));
          issue(prevStage, add(prev, stages));
        });
        // Thread 0 may still be waiting on the empty barrier while its warp goes on:
        // the next iteration's ldmatrix and wgmma are .sync.aligned and need the whole
        // warp (found under compute-sanitizer memcheck, whose slower memory operations
        // kept warp 0 apart: A read from registers came out garbage).
        ptx.syncWarp();
      }
      b.create<scf::YieldOp>(loc, acc);
    }
    ptx.wgmmaWaitGroup(0);
    if (!refill)  // the last slice too: the producer's next pass reuses its stage
      release(stageOf(add(base, kTiles - 1)), lane0);
    return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
  }

  /// The thread index, the ring's address and the CTA's rank in its cluster.
  void locate() {
    tid = t.threadId();
    Value raw = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), t.scratchBase(op));
    ring = b.create<arith::AndIOp>(loc, add(raw, 1023), c32(~int64_t(1023)));
    if (cluster > 1)
      rank = t.ptx(loc).clusterCtaRank();
  }

  /// locate(), barrier init and the barrier after it, at the builder's point.
  void setUp() {
    PtxBuilder ptx = t.ptx(loc);
    locate();
    when(eq(tid, 0), [&] {
      for (int64_t s = 0; s < stages; ++s) {
        ptx.mbarrierInit(full(c32(s)), 1);
        ptx.mbarrierInit(empty(c32(s)), static_cast<unsigned>(warps * cluster));
      }
      // Earlier generic accesses to this scratch come before the TMA writes.
      ptx.fenceProxyAsyncShared();
      if (cluster > 1)
        ptx.fenceMbarrierInitCluster();
    });
    // The other CTA arrives on these barriers and multicasts into this ring: it may
    // start only once both have initialized theirs.
    if (cluster > 1)
      ptx.clusterBarrier();
    else
      t.barrier();
  }

  /// The warp index broadcast from lane 0: ptxas then knows the roles are warp-uniform
  /// and keeps the consumers' wgmma chain asynchronous inside their branch.
  Value uniformWarp() {
    return b.create<NVVM::ShflOp>(loc, b.getI32Type(), c32(-1), t.warpId(), c32(0), c32(31), NVVM::ShflKind::idx,
                                  UnitAttr());
  }

  /// The first ring slice of the current iteration of `loop` (a lowered scf.for):
  /// iteration i uses slices i * kTiles ...
  Value firstSlice(scf::ForOp loop) {
    Value trips = b.create<arith::DivUIOp>(loc, b.create<arith::SubIOp>(loc, loop.getInductionVar(), loop.getLowerBound()),
                                           loop.getStep());
    return mul(trips, kTiles);
  }

  /// Inside one role's copy of the loop (lowerWarpSpecializedLoop set the ring up):
  /// the producer's first thread loads and its warps skip the rest of the body; the
  /// consumers multiply, and the rest (the epilogue) synchronizes among them only.
  LogicalResult runRole() {
    auto loop = dyn_cast<scf::ForOp>(b.getInsertionBlock()->getParentOp());
    if (!loop)
      return op.emitOpError("lowered for one warp role outside its loop");
    locate();
    Value base = firstSlice(loop);
    const Registers &accIn = t.regs(op.getAcc());
    if (t.role() == TileLowering::WarpRole::Producer) {
      onProducerLead([&] { produce(base); });
      t.setRegs(op.getResult(), accIn);
      t.skipRest();
      return success();
    }
    FailureOr<SmallVector<Value>> acc = consume(base, SmallVector<Value>(accIn.begin(), accIn.end()), false);
    if (failed(acc))
      return failure();
    t.setRegs(op.getResult(), Registers(acc->begin(), acc->end()));
    t.guardRest(b.create<arith::ConstantOp>(loc, b.getBoolAttr(true)), 32 * warps);
    return success();
  }

  /// See lowerWarpSpecializedLoop: the ring set up before the loop, then the loop
  /// lowered once per role in a branch on the warp's role, each role first setting
  /// its register limit: the producer warpgroup keeps 40 per thread and the consumers
  /// take what that frees of the launch's allotment. After the loop, in a cluster, the
  /// producer drains the ring.
  LogicalResult splitLoop(scf::ForOp loop, llvm::function_ref<LogicalResult()> lowerLoop) {
    setUp();
    constexpr int64_t kProducerRegisters = 40, kMaxRegisters = 240;
    const int64_t producerThreads = 32 * int64_t(kProducerWarps), threads = 32 * int64_t(warps) + producerThreads;
    int64_t launch = std::min<int64_t>(255, 65536 / threads) / 8 * 8;
    int64_t consumers =
        std::min(kMaxRegisters, (launch * threads - kProducerRegisters * producerThreads) / (32 * warps) / 8 * 8);
    bool rebalance = consumers > launch;
    if (rebalance)
      t.setLaunchRegisters(static_cast<unsigned>(launch));
    Value producer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, uniformWarp(), c32(warps));
    auto split = b.create<scf::IfOp>(loc, TypeRange{}, producer, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    auto lowerAs = [&](TileLowering::WarpRole role, Block &block) -> LogicalResult {
      b.setInsertionPoint(block.getTerminator());
      if (rebalance)
        b.create<NVVM::SetMaxRegisterOp>(loc,
                                         static_cast<uint32_t>(role == TileLowering::WarpRole::Producer
                                                                   ? kProducerRegisters
                                                                   : consumers),
                                         role == TileLowering::WarpRole::Producer
                                             ? NVVM::SetMaxRegisterAction::decrease
                                             : NVVM::SetMaxRegisterAction::increase);
      t.setRole(role);
      LogicalResult lowered = lowerLoop();
      t.setRole(TileLowering::WarpRole::All);
      return lowered;
    };
    if (failed(lowerAs(TileLowering::WarpRole::Producer, split.getThenRegion().front())))
      return failure();
    if (cluster > 1)
      drainAfter(cast<scf::ForOp>(b.getInsertionPoint()->getPrevNode()));
    return lowerAs(TileLowering::WarpRole::Consumer, split.getElseRegion().front());
  }

  LogicalResult run() {
    if (!t.target().has_wgmma())
      return op.emitOpError("needs sm_90a (wgmma and TMA), compiling for ") << t.arch();
    if (warps % 4 != 0 || bm % (16 * warps) != 0)
      return op.emitOpError("needs num_warps a multiple of 4 (whole warpgroups) and block M a multiple of 16 * "
                            "num_warps; got ")
             << warps << " warps for block M " << bm;
    mapA = t.tensorMap(op.getA());
    mapB = t.tensorMap(op.getB());
    if (!mapA || !mapB)
      return op.emitOpError("has no tensor map for its operands (the kernel lowering must add them)");
    m0 = t.regs(op.getM0())[0];
    n0 = t.regs(op.getN0())[0];
    if (op.getBK0())
      bK0 = t.regs(op.getBK0())[0];
    const Registers &accIn = t.regs(op.getAcc());
    SmallVector<Value> inits(accIn.begin(), accIn.end());
    PtxBuilder ptx = t.ptx(loc);

    if (!op.getWarpSpecialize()) {
      setUp();
      when(eq(tid, 0), [&] {
        for (int64_t s = 0; s < std::min(stages, kTiles); ++s)
          issue(c32(s), c32(s));
      });
      FailureOr<SmallVector<Value>> acc = consume(c32(0), inits, /*refill=*/true);
      if (failed(acc))
        return failure();
      t.barrier();
      when(eq(tid, 0), [&] {
        for (int64_t s = 0; s < stages; ++s) {
          ptx.mbarrierInval(full(c32(s)));
          ptx.mbarrierInval(empty(c32(s)));
        }
      });
      t.setRegs(op.getResult(), Registers(acc->begin(), acc->end()));
      return success();
    }

    if (t.role() != TileLowering::WarpRole::All)
      return runRole();
    if (op.getRebalanceRegisters())  // the loop holding it lowers it per role
      return op.emitOpError("with rebalance_registers was lowered outside its loop's per-role lowering");
    // Warp-specialized: the ring lives across the kernel. In a loop (a persistent
    // kernel), it is set up once before the loop and iteration i uses slices
    // i * kTiles .. of it, so the producer runs ahead into the next iteration's loads
    // while the consumers finish this one.
    auto loop = dyn_cast<scf::ForOp>(b.getInsertionBlock()->getParentOp());
    {
      OpBuilder::InsertionGuard guard(b);
      if (loop)
        b.setInsertionPoint(loop);
      setUp();
      if (loop && cluster > 1) {  // after the loop: the producer drains the ring
        b.setInsertionPointAfter(loop);
        drainAfter(loop);
      }
    }
    Value base = loop ? firstSlice(loop) : c32(0);
    Value warp = uniformWarp();
    Value producer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, warp, c32(warps));
    SmallVector<Type> types;
    for (Value v : inits)
      types.push_back(v.getType());
    auto split = b.create<scf::IfOp>(loc, types, producer, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&split.getThenRegion().front());
      onProducerLead([&] {
        produce(base);
        if (cluster > 1 && !loop)
          drain(c32(kTiles));
      });
      b.create<scf::YieldOp>(loc, inits);
      b.setInsertionPointToStart(&split.getElseRegion().front());
      FailureOr<SmallVector<Value>> acc = consume(base, inits, /*refill=*/false);
      if (failed(acc))
        return failure();
      b.create<scf::YieldOp>(loc, *acc);
    }
    t.setRegs(op.getResult(), Registers(split.getResults().begin(), split.getResults().end()));
    // What follows in this block is the consumers' alone.
    t.guardRest(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, warp, c32(warps)), 32 * warps);
    return success();
  }
};

} // namespace

LogicalResult lowerWarpSpecializedLoop(TileLowering &t, Operation *loop, Operation *dot,
                                       llvm::function_ref<LogicalResult()> lowerLoop) {
  return TmaDotLowering(t, cast<TmaDotOp>(dot)).splitLoop(cast<scf::ForOp>(loop), lowerLoop);
}

LogicalResult lowerTmaDotOp(TileLowering &t, Operation *op, bool &handled) {
  auto dot = dyn_cast<TmaDotOp>(op);
  if (!dot)
    return success();
  handled = true;
  return TmaDotLowering(t, dot).run();
}

} // namespace tokamax::tile
