//===- TensorMap.h - TMA descriptors for 2-D tensors (rows in batches) -*- C++ -*-===//
//
// The 128-byte tensor map (CUtensorMap) that cp.async.bulk.tensor reads, encoded on the
// host by the driver for a row-major 2-D tensor: boxes of box_outer rows by box_inner
// contiguous elements, stored in shared memory with the 32-, 64- or 128-byte swizzle,
// zeros read outside the tensor.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/LaunchInfo.h>

#include <cstdint>

namespace tokamax {

struct alignas(128) TensorMap {
  uint64_t words[16];
};

/// `swizzle_bytes` (32, 64 or 128) is the row of the swizzle pattern; a box row may not
/// be wider. With `batch_rows` > 0 the rows are batches of that many (it divides rows)
/// and the map is 3-D ([rows / batch_rows, batch_rows, cols], boxes of one batch): a
/// box reaching past its batch's last row reads zeros, not the next batch's rows; the
/// kernel addresses it as (column, row within the batch, batch). Throws tokamax::Error
/// naming `what` when the tensor cannot be described (a row not a multiple of 16 bytes,
/// an address not 16-byte aligned, a box over 256 or wider than the swizzle, another
/// swizzle, batches that do not divide the rows, a dtype TMA cannot move).
TOKAMAX_API TensorMap encode_tensor_map(const char *what, uint64_t address, DType dtype, int64_t rows,
                                        int64_t cols, uint32_t box_inner, uint32_t box_outer,
                                        uint32_t swizzle_bytes = 128, int64_t batch_rows = 0);
/// The map a kernel's launch metadata asks for: its tensor parameter `param` (2-D, or
/// 3-D [batches, rows, cols] as rows in batches) at `address`.
TOKAMAX_API TensorMap encode_tensor_map(const KernelParam &param, const TensorMapParam &map, uint64_t address);

} // namespace tokamax
