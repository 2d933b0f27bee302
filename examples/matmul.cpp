// matmul: c = a @ b^T in bf16 (f32 accumulation) through the op framework, checked
// against a float64 reference. Auto picks `hopper` (TMA + wgmma) on sm_90a, `tile`
// (mma.sync) on other GPUs; without a GPU the same op runs on the CPU interpreter.
// On a GPU it also reports TFLOP/s.
#include "common/Example.h"

#include <tokamax/ops/Matmul.h>

using namespace tokamax;

int main() try {
  bool gpu = example::use_gpu();
  const int64_t m = gpu ? 8192 : 160, n = gpu ? 8192 : 264, k = gpu ? 4096 : 200;
  const DType dtype = DType::BF16;
  auto a = example::random_values(m * k, dtype, 1), b = example::random_values(n * k, dtype, 2);  // b is [N, K]
  auto ab = example::to_bytes(a, dtype), bb = example::to_bytes(b, dtype);
  std::vector<uint8_t> cb(size_t(m * n) * dtype_size(dtype), 0xff);
  MatmulOptions options;
  options.trans_b = true;
  BoundArgs args = bind_matmul({{m, k}, dtype}, {{n, k}, dtype}, std::nullopt, {{m, n}, dtype}, false, true, 1.0);
  std::string arch = gpu ? Device::get().arch() : "sm_90a";
  fmt::print("matmul {}x{}x{} bf16, b transposed: auto picks `{}` on {}\n", m, n, k,
             matmul_op().select(args, std::nullopt, arch).name(), arch);
  if (gpu) {
    Stream stream = Stream::create(Device::get());
    Tensor ta = Tensor::empty({m, k}, dtype), tb = Tensor::empty({n, k}, dtype), tc = Tensor::empty({m, n}, dtype);
    ta.copy_from_host(ab.data(), ab.size());
    tb.copy_from_host(bb.data(), bb.size());
    matmul(ta, tb, tc, stream, options);
    stream.synchronize();
    tc.copy_to_host(cb.data(), cb.size());
    auto t = time_on_stream(stream, [&] { matmul(ta, tb, tc, stream, options); }, 3, 20);
    fmt::print("matmul: {:.3f} ms, {:.1f} TFLOP/s\n", t.median, 2.0 * m * n * k / t.median / 1e9);
  } else {
    matmul_host(host_view(ab.data(), dtype, {m, k}), host_view(bb.data(), dtype, {n, k}),
                host_view(cb.data(), dtype, {m, n}), options);
  }
  // Reference on a sample of rows (all of them without a GPU).
  std::vector<double> got = example::from_bytes(cb, dtype), sampled, ref;
  for (int64_t i = 0; i < m; i += gpu ? 61 : 1)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t x = 0; x < k; ++x)
        s += a[i * k + x] * b[j * k + x];
      ref.push_back(s);
      sampled.push_back(got[i * n + j]);
    }
  return example::report("matmul", example::relative_error(sampled, ref), 1e-2);
} catch (const std::exception &e) {
  fmt::print(stderr, "matmul: error: {}\n", e.what());
  return 1;
}
