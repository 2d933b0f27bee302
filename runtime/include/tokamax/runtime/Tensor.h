//===- Tensor.h - Tensor views and owning device tensors ------------*- C++ -*-===//
//
// TensorView is what kernels take: a device address plus dtype, shape and
// element strides, in fixed inline storage (up to kMaxRank dims) so building
// one on the launch path never allocates. Tensor owns device memory.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/DType.h"
#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Export.h"
#include "tokamax/runtime/Memory.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace tokamax {

// "[16384, 4096]"; "[]" for a scalar.
TOKAMAX_API std::string format_shape(std::span<const int64_t> shape);

class TOKAMAX_API TensorView {
public:
  static constexpr int kMaxRank = 8;

  TensorView() = default; // Rank 0, no data.
  // Contiguous row-major. Throws Error on a negative dim or rank > kMaxRank.
  TensorView(uint64_t data, DType dtype, std::span<const int64_t> shape, int device = 0);
  // Explicit strides, in elements; strides.size() must equal shape.size().
  TensorView(uint64_t data, DType dtype, std::span<const int64_t> shape,
             std::span<const int64_t> strides, int device = 0);

  DType dtype() const { return dtype_; }
  uint64_t data() const { return data_; }
  int device() const { return device_; }
  int rank() const { return rank_; }
  // Negative indices count from the back (-1 is the last dim). Throws Error
  // when out of range.
  int64_t dim(int i) const { return shape_[index(i)]; }
  int64_t stride(int i) const { return strides_[index(i)]; }
  std::span<const int64_t> shape() const { return {shape_.data(), size_t(rank_)}; }
  std::span<const int64_t> strides() const { return {strides_.data(), size_t(rank_)}; }
  int64_t numel() const;
  // numel() * dtype_size(): the logical size, not the strided extent.
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  // Row-major dense; dims of size 1 may have any stride.
  bool is_contiguous() const;

private:
  size_t index(int i) const {
    const int j = i < 0 ? i + rank_ : i;
    if (j < 0 || j >= rank_)
      throw_bad_index(i);
    return size_t(j);
  }
  [[noreturn]] void throw_bad_index(int i) const;

  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
  uint64_t data_ = 0;
  DType dtype_ = DType::F32;
  int8_t rank_ = 0;
  int device_ = 0;
};

// A contiguous tensor owning its device memory. Move-only.
class TOKAMAX_API Tensor {
public:
  static Tensor empty(std::span<const int64_t> shape, DType dtype,
                      Device& device = Device::get());
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype,
                      Device& device = Device::get()) {
    return empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
  }
  // Converts `values` to `dtype` on the host (round to nearest even; f64 keeps
  // them exact) and uploads them. values.size() must equal the shape's numel.
  static Tensor from_host_floats(std::span<const float> values,
                                 std::span<const int64_t> shape, DType dtype,
                                 Device& device = Device::get());

  // A moved-from tensor is empty (no memory, rank 0).
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() = default;

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  DType dtype() const { return view_.dtype(); }
  uint64_t data() const { return view_.data(); }
  std::span<const int64_t> shape() const { return view_.shape(); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  Device& device() const { return *buffer_.device(); }

  // Synchronous copies of the whole tensor; `bytes` must equal nbytes().
  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;
  // Downloads and widens every element to double (row-major order).
  std::vector<double> to_host_doubles() const;

private:
  Tensor(DeviceBuffer buffer, TensorView view)
      : buffer_(std::move(buffer)), view_(view) {}

  DeviceBuffer buffer_;
  TensorView view_;
};

} // namespace tokamax
