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

unsigned MmaLayout::num_warps() const {
  unsigned n = 1;
  for (unsigned w : warps_per_cta)
    n *= w;
  return n;
}

std::string MmaLayout::to_string() const { return fmt::format("mma{{wpc={}}}", warps_per_cta); }

std::string DotOperandLayout::to_string() const {
  return fmt::format("dot_op{{op={}, parent={}, k_width={}}}", op_idx, parent.to_string(), k_width);
}

MmaLayout default_mma_layout(int64_t m, int64_t n, unsigned num_warps) {
  unsigned wm = 1, wn = 1;
  while (wm * wn < num_warps) {
    bool mRoom = m / (16 * int64_t(wm)) >= 2, nRoom = n / (8 * int64_t(wn)) >= 2;
    // Keep warp tiles square-ish in elements; replicate along M when both are full.
    if (mRoom && (m / wm >= n / wn || !nRoom))
      wm *= 2;
    else if (nRoom)
      wn *= 2;
    else
      wm *= 2;
  }
  return MmaLayout{{wm, wn}};
}

namespace {
std::vector<int64_t> iota(unsigned n) {
  std::vector<int64_t> v(n);
  for (unsigned i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

/// Offsets along K of one thread's operand registers within one instruction.
std::vector<int64_t> kOffsets(unsigned kWidth) {
  std::vector<int64_t> v;
  for (int64_t half : {int64_t(0), int64_t(4 * kWidth)})
    for (unsigned i = 0; i < kWidth; ++i)
      v.push_back(half + i);
  return v;
}

Distribution::Axis mmaRows(const MmaLayout &l) {
  unsigned wn = l.warps_per_cta[1];
  return {8, 4, 1, l.warps_per_cta[0], wn, 16, {0, 8}, 16 * int64_t(l.warps_per_cta[0])};
}
Distribution::Axis mmaCols(const MmaLayout &l) {
  return {4, 1, 2, l.warps_per_cta[1], 1, 8, {0, 1}, 8 * int64_t(l.warps_per_cta[1])};
}
} // namespace

Distribution::Distribution(BlockedLayout parent, std::vector<int64_t> shape,
                           std::vector<unsigned> kept)
    : Distribution({}, {}, {}, parent, std::move(shape), std::move(kept)) {}

Distribution::Distribution(std::vector<Axis> axes, std::vector<unsigned> order,
                           std::vector<Dropped> hidden, BlockedLayout view,
                           std::vector<int64_t> shape, std::vector<unsigned> kept)
    : parent_(std::move(view)), kept_(std::move(kept)) {
  assert(shape.size() == kept_.size());
  size_t prank = parent_.rank();
  if (axes.empty()) {
    // A blocked layout: lane and warp strides follow its order (fastest first).
    order = parent_.order;
    axes.resize(prank);
    unsigned lane = 1, warp = 1;
    for (unsigned d : parent_.order) {
      Axis &a = axes[d];
      a.lanes = parent_.threads_per_warp[d];
      a.warps = parent_.warps_per_cta[d];
      a.lane_stride = lane;
      a.warp_stride = warp;
      a.lane_scale = parent_.size_per_thread[d];
      a.warp_scale = a.lane_scale * a.lanes;
      a.thread_offsets = iota(parent_.size_per_thread[d]);
      a.coverage = int64_t(a.warp_scale) * a.warps;
      lane *= a.lanes;
      warp *= a.warps;
    }
  }
  num_warps_ = 1;
  for (const Axis &a : axes)
    num_warps_ *= a.warps;
  for (const Dropped &h : hidden)
    num_warps_ *= h.warps;
  std::vector<bool> isKept(prank, false);
  for (size_t i = 0; i < kept_.size(); ++i) {
    const Axis &a = axes[kept_[i]];
    isKept[kept_[i]] = true;
    Dim dim;
    dim.size = shape[i];
    dim.per_thread = static_cast<unsigned>(a.thread_offsets.size());
    dim.lanes = a.lanes;
    dim.warps = a.warps;
    dim.lane_stride = a.lane_stride;
    dim.warp_stride = a.warp_stride;
    dim.repeats = static_cast<unsigned>(std::max<int64_t>(1, dim.size / a.coverage));
    dim.lane_scale = a.lane_scale;
    dim.warp_scale = a.warp_scale;
    dim.coverage = a.coverage;
    dims_.push_back(dim);
  }
  for (unsigned d = 0; d < prank; ++d)
    if (!isKept[d])
      dropped_.push_back({axes[d].lanes, axes[d].warps, axes[d].lane_stride, axes[d].warp_stride});
  dropped_.insert(dropped_.end(), hidden.begin(), hidden.end());

  // Registers: repeats outer, per-thread elements inner; within each, the fastest tile
  // dimension varies fastest so vector elements are adjacent registers.
  std::vector<size_t> fastFirst;
  for (unsigned d : order)
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
        const Axis &a = axes[kept_[i]];
        offset[i] = (repLeft % dim.repeats) * dim.coverage + a.thread_offsets[eLeft % dim.per_thread];
        repLeft /= dim.repeats;
        eLeft /= dim.per_thread;
      }
      offsets_.push_back(std::move(offset));
    }
  }
  // Vector width: leading consecutive offsets of the fastest tile dimension.
  if (!fastFirst.empty()) {
    const auto &offsets = axes[kept_[fastFirst.front()]].thread_offsets;
    unsigned run = 0;
    while (run < offsets.size() && offsets[run] == int64_t(run))
      ++run;
    while (run > 1 && offsets.size() % run != 0)
      --run;
    contiguous_ = static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>(run, dims_[fastFirst.front()].size)));
  }
}

