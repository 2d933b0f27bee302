//===- LowerMemory.cpp - Global memory accesses and atomics -----------------===//
//
// Block accesses compute each register's coordinates, mask them against the tensor's
// dims and access `vector` contiguous elements at once when the layout, the strides and
// the known alignment of the block offset allow (16 bytes per thread for the default
// layouts; mma accumulator tiles trade pairs among lanes first to get there). Pointer-
// tile accesses are per element. Accesses are predicated inline PTX.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <map>

using namespace mlir;

namespace tokamax::tile {

namespace {

/// How a block access reaches memory: `vector` contiguous elements at once, and whether
/// the last dimension's extent is not a multiple of it (so the vector that straddles the
/// end must fall back to element accesses).
struct Vectorization {
  unsigned vector = 1;
  bool ragged = false;
};

Vectorization blockVectorization(RankedTensorType type, ArrayRef<int64_t> dims,
                                 ArrayRef<int64_t> strides, Value lastOffset) {
  compiler::Distribution dist = getDistribution(type);
  size_t last = dims.size() - 1;
  // The layout's fastest dimension must be the tensor's unit-stride last dimension.
  if (dist.parent().order.front() != dist.kept()[last] || strides[last] != 1)
    return {};
  unsigned bytes = elementBytes(type.getElementType());
  unsigned vec = std::min<unsigned>(dist.contiguous_registers(), 16 / bytes);
  // Every vector must start 16-byte aligned: the block offset and the row strides must be
  // multiples of it (the base pointer is checked at launch).
  auto divides = [&](int64_t v) { return v % vec == 0; };
  while (vec > 1 && !(divides(knownMultipleOf(lastOffset)) && llvm::all_of(strides.drop_back(), divides)))
    vec /= 2;
  if (vec <= 1)
    return {};
  return {vec, dims[last] % vec != 0};
}

struct BlockAddress {
  Value ptr;
  Value inBounds;
};

/// A run-time bound on one dimension's index (tile.block_store's limit), or none.
struct DimLimit {
  int64_t dim = -1;
  Value limit;
};

/// The address of register `r`'s element of a block at `offsets` and whether it lies in
/// the tensor (and below `bound`). The tile's dims are the tensor's, or, when `block` is
/// given, the block's dims that are not unit dims (in order; the unit dims sit at their
/// offset).
BlockAddress blockAddress(TileLowering &t, Location loc, RankedTensorType type, int64_t r,
                          Value base, Type elem, ValueRange offsets, ArrayRef<int64_t> dims,
                          ArrayRef<int64_t> strides, ArrayRef<int64_t> block = {}, const DimLimit &bound = {}) {
  OpBuilder &b = t.builder();
  Registers coords = t.coords(type, r);
  Value inBounds = b.create<arith::ConstantOp>(loc, b.getBoolAttr(true));
  Value linear = t.i64(0);
  size_t kept = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    Value idx = t.regs(offsets[d])[0];
    if (block.empty() || (block[d] != 1 && kept < coords.size()))
      idx = b.create<arith::AddIOp>(loc, coords[block.empty() ? d : kept++], idx);
    // Unsigned compare also rejects negative offsets.
    inBounds = b.create<arith::AndIOp>(
        loc, inBounds, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, idx, t.i32(dims[d])));
    if (bound.dim == int64_t(d))
      inBounds = b.create<arith::AndIOp>(
          loc, inBounds, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, idx, t.regs(bound.limit)[0]));
    Value wide = b.create<arith::ExtSIOp>(loc, b.getI64Type(), idx);
    linear = b.create<arith::AddIOp>(loc, linear, b.create<arith::MulIOp>(loc, wide, t.i64(strides[d])));
  }
  Value ptr = b.create<LLVM::GEPOp>(loc, base.getType(), elem, base, ValueRange{linear});
  return {ptr, inBounds};
}

