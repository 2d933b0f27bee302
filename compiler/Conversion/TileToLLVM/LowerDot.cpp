//===- LowerDot.cpp - tile.dot on tensor cores (mma.sync) -------------------===//
//
// tile-assign-layouts gives a dot's result the mma accumulator layout and converts its
// operands into dot-operand layouts (#tile.mma, #tile.dot_op in TileTypes.td):
//
// - A conversion into a dot-operand layout writes the source tile to shared memory in
//   its own fastest dimension, 16-byte chunks XOR-swizzled by row so that both the
//   vector stores and the 8-row ldmatrix reads avoid bank conflicts, then a barrier, then
//   ldmatrix (.trans when the stored rows run along the wrong dimension) fills exactly
//   the registers the mma.sync fragments need. 32-bit transposed reads and K smaller
//   than one instruction read single elements from the swizzled tile instead; rows
//   narrower than 16 bytes take the generic conversion through scratch (LowerShape.cpp).
//   The B operand's region follows A's (tile-allocate-shared): one barrier per dot.
//   Conversions that feed the dot right after them are lowered with it: the dot
//   stores, waits once and reads each K step's fragments just before that step's
//   mma.sync, so the operand never sits in registers whole. An operand read from a
//   shared tile (tile.async_block_load's, LowerAsyncCopy.cpp) is read the same way,
//   with nothing to store and no barrier.
// - The dot itself issues one mma.sync per 16x8 accumulator tile and K step:
//   m16n8k16 for bf16/f16, m16n8k32 for fp8 (sm_89 on), m16n8k8 on tf32 (cvt.rna) for
//   f32. K below one instruction is zero-padded in registers. Other element types (f64,
//   integers) stay on the CPU interpreter and are rejected here with a clear error.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"

#include <tokamax/compiler/Compiler.h>

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cstdio>
#include <functional>

using namespace mlir;

namespace tokamax::tile {

Value packWord(OpBuilder &b, Location loc, ArrayRef<Value> elems) {
  auto vecType = VectorType::get({int64_t(elems.size())}, elems[0].getType());
  Value vec = b.create<LLVM::UndefOp>(loc, vecType);
  for (size_t i = 0; i < elems.size(); ++i)
    vec = b.create<LLVM::InsertElementOp>(loc, vec, elems[i],
                                          b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i)));
  return b.create<LLVM::BitcastOp>(loc, b.getI32Type(), vec);
}

SmallVector<Value> unpackWord(OpBuilder &b, Location loc, Value word, Type elem, unsigned kWidth) {
  if (kWidth == 1)
    return {b.create<LLVM::BitcastOp>(loc, elem, word)};
  Value vec = b.create<LLVM::BitcastOp>(loc, VectorType::get({int64_t(kWidth)}, elem), word);
  SmallVector<Value> elems;
  for (unsigned i = 0; i < kWidth; ++i)
    elems.push_back(
        b.create<LLVM::ExtractElementOp>(loc, vec, b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i))));
  return elems;
}

StringRef mmaTypeName(Type elem) {
  if (elem.isBF16())
    return "bf16";
  if (isa<Float8E4M3FNType>(elem))
    return "e4m3";
  if (isa<Float8E5M2Type>(elem))
    return "e5m2";
  return "f16";
}

namespace {

/// A convert_layout into a dot-operand layout through a swizzled tile: store() writes
/// this thread's source elements, load() (after a barrier) fills the result registers.
struct StagedOperand {
  TileLowering &t;
  ConvertLayoutOp op;
  RankedTensorType srcType, dstType;
  compiler::Distribution in;
  Type elem;
  unsigned bytes;
  int cd;  ///< tile dimension stored contiguously
  Staging staging;
  Location loc;
  Value base;

  StagedOperand(TileLowering &t, ConvertLayoutOp op, int cd)
      : t(t), op(op), srcType(cast<RankedTensorType>(op.getSource().getType())),
        dstType(cast<RankedTensorType>(op.getResult().getType())), in(getDistribution(srcType)),
        elem(t.registerType(srcType.getElementType())), bytes(elementBytes(elem)), cd(cd),
        staging(srcType.getDimSize(1 - cd), srcType.getDimSize(cd), bytes), loc(op.getLoc()),
        base(t.scratchBase(op)) {}