Distribution Distribution::blocked(BlockedLayout layout, std::vector<int64_t> shape) {
  std::vector<unsigned> kept(layout.rank());
  for (unsigned d = 0; d < kept.size(); ++d)
    kept[d] = d;
  return Distribution(std::move(layout), std::move(shape), std::move(kept));
}

Distribution Distribution::mma(const MmaLayout &layout, std::vector<int64_t> shape,
                               std::vector<unsigned> kept) {
  BlockedLayout view{{1, 2}, {8, 4}, layout.warps_per_cta, {1, 0}};
  return Distribution({mmaRows(layout), mmaCols(layout)}, {1, 0}, {}, std::move(view),
                      std::move(shape), std::move(kept));
}

Distribution Distribution::dot_operand(const DotOperandLayout &layout, std::vector<int64_t> shape) {
  const MmaLayout &p = layout.parent;
  unsigned kw = layout.k_width;
  Axis k{4, 1, kw, 1, 1, 1, kOffsets(kw), 8 * int64_t(kw)};
  unsigned wm = p.warps_per_cta[0], wn = p.warps_per_cta[1];
  if (layout.op_idx == 0) {
    BlockedLayout view{{1, kw}, {8, 4}, {wm, 1}, {1, 0}};
    return Distribution({mmaRows(p), k}, {1, 0}, {Dropped{1, wn, 1, 1}}, std::move(view),
                        std::move(shape), {0, 1});
  }
  Axis n = mmaCols(p);
  n.lanes = 8, n.lane_stride = 4, n.lane_scale = 1, n.thread_offsets = {0};
  BlockedLayout view{{kw, 1}, {4, 8}, {1, wn}, {0, 1}};
  return Distribution({k, n}, {0, 1}, {Dropped{1, wm, 1, wn}}, std::move(view), std::move(shape),
                      {0, 1});
}

unsigned Distribution::contiguous_registers() const { return dims_.empty() ? 1 : contiguous_; }

bool Distribution::has_thread_replicas() const {
  for (const Dim &d : dims_)
    if (int64_t(d.lanes - 1) * d.lane_scale + int64_t(d.warps - 1) * d.warp_scale >= d.size)
      return true;
  for (const Dropped &d : dropped_)
    if (d.lanes > 1 || d.warps > 1)
      return true;
  return false;
}

bool Distribution::needs_wrap(size_t i) const { return dims_[i].coverage > dims_[i].size; }

unsigned Distribution::distinct_lanes(size_t i) const {
  const Dim &dim = dims_[i];
  return static_cast<unsigned>(std::clamp<int64_t>(dim.size / dim.lane_scale, 1, dim.lanes));
}

unsigned Distribution::distinct_warps(size_t i) const {
  const Dim &dim = dims_[i];
  return static_cast<unsigned>(std::clamp<int64_t>(dim.size / dim.warp_scale, 1, dim.warps));
}

std::vector<int64_t> Distribution::thread_base(unsigned lane, unsigned warp) const {
  std::vector<int64_t> base(rank());
  for (size_t i = 0; i < rank(); ++i) {
    const Dim &dim = dims_[i];
    int64_t laneIdx = (lane / dim.lane_stride) % dim.lanes;
    int64_t warpIdx = (warp / dim.warp_stride) % dim.warps;
    base[i] = (laneIdx * dim.lane_scale + warpIdx * dim.warp_scale) % dim.size;
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
    if (laneIdx * dim.lane_scale + warpIdx * dim.warp_scale >= dim.size)
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
