//===- Layout.h - Distributed tile layouts ------------------------*- C++ -*-===//
//
// The layout algebra the compiler uses to place tile elements in threads' registers,
// kept free of MLIR so it can be unit-tested and reused by tools.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tokamax::compiler {

/// Each tile dimension d is split into size_per_thread[d] registers x threads_per_warp[d]
/// lanes x warps_per_cta[d] warps; `order` lists dimensions fastest first.
struct TOKAMAX_API BlockedLayout {
  std::vector<unsigned> size_per_thread, threads_per_warp, warps_per_cta, order;

  size_t rank() const { return size_per_thread.size(); }
  unsigned num_warps() const;
  std::string to_string() const;
  bool operator==(const BlockedLayout &) const = default;
};

/// The accumulator (C/D fragment) layout of mma.sync m16n8k16 and m16n8k8 on sm_80+.
/// Each warp computes 16x8 tiles; lane l = 4 * groupID + threadID_in_group holds
///   c0, c1 at (groupID,     2 * threadID_in_group + {0, 1})
///   c2, c3 at (groupID + 8, 2 * threadID_in_group + {0, 1})
/// warps_per_cta = {WM, WN} tile the block with warp w at (w / WN, w % WN); the
/// 16*WM x 8*WN warp grid then repeats over the tile (more registers per thread).
struct TOKAMAX_API MmaLayout {
  std::vector<unsigned> warps_per_cta;  ///< {WM, WN}

  unsigned num_warps() const;
  std::string to_string() const;
  bool operator==(const MmaLayout &) const = default;
};

/// Operand A (op_idx 0, [M, K]) or B (op_idx 1, [K, N]) of the mma.sync instructions whose
/// accumulator has layout `parent`. k_width elements along K share a 32-bit register: 2
/// for 16-bit types (m16n8k16), 1 for tf32 (m16n8k8), 4 for fp8 (m16n8k32). With
/// t = threadID_in_group, g = groupID and k_width = 2, one instruction's A (16x16) is
///   a0,a1 (g, 2t+{0,1})  a2,a3 (g+8, 2t+{0,1})  a4,a5 (g, 2t+8+{0,1})  a6,a7 (g+8, 2t+8+{0,1})
/// and B (16x8) is b0,b1 (2t+{0,1}, g)  b2,b3 (2t+8+{0,1}, g). Warps along the other
/// accumulator dimension (N for A, M for B) hold replicas.
struct TOKAMAX_API DotOperandLayout {
  unsigned op_idx = 0;
  MmaLayout parent;
  unsigned k_width = 2;

  /// K extent of one instruction: 16 (k_width 2), 8 (k_width 1) or 32 (k_width 4).
  unsigned k_per_instruction() const { return 8 * k_width; }
  std::string to_string() const;
  bool operator==(const DotOperandLayout &) const = default;
};

/// The mma accumulator layout the compiler gives an [m, n] dot result on `num_warps`
/// warps: warps split the dimension with more 16x8 tiles per warp first.
TOKAMAX_API MmaLayout default_mma_layout(int64_t m, int64_t n, unsigned num_warps);

/// The layout the compiler anchors memory accesses on: each thread owns one 16-byte
/// vector along the last dimension, lanes then warps fill the tile fastest dimension first.
TOKAMAX_API BlockedLayout default_blocked_layout(std::span<const int64_t> shape,
                                                 unsigned element_bytes, unsigned num_warps);