/// Packs `values` (one element type) into `words` integers of `wordBits`.
SmallVector<Value> packWords(OpBuilder &b, Location loc, ArrayRef<Value> values, unsigned wordBits) {
  Type elem = values.front().getType();
  unsigned elemBits = elem.getIntOrFloatBitWidth();
  if (elemBits == wordBits && elem.isInteger(wordBits))
    return SmallVector<Value>(values);
  auto vecType = VectorType::get({int64_t(values.size())}, elem);
  Value vec = b.create<LLVM::UndefOp>(loc, vecType);
  for (auto [i, v] : llvm::enumerate(values))
    vec = b.create<LLVM::InsertElementOp>(loc, vec, v,
                                          b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i)));
  unsigned words = values.size() * elemBits / wordBits;
  auto wordType = b.getIntegerType(wordBits);
  Value cast = b.create<LLVM::BitcastOp>(loc, VectorType::get({int64_t(words)}, wordType), vec);
  SmallVector<Value> result;
  for (unsigned i = 0; i < words; ++i)
    result.push_back(b.create<LLVM::ExtractElementOp>(
        loc, cast, b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i))));
  return result;
}

SmallVector<Value> unpackWords(OpBuilder &b, Location loc, ArrayRef<Value> words, Type elem,
                               unsigned count) {
  if (words.size() == count && words.front().getType() == elem)
    return SmallVector<Value>(words);
  Type wordType = words.front().getType();
  auto wordsVec = VectorType::get({int64_t(words.size())}, wordType);
  Value vec = b.create<LLVM::UndefOp>(loc, wordsVec);
  for (auto [i, w] : llvm::enumerate(words))
    vec = b.create<LLVM::InsertElementOp>(loc, vec, w,
                                          b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i)));
  Value cast = b.create<LLVM::BitcastOp>(loc, VectorType::get({int64_t(count)}, elem), vec);
  SmallVector<Value> result;
  for (unsigned i = 0; i < count; ++i)
    result.push_back(b.create<LLVM::ExtractElementOp>(
        loc, cast, b.create<LLVM::ConstantOp>(loc, b.getI32Type(), int64_t(i))));
  return result;
}

unsigned wordBitsFor(unsigned totalBits) { return totalBits >= 32 ? 32 : totalBits; }

/// Loads `count` elements of `elem` at `ptr` under `pred`; masked lanes read as zero.
SmallVector<Value> loadElements(TileLowering &t, Location loc, Value ptr, Value pred, Type elem,
                                unsigned count) {
  unsigned total = count * elem.getIntOrFloatBitWidth();
  unsigned wordBits = elem.isF64() || elem.isInteger(64) ? 64 : wordBitsFor(total);
  SmallVector<Value> words = t.ptx(loc).predicatedLoad(ptr, pred, total / wordBits, wordBits);
  return unpackWords(t.builder(), loc, words, elem, count);
}

void storeElements(TileLowering &t, Location loc, Value ptr, Value pred, ArrayRef<Value> values) {
  Type elem = values.front().getType();
  unsigned total = values.size() * elem.getIntOrFloatBitWidth();
  unsigned wordBits = elem.isF64() || elem.isInteger(64) ? 64 : wordBitsFor(total);
  t.ptx(loc).predicatedStore(ptr, pred, packWords(t.builder(), loc, values, wordBits));
}

/// i1 is stored as a byte.
Value toMemory(OpBuilder &b, Location loc, Value v) {
  return v.getType().isInteger(1) ? b.create<arith::ExtUIOp>(loc, b.getI8Type(), v).getResult() : v;
}
Value fromMemory(OpBuilder &b, Location loc, Value v, Type elem) {
  if (!elem.isInteger(1))
    return v;
  return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v,
                                 b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(0)));
}

Value withPadding(TileLowering &t, Location loc, Value loaded, Value inBounds, double padding) {
  if (padding == 0.0)
    return loaded;
  return t.builder().create<arith::SelectOp>(loc, inBounds, loaded, t.constant(loaded.getType(), padding));
}

/// Whether the `vec` elements from the last coordinate of `addr` are all inside.
Value wholeVectorInside(TileLowering &t, Location loc, RankedTensorType type, int64_t r,
                        ValueRange offsets, ArrayRef<int64_t> dims, Value inBounds, unsigned vec) {
  OpBuilder &b = t.builder();
  Value last = b.create<arith::AddIOp>(loc, t.coords(type, r).back(), t.regs(offsets.back())[0]);
  Value end = b.create<arith::AddIOp>(loc, last, t.i32(vec));
  return b.create<arith::AndIOp>(
      loc, inBounds, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle, end, t.i32(dims.back())));
}

