//===- Tensor.cpp - Tensor views and owning device tensors ----------------===//
#include "tokamax/runtime/Tensor.h"

#include "tokamax/runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <utility>

namespace tokamax {
namespace {

void check_rank(std::span<const int64_t> shape) {
  if (shape.size() > size_t(TensorView::kMaxRank))
    throw Error(fmt::format("tensor rank {} exceeds the maximum of {} (shape {})",
                            shape.size(), TensorView::kMaxRank, format_shape(shape)));
}

void check_dims(std::span<const int64_t> shape) {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0)
      throw Error(fmt::format("negative size {} for dim {} in shape {}", shape[i], i,
                              format_shape(shape)));
}

// numel with an overflow check, so a bogus shape cannot wrap to a small size.
int64_t checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error(fmt::format("shape {} has more than 2^63 elements", format_shape(shape)));
    n *= d;
  }
  return n;
}

} // namespace

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

TensorView::TensorView(uint64_t data, DType dtype, std::span<const int64_t> shape,
                       int device)
    : data_(data), dtype_(dtype), device_(device) {
  check_rank(shape);
  check_dims(shape);
  (void)checked_numel(shape);
  rank_ = static_cast<int8_t>(shape.size());
  int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    shape_[size_t(i)] = shape[size_t(i)];
    strides_[size_t(i)] = stride;
    stride *= shape[size_t(i)];
  }
}

TensorView::TensorView(uint64_t data, DType dtype, std::span<const int64_t> shape,
                       std::span<const int64_t> strides, int device)
    : data_(data), dtype_(dtype), device_(device) {
  check_rank(shape);
  check_dims(shape);
  (void)checked_numel(shape);
  if (strides.size() != shape.size())
    throw Error(fmt::format("shape {} has rank {} but {} strides were given: {}",
                            format_shape(shape), shape.size(), strides.size(),
                            format_shape(strides)));
  rank_ = static_cast<int8_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    shape_[i] = shape[i];
    strides_[i] = strides[i];
  }
}

void TensorView::throw_bad_index(int i) const {
  throw Error(fmt::format("dim index {} out of range for a rank-{} tensor of shape {}", i,
                          int(rank_), format_shape(shape())));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i)
    n *= shape_[size_t(i)];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    const int64_t d = shape_[size_t(i)];
    if (d == 0)
      return true; // No elements: any strides describe the same (empty) data.
    if (d != 1 && strides_[size_t(i)] != expected)
      return false;
    expected *= d;
  }
  return true;
}

Tensor::Tensor(Tensor&& other) noexcept
    : buffer_(std::move(other.buffer_)), view_(std::exchange(other.view_, TensorView())) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    buffer_ = std::move(other.buffer_);
    view_ = std::exchange(other.view_, TensorView());
  }
  return *this;
}

Tensor Tensor::empty(std::span<const int64_t> shape, DType dtype, Device& device) {
  check_rank(shape);
  check_dims(shape);
  const int64_t n = checked_numel(shape);
  // The byte count must not wrap to a small (or zero) allocation.
  if (size_t(n) > std::numeric_limits<size_t>::max() / dtype_size(dtype))
    throw Error(fmt::format("shape {} of {} needs more than 2^64 bytes ({} elements of {} bytes)",
                            format_shape(shape), dtype_name(dtype), n, dtype_size(dtype)));
  DeviceBuffer buffer(size_t(n) * dtype_size(dtype), device);
  TensorView view(buffer.ptr(), dtype, shape, device.ordinal());
  return Tensor(std::move(buffer), view);
}

Tensor Tensor::from_host_floats(std::span<const float> values, std::span<const int64_t> shape,
                                DType dtype, Device& device) {
  Tensor t = empty(shape, dtype, device);
  if (values.size() != size_t(t.numel()))
    throw Error(fmt::format("from_host_floats: {} values given for shape {} ({} elements)",
                            values.size(), format_shape(shape), t.numel()));
  const size_t elem = dtype_size(dtype);
  std::vector<uint8_t> host(values.size() * elem);
  // store_from_double rounds once from the (exact) double, as a float would.
  for (size_t i = 0; i < values.size(); ++i)
    store_from_double(dtype, host.data() + i * elem, double(values[i]));
  t.copy_from_host(host.data(), host.size());
  return t;
}

void Tensor::copy_from_host(const void* src, size_t bytes) {
  if (bytes != nbytes())
    throw Error(fmt::format("copy_from_host: tensor {} {} needs {} bytes, got {}",
                            dtype_name(dtype()), format_shape(shape()), nbytes(), bytes));
  if (bytes == 0)
    return;
  device().make_current();
  copy_host_to_device(data(), src, bytes);
}

void Tensor::copy_to_host(void* dst, size_t bytes) const {
  if (bytes != nbytes())
    throw Error(fmt::format("copy_to_host: tensor {} {} has {} bytes, got a {}-byte buffer",
                            dtype_name(dtype()), format_shape(shape()), nbytes(), bytes));
  if (bytes == 0)
    return;
  device().make_current();
  copy_device_to_host(dst, data(), bytes);
}

std::vector<double> Tensor::to_host_doubles() const {
  std::vector<uint8_t> host(nbytes());
  copy_to_host(host.data(), host.size());
  const size_t elem = dtype_size(dtype());
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = load_as_double(dtype(), host.data() + i * elem);
  return out;
}

} // namespace tokamax