/// Which tile element each (lane, warp, register) holds: a blocked layout over a parent
/// shape, of which only the dimensions in `kept` (increasing) remain in the tile (the
/// others were reduced away; threads along them hold replicas).
///
/// Element coordinates are coords[d] = (base(lane, warp)[d] + offset(register)[d]) mod shape[d]
/// with base[d] = lane_index * lane_scale + warp_index * warp_scale (lane_index =
/// lane / lane_stride % lanes, likewise for warps). Blocked layouts, mma accumulators,
/// dot operands and their slices are all of this form.
class TOKAMAX_API Distribution {
public:
  /// Per tile dimension, what code generation needs to compute a thread's base.
  struct Dim {
    int64_t size;            ///< tile extent
    unsigned per_thread;     ///< registers per repeat (blocked: contiguous registers)
    unsigned lanes, warps;   ///< lanes / warps along this dimension
    unsigned lane_stride;    ///< lane id = ... + lane_index * lane_stride + ...
    unsigned warp_stride;
    unsigned repeats;        ///< how many times the layout's coverage tiles the extent
    unsigned lane_scale = 1; ///< elements between consecutive lanes (blocked: per_thread)
    unsigned warp_scale = 1; ///< elements between consecutive warps (blocked: per_thread * lanes)
    int64_t coverage = 1;    ///< extent one repeat covers (blocked: per_thread * lanes * warps)
  };
  struct Dropped {
    unsigned lanes, warps, lane_stride, warp_stride;
  };
  /// One parent dimension of a general distribution: lanes and warps as in Dim, and the
  /// offsets of one thread's registers within one repeat of `coverage` elements.
  struct Axis {
    unsigned lanes = 1, lane_stride = 1, lane_scale = 1;
    unsigned warps = 1, warp_stride = 1, warp_scale = 1;
    std::vector<int64_t> thread_offsets{0};
    int64_t coverage = 1;
  };

  Distribution(BlockedLayout parent, std::vector<int64_t> shape, std::vector<unsigned> kept);
  static Distribution blocked(BlockedLayout layout, std::vector<int64_t> shape);
  /// An mma accumulator tile (kept: the parent dimensions left after slicing, as above).
  static Distribution mma(const MmaLayout &layout, std::vector<int64_t> shape,
                          std::vector<unsigned> kept = {0, 1});
  static Distribution dot_operand(const DotOperandLayout &layout, std::vector<int64_t> shape);
  /// The general form: `axes` per parent dimension, `order` fastest first, `hidden` warp
  /// splits that hold replicas (the dot operands' other accumulator dimension). `view` is
  /// what parent() reports (a blocked layout with the same order and lane/warp counts).
  Distribution(std::vector<Axis> axes, std::vector<unsigned> order, std::vector<Dropped> hidden,
               BlockedLayout view, std::vector<int64_t> shape, std::vector<unsigned> kept);

  size_t rank() const { return dims_.size(); }
  const std::vector<Dim> &dims() const { return dims_; }
  const std::vector<Dropped> &dropped() const { return dropped_; }
  const BlockedLayout &parent() const { return parent_; }
  const std::vector<unsigned> &kept() const { return kept_; }
  unsigned num_warps() const { return num_warps_; }

  int64_t num_registers() const { return static_cast<int64_t>(offsets_.size()); }
  /// Constant part of register r's coordinates (before the wrap-around).
  const std::vector<int64_t> &register_offset(int64_t r) const { return offsets_[r]; }
  /// Number of contiguous registers along the fastest tile dimension (vector width).
  unsigned contiguous_registers() const;
  /// True when threads other than a element's owner hold it too (a layout larger than
  /// its tile, or dims reduced away): writers to shared memory then let the owner store.
  bool has_thread_replicas() const;
  /// True when some (base + offset) may reach the extent, so code must wrap it.
  bool needs_wrap(size_t dim) const;

  /// Lanes / warps along a dimension that hold distinct elements (the rest are replicas).
  unsigned distinct_lanes(size_t dim) const;
  unsigned distinct_warps(size_t dim) const;

  std::vector<int64_t> thread_base(unsigned lane, unsigned warp) const;
  std::vector<int64_t> coords(unsigned lane, unsigned warp, int64_t reg) const;
  /// Whether this thread's copy of its elements is the canonical one (replicated threads
  /// must not repeat side effects such as atomics).
  bool thread_owns(unsigned lane, unsigned warp) const;
  /// Whether register r is not a duplicate of a lower register of the same thread.
  bool register_owns(int64_t r) const;

private:
  BlockedLayout parent_;
  std::vector<unsigned> kept_;
  std::vector<Dim> dims_;
  std::vector<Dropped> dropped_;
  std::vector<std::vector<int64_t>> offsets_;
  unsigned contiguous_ = 1;
  unsigned num_warps_ = 1;
};

} // namespace tokamax::compiler