  /// Every thread writes its elements, `vec` contiguous ones per store.
  void store() {
    t.asOwner(loc, srcType, [&] { storeOwn(); });  // replicas in other threads hold the same values
  }

private:
  void storeOwn() {
    OpBuilder &b = t.builder();
    unsigned vec = std::min<unsigned>(in.contiguous_registers(), staging.chunk);
    I32 m{t, loc};
    const Registers &regs = t.regs(op.getSource());
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
    for (int64_t r = 0; r < in.num_registers(); r += vec) {
      if (!in.register_owns(r))
        continue;
      Registers coords = t.coords(srcType, r);
      Value ptr = b.create<LLVM::GEPOp>(loc, ptrType, elem, base, ValueRange{staging.index(m, coords[1 - cd], coords[cd])});
      Value value = regs[r];
      if (vec > 1) {
        value = b.create<LLVM::UndefOp>(loc, VectorType::get({int64_t(vec)}, elem));
        for (unsigned i = 0; i < vec; ++i)
          value = b.create<LLVM::InsertElementOp>(loc, value, regs[r + i],
                                                  b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i)));
      }
      b.create<LLVM::StoreOp>(loc, value, ptr, vec * bytes);
    }
  }

public:
  /// The result registers of K steps `steps` (the others null), after a barrier.
  FailureOr<Registers> read(KSteps steps = {}) { return readDotOperand(t, op, dstType, cd, staging, base, steps); }

  LogicalResult load() {
    FailureOr<Registers> regs = read();
    if (failed(regs))
      return failure();
    t.setRegs(op.getResult(), std::move(*regs));
    return success();
  }
};

} // namespace

