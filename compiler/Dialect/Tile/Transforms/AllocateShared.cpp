//===- AllocateShared.cpp - Size the kernel's shared-memory scratch ---------===//
//
// Scratch is transient: each user needs it only while it runs, so users share it at
// offset 0. The two operand conversions of a tile.dot that go through swizzled tiles
// (LowerDot.cpp) are staged together instead: A at 0, B after it (tile.scratch_offset,
// tile.scratch_with_previous), written before one barrier and read after it. In a loop
// body they also alternate between two such buffers (tile.scratch_stride), so a k-loop
// needs one barrier per iteration: the next iteration writes the other buffer. A
// warp-specialized tile.tma_dot's ring is in use across the rest of the kernel: it gets
// a region of its own after the shared ones, and so does each shared buffer that
// tile.async_block_load ops fill (slots x the largest block copied into it, in use from
// the copy until a later one into the slot). The kernel's mbarriers come last.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <bit>
#include <map>

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
      auto i64 = [&](int64_t v) { return IntegerAttr::get(IntegerType::get(func.getContext(), 64), v); };
      func.walk([&](DotOp dot) {
        auto a = dot.getA().getDefiningOp<ConvertLayoutOp>();
        auto b = dot.getB().getDefiningOp<ConvertLayoutOp>();
        // (An A operand renamed in registers needs no scratch: B is staged alone.)
        if (!a || !b || a->getNextNode() != b || stagedDotOperandDim(a) < 0 || stagedDotOperandDim(b) < 0 ||
            b->hasAttr(kScratchWithPreviousAttr) || getScratchBytes(a) == 0)
          return;
        auto round = [](int64_t v) { return (v + 127) / 128 * 128; };
        int64_t offset = round(getScratchBytes(a));
        b->setAttr(kScratchOffsetAttr, i64(offset));
        b->setAttr(kScratchWithPreviousAttr, UnitAttr::get(func.getContext()));
        int64_t stride = round(offset + getScratchBytes(b));
        // Static shared memory is limited to 48 KiB.
        if (isa<scf::ForOp>(a->getParentOp()) && 2 * stride <= 48 * 1024) {
          a->setAttr(kScratchStrideAttr, i64(stride));
          b->setAttr(kScratchStrideAttr, i64(stride));
        }
      });
      int64_t bytes = 0;
      SmallVector<Operation *> own;
      func.walk([&](Operation *op) {
        auto dot = dyn_cast<TmaDotOp>(op);
        if ((dot && dot.getWarpSpecialize()) || isa<TmaStoreOp>(op))
          own.push_back(op);
        else if (int64_t need = getScratchBytes(op))
          bytes = std::max(bytes, getScratchOffset(op) + getScratchStride(op) + need);
      });
      // Shared buffers of asynchronous copies: every op naming buffer b gets b's region.
      std::map<int64_t, std::pair<int64_t, int64_t>> buffers;  // id -> (slots, slot bytes)
      func.walk([&](AsyncBlockLoadOp copy) {
        auto type = copy.getResult().getType();
        auto &[slots, slotBytes] = buffers[copy.getBuffer()];
        slots = std::max<int64_t>(slots, copy.getSlots());
        slotBytes = std::max(slotBytes, (type.getNumElements() * elementBytes(type.getElementType()) + 127) / 128 * 128);
      });
      // Where dots may read them on wgmma, slots are aligned to their size up to 1024
      // bytes: the base of every 32-, 64- or 128-byte swizzle atom they hold.
      const bool atoms = func->hasAttr(kWgmmaDotsAttr);
      std::map<int64_t, int64_t> bufferOffsets;
      for (auto &[id, size] : buffers) {
        const int64_t align =
            atoms ? std::min<int64_t>(1024, std::bit_ceil(static_cast<uint64_t>(size.second))) : 128;
        size.second = (size.second + align - 1) / align * align;
        bytes = (bytes + align - 1) / align * align;
        bufferOffsets[id] = bytes;
        bytes += size.first * size.second;
      }
      func.walk([&](AsyncBlockLoadOp copy) {
        copy->setAttr(kScratchOffsetAttr, i64(bufferOffsets.at(copy.getBuffer())));
        copy->setAttr(kSlotBytesAttr, i64(buffers.at(copy.getBuffer()).second));
      });
      // A warp-specialized tma_dot's producer refills its ring while the other warps
      // run what follows it, and TMA reads a tma_store's strips after the op is done:
      // each gets a region of its own after every other user.
      for (Operation *op : own) {
        bytes = (bytes + 1023) / 1024 * 1024;
        op->setAttr(kScratchOffsetAttr, i64(bytes));
        bytes += getScratchBytes(op);
      }
      // The kernel's mbarriers (8 bytes each) are in use for the whole kernel.
      if (auto barriers = func->getAttrOfType<DenseI64ArrayAttr>(kMbarriersAttr); barriers && !barriers.empty()) {
        bytes = (bytes + 7) / 8 * 8;
        func->setAttr(kMbarrierOffsetAttr, i64(bytes));
        bytes += 8 * static_cast<int64_t>(barriers.size());
      }
      // Round up so vector accesses to scratch stay aligned.
      bytes = (bytes + 15) / 16 * 16;
      func->setAttr(kSharedBytesAttr,
                    IntegerAttr::get(IntegerType::get(func.getContext(), 64), bytes));
    });
  }
};
} // namespace
