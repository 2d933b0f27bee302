//===- AllocateShared.cpp - Size the kernel's shared-memory scratch ---------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tokamax::tile {
#define GEN_PASS_DEF_TILEALLOCATESHARED
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {
struct AllocateSharedPass : tokamax::tile::impl::TileAllocateSharedBase<AllocateSharedPass> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      int64_t bytes = 0;
      func.walk([&](Operation *op) { bytes = std::max(bytes, getScratchBytes(op)); });
      // Round up so vector accesses to scratch stay aligned.
      bytes = (bytes + 15) / 16 * 16;
      func->setAttr(kSharedBytesAttr,
                    IntegerAttr::get(IntegerType::get(func.getContext(), 64), bytes));
    });
  }
};
} // namespace
