// gelu: a fused elementwise kernel, out = x * Phi(x) in f32 on bf16 data, checked
// against a float64 reference; on a GPU it also reports time and bandwidth.
#include "common/Example.h"

#include <tokamax/ops/Elementwise.h>

#include <cmath>

using namespace tokamax;

int main() try {
  bool gpu = example::use_gpu();
  int64_t n = gpu ? int64_t(1) << 26 : 65537;
  DType dtype = DType::BF16;
  auto x = example::random_values(n, dtype, 4);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
  auto xb = example::to_bytes(x, dtype);
  std::vector<uint8_t> out(xb.size(), 0xff);
  if (gpu) {
    Stream stream = Stream::create(Device::get());
    Tensor tx = Tensor::empty({n}, dtype), to = Tensor::empty({n}, dtype);
    tx.copy_from_host(xb.data(), xb.size());
    gelu(tx, to, stream);
    stream.synchronize();
    to.copy_to_host(out.data(), out.size());
    auto t = time_on_stream(stream, [&] { gelu(tx, to, stream); }, 5, 50);
    example::print_timing("gelu", t, 2.0 * n * dtype_size(dtype));
  } else {
    ElementwiseSpec spec{n, dtype};
    HostArg args[] = {HostArg::tensor(xb.data(), xb.size()), HostArg::tensor(out.data(), out.size())};
    interpret(gelu_kernel(spec, default_config(spec)), args);
  }
  return example::report("gelu", example::relative_error(example::from_bytes(out, dtype), ref), 1e-2);
} catch (const std::exception &e) {
  fmt::print(stderr, "gelu: error: {}\n", e.what());
  return 1;
}