FailureOr<Registers> readDotOperand(TileLowering &t, Operation *op, RankedTensorType dstType, int cd,
                                    const Staging &staging, Value base, KSteps steps) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  I32 m{t, loc};
  compiler::Distribution out = getDistribution(dstType);
  Type elem = t.registerType(dstType.getElementType());
  unsigned bytes = elementBytes(elem);
  auto layout = cast<DotOperandLayoutAttr>(dstType.getEncoding());
  unsigned opIdx = layout.getOpIdx(), kw = layout.getKWidth(), kpi = 8 * kw;
  unsigned kDim = opIdx == 0 ? 1 : 0, nd = 1 - kDim;
  int64_t shape[2] = {dstType.getDimSize(0), dstType.getDimSize(1)};
  // ldmatrix.trans moves 16-bit elements only; K must cover one instruction.
  bool trans = (opIdx == 0) == (cd == 0);
  bool useLdmatrix = bytes * kw == 4 && shape[kDim] >= kpi && !(trans && bytes != 2);
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  auto storageIndex = [&](const Registers &coords) { return staging.index(m, coords[1 - cd], coords[cd]); };

  // Without ldmatrix (32-bit elements read across the stored rows, K shorter than an
  // instruction): each register from its swizzled address.
  if (!useLdmatrix) {
    Registers result(out.num_registers());
    for (int64_t r = 0; r < out.num_registers(); ++r) {
      if (!steps.contains(out.register_offset(r)[kDim] / kpi))
        continue;
      Value ptr = b.create<LLVM::GEPOp>(loc, ptrType, elem, base, ValueRange{storageIndex(t.coords(dstType, r))});
      result[r] = b.create<LLVM::LoadOp>(loc, elem, ptr);
    }
    return result;
  }

  // ldmatrix: lane l gives row l % 8 of matrix l / 8. Matrix mi = 2 * b1 + b0 covers,
  // for A, rows +8*b0 and K +kpi/2*b1 of one instruction; for B, K +kpi/2*b0 and the
  // next N repeat for b1 (x4 only when there is one).
  const auto &ndDim = out.dims()[nd], &kDimInfo = out.dims()[kDim];
  Value lane = t.laneId();
  Value r8 = m.rem(lane, 8), b0 = m.rem(m.div(lane, 8), 2), b1 = m.rem(m.div(lane, 16), 2);
  Value warpBase = m.mul(m.rem(m.div(t.warpId(), ndDim.warp_stride), ndDim.warps), ndDim.warp_scale);
  Value sharedAddr = b.create<LLVM::PtrToIntOp>(loc, b.getI32Type(), base);
  auto byOffset = registersByOffset(out);
  Registers result(out.num_registers());
  unsigned ndRepeats = ndDim.repeats;
  unsigned ndStep = opIdx == 0 ? 1 : (ndRepeats >= 2 ? 2 : 1);
  unsigned count = opIdx == 0 || ndRepeats >= 2 ? 4 : 2;
  for (unsigned rn = 0; rn < ndRepeats; rn += ndStep)
    for (unsigned rk = 0; rk < kDimInfo.repeats; ++rk) {
      if (!steps.contains(rk))
        continue;
      int64_t ndOrigin = int64_t(rn) * ndDim.coverage, kOrigin = int64_t(rk) * kpi;
      // This lane's row start in tile coordinates.
      Value ndStart, kStart;
      if (opIdx == 0) {
        ndStart = m.add(m.add(warpBase, m.c(ndOrigin)), m.mul(b0, 8));
        kStart = m.add(m.c(kOrigin), m.mul(b1, kpi / 2));
      } else {
        kStart = m.add(m.c(kOrigin), m.mul(b0, kpi / 2));
        Value next = count == 4 ? m.mul(b1, ndDim.coverage) : m.c(0);
        ndStart = m.add(m.add(warpBase, m.c(ndOrigin)), next);
      }
      Registers coords(2);
      coords[nd] = ndStart;
      coords[kDim] = kStart;
      coords[1 - cd] = m.add(coords[1 - cd], r8);
      coords[0] = m.rem(coords[0], shape[0]);
      coords[1] = m.rem(coords[1], shape[1]);
      Value addr = m.add(sharedAddr, m.mul(storageIndex(coords), bytes));
      SmallVector<Value> words = t.ptx(loc).ldmatrix(addr, count, trans);
      for (unsigned mi = 0; mi < count; ++mi) {
        unsigned bit0 = mi % 2, bit1 = mi / 2;
        int64_t ndOff = opIdx == 0 ? ndOrigin + 8 * bit0 : ndOrigin + bit1 * ndDim.coverage;
        int64_t kOff = kOrigin + (kpi / 2) * (opIdx == 0 ? bit1 : bit0);
        SmallVector<Value> elems = unpackWord(b, loc, words[mi], elem, kw);
        for (unsigned e = 0; e < kw; ++e) {
          std::vector<int64_t> offset(2);
          offset[nd] = ndOff;
          offset[kDim] = kOff + e;
          auto it = byOffset.find(offset);
          if (it == byOffset.end()) {
            op->emitOpError("internal error: ldmatrix result without a dot-operand register");
            return failure();
          }
          result[it->second] = elems[e];
        }
      }
    }
  for (int64_t r = 0; r < out.num_registers(); ++r)
    if (!result[r] && steps.contains(out.register_offset(r)[kDim] / kpi)) {
      op->emitOpError("internal error: dot-operand register not loaded by ldmatrix");
      return failure();
    }
  return result;
}

