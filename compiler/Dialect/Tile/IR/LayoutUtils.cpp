//===- LayoutUtils.cpp - Layout attributes <-> layout algebra ---------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <map>

using namespace mlir;

namespace tokamax::tile {

compiler::BlockedLayout toBlockedLayout(BlockedLayoutAttr attr) {
  compiler::BlockedLayout layout;
  layout.size_per_thread.assign(attr.getSizePerThread().begin(), attr.getSizePerThread().end());
  layout.threads_per_warp.assign(attr.getThreadsPerWarp().begin(), attr.getThreadsPerWarp().end());
  layout.warps_per_cta.assign(attr.getWarpsPerCTA().begin(), attr.getWarpsPerCTA().end());
  layout.order.assign(attr.getOrder().begin(), attr.getOrder().end());
  return layout;
}

BlockedLayoutAttr toAttr(MLIRContext *ctx, const compiler::BlockedLayout &layout) {
  return BlockedLayoutAttr::get(ctx, layout.size_per_thread, layout.threads_per_warp,
                                layout.warps_per_cta, layout.order);
}

unsigned elementBytes(Type type) {
  if (isa<PointerType>(type))
    return 8;
  if (type.isIndex())
    return 8;
  unsigned bits = type.getIntOrFloatBitWidth();
  return std::max(1u, bits / 8);
}

BlockedLayoutAttr getDefaultLayout(RankedTensorType type, unsigned numWarps) {
  return toAttr(type.getContext(),
                compiler::default_blocked_layout(type.getShape(),
                                                 elementBytes(type.getElementType()), numWarps));
}

compiler::MmaLayout toMmaLayout(MmaLayoutAttr attr) {
  return compiler::MmaLayout{{attr.getWarpsPerCTA().begin(), attr.getWarpsPerCTA().end()}};
}

compiler::DotOperandLayout toDotOperandLayout(DotOperandLayoutAttr attr) {
  return compiler::DotOperandLayout{attr.getOpIdx(), toMmaLayout(cast<MmaLayoutAttr>(attr.getParent())),
                                    attr.getKWidth()};
}

unsigned mmaKWidth(Type elem) {
  if (elem.isBF16() || elem.isF16())
    return 2;
  if (elem.isF32())
    return 1;
  if (isFp8(elem))
    return 4;
  return 0;
}

MmaLayoutAttr getMmaLayout(RankedTensorType accType, unsigned numWarps) {
  compiler::MmaLayout layout =
      compiler::default_mma_layout(accType.getDimSize(0), accType.getDimSize(1), numWarps);
  return MmaLayoutAttr::get(accType.getContext(), layout.warps_per_cta);
}

DotOperandLayoutAttr getDotOperandLayout(unsigned opIdx, MmaLayoutAttr parent, Type elem) {
  return DotOperandLayoutAttr::get(parent.getContext(), opIdx, parent, mmaKWidth(elem));
}

/// The root layout of a (possibly sliced) encoding and the parent dimensions it keeps.
static void collectKept(Attribute layout, Attribute &root, std::vector<unsigned> &kept) {
  if (auto slice = dyn_cast<SliceLayoutAttr>(layout)) {
    collectKept(slice.getParent(), root, kept);
    kept.erase(kept.begin() + slice.getDim());
    return;
  }
  root = layout;
  kept.clear();
  unsigned rank = 2;
  if (auto blocked = dyn_cast<BlockedLayoutAttr>(layout))
    rank = blocked.getSizePerThread().size();
  for (unsigned d = 0; d < rank; ++d)
    kept.push_back(d);
}

bool isSharedTile(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa_and_nonnull<SharedLayoutAttr>(tensor.getEncoding());
}

compiler::Distribution getDistribution(RankedTensorType type) {
  Attribute root;
  std::vector<unsigned> kept;
  collectKept(type.getEncoding(), root, kept);
  std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
  if (auto mma = dyn_cast<MmaLayoutAttr>(root))
    return compiler::Distribution::mma(toMmaLayout(mma), std::move(shape), std::move(kept));
  if (auto operand = dyn_cast<DotOperandLayoutAttr>(root))
    return compiler::Distribution::dot_operand(toDotOperandLayout(operand), std::move(shape));
  return compiler::Distribution(toBlockedLayout(cast<BlockedLayoutAttr>(root)), std::move(shape),
                                std::move(kept));
}

unsigned getNumWarps(Operation *op) {
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op) : op->getParentOfType<func::FuncOp>();
  if (func)
    if (auto attr = func->getAttrOfType<IntegerAttr>(kNumWarpsAttr))
      return static_cast<unsigned>(attr.getInt());
  return 4;
}

