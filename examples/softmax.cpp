// softmax: row softmax of a [rows, cols] tensor (cols not a power of two), checked
// against a float64 reference; on a GPU it also reports time and bandwidth.
#include "common/Example.h"

#include <tokamax/ops/Softmax.h>

#include <cmath>

using namespace tokamax;

int main() try {
  bool gpu = example::use_gpu();
  int64_t rows = gpu ? 16384 : 37, cols = 1000;
  DType dtype = DType::BF16;
  auto x = example::random_values(rows * cols, dtype, 3);
  std::vector<double> ref(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c)
      m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c)
      s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c)
      ref[r * cols + c] = std::exp(x[r * cols + c] - m) / s;
  }
  auto xb = example::to_bytes(x, dtype);
  std::vector<uint8_t> out(xb.size(), 0xff);
  if (gpu) {
    Stream stream = Stream::create(Device::get());
    Tensor tx = Tensor::empty({rows, cols}, dtype), ty = Tensor::empty({rows, cols}, dtype);
    tx.copy_from_host(xb.data(), xb.size());
    softmax(tx, ty, stream);
    stream.synchronize();
    ty.copy_to_host(out.data(), out.size());
    auto t = time_on_stream(stream, [&] { softmax(tx, ty, stream); }, 5, 50);
    example::print_timing("softmax", t, 2.0 * rows * cols * dtype_size(dtype));
  } else {
    SoftmaxSpec spec{rows, cols, dtype};
    HostArg args[] = {HostArg::tensor(xb.data(), xb.size()), HostArg::tensor(out.data(), out.size())};
    interpret(softmax_kernel(spec, default_config(spec)), args);
  }
  // bf16 output: each element is rounded to 8 bits of mantissa.
  return example::report("softmax", example::relative_error(example::from_bytes(out, dtype), ref), 1e-2);
} catch (const std::exception &e) {
  fmt::print(stderr, "softmax: error: {}\n", e.what());
  return 1;
}