namespace {

/// Whether `op` moves an fp8 accumulator into a dot operand by quad shuffles.
bool isQuadShuffled(ConvertLayoutOp op) {
  return quadShuffleToFp8Operand(cast<RankedTensorType>(op.getSource().getType()),
                                 cast<RankedTensorType>(op.getResult().getType()));
}

/// Whether `op` goes through a swizzled tile (rather than renaming registers, warp
/// shuffles or the generic conversion).
bool isStaged(TileLowering &t, ConvertLayoutOp op) {
  if (stagedDotOperandDim(op) < 0 || t.target().number() < 80 || isQuadShuffled(op))
    return false;
  // An accumulator whose warps own whole rows is already the next dot's A operand
  // (after a cast to 16 bits): the generic lowering renames its registers.
  return op->hasAttr(kScratchWithPreviousAttr) ||
         !threadLocalRegisters(op.getSource().getType(), op.getResult().getType());
}

/// Whether a staged conversion is lowered by the dot that consumes it: its only user is
/// the dot right after it (after the dot's other staged conversion at most). The dot
/// then reads the operand one K step at a time between its mma.sync steps, so one
/// step's fragments are live instead of the whole operand (64 registers per thread for
/// the [64, 64] B operand of an attention step).
bool lowersWithDot(TileLowering &t, ConvertLayoutOp op) {
  if (!isStaged(t, op) || !op->hasOneUse())
    return false;
  Operation *dot = *op->user_begin();
  if (!isa<DotOp>(dot) || dot->getBlock() != op->getBlock())
    return false;
  if (Operation *next = op->getNextNode(); next != dot) {
    auto other = dyn_cast<ConvertLayoutOp>(next);
    if (!other || other->getNextNode() != dot || !other->hasOneUse() || *other->user_begin() != dot ||
        !other->hasAttr(kScratchWithPreviousAttr) || !isStaged(t, other))
      return false;
  }
  // Staged together with the previous conversion: both go with the dot or neither.
  if (op->hasAttr(kScratchWithPreviousAttr)) {
    auto previous = dyn_cast_or_null<ConvertLayoutOp>(op->getPrevNode());
    return previous && previous->hasOneUse() && *previous->user_begin() == dot && lowersWithDot(t, previous);
  }
  return true;
}

/// convert_layout into a dot-operand layout through swizzled tiles; a dot's B operand
/// conversion marked tile.scratch_with_previous is staged together with A's. Leaves
/// `handled` false when the generic conversion must do it.
LogicalResult lowerToDotOperand(TileLowering &t, ConvertLayoutOp op, bool &handled) {
  if (isQuadShuffled(op) && t.target().number() >= 80) {
    handled = true;
    return lowerByQuadShuffle(t, op);
  }
  if (!isStaged(t, op))
    return success();
  int cd = stagedDotOperandDim(op);
  handled = true;
  if (lowersWithDot(t, op))
    return success();  // lowerDot stages it
  if (op->hasAttr(kScratchWithPreviousAttr) && t.hasRegs(op.getResult()))
    return success();  // staged with the A operand
  if (!t.sharedBase())
    return op.emitOpError("needs shared-memory scratch but the kernel has none (run tile-allocate-shared first)");
  std::vector<StagedOperand> operands;
  operands.emplace_back(t, op, cd);
  auto next = dyn_cast_or_null<ConvertLayoutOp>(op->getNextNode());
  if (next && next->hasAttr(kScratchWithPreviousAttr) && stagedDotOperandDim(next) >= 0)
    operands.emplace_back(t, next, stagedDotOperandDim(next));
  for (StagedOperand &operand : operands)
    operand.store();
  t.barrier();
  for (StagedOperand &operand : operands)
    if (failed(operand.load()))
      return failure();
  return success();
}

} // namespace

MmaFragments::MmaFragments(TileLowering &t, Operation *op, RankedTensorType aType, RankedTensorType bType,
                           RankedTensorType accType)
    : t(t), op(op), kSize(aType.getDimSize(1)), da(getDistribution(aType)), db(getDistribution(bType)),
      dc(getDistribution(accType)), aRegs(registersByOffset(da)), bRegs(registersByOffset(db)) {
  kw = cast<DotOperandLayoutAttr>(aType.getEncoding()).getKWidth();
  kpi = 8 * kw;
  I32 m{t, op->getLoc()};
  laneK = m.mul(m.rem(t.laneId(), 4), kw);
}