bool hasWgmmaDots(Operation *op) {
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op) : op->getParentOfType<func::FuncOp>();
  return func && func->hasAttr(kWgmmaDotsAttr);
}

unsigned getBlocksPerSm(Operation *op) {
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op) : op->getParentOfType<func::FuncOp>();
  if (func)
    if (auto attr = func->getAttrOfType<IntegerAttr>(kBlocksPerSmAttr))
      return static_cast<unsigned>(std::max<int64_t>(1, attr.getInt()));
  return 1;
}

TmaDotSmem getTmaDotSmem(TmaDotOp op) {
  TmaDotSmem s;
  unsigned bytes = elementBytes(cast<PointerType>(op.getA().getType()).getPointeeType());
  s.aBytes = op.getBlockM() * op.getBlockK() * bytes;
  s.bBytes = op.getBlockK() * op.getBlockN() * bytes;
  s.stageBytes = (s.aBytes + s.bBytes + 1023) / 1024 * 1024;
  s.barriers = op.getStages() * s.stageBytes;
  s.total = s.barriers + 16 * op.getStages();  // at a 1024-aligned offset (the swizzle's)
  return s;
}

CpAsyncDotSmem getCpAsyncDotSmem(CpAsyncDotOp op) {
  CpAsyncDotSmem s;
  unsigned bytes = elementBytes(cast<PointerType>(op.getA().getType()).getPointeeType());
  s.aBytes = op.getBlockM() * op.getBlockK() * bytes;
  s.bBytes = op.getBlockK() * op.getBlockN() * bytes;
  s.stageBytes = s.aBytes + s.bBytes;
  s.total = op.getStages() * s.stageBytes;
  return s;
}

static int64_t linearOf(const std::vector<int64_t> &coords, ArrayRef<int64_t> shape) {
  int64_t linear = 0;
  for (size_t d = 0; d < coords.size(); ++d)
    linear = linear * shape[d] + coords[d];
  return linear;
}

std::optional<std::vector<int64_t>> threadLocalRegisters(RankedTensorType source, RankedTensorType result) {
  if (!source.getEncoding() || !result.getEncoding() || isSharedTile(source) || isSharedTile(result))
    return std::nullopt;
  compiler::Distribution in = getDistribution(source), out = getDistribution(result);
  if (in.num_warps() != out.num_warps())
    return std::nullopt;
  // Source registers by the row-major index of their element, for lane 0 of warp 0.
  std::multimap<int64_t, int64_t> candidates;
  for (int64_t r = 0; r < in.num_registers(); ++r)
    candidates.emplace(linearOf(in.coords(0, 0, r), source.getShape()), r);
  std::vector<int64_t> map;
  for (int64_t r = 0; r < out.num_registers(); ++r) {
    auto [first, last] = candidates.equal_range(linearOf(out.coords(0, 0, r), result.getShape()));
    std::optional<int64_t> found;
    for (auto it = first; it != last && !found; ++it) {
      bool everywhere = true;
      for (unsigned warp = 0; warp < out.num_warps() && everywhere; ++warp)
        for (unsigned lane = 0; lane < 32 && everywhere; ++lane)
          everywhere = linearOf(in.coords(lane, warp, it->second), source.getShape()) ==
                       linearOf(out.coords(lane, warp, r), result.getShape());
      if (everywhere)
        found = it->second;
    }
    if (!found)
      return std::nullopt;
    map.push_back(*found);
  }
  return map;
}

