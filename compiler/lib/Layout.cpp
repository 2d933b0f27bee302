//===- Layout.cpp - Distributed tile layouts --------------------------------===//
#include <tokamax/compiler/Layout.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>

namespace tokamax::compiler {

unsigned BlockedLayout::num_warps() const {
  unsigned n = 1;
  for (unsigned w : warps_per_cta)
    n *= w;
  return n;
}

std::string BlockedLayout::to_string() const {
  return fmt::format("blocked{{spt={}, tpw={}, wpc={}, order={}}}", size_per_thread,
                     threads_per_warp, warps_per_cta, order);
}

BlockedLayout default_blocked_layout(std::span<const int64_t> shape, unsigned element_bytes,
                                     unsigned num_warps) {
  size_t rank = shape.size();
  BlockedLayout layout;
  layout.size_per_thread.assign(rank, 1);
  layout.threads_per_warp.assign(rank, 1);
  layout.warps_per_cta.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i)
    layout.order.push_back(static_cast<unsigned>(rank - 1 - i));
  if (rank == 0)
    return layout;
  int64_t last = shape[rank - 1];
  unsigned vector = std::max(1u, 16u / std::max(1u, element_bytes));
  layout.size_per_thread[rank - 1] = static_cast<unsigned>(std::min<int64_t>(vector, last));
  // Lanes fill the fastest dimension first, then the next; leftovers replicate on dim 0.
  unsigned lanes = 32;
  for (size_t i = 0; i < rank && lanes > 1; ++i) {
    size_t d = rank - 1 - i;
    int64_t room = std::max<int64_t>(1, shape[d] / layout.size_per_thread[d]);
    unsigned take = static_cast<unsigned>(std::min<int64_t>(lanes, room));
    layout.threads_per_warp[d] = take;
    lanes /= take;
  }
  layout.threads_per_warp[0] *= lanes;
  // Warps go along rows first (so a row reduction stays inside a warp when it can).
  unsigned warps = num_warps;
  for (size_t d = 0; d < rank && warps > 1; ++d) {
    int64_t covered = int64_t(layout.size_per_thread[d]) * layout.threads_per_warp[d];
    int64_t room = std::max<int64_t>(1, shape[d] / covered);
    unsigned take = static_cast<unsigned>(std::min<int64_t>(warps, room));
    layout.warps_per_cta[d] = take;
    warps /= take;
  }
  layout.warps_per_cta[0] *= warps;
  return layout;
}

Distribution::Distribution(BlockedLayout parent, std::vector<int64_t> shape,
                           std::vector<unsigned> kept)
    : parent_(std::move(parent)), kept_(std::move(kept)) {
  assert(shape.size() == kept_.size());
  size_t prank = parent_.rank();
  // Lane and warp strides follow the parent's order (fastest first).
  std::vector<unsigned> laneStride(prank), warpStride(prank);
  unsigned lane = 1, warp = 1;
  for (unsigned d : parent_.order) {
    laneStride[d] = lane;
    warpStride[d] = warp;
    lane *= parent_.threads_per_warp[d];
    warp *= parent_.warps_per_cta[d];
  }
  std::vector<bool> isKept(prank, false);
  for (size_t i = 0; i < kept_.size(); ++i) {
    unsigned d = kept_[i];
    isKept[d] = true;
    Dim dim;
    dim.size = shape[i];
    dim.per_thread = parent_.size_per_thread[d];
    dim.lanes = parent_.threads_per_warp[d];
    dim.warps = parent_.warps_per_cta[d];
    dim.lane_stride = laneStride[d];
    dim.warp_stride = warpStride[d];
    int64_t coverage = int64_t(dim.per_thread) * dim.lanes * dim.warps;
    dim.repeats = static_cast<unsigned>(std::max<int64_t>(1, dim.size / coverage));
    dims_.push_back(dim);
  }
  for (unsigned d = 0; d < prank; ++d)
    if (!isKept[d])
      dropped_.push_back({parent_.threads_per_warp[d], parent_.warps_per_cta[d], laneStride[d],
                          warpStride[d]});

  // Registers: repeats outer, per-thread elements inner; within each, the fastest tile
  // dimension varies fastest so vector elements are adjacent registers.
  std::vector<size_t> fastFirst;
  for (unsigned d : parent_.order)
    for (size_t i = 0; i < kept_.size(); ++i)
      if (kept_[i] == d)
        fastFirst.push_back(i);
  int64_t perThread = 1, repeats = 1;
  for (const Dim &dim : dims_) {
    perThread *= dim.per_thread;
    repeats *= dim.repeats;
  }
  for (int64_t rep = 0; rep < repeats; ++rep) {
    for (int64_t e = 0; e < perThread; ++e) {
      std::vector<int64_t> offset(rank());
      int64_t repLeft = rep, eLeft = e;
      for (size_t i : fastFirst) {
        const Dim &dim = dims_[i];
        int64_t coverage = int64_t(dim.per_thread) * dim.lanes * dim.warps;
        offset[i] = (repLeft % dim.repeats) * coverage + eLeft % dim.per_thread;
        repLeft /= dim.repeats;
        eLeft /= dim.per_thread;
      }
      offsets_.push_back(std::move(offset));
    }
  }
}