// One operand element, zero where K is shorter than one instruction.
FailureOr<Value> MmaFragments::element(const Registers &regs, const std::map<std::vector<int64_t>, int64_t> &map,
                                       std::vector<int64_t> offset, unsigned kDim) {
  auto it = map.find(offset);
  if (it == map.end()) {
    op->emitOpError("internal error: no operand register for an mma fragment");
    return failure();
  }
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  Value v = regs[it->second];
  if (kSize < kpi) {
    I32 m{t, loc};
    Value k = m.add(laneK, m.c(offset[kDim]));
    Value inside = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, k, m.c(kSize));
    v = b.create<arith::SelectOp>(loc, inside, v, t.constant(v.getType(), 0.0));
  }
  return v;
}

FailureOr<Value> MmaFragments::word(const Registers &regs, const std::map<std::vector<int64_t>, int64_t> &map,
                                    std::vector<int64_t> offset, unsigned kDim) {
  SmallVector<Value> elems;
  for (unsigned e = 0; e < kw; ++e) {
    std::vector<int64_t> at = offset;
    at[kDim] += e;
    FailureOr<Value> v = element(regs, map, at, kDim);
    if (failed(v))
      return failure();
    elems.push_back(*v);
  }
  if (kw == 1)
    return t.ptx(op->getLoc()).f32ToTf32(elems[0]);
  return packWord(t.builder(), op->getLoc(), elems);
}

FailureOr<SmallVector<Value>> MmaFragments::a(const Registers &regs, unsigned rm, unsigned rk) {
  SmallVector<Value> frag;
  const auto &cm = dc.dims()[0];
  for (unsigned kh = 0; kh < 2; ++kh)
    for (unsigned i = 0; i < 2; ++i) {
      FailureOr<Value> w = word(regs, aRegs, {rm * cm.coverage + 8 * i, int64_t(rk) * kpi + kh * kpi / 2}, 1);
      if (failed(w))
        return failure();
      frag.push_back(*w);
    }
  return frag;
}

FailureOr<SmallVector<Value>> MmaFragments::b(const Registers &regs, unsigned rn, unsigned rk) {
  SmallVector<Value> frag;
  const auto &cn = dc.dims()[1];
  for (unsigned kh = 0; kh < 2; ++kh) {
    FailureOr<Value> w = word(regs, bRegs, {int64_t(rk) * kpi + kh * kpi / 2, rn * cn.coverage}, 0);
    if (failed(w))
      return failure();
    frag.push_back(*w);
  }
  return frag;
}

FailureOr<Registers> emitMmaSync(TileLowering &t, Operation *op, RankedTensorType aType, RankedTensorType bType,
                                 RankedTensorType accType, const Registers &av, const Registers &bv,
                                 const Registers &cv, KSteps steps) {
  Location loc = op->getLoc();
  Type elem = aType.getElementType();
  MmaFragments fragments(t, op, aType, bType, accType);
  const unsigned kw = fragments.kw, kpi = fragments.kpi;
  std::string shape = kw == 4 ? "m16n8k32" : kw == 2 ? "m16n8k16" : "m16n8k8";
  std::string ab = kw == 1 ? std::string("tf32") : mmaTypeName(elem).str();
  int64_t kSize = aType.getDimSize(1);
  compiler::Distribution dc = getDistribution(accType);
  auto cRegs = registersByOffset(dc);

  const auto &cm = dc.dims()[0], &cn = dc.dims()[1];
  unsigned repK = std::max<int64_t>(1, kSize / kpi);
  // Fragments, built once per (m or n repeat, k step).
  std::map<std::pair<unsigned, unsigned>, SmallVector<Value>> aFrags, bFrags;
  for (unsigned rk = steps.begin; rk < std::min(repK, steps.end); ++rk) {
    for (unsigned rm = 0; rm < cm.repeats; ++rm) {
      auto frag = fragments.a(av, rm, rk);
      if (failed(frag))
        return failure();
      aFrags[{rm, rk}] = *frag;
    }
    for (unsigned rn = 0; rn < cn.repeats; ++rn) {
      auto frag = fragments.b(bv, rn, rk);
      if (failed(frag))
        return failure();
      bFrags[{rn, rk}] = *frag;
    }
  }

  Registers result(cv.begin(), cv.end());
  for (unsigned rk = steps.begin; rk < std::min(repK, steps.end); ++rk)
    for (unsigned rm = 0; rm < cm.repeats; ++rm)
      for (unsigned rn = 0; rn < cn.repeats; ++rn) {
        SmallVector<int64_t> idx;
        for (unsigned i = 0; i < 2; ++i)
          for (unsigned j = 0; j < 2; ++j) {
            auto it = cRegs.find({rm * cm.coverage + 8 * i, rn * cn.coverage + j});
            if (it == cRegs.end()) {
              op->emitOpError("internal error: no accumulator register for an mma tile");
              return failure();
            }
            idx.push_back(it->second);
          }
        SmallVector<Value> c;
        for (int64_t r : idx)
          c.push_back(result[r]);
        SmallVector<Value> d = t.ptx(loc).mma(shape, ab, aFrags[{rm, rk}], bFrags[{rn, rk}], c);
        for (unsigned i = 0; i < 4; ++i)
          result[idx[i]] = d[i];
      }
  return result;
}

