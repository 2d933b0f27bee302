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

/// The layout the compiler anchors memory accesses on: each thread owns one 16-byte
/// vector along the last dimension, lanes then warps fill the tile fastest dimension first.
TOKAMAX_API BlockedLayout default_blocked_layout(std::span<const int64_t> shape,
                                                 unsigned element_bytes, unsigned num_warps);

/// Which tile element each (lane, warp, register) holds: a blocked layout over a parent
/// shape, of which only the dimensions in `kept` (increasing) remain in the tile (the
/// others were reduced away; threads along them hold replicas).
///
/// Element coordinates are coords[d] = (base(lane, warp)[d] + offset(register)[d]) mod shape[d].
class TOKAMAX_API Distribution {
public:
  /// Per tile dimension, what code generation needs to compute a thread's base.
  struct Dim {
    int64_t size;            ///< tile extent
    unsigned per_thread;     ///< contiguous registers
    unsigned lanes, warps;   ///< lanes / warps along this dimension
    unsigned lane_stride;    ///< lane id = ... + lane_index * lane_stride + ...
    unsigned warp_stride;
    unsigned repeats;        ///< how many times the layout's coverage tiles the extent
  };
  struct Dropped {
    unsigned lanes, warps, lane_stride, warp_stride;
  };

  Distribution(BlockedLayout parent, std::vector<int64_t> shape, std::vector<unsigned> kept);
  static Distribution blocked(BlockedLayout layout, std::vector<int64_t> shape);

  size_t rank() const { return dims_.size(); }
  const std::vector<Dim> &dims() const { return dims_; }
  const std::vector<Dropped> &dropped() const { return dropped_; }
  const BlockedLayout &parent() const { return parent_; }
  const std::vector<unsigned> &kept() const { return kept_; }
  unsigned num_warps() const { return parent_.num_warps(); }

  int64_t num_registers() const { return static_cast<int64_t>(offsets_.size()); }
  /// Constant part of register r's coordinates (before the wrap-around).
  const std::vector<int64_t> &register_offset(int64_t r) const { return offsets_[r]; }
  /// Number of contiguous registers along the fastest tile dimension (vector width).
  unsigned contiguous_registers() const;
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
};

} // namespace tokamax::compiler
