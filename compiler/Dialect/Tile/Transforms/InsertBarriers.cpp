//===- InsertBarriers.cpp - Separate shared-memory scratch users ------------===//
//
// Every scratch user writes its region of scratch, passes its own internal barrier and
// then reads the region. The next user must not overwrite bytes that some thread may
// still be reading, so a barrier goes before a user whose region overlaps one read since
// the last barrier on some path to it. The two operand conversions of a tile.dot are
// staged together (see tile-allocate-shared) and, double-buffered in a k-loop, need no
// barrier at the back edge: one barrier per iteration remains, their own. A loop whose
// users would overwrite what is read before it, where the back edge alone would not need
// that barrier, gets one before it instead of one per iteration. Loops iterate to a fixed
// point; branches join. A warp-specialized tile.tma_dot's ring is a region of
// its own whose reuse its mbarriers order: it never needs a barrier.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/LoopLikeInterface.h"

#include <set>
#include <tuple>

namespace tokamax::tile {
#define GEN_PASS_DEF_TILEINSERTBARRIERS
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {

/// A byte range of scratch that threads may still read. Double-buffered users (stride
/// > 0) are tracked in the buffer of the current iteration: `second` flips at a loop's
/// back edge.
struct Range {
  int64_t begin, end, stride = 0;
  bool second = false;
  int64_t lo() const { return begin + (second ? stride : 0); }
  int64_t hi() const { return end + (second ? stride : 0); }
  auto key() const { return std::make_tuple(begin, end, stride, second); }
  bool operator<(const Range &o) const { return key() < o.key(); }
  bool operator==(const Range &o) const { return key() == o.key(); }
};
using Dirty = std::set<Range>;

/// Whether two ranges may share bytes. Double-buffered ranges of one stride are in the
/// same frame (this iteration's buffer); against a fixed range, a double-buffered one may
/// be in either buffer, since which is this iteration's alternates.
bool overlap(const Range &a, const Range &b) {
  if ((a.stride > 0) != (b.stride > 0) || (a.stride > 0 && a.stride != b.stride)) {
    for (const Range &x : {Range{a.begin, a.end, a.stride, false}, Range{a.begin, a.end, a.stride, true}})
      for (const Range &y : {Range{b.begin, b.end, b.stride, false}, Range{b.begin, b.end, b.stride, true}})
        if (x.lo() < y.hi() && y.lo() < x.hi())
          return true;
    return false;
  }
  return a.lo() < b.hi() && b.lo() < a.hi();
}

bool overlaps(const Dirty &dirty, const Dirty &ranges) {
  for (const Range &a : dirty)
    for (const Range &b : ranges)
      if (overlap(a, b))
        return true;
  return false;
}

Dirty join(Dirty a, const Dirty &b) {
  a.insert(b.begin(), b.end());
  return a;
}

/// The next iteration's view of double-buffered ranges (`both`: either buffer).
Dirty flip(const Dirty &dirty, bool both) {
  Dirty out;
  for (Range r : dirty) {
    if (r.stride > 0) {
      r.second = !r.second;
      if (both)
        out.insert(Range{r.begin, r.end, r.stride, !r.second});
    }
    out.insert(r);
  }
  return out;
}

Range rangeOf(Operation *op) {
  int64_t offset = getScratchOffset(op);
  return Range{offset, offset + getScratchBytes(op), getScratchStride(op)};
}

void insertBarrierBefore(Operation *op) {
  Operation *prev = op->getPrevNode();
  if (prev && isa<BarrierOp, AsyncWaitOp>(prev))
    return;
  OpBuilder builder(op);
  builder.create<BarrierOp>(op->getLoc());
}

/// The scratch ranges still being read after `block` runs from `dirty`; barriers are
/// inserted when `insert` is set, else counted in `needed` (when given).
Dirty walk(Block &block, Dirty dirty, bool insert, int *needed = nullptr) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (isa<BarrierOp, AsyncWaitOp>(op)) {  // tile.async_wait ends in a barrier
      dirty.clear();
      continue;
    }
    if (op.getNumRegions() > 0) {
      bool loop = isa<LoopLikeOpInterface>(op);
      auto walkRegions = [&](const Dirty &entry, bool doInsert, int *count = nullptr) {
        Dirty exit = entry, out;
        for (Region &region : op.getRegions()) {
          if (region.empty())
            continue;
          // A loop's regions run in sequence; a branch's regions are alternatives.
          Dirty after = walk(region.front(), loop ? exit : entry, doInsert, count);
          if (loop)
            exit = after;
          else
            out = join(out, after);
        }
        return loop ? exit : out;
      };
      if (loop) {
        // The state at the top of the body: what came before, joined with what the
        // back edge brings, to a fixed point.
        auto topOfBody = [&](const Dirty &before) {
          Dirty entry = before;
          for (int i = 0; i < 8; ++i) {
            Dirty next = join(before, flip(walkRegions(entry, false), false));
            if (next == entry)
              break;
            entry = next;
          }
          return entry;
        };
        // What came before the loop gets one barrier before it rather than barriers
        // inside it on every iteration (double-buffered users always want it).
        bool doubleBuffered = false;
        op.walk([&](Operation *inner) { doubleBuffered |= getScratchStride(inner) > 0; });
        Dirty entry = topOfBody(dirty);
        if (!dirty.empty()) {
          Dirty clean = topOfBody({});
          bool before = doubleBuffered;
          if (!before) {
            int withBefore = 0, withoutBefore = 0;
            walkRegions(entry, false, &withBefore);
            walkRegions(clean, false, &withoutBefore);
            before = withBefore > withoutBefore;
          }
          if (before) {
            if (insert)
              insertBarrierBefore(&op);
            else if (needed)
              ++*needed;
            dirty.clear();
            entry = std::move(clean);
          }
        }
        // The loop may run zero times; after it either buffer may be being read.
        dirty = join(dirty, flip(walkRegions(entry, insert, needed), true));
      } else {
        dirty = join(dirty, walkRegions(dirty, insert, needed));
      }
      continue;
    }
    if (getScratchBytes(&op) == 0 || op.hasAttr(kScratchWithPreviousAttr))
      continue; // not a user, or staged with the user before it
    if (auto dot = dyn_cast<TmaDotOp>(op); dot && dot.getWarpSpecialize())
      continue; // its own region, ordered by its mbarriers
    Dirty ranges{rangeOf(&op)};
    Operation *next = op.getNextNode();
    if (next && next->hasAttr(kScratchWithPreviousAttr) && getScratchBytes(next) > 0)
      ranges.insert(rangeOf(next));
    if (overlaps(dirty, ranges)) {
      if (insert)
        insertBarrierBefore(&op);
      else if (needed)
        ++*needed;
    }
    // The users' own barrier orders everything before it; then they read their ranges.
    dirty = ranges;
  }
  return dirty;
}

struct InsertBarriersPass : tokamax::tile::impl::TileInsertBarriersBase<InsertBarriersPass> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      if (!func.isExternal())
        walk(func.getBody().front(), {}, true);
    });
  }
};
} // namespace