LogicalResult lowerBlockLoad(TileLowering &t, BlockLoadOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto type = op.getResult().getType();
  Type tileElem = type.getElementType();
  Type elem = t.registerType(tileElem);
  Type memElem = elem.isInteger(1) ? b.getI8Type() : elem;
  Vectorization v = blockVectorization(type, op.getDims(), op.getStrides(), op.getOffsets().back());
  int64_t n = getDistribution(type).num_registers();
  double padding = op.getPadding().convertToDouble();
  Registers result;
  for (int64_t r = 0; r < n; r += v.vector) {
    BlockAddress addr = blockAddress(t, loc, type, r, t.regs(op.getBase())[0], memElem,
                                     op.getOffsets(), op.getDims(), op.getStrides());
    SmallVector<Value> values;
    if (!v.ragged) {
      values = loadElements(t, loc, addr.ptr, addr.inBounds, memElem, v.vector);
    } else {
      // Whole vectors load at once; the one straddling the end of the row loads element
      // by element (a branch taken only there).
      Value whole = wholeVectorInside(t, loc, type, r, op.getOffsets(), op.getDims(), addr.inBounds, v.vector);
      auto branch = b.create<scf::IfOp>(loc, SmallVector<Type>(v.vector, memElem), whole, true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&branch.getThenRegion().front());
        b.create<scf::YieldOp>(loc, loadElements(t, loc, addr.ptr, whole, memElem, v.vector));
        b.setInsertionPointToStart(&branch.getElseRegion().front());
        SmallVector<Value> parts;
        for (unsigned i = 0; i < v.vector; ++i) {
          BlockAddress one = blockAddress(t, loc, type, r + i, t.regs(op.getBase())[0], memElem,
                                          op.getOffsets(), op.getDims(), op.getStrides());
          parts.push_back(loadElements(t, loc, one.ptr, one.inBounds, memElem, 1)[0]);
        }
        b.create<scf::YieldOp>(loc, parts);
      }
      values.assign(branch.getResults().begin(), branch.getResults().end());
    }
    for (auto [i, value] : llvm::enumerate(values)) {
      Value inside = addr.inBounds;
      if (v.ragged && padding != 0.0)
        inside = blockAddress(t, loc, type, r + i, t.regs(op.getBase())[0], memElem, op.getOffsets(),
                              op.getDims(), op.getStrides()).inBounds;
      result.push_back(withPadding(t, loc, fromMemory(b, loc, value, tileElem), inside, padding));
    }
  }
  t.setRegs(op, std::move(result));
  return success();
}

