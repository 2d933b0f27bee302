// vector_add: out = x + y on f32 vectors of an odd length, checked against a float64
// reference; on a GPU it also reports time and bandwidth.
#include "common/Example.h"

#include <tokamax/ops/Elementwise.h>

using namespace tokamax;

int main() try {
  bool gpu = example::use_gpu();
  int64_t n = gpu ? (int64_t(1) << 24) + 17 : 100003;
  DType dtype = DType::F32;
  auto x = example::random_values(n, dtype, 1), y = example::random_values(n, dtype, 2);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = x[i] + y[i];
  auto xb = example::to_bytes(x, dtype), yb = example::to_bytes(y, dtype);
  std::vector<uint8_t> out(n * sizeof(float), 0xff);
  if (gpu) {
    Stream stream = Stream::create(Device::get());
    Tensor tx = Tensor::empty({n}, dtype), ty = Tensor::empty({n}, dtype), to = Tensor::empty({n}, dtype);
    tx.copy_from_host(xb.data(), xb.size());
    ty.copy_from_host(yb.data(), yb.size());
    vector_add(tx, ty, to, stream);
    stream.synchronize();
    to.copy_to_host(out.data(), out.size());
    auto t = time_on_stream(stream, [&] { vector_add(tx, ty, to, stream); }, 5, 50);
    example::print_timing("vector_add", t, 3.0 * n * dtype_size(dtype));
  } else {
    ElementwiseSpec spec{n, dtype};
    HostArg args[] = {HostArg::tensor(xb.data(), xb.size()), HostArg::tensor(yb.data(), yb.size()),
                      HostArg::tensor(out.data(), out.size())};
    interpret(vector_add_kernel(spec, default_config(spec)), args);
  }
  return example::report("vector_add", example::relative_error(example::from_bytes(out, dtype), ref), 1e-6);
} catch (const std::exception &e) {
  fmt::print(stderr, "vector_add: error: {}\n", e.what());
  return 1;
}