bool quadShuffleToFp8Operand(RankedTensorType source, RankedTensorType result) {
  auto mma = dyn_cast_or_null<MmaLayoutAttr>(source.getEncoding());
  auto operand = dyn_cast_or_null<DotOperandLayoutAttr>(result.getEncoding());
  if (!mma || !operand || operand.getOpIdx() != 0 || operand.getParent() != mma || operand.getKWidth() != 4 ||
      !isFp8(source.getElementType()) || source.getShape() != result.getShape())
    return false;
  ArrayRef<unsigned> warps = mma.getWarpsPerCTA();
  return source.getRank() == 2 && warps.size() == 2 && warps[1] == 1 &&
         source.getDimSize(0) % (16 * int64_t(warps[0])) == 0 && source.getDimSize(1) % 32 == 0;
}

int64_t getScratchBytes(Operation *op) {
  if (auto dot = dyn_cast<TmaDotOp>(op))
    return getTmaDotSmem(dot).total;
  if (auto dot = dyn_cast<CpAsyncDotOp>(op))
    return getCpAsyncDotSmem(dot).total;
  if (auto store = dyn_cast<TmaStoreOp>(op))
    return getTmaStoreBufferBytes(store) * 2;  // two strips (offsets 1024-aligned: swizzle)
  if (auto reduce = dyn_cast<ReduceOp>(op)) {
    auto source = reduce.getSource().getType();
    if (!source.getEncoding())
      return 0;
    compiler::Distribution dist = getDistribution(source);
    unsigned axis = reduce.getAxis();
    unsigned warps = dist.distinct_warps(axis);
    if (warps == 1)
      return 0;
    int64_t others = source.getNumElements() / source.getDimSize(axis);
    int64_t valueBytes = elementBytes(source.getElementType());
    if (reduce.getKind() == ReduceKind::Argmax)
      valueBytes += 4;
    return warps * others * valueBytes;
  }
  // tile.dot reads its operands from registers: their staging through shared memory
  // (ldmatrix from a swizzled copy) is the convert_layout into the dot-operand layout
  // that tile-assign-layouts puts before it, sized below like any conversion.
  if (isa<ConvertLayoutOp, ReshapeOp>(op)) {
    if (isSharedTile(op->getOperand(0).getType()))
      return 0;  // read straight from the shared tile
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    auto source = cast<RankedTensorType>(op->getOperand(0).getType());
    if (threadLocalRegisters(source, type))
      return 0;  // registers are renamed (tile-to-llvm)
    if (isa<ConvertLayoutOp>(op) && quadShuffleToFp8Operand(source, type))
      return 0;  // exchanged by warp shuffles
    return type.getNumElements() * elementBytes(type.getElementType());
  }
  return 0;
}

int64_t getTmaStoreBufferBytes(TmaStoreOp op) { return op.getValue().getType().getDimSize(0) * 128; }

int64_t getScratchStride(Operation *op) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(kScratchStrideAttr))
    return attr.getInt();
  return 0;
}

int stagedDotOperandDim(ConvertLayoutOp op) {
  auto src = cast<RankedTensorType>(op.getSource().getType());
  auto dst = cast<RankedTensorType>(op.getResult().getType());
  if (!isa_and_nonnull<DotOperandLayoutAttr>(dst.getEncoding()) || src.getRank() != 2 || !src.getEncoding() ||
      isSharedTile(src))
    return -1;
  unsigned bytes = elementBytes(src.getElementType());
  if (bytes != 2 && bytes != 4)
    return -1;
  compiler::Distribution in = getDistribution(src);
  for (unsigned d : in.parent().order)
    for (size_t i = 0; i < in.kept().size(); ++i)
      if (in.kept()[i] == d)
        return src.getDimSize(i) * bytes >= 16 ? static_cast<int>(i) : -1;
  return -1;
}

int64_t getScratchOffset(Operation *op) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(kScratchOffsetAttr))
    return attr.getInt();
  return 0;
}

} // namespace tokamax::tile