/// A block store of an mma accumulator tile (a matmul's epilogue). Each thread holds
/// pairs of adjacent elements, so stored as they are, a quad of lanes fills half a
/// 32-byte sector per row (16-bit) and every store moves 4 or 8 bytes. Instead the E =
/// 16 / pair-bytes lanes of a subgroup of a quad trade pairs of E consecutive n-repeats
/// (an E x E transpose: E - 1 shuffles per 32-bit word), after which lane i holds 16
/// contiguous bytes of n-repeat i: one vector store each, whole sectors per quad.
/// Returns false, emitting nothing, when the tile or the tensor does not qualify.
bool storeMmaTileAsVectors(TileLowering &t, BlockStoreOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto type = op.getValue().getType();
  Type elem = t.registerType(type.getElementType());
  if (!isa_and_nonnull<MmaLayoutAttr>(type.getEncoding()) || type.getRank() != 2 || !isa<FloatType>(elem) ||
      op.getLimit())
    return false;
  unsigned bytes = elementBytes(elem);
  ArrayRef<int64_t> dims = op.getDims(), strides = op.getStrides();
  compiler::Distribution dist = getDistribution(type);
  if ((bytes != 2 && bytes != 4) || dist.needs_wrap(0) || dist.needs_wrap(1))
    return false;
  const unsigned E = 8 / bytes, words = bytes / 2;  // pairs per 16 bytes; 32-bit words per pair
  const int64_t vec = 16 / bytes;
  const auto &cm = dist.dims()[0], &cn = dist.dims()[1];
  if (cn.repeats % E != 0 || strides[1] != 1 || strides[0] % vec != 0 || dims[1] % vec != 0 ||
      knownMultipleOf(t.regs(op.getOffsets()[1])[0]) % vec != 0)
    return false;

  std::map<std::pair<int64_t, int64_t>, int64_t> byOffset;
  for (int64_t r = 0; r < dist.num_registers(); ++r)
    byOffset[{dist.register_offset(r)[0], dist.register_offset(r)[1]}] = r;
  const Registers &values = t.regs(op.getValue());
  auto i32 = b.getI32Type();
  // The 32-bit words of the pair at (row offset, n-repeat).
  auto pairWords = [&](int64_t rowOff, int64_t rn) {
    int64_t r0 = byOffset.at({rowOff, rn * cn.coverage});
    int64_t r1 = byOffset.at({rowOff, rn * cn.coverage + 1});
    if (bytes == 4)
      return SmallVector<Value>{b.create<LLVM::BitcastOp>(loc, i32, values[r0]),
                                b.create<LLVM::BitcastOp>(loc, i32, values[r1])};
    Value pair = b.create<LLVM::UndefOp>(loc, VectorType::get({2}, elem));
    pair = b.create<LLVM::InsertElementOp>(loc, pair, values[r0], t.i32(0));
    pair = b.create<LLVM::InsertElementOp>(loc, pair, values[r1], t.i32(1));
    return SmallVector<Value>{b.create<LLVM::BitcastOp>(loc, i32, pair)};
  };
  auto eq = [&](Value x, Value y) { return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, x, y); };
  // v[index] for a lane-dependent index among E candidates.
  auto pick = [&](ArrayRef<Value> v, Value index) {
    Value chosen = v[0];
    for (unsigned j = 1; j < v.size(); ++j)
      chosen = b.create<arith::SelectOp>(loc, eq(index, t.i32(j)), v[j], chosen);
    return chosen;
  };
  auto modE = [&](Value x) { return b.create<arith::AndIOp>(loc, x, t.i32(E - 1)); };
  Value lane = t.laneId();
  Value i = modE(lane);
  Value groupBase = b.create<arith::AndIOp>(loc, lane, t.i32(~int64_t(E - 1)));
  Value owns = t.threadOwns(type);
  Value base = t.regs(op.getBase())[0];
  Value colShift = b.create<arith::MulIOp>(loc, i, t.i32(cn.coverage - 2));

  for (unsigned rm = 0; rm < cm.repeats; ++rm)
    for (int64_t half = 0; half < 2; ++half)
      for (unsigned rnBase = 0; rnBase < cn.repeats; rnBase += E) {
        int64_t rowOff = rm * cm.coverage + 8 * half;
        std::vector<SmallVector<Value>> mine;  // [j][w]: this lane's pair of repeat rnBase + j
        for (unsigned j = 0; j < E; ++j)
          mine.push_back(pairWords(rowOff, rnBase + j));
        // Round r: send the pair of repeat (i + r) mod E, receive from lane (i - r) mod E
        // its pair of repeat i, which is pair (i - r) mod E of the 16-byte vector.
        std::vector<SmallVector<Value>> received(E);
        for (unsigned r = 0; r < E; ++r) {
          Value sendIndex = modE(b.create<arith::AddIOp>(loc, i, t.i32(r)));
          Value from = b.create<arith::OrIOp>(loc, groupBase, modE(b.create<arith::AddIOp>(loc, i, t.i32(E - r))));
          for (unsigned w = 0; w < words; ++w) {
            SmallVector<Value> candidates;
            for (unsigned j = 0; j < E; ++j)
              candidates.push_back(mine[j][w]);
            Value sent = pick(candidates, sendIndex);
            received[r].push_back(r == 0 ? sent
                                         : b.create<NVVM::ShflOp>(loc, i32, t.i32(-1), sent, from, t.i32(31),
                                                                  NVVM::ShflKind::idx, UnitAttr())
                                               .getResult());
          }
        }
        // Position p of the vector came in round (i - p) mod E.
        SmallVector<Value> vector;
        for (unsigned p = 0; p < E; ++p) {
          Value round = modE(b.create<arith::AddIOp>(loc, i, t.i32(E - p)));
          for (unsigned w = 0; w < words; ++w) {
            SmallVector<Value> candidates;
            for (unsigned r = 0; r < E; ++r)
              candidates.push_back(received[r][w]);
            vector.push_back(pick(candidates, round));
          }
        }
        // This lane's vector starts at its own pair of repeat rnBase, moved to repeat
        // rnBase + i and back to the subgroup's first pair: + i * (coverage - 2).
        Registers coords = t.coords(type, byOffset.at({rowOff, int64_t(rnBase) * cn.coverage}));
        Value row = b.create<arith::AddIOp>(loc, coords[0], t.regs(op.getOffsets()[0])[0]);
        Value col = b.create<arith::AddIOp>(loc, b.create<arith::AddIOp>(loc, coords[1], colShift),
                                            t.regs(op.getOffsets()[1])[0]);
        Value inside = b.create<arith::AndIOp>(
            loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, row, t.i32(dims[0])),
            b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, col, t.i32(dims[1])));
        Value linear = b.create<arith::AddIOp>(
            loc, b.create<arith::MulIOp>(loc, b.create<arith::ExtUIOp>(loc, b.getI64Type(), row), t.i64(strides[0])),
            b.create<arith::ExtUIOp>(loc, b.getI64Type(), col));
        Value ptr = b.create<LLVM::GEPOp>(loc, base.getType(), elem, base, ValueRange{linear});
        t.ptx(loc).predicatedStore(ptr, b.create<arith::AndIOp>(loc, inside, owns), vector);
      }
  return true;
}

