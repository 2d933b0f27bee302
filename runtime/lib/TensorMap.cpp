//===- TensorMap.cpp - TMA descriptors through cuTensorMapEncodeTiled -------===//
#include "tokamax/runtime/TensorMap.h"

#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

namespace tokamax {

static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) && alignof(TensorMap) >= alignof(CUtensorMap));

namespace {
CUtensorMapDataType tmaType(DType dtype, const char *what) {
  switch (dtype) {
  case DType::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case DType::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case DType::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  case DType::F8E4M3:
  case DType::F8E5M2:
  case DType::I8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  default: throw Error(fmt::format("{}: TMA cannot move {} tensors", what, dtype_name(dtype)));
  }
}
} // namespace

TensorMap encode_tensor_map(const char *what, uint64_t address, DType dtype, int64_t rows, int64_t cols,
                            uint32_t box_inner, uint32_t box_outer, uint32_t swizzle_bytes, int64_t batch_rows) {
  const int64_t rowBytes = cols * static_cast<int64_t>(dtype_size(dtype));
  if (rows < 1 || cols < 1 || rowBytes % 16 != 0)
    throw Error(fmt::format("{}: TMA needs rows of a multiple of 16 bytes, got [{}, {}] {}", what, rows, cols,
                            dtype_name(dtype)));
  if (address % 16 != 0)
    throw Error(fmt::format("{}: TMA needs a 16-byte aligned address, got {:#x}", what, address));
  if (swizzle_bytes != 32 && swizzle_bytes != 64 && swizzle_bytes != 128)
    throw Error(fmt::format("{}: TMA swizzle must be 32, 64 or 128 bytes, got {}", what, swizzle_bytes));
  if (box_inner * dtype_size(dtype) > swizzle_bytes || box_outer > 256 || box_inner == 0 || box_outer == 0)
    throw Error(fmt::format("{}: TMA box {} x {} exceeds the {}-byte swizzle or 256 rows", what, box_outer,
                            box_inner, swizzle_bytes));
  if (batch_rows < 0 || (batch_rows > 0 && rows % batch_rows != 0))
    throw Error(fmt::format("{}: TMA batches of {} rows must divide the {} rows", what, batch_rows, rows));
  const CUtensorMapDataType type = tmaType(dtype, what);  // refused before the driver is touched
  const CUtensorMapSwizzle swizzle = swizzle_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                           : CU_TENSOR_MAP_SWIZZLE_32B;
  TensorMap map{};
  const bool batched = batch_rows > 0;
  const int64_t inBatch = batched ? batch_rows : rows;
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(inBatch),
                        static_cast<cuuint64_t>(rows / inBatch)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(rowBytes), static_cast<cuuint64_t>(rowBytes * inBatch)};
  cuuint32_t box[3] = {box_inner, box_outer, 1};
  cuuint32_t elementStrides[3] = {1, 1, 1};
  CUresult r = detail::driver().cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap *>(&map), type, batched ? 3 : 2, reinterpret_cast<void *>(address), dims,
      strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    detail::throw_driver_error(r, "cuTensorMapEncodeTiled",
                               fmt::format("{}: [{}, {}] {} at {:#x}, box {} x {}{}", what, rows, cols,
                                           dtype_name(dtype), address, box_outer, box_inner,
                                           batched ? fmt::format(", batches of {} rows", batch_rows) : ""));
  return map;
}

TensorMap encode_tensor_map(const KernelParam &param, const TensorMapParam &map, uint64_t address) {
  if (param.shape.size() < 2)
    throw Error(fmt::format("{}: a TMA tensor has 2 or 3 dims, got {}", param.name, param.shape.size()));
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < param.shape.size(); ++d)
    rows *= param.shape[d];
  return encode_tensor_map(param.name.c_str(), address, param.dtype, rows, param.shape.back(), map.box_inner,
                           map.box_outer, map.swizzle, map.batch_rows);
}

} // namespace tokamax
