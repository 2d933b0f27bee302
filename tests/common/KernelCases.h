// One call of every kernel family the library ships (norms and their VJPs, softmax,
// gelu, matmul tile and hopper, attention forward and VJP per implementation) at small
// odd shapes, written once for both sides: device tensors on a stream, or host views on
// the interpreter. Outputs start poisoned; inputs are seeded random non-zero values, so
// the same case gives the same inputs on every run. The sanitizer sweep and the load
// test run them.
#pragma once

#include "common/Numerics.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace test {

using namespace tokamax;

/// The tensors of one call on one side: device tensors (with a stream) or host views.
class Io {
public:
  explicit Io(Stream *stream) : stream(stream) {}
  Stream *const stream;  ///< null: the interpreter
  bool device() const { return stream != nullptr; }

  const TensorView &input(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return add(dtype, std::move(shape), test::to_bytes(test::random_values(n, dtype, seed, 0.05, 2.0), dtype));
  }
  /// Poisoned (0xA5 bytes) until the call writes it.
  const TensorView &output(DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    const TensorView &v = add(dtype, std::move(shape), std::vector<uint8_t>(n * dtype_size(dtype), 0xA5));
    outputs_.push_back(views_.size() - 1);
    return v;
  }
  std::vector<std::vector<double>> results() {
    if (stream)
      stream->synchronize();
    std::vector<std::vector<double>> r;
    for (size_t i : outputs_) {
      if (stream)
        tensors_[i]->copy_to_host(bytes_[i].data(), bytes_[i].size());
      r.push_back(test::from_bytes(bytes_[i], views_[i].dtype()));
    }
    return r;
  }

  /// Elements of output `k` (after results()) that still hold the poison bytes.
  size_t poisoned(size_t k) const {
    const std::vector<uint8_t> &b = bytes_[outputs_[k]];
    const size_t size = dtype_size(views_[outputs_[k]].dtype());
    size_t count = 0;
    for (size_t at = 0; at < b.size(); at += size)
      count += std::all_of(b.begin() + at, b.begin() + at + size, [](uint8_t x) { return x == 0xA5; }) ? 1 : 0;
    return count;
  }

private:
  const TensorView &add(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    bytes_.push_back(std::move(bytes));
    if (stream) {
      tensors_.push_back(Tensor::empty(shape, dtype));
      tensors_.back()->copy_from_host(bytes_.back().data(), bytes_.back().size());
      views_.push_back(tensors_.back()->view());
    } else {
      tensors_.emplace_back();  // keeps indices aligned
      views_.push_back(host_view(bytes_.back().data(), dtype, std::span<const int64_t>(shape)));
    }
    return views_.back();
  }
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<std::optional<Tensor>> tensors_;
  std::deque<TensorView> views_;
  std::vector<size_t> outputs_;
};

struct KernelCase {
  std::string name;
  std::function<void(Io &)> call;
  double tolerance;
};