LogicalResult lowerBlockStore(TileLowering &t, BlockStoreOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto type = op.getValue().getType();
  Type elem = t.registerType(type.getElementType());
  Type memElem = elem.isInteger(1) ? b.getI8Type() : elem;
  if (storeMmaTileAsVectors(t, op))
    return success();
  Vectorization v = blockVectorization(type, op.getDims(), op.getStrides(), op.getOffsets().back());
  const Registers &values = t.regs(op.getValue());
  // Replicated threads store the same values; only the canonical copy writes.
  Value owns = t.threadOwns(type);
  compiler::Distribution dist = getDistribution(type);
  const DimLimit bound = op.getLimit() ? DimLimit{*op.getLimitDim(), op.getLimit()} : DimLimit{};
  for (int64_t r = 0; r < dist.num_registers(); r += v.vector) {
    if (!dist.register_owns(r))
      continue;
    BlockAddress addr = blockAddress(t, loc, type, r, t.regs(op.getBase())[0], memElem,
                                     op.getOffsets(), op.getDims(), op.getStrides(), {}, bound);
    SmallVector<Value> chunk;
    for (unsigned i = 0; i < v.vector; ++i)
      chunk.push_back(toMemory(b, loc, values[r + i]));
    Value pred = b.create<arith::AndIOp>(loc, addr.inBounds, owns);
    if (!v.ragged) {
      storeElements(t, loc, addr.ptr, pred, chunk);
      continue;
    }
    Value whole = wholeVectorInside(t, loc, type, r, op.getOffsets(), op.getDims(), pred, v.vector);
    auto branch = b.create<scf::IfOp>(loc, TypeRange{}, whole, true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(branch.getThenRegion().front().getTerminator());
    storeElements(t, loc, addr.ptr, whole, chunk);
    b.setInsertionPoint(branch.getElseRegion().front().getTerminator());
    for (unsigned i = 0; i < v.vector; ++i) {
      BlockAddress one = blockAddress(t, loc, type, r + i, t.regs(op.getBase())[0], memElem,
                                      op.getOffsets(), op.getDims(), op.getStrides(), {}, bound);
      storeElements(t, loc, one.ptr, b.create<arith::AndIOp>(loc, one.inBounds, owns), {chunk[i]});
    }
  }
  return success();
}

/// The PTX type of an atomic add of `elem` (integers add as unsigned).
const char *atomicAddType(Type elem) {
  return elem.isF32() ? "f32" : elem.isF64() ? "f64" : elem.isInteger(32) ? "u32" : "u64";
}

/// One red.global.add per element this thread owns; the value's dims are the block's
/// dims that are not unit dims, in order.
LogicalResult lowerBlockAtomicAdd(TileLowering &t, BlockAtomicAddOp op) {
  OpBuilder &b = t.builder();
  Location loc = op.getLoc();
  auto type = op.getValue().getType();
  Type elem = type.getElementType();
  const Registers &values = t.regs(op.getValue());
  Value owns = t.threadOwns(type);
  compiler::Distribution dist = getDistribution(type);
  for (int64_t r = 0; r < dist.num_registers(); ++r) {
    if (!dist.register_owns(r))
      continue;
    BlockAddress addr = blockAddress(t, loc, type, r, t.regs(op.getBase())[0], elem, op.getOffsets(),
                                     op.getDims(), op.getStrides(), op.getBlock());
    t.ptx(loc).reduction("add", atomicAddType(elem), addr.ptr, b.create<arith::AndIOp>(loc, addr.inBounds, owns),
                         values[r]);
  }
  return success();
}

Value maskAt(TileLowering &t, Value mask, size_t i) {
  if (!mask)
    return t.builder().create<arith::ConstantOp>(t.builder().getUnknownLoc(),
                                                 t.builder().getBoolAttr(true));
  return t.regs(mask)[i];
}

LogicalResult lowerAtomic(TileLowering &t, Operation *op, Value ptrs, Value mask,
                          ValueRange args) {
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  auto type = cast<RankedTensorType>(ptrs.getType());
  Type elem = getElementTypeOrSelf(op->getResult(0).getType());
  compiler::Distribution dist = getDistribution(type);
  Value owns = t.threadOwns(type);
  std::string ty = elem.isF32() ? "f32" : elem.isF64() ? "f64" : elem.isInteger(32) ? "s32" : "s64";
  Registers result;
  for (int64_t r = 0; r < dist.num_registers(); ++r) {
    Value pred = b.create<arith::AndIOp>(loc, maskAt(t, mask, r), owns);
    if (!dist.register_owns(r))
      pred = b.create<arith::ConstantOp>(loc, b.getBoolAttr(false));
    Value ptr = t.regs(ptrs)[r];
    SmallVector<Value> operands;
    for (Value a : args)
      operands.push_back(t.regs(a)[r]);
    PtxBuilder ptx = t.ptx(loc);
    Value old;
    if (auto cas = dyn_cast<AtomicCASOp>(op)) {
      old = ptx.atomic("cas", elem.isInteger(32) ? "b32" : "b64", ptr, pred, operands, elem);
    } else if (cast<AtomicRMWOp>(op).getKind() == AtomicKind::Add && op->getResult(0).use_empty()) {
      // Nobody reads the old value: a reduction, which needs no round trip to the thread.
      ptx.reduction("add", atomicAddType(elem), ptr, pred, operands[0]);
      old = b.create<arith::ConstantOp>(loc, b.getZeroAttr(elem));
    } else if (cast<AtomicRMWOp>(op).getKind() == AtomicKind::Add) {
      old = ptx.atomic("add", atomicAddType(elem), ptr, pred, operands, elem);
    } else if (elem.isF32()) {
      // Float max through integer atomics: non-negative floats order like signed ints,
      // negative ones in reverse like unsigned ints.
      Value bits = b.create<arith::BitcastOp>(loc, b.getI32Type(), operands[0]);
      Value nonNegative = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, bits, t.i32(0));
      Value oldPos = ptx.atomic("max", "s32", ptr, b.create<arith::AndIOp>(loc, pred, nonNegative),
                                bits, b.getI32Type());
      Value notNonNegative = b.create<arith::XOrIOp>(loc, nonNegative, b.create<arith::ConstantOp>(loc, b.getBoolAttr(true)));
      Value oldNeg = ptx.atomic("min", "u32", ptr, b.create<arith::AndIOp>(loc, pred, notNonNegative),
                                bits, b.getI32Type());
      old = b.create<arith::BitcastOp>(loc, elem,
                                       b.create<arith::SelectOp>(loc, nonNegative, oldPos, oldNeg));
    } else {
      old = ptx.atomic("max", ty, ptr, pred, operands, elem);
    }
    result.push_back(old);
  }
  t.setRegs(op->getResult(0), std::move(result));
  return success();
}

