//===- LaunchInfo.h - What launching a compiled kernel takes -------*- C++ -*-===//
//
// The compiler writes a kernel's launch metadata beside its cubin (cache entries and
// export files carry it as JSON); the runtime reads it back to check arguments, pack
// parameters, encode tensor maps and launch, with no compiler.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tokamax {

/// One kernel parameter as the launcher packs it.
struct TOKAMAX_API KernelParam {
  std::string name;
  bool is_tensor = true;  ///< a pointer to a tensor, else a scalar passed by value
  bool is_output = false;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  ///< tensors only
};

/// A TMA tensor map the launcher encodes for a 2-D tensor parameter and passes after the
/// kernel's own parameters (swizzled boxes, zero fill out of bounds).
struct TOKAMAX_API TensorMapParam {
  uint32_t param = 0;  ///< index of the tensor parameter
  uint32_t box_inner = 0, box_outer = 0;  ///< box extent along the contiguous dimension, and the other
  uint32_t swizzle = 128;  ///< bytes of the swizzle pattern's row: 32, 64 or 128
  /// > 0: the tensor's rows are batches of this many and boxes stay within one (a 3-D
  /// map; zeros past a batch's last row)
  uint32_t batch_rows = 0;
};

struct TOKAMAX_API LaunchInfo {
  std::string kernel_name;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block_threads = 128;
  uint32_t shared_bytes = 0;
  bool dynamic_shared = false;  ///< shared_bytes is passed at launch (over 48 KiB)
  uint32_t cluster = 1;  ///< CTAs per cluster along x (fixed in the cubin; grid[0] is a multiple)
  std::vector<KernelParam> params;
  std::vector<TensorMapParam> tensor_maps;
  std::string assembler;  ///< what made the cubin, e.g. "nvJitLink 13.0"

  std::string to_json() const;
  /// Throws Error naming the field when `text` is not launch metadata.
  static LaunchInfo from_json(const std::string &text);
};

} // namespace tokamax