/// One call of every kernel family; `variant` (0, 1, 2) picks other odd shapes.
inline std::vector<KernelCase> kernel_cases(int variant = 0) {
  const int64_t v = variant;
  std::vector<KernelCase> all;
  for (std::string impl : {"tile", "reference"}) {
    NormOptions o;
    o.implementation = impl;
    all.push_back({"layer_norm + vjp " + impl, [o, v](Io &io) {
                     const int64_t rows = 33 + 40 * v, cols = 200 + 72 * v;
                     const TensorView &x = io.input(DType::BF16, {rows, cols}, 1), &scale = io.input(DType::F32, {cols}, 2);
                     const TensorView &offset = io.input(DType::F32, {cols}, 3), &dy = io.input(DType::BF16, {rows, cols}, 4);
                     const TensorView &y = io.output(DType::BF16, {rows, cols}), &mean = io.output(DType::F32, {rows});
                     const TensorView &rstd = io.output(DType::F32, {rows}), &dx = io.output(DType::BF16, {rows, cols});
                     const TensorView &dscale = io.output(DType::F32, {cols}), &doffset = io.output(DType::F32, {cols});
                     if (io.device()) {
                       layer_norm(x, &scale, &offset, y, *io.stream, o, &mean, &rstd);
                       layer_norm_vjp(dy, x, &scale, mean, rstd, dx, &dscale, &doffset, *io.stream, o);
                     } else {
                       layer_norm_host(x, &scale, &offset, y, o, &mean, &rstd);
                       layer_norm_vjp_host(dy, x, &scale, mean, rstd, dx, &dscale, &doffset, o);
                     }
                   }, 1e-2});
    all.push_back({"rms_norm + vjp " + impl, [o, v](Io &io) {
                     const int64_t rows = 17 + 9 * v, cols = 1000 - 136 * v;
                     const TensorView &x = io.input(DType::F16, {rows, cols}, 5), &scale = io.input(DType::F32, {cols}, 6);
                     const TensorView &dy = io.input(DType::F16, {rows, cols}, 7);
                     const TensorView &y = io.output(DType::F16, {rows, cols}), &rstd = io.output(DType::F32, {rows});
                     const TensorView &dx = io.output(DType::F16, {rows, cols}), &dscale = io.output(DType::F32, {cols});
                     if (io.device()) {
                       rms_norm(x, &scale, y, *io.stream, o, &rstd);
                       rms_norm_vjp(dy, x, &scale, rstd, dx, &dscale, *io.stream, o);
                     } else {
                       rms_norm_host(x, &scale, y, o, &rstd);
                       rms_norm_vjp_host(dy, x, &scale, rstd, dx, &dscale, o);
                     }
                   }, 1e-2});
  }
  all.push_back({"softmax and gelu", [v](Io &io) {
                   const int64_t rows = 17 + v, cols = 300 + 100 * v, n = 1000 + 777 * v;
                   const TensorView &x = io.input(DType::F32, {rows, cols}, 8), &g = io.input(DType::BF16, {n}, 9);
                   const TensorView &y = io.output(DType::F32, {rows, cols}), &gy = io.output(DType::BF16, {n});
                   if (io.device()) {
                     softmax(x, y, *io.stream);
                     gelu(g, gy, *io.stream);
                   } else {
                     softmax_host(x, y);
                     gelu_host(g, gy);
                   }
                 }, 1e-2});
  // matmul: the cp.async ring (rows of whole 16-byte chunks), masked loads (odd K),
  // hopper (TMA + wgmma, warp-specialized) and its in-order A-in-registers form.
  auto matmulCase = [](std::string name, int64_t m, int64_t n, int64_t k, std::string impl,
                       std::optional<MatmulConfig> config) {
    return KernelCase{name, [=](Io &io) {
                        const TensorView &a = io.input(DType::BF16, {m, k}, 10), &b = io.input(DType::BF16, {k, n}, 11);
                        const TensorView &c = io.output(DType::F32, {m, n});
                        MatmulOptions o;
                        o.implementation = impl;
                        o.config = config;
                        io.device() ? matmul(a, b, c, *io.stream, o) : matmul_host(a, b, c, o);
                      }, 1e-4};
  };
  all.push_back(matmulCase("matmul tile cp.async", 100 + 28 * v, 72, 136 + 64 * v, "tile", std::nullopt));
  all.push_back(matmulCase("matmul tile odd K", 33, 40 + 8 * v, 17 + 2 * v, "tile", std::nullopt));
  all.push_back(matmulCase("matmul hopper", 200 + 56 * v, 136, 264, "hopper", std::nullopt));
  MatmulConfig inOrder = default_hopper_config({});
  inOrder.block_k = 16, inOrder.num_stages = 8, inOrder.a_in_registers = true;
  inOrder.warp_specialize = false, inOrder.programs = 0;
  all.push_back(matmulCase("matmul hopper A in registers in order", 200, 136, 264, "hopper", inOrder));
  // attention forward and VJP: the tile kernels through the cp.async ring (a head dim
  // with zero-filled columns too), chunked and reference; causal with GQA.
  for (auto [impl, h] : {std::pair<std::string, int64_t>{"tile", 64}, {"tile", 40}, {"chunked", 64}, {"reference", 64}}) {
    all.push_back({"attention + vjp " + impl + " H" + std::to_string(h), [impl, h, v](Io &io) {
                     const int64_t B = 1 + v, T = 70 + 33 * v, S = 45 + 50 * v, N = 4, K = 2;
                     const TensorView &q = io.input(DType::BF16, {B, T, N, h}, 12), &k = io.input(DType::BF16, {B, S, K, h}, 13);
                     const TensorView &v = io.input(DType::BF16, {B, S, K, h}, 14), &dout = io.input(DType::BF16, {B, T, N, h}, 15);
                     const TensorView &out = io.output(DType::BF16, {B, T, N, h}), &lse = io.output(DType::F32, {B, N, T});
                     const TensorView &dq = io.output(DType::BF16, {B, T, N, h}), &dk = io.output(DType::BF16, {B, S, K, h});
                     const TensorView &dv = io.output(DType::BF16, {B, S, K, h});
                     AttentionOptions o;
                     o.implementation = impl;
                     o.is_causal = true;
                     if (io.device()) {
                       dot_product_attention(q, k, v, out, *io.stream, o, &lse);
                       dot_product_attention_vjp(dout, q, k, v, out, lse, dq, dk, dv, *io.stream, o);
                     } else {
                       dot_product_attention_host(q, k, v, out, o, &lse);
                       dot_product_attention_vjp_host(dout, q, k, v, out, lse, dq, dk, dv, o);
                     }
                   }, 2e-2});
  }
  return all;
}

} // namespace test