Distribution Distribution::blocked(BlockedLayout layout, std::vector<int64_t> shape) {
  std::vector<unsigned> kept(layout.rank());
  for (unsigned d = 0; d < kept.size(); ++d)
    kept[d] = d;
  return Distribution(std::move(layout), std::move(shape), std::move(kept));
}

unsigned Distribution::contiguous_registers() const {
  if (dims_.empty())
    return 1;
  // The fastest tile dimension is the first kept one in the parent's order.
  for (unsigned d : parent_.order)
    for (size_t i = 0; i < kept_.size(); ++i)
      if (kept_[i] == d)
        return static_cast<unsigned>(std::min<int64_t>(dims_[i].per_thread, dims_[i].size));
  return 1;
}

bool Distribution::needs_wrap(size_t i) const {
  const Dim &dim = dims_[i];
  int64_t coverage = int64_t(dim.per_thread) * dim.lanes * dim.warps;
  return coverage > dim.size;
}

unsigned Distribution::distinct_lanes(size_t i) const {
  const Dim &dim = dims_[i];
  return static_cast<unsigned>(
      std::clamp<int64_t>(dim.size / dim.per_thread, 1, dim.lanes));
}

unsigned Distribution::distinct_warps(size_t i) const {
  const Dim &dim = dims_[i];
  return static_cast<unsigned>(
      std::clamp<int64_t>(dim.size / (int64_t(dim.per_thread) * dim.lanes), 1, dim.warps));
}

std::vector<int64_t> Distribution::thread_base(unsigned lane, unsigned warp) const {
  std::vector<int64_t> base(rank());
  for (size_t i = 0; i < rank(); ++i) {
    const Dim &dim = dims_[i];
    int64_t laneIdx = (lane / dim.lane_stride) % dim.lanes;
    int64_t warpIdx = (warp / dim.warp_stride) % dim.warps;
    base[i] = (laneIdx * dim.per_thread + warpIdx * dim.per_thread * dim.lanes) % dim.size;
  }
  return base;
}

std::vector<int64_t> Distribution::coords(unsigned lane, unsigned warp, int64_t reg) const {
  std::vector<int64_t> c = thread_base(lane, warp);
  for (size_t i = 0; i < rank(); ++i)
    c[i] = (c[i] + offsets_[reg][i]) % dims_[i].size;
  return c;
}

bool Distribution::thread_owns(unsigned lane, unsigned warp) const {
  for (const Dim &dim : dims_) {
    int64_t laneIdx = (lane / dim.lane_stride) % dim.lanes;
    int64_t warpIdx = (warp / dim.warp_stride) % dim.warps;
    if (laneIdx * dim.per_thread + warpIdx * dim.per_thread * dim.lanes >= dim.size)
      return false;
  }
  for (const Dropped &dim : dropped_)
    if ((lane / dim.lane_stride) % dim.lanes != 0 || (warp / dim.warp_stride) % dim.warps != 0)
      return false;
  return true;
}

bool Distribution::register_owns(int64_t r) const {
  for (size_t i = 0; i < rank(); ++i)
    if (offsets_[r][i] >= dims_[i].size)
      return false;
  return true;
}

} // namespace tokamax::compiler