/// What both tile.semaphore_* lowerings start from: the address of the i32 counter at
/// the op's offsets, the op's i32 value, and whether this is thread 0 (the one thread
/// that touches the counter).
struct SemaphoreAccess {
  Value ptr, value, first;
};

template <typename Op>
SemaphoreAccess semaphoreAccess(TileLowering &t, Location loc, Op op) {
  OpBuilder &b = t.builder();
  Value linear = t.i64(0);
  for (auto [offset, stride] : llvm::zip(op.getOffsets(), op.getStrides())) {
    Value wide = b.create<arith::ExtSIOp>(loc, b.getI64Type(), t.regs(offset)[0]);
    linear = b.create<arith::AddIOp>(loc, linear, b.create<arith::MulIOp>(loc, wide, t.i64(stride)));
  }
  Value base = t.regs(op.getBase())[0];
  Value ptr = b.create<LLVM::GEPOp>(loc, base.getType(), b.getI32Type(), base, ValueRange{linear});
  Value value = t.regs(op.getValue())[0];
  Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, t.threadId(), t.i32(0));
  return {ptr, value, first};
}

/// Thread 0 spins on ld.acquire.gpu until the counter holds the value, then a barrier
/// releases the other threads (bar.sync orders thread 0's acquire before their reads).
LogicalResult lowerSemaphoreWait(TileLowering &t, SemaphoreWaitOp op) {
  Location loc = op.getLoc();
  auto [ptr, expected, first] = semaphoreAccess(t, loc, op);
  t.when(loc, first, [&] {
    t.builder().create<scf::WhileOp>(
        loc, TypeRange{}, ValueRange{},
        [&](OpBuilder &nb, Location l, ValueRange) {
          Value now = PtxBuilder(nb, l).loadAcquireGpu(ptr);
          Value pending = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ne, now, expected);
          nb.create<scf::ConditionOp>(l, pending, ValueRange{});
        },
        [&](OpBuilder &nb, Location l, ValueRange) { nb.create<scf::YieldOp>(l); });
  });
  t.barrier();
  return success();
}