namespace {

/// The accumulator's registers as mma.sync reads them: zeros where a fresh dot restarts.
Registers accumulatorIn(TileLowering &t, DotOp op) {
  Registers acc = t.regs(op.getAcc());
  if (Value fresh = op.getFresh())
    for (Value &r : acc)
      r = t.builder().create<arith::SelectOp>(op.getLoc(), t.regs(fresh)[0], t.constant(r.getType(), 0.0), r);
  return acc;
}

LogicalResult lowerDot(TileLowering &t, DotOp op) {
  auto accType = op.getAcc().getType();
  auto aType = op.getA().getType(), bType = op.getB().getType();
  Type elem = aType.getElementType();
  if (!isa_and_nonnull<MmaLayoutAttr>(accType.getEncoding()) ||
      !isa_and_nonnull<DotOperandLayoutAttr>(aType.getEncoding()) ||
      !isa_and_nonnull<DotOperandLayoutAttr>(bType.getEncoding()))
    return op.emitOpError("runs on the CPU interpreter only for ")
           << elem << " operands with " << accType.getElementType()
           << " accumulation: tensor cores take bf16, f16 and fp8 operands (and f32 as tf32) with "
              "f32 accumulation";
  if (t.target().number() < 80)
    return op.emitOpError("needs tensor cores (mma.sync, sm_80 or newer), the target is ") << t.arch();
  if (isFp8(elem) && t.target().number() < 89)
    return op.emitOpError("takes fp8 operands on sm_89 or newer, the target is ") << t.arch();
  // a_k_interleaved holds only where a's registers were renamed from an fp8 accumulator.
  if (op.getAKInterleaved()) {
    auto convert = op.getA().getDefiningOp<ConvertLayoutOp>();
    if (!convert || !isQuadShuffled(convert))
      return op.emitOpError("a_k_interleaved needs its a operand to be an fp8 tile in the accumulator layout of a "
                            "product like it (its registers renamed into the A operand)");
  }
  // Operands whose conversions go with this dot (stored together, one barrier) or that
  // it reads from shared tiles: each K step's fragments are read right before that
  // step's mma.sync.
  std::vector<StagedOperand> staged;
  std::vector<std::pair<unsigned, std::function<FailureOr<Registers>(KSteps)>>> readers;
  SmallVector<Registers, 2> operands{Registers(), Registers()};
  // On wgmma B stays in its shared tile and A is read whole.
  std::optional<SharedTileView> wgmmaB = wgmmaSharedB(t, op);
  std::optional<SharedTileView> wgmmaA = wgmmaSharedA(t, op);
  for (unsigned i = 0; i < 2; ++i) {
    auto convert = op->getOperand(i).getDefiningOp<ConvertLayoutOp>();
    if ((i == 1 && wgmmaB) || (i == 0 && wgmmaA))
      continue;
    if (convert && readsSharedAtDot(convert)) {
      SharedTileView view = sharedTileView(t, convert.getSource());
      auto dstType = cast<RankedTensorType>(convert.getType());
      readers.emplace_back(i, [&t, convert, view, dstType](KSteps steps) {
        return readDotOperand(t, convert, dstType, view.cd, view.staging, view.base, steps);
      });
    } else if (convert && lowersWithDot(t, convert)) {
      staged.emplace_back(t, convert, stagedDotOperandDim(convert));
    } else {
      operands[i] = t.regs(op->getOperand(i));
      continue;
    }
    operands[i] = Registers(getDistribution(cast<RankedTensorType>(convert.getType())).num_registers());
  }
  if (wgmmaB) {
    for (StagedOperand &operand : staged)
      operand.store();
    if (!staged.empty())
      t.barrier();
    for (StagedOperand &operand : staged)
      readers.emplace_back(0, [&operand](KSteps steps) { return operand.read(steps); });
    for (auto &[index, read] : readers) {
      FailureOr<Registers> regs = read(KSteps{});
      if (failed(regs))
        return failure();
      operands[index] = std::move(*regs);
    }
    if (auto convert = op.getA().getDefiningOp<ConvertLayoutOp>();
        convert && !wgmmaA && !t.hasRegs(convert.getResult()))
      t.setRegs(convert.getResult(), operands[0]);
    FailureOr<Registers> result = emitWgmma(t, op, operands[0], *wgmmaB, t.regs(op.getAcc()), wgmmaA);
    if (failed(result))
      return failure();
    t.setRegs(op.getResult(), std::move(*result));
    return success();
  }
  if (staged.empty() && readers.empty()) {
    FailureOr<Registers> result =
        emitMmaSync(t, op, aType, bType, accType, operands[0], operands[1], accumulatorIn(t, op));
    if (failed(result))
      return failure();
    t.setRegs(op.getResult(), std::move(*result));
    return success();
  }
  for (StagedOperand &operand : staged) {
    operand.store();
    unsigned index = operand.op.getResult() == op.getA() ? 0 : 1;
    readers.emplace_back(index, [&operand](KSteps steps) { return operand.read(steps); });
  }
  if (!staged.empty())
    t.barrier();
  const unsigned kpi = 8 * cast<DotOperandLayoutAttr>(aType.getEncoding()).getKWidth();
  const unsigned repK = std::max<int64_t>(1, aType.getDimSize(1) / kpi);
  Registers acc = accumulatorIn(t, op);
  for (unsigned rk = 0; rk < repK; ++rk) {
    KSteps step{rk, rk + 1};
    for (auto &[index, read] : readers) {
      FailureOr<Registers> regs = read(step);
      if (failed(regs))
        return failure();
      for (size_t r = 0; r < regs->size(); ++r)
        if ((*regs)[r])
          operands[index][r] = (*regs)[r];
    }
    FailureOr<Registers> result = emitMmaSync(t, op, aType, bType, accType, operands[0], operands[1], acc, step);
    if (failed(result))
      return failure();
    acc = std::move(*result);
  }
  for (unsigned i = 0; i < 2; ++i)
    if (auto convert = op->getOperand(i).getDefiningOp<ConvertLayoutOp>(); convert && !t.hasRegs(convert.getResult()))
      t.setRegs(convert.getResult(), operands[i]);
  t.setRegs(op.getResult(), std::move(acc));
  return success();
}

} // namespace

LogicalResult lowerDotOp(TileLowering &t, Operation *op, bool &handled) {
  handled = false;
  if (auto dot = dyn_cast<DotOp>(op)) {
    handled = true;
    return lowerDot(t, dot);
  }
  if (auto wait = dyn_cast<DotWaitOp>(op)) {
    handled = true;
    return lowerDotWait(t, wait);
  }
  if (auto convert = dyn_cast<ConvertLayoutOp>(op))
    return lowerToDotOperand(t, convert, handled);
  return success();
}

} // namespace tokamax::tile
