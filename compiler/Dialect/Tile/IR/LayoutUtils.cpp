//===- LayoutUtils.cpp - Layout attributes <-> layout algebra ---------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

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

static void collectKept(Attribute layout, BlockedLayoutAttr &root, std::vector<unsigned> &kept) {
  if (auto blocked = dyn_cast<BlockedLayoutAttr>(layout)) {
    root = blocked;
    kept.clear();
    for (unsigned d = 0; d < blocked.getSizePerThread().size(); ++d)
      kept.push_back(d);
    return;
  }
  auto slice = cast<SliceLayoutAttr>(layout);
  collectKept(slice.getParent(), root, kept);
  kept.erase(kept.begin() + slice.getDim());
}

compiler::Distribution getDistribution(RankedTensorType type) {
  BlockedLayoutAttr root;
  std::vector<unsigned> kept;
  collectKept(type.getEncoding(), root, kept);
  return compiler::Distribution(toBlockedLayout(root),
                                std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
                                std::move(kept));
}

unsigned getNumWarps(Operation *op) {
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op) : op->getParentOfType<func::FuncOp>();
  if (func)
    if (auto attr = func->getAttrOfType<IntegerAttr>(kNumWarpsAttr))
      return static_cast<unsigned>(attr.getInt());
  return 4;
}

int64_t getScratchBytes(Operation *op) {
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
  if (isa<ConvertLayoutOp, ReshapeOp>(op)) {
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    return type.getNumElements() * elementBytes(type.getElementType());
  }
  return 0;
}

} // namespace tokamax::tile
