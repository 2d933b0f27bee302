//===- Tensors.cpp - tkx_tensor to ArgSpec / TensorView, checked ------------===//
#include "c/lib/CApi.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstddef>

namespace tokamax::capi {

namespace {

/// The fields of version 1 end with `data`: a caller's struct must hold at least those.
constexpr size_t kTensorV1Size = offsetof(tkx_tensor, data) + sizeof(void *);
static_assert(kTensorV1Size == sizeof(tkx_tensor), "tkx_tensor grew: keep kTensorV1Size at version 1's size");

std::span<const int64_t> shapeOf(const tkx_tensor &t) {
  return {t.shape, static_cast<size_t>(t.rank)};
}

} // namespace

ArgSpec spec_of(const tkx_tensor &t, std::string_view what) {
  if (t.struct_size < kTensorV1Size)
    throw Error(fmt::format("{}: struct_size {} is smaller than tkx_tensor ({} bytes); set it to sizeof(tkx_tensor)",
                            what, t.struct_size, kTensorV1Size));
  if (t.dtype < TKX_BF16 || t.dtype > TKX_F8E5M2)
    throw Error(fmt::format("{}: dtype {} is not a tkx_dtype (0..{})", what, t.dtype, int(TKX_F8E5M2)));
  if (t.rank < 0 || t.rank > TKX_MAX_RANK)
    throw Error(fmt::format("{}: rank {} is outside 0..{}", what, t.rank, TKX_MAX_RANK));
  if (t.rank > 0 && !t.shape)
    throw Error(fmt::format("{}: shape is NULL for rank {}", what, t.rank));
  ArgSpec spec{{shapeOf(t).begin(), shapeOf(t).end()}, static_cast<DType>(t.dtype)};
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] < 0)
      throw Error(fmt::format("{}: shape [{}] has a negative dimension", what, fmt::join(spec.shape, ", ")));
  if (t.strides) {
    // Contiguous row-major only (the ops' kernels read dense rows); a dimension of one
    // element may carry any stride, as frameworks give such dims.
    int64_t expected = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected && spec.numel() != 0)
        throw Error(fmt::format("{}: strides [{}] of shape [{}] are not contiguous row-major (only contiguous "
                                "tensors are accepted; pass strides NULL or make the tensor contiguous)",
                                what, fmt::join(std::span(t.strides, t.rank), ", "), fmt::join(spec.shape, ", ")));
      expected *= t.shape[i];
    }
  }
  return spec;
}

TensorView view_of(const tkx_tensor &t, std::string_view what) {
  ArgSpec spec = spec_of(t, what);
  if (t.device < -1)
    throw Error(fmt::format("{}: device {} is neither a CUDA ordinal nor -1 (host)", what, t.device));
  if (!t.data && spec.numel() != 0)
    throw Error(fmt::format("{}: data is NULL for a tensor of {} elements", what, spec.numel()));
  return TensorView(reinterpret_cast<uint64_t>(t.data), spec.dtype, spec.shape, t.device < 0 ? 0 : t.device);
}

} // namespace tokamax::capi