/// Thread 0 waits for its TMA stores (if any were issued), a barrier (every thread's
/// writes done), then thread 0's release add.
LogicalResult lowerSemaphoreSignal(TileLowering &t, SemaphoreSignalOp op) {
  Location loc = op.getLoc();
  auto [ptr, value, first] = semaphoreAccess(t, loc, op);
  if (t.hasBulkStores())
    t.when(loc, first, [&] { t.ptx(loc).bulkWaitGroup(0); });
  t.barrier();
  t.when(loc, first, [&] { t.ptx(loc).reductionAddRelease(ptr, value); });
  return success();
}

} // namespace

LogicalResult lowerMemoryOp(TileLowering &t, Operation *op, bool &handled) {
  handled = true;
  OpBuilder &b = t.builder();
  Location loc = op->getLoc();
  if (auto load = dyn_cast<BlockLoadOp>(op))
    return lowerBlockLoad(t, load);
  if (auto add = dyn_cast<BlockAtomicAddOp>(op))
    return lowerBlockAtomicAdd(t, add);
  if (auto store = dyn_cast<BlockStoreOp>(op))
    return lowerBlockStore(t, store);
  if (auto wait = dyn_cast<SemaphoreWaitOp>(op))
    return lowerSemaphoreWait(t, wait);
  if (auto signal = dyn_cast<SemaphoreSignalOp>(op))
    return lowerSemaphoreSignal(t, signal);
  if (auto load = dyn_cast<LoadOp>(op)) {
    Type tileElem = load.getResult().getType().getElementType();
    Type elem = t.registerType(tileElem);
    Type memElem = elem.isInteger(1) ? b.getI8Type() : elem;
    Registers result;
    const Registers &ptrs = t.regs(load.getPtrs());
    for (size_t i = 0; i < ptrs.size(); ++i) {
      Value pred = maskAt(t, load.getMask(), i);
      Value v = fromMemory(b, loc, loadElements(t, loc, ptrs[i], pred, memElem, 1)[0], tileElem);
      if (load.getOther())
        v = b.create<arith::SelectOp>(loc, pred, v, t.regs(load.getOther())[i]);
      result.push_back(v);
    }
    t.setRegs(load, std::move(result));
    return success();
  }
  if (auto store = dyn_cast<StoreOp>(op)) {
    auto type = store.getPtrs().getType();
    Value owns = t.threadOwns(type);
    compiler::Distribution dist = getDistribution(type);
    const Registers &ptrs = t.regs(store.getPtrs());
    for (size_t i = 0; i < ptrs.size(); ++i) {
      if (!dist.register_owns(i))
        continue;
      Value pred = b.create<arith::AndIOp>(loc, maskAt(t, store.getMask(), i), owns);
      storeElements(t, loc, ptrs[i], pred, {toMemory(b, loc, t.regs(store.getValue())[i])});
    }
    return success();
  }
  if (auto rmw = dyn_cast<AtomicRMWOp>(op))
    return lowerAtomic(t, op, rmw.getPtrs(), rmw.getMask(), ValueRange{rmw.getValue()});
  if (auto cas = dyn_cast<AtomicCASOp>(op))
    return lowerAtomic(t, op, cas.getPtrs(), Value(), ValueRange{cas.getCompare(), cas.getValue()});
  handled = false;
  return success();
}

} // namespace tokamax::tile
