//===- InsertBarriers.cpp - Separate shared-memory scratch users ------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tokamax::tile {
#define GEN_PASS_DEF_TILEINSERTBARRIERS
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {
struct InsertBarriersPass : tokamax::tile::impl::TileInsertBarriersBase<InsertBarriersPass> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      bool seenUser = false;
      func.walk([&](Operation *op) {
        if (getScratchBytes(op) == 0)
          return;
        // Inside a loop the previous iteration's user may still be reading.
        bool inLoop = op->getParentOfType<scf::ForOp>() != nullptr;
        if (seenUser || inLoop) {
          Operation *prev = op->getPrevNode();
          if (!prev || !isa<BarrierOp>(prev)) {
            OpBuilder builder(op);
            builder.create<BarrierOp>(op->getLoc());
          }
        }
        seenUser = true;
      });
    });
  }
};
} // namespace
