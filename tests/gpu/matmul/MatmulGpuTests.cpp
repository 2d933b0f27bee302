// matmul on the device (tensor cores through tile.dot -> mma.sync) against float64 host
// references: M, N, K from {1, 17, 127, 1000, 4097}, all four transposes, bf16, f16 and
// f32 (tf32) inputs, bias and alpha, and f64 through the reference kernel; null operands
// and empty products. Also a DSL kernel chaining two dots through reductions and
// elementwise math on the accumulator layout (attention-like), which exercises slices of
// mma layouts and mma -> operand conversions. The hopper kernel's device tests are in
// MatmulHopperGpuTests.cpp.
#include <catch2/catch.hpp>

#include "common/Numerics.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <optional>
#include <tuple>
#include <vector>

#include "gpu/matmul/MatmulGpuCase.h"

using namespace tokamax;
using namespace matmul_gpu_test;

TEST_CASE("matmul on the device: odd shapes, all transposes, bf16/f16/f32", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  // Host references stay below ~3e8 multiply-adds per case.
  std::vector<Shape> shapes{{1, 1, 1},       {17, 127, 1},   {127, 17, 17},  {1, 127, 127},
                            {127, 127, 127}, {4097, 127, 17}, {17, 4097, 127}, {127, 17, 4097},
                            {1, 4097, 1000}, {1000, 1, 4097}, {1000, 1000, 17}, {4097, 17, 1000}};
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : shapes) {
        Case c{m, n, k, dtype, dtype, bool(t & 1), bool(t & 2), (m + n + k + t) % 3 == 0};
        double err = runCase(c, stream);
        INFO(describe(c) << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
}

TEST_CASE("tile matmul on the device through the cp.async ring: ragged shapes, configs", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  // Rows of a and b that are whole 16-byte chunks (multiples of 8 16-bit or 4 f32
  // elements) stream through the ring; M, N and K still leave partial blocks and slices.
  // Where a transpose makes a row odd (M = 1 stored [K, M]) the masked path runs instead.
  std::vector<Shape> shapes{{8, 8, 8},          {1, 136, 264},     {1000, 1000, 1000},
                            {4104, 136, 520},   {136, 4104, 72},   {520, 264, 4104}};
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : shapes) {
        Case c{m, n, k, dtype, t == 2 ? DType::F32 : dtype, bool(t & 1), bool(t & 2), (m + t) % 3 == 0, 0.5};
        double err = runCase(c, stream);
        INFO(describe(c) << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // Every block shape, warp count, K slice and ring depth of the search space.
  int index = 0;
  for (auto [bm, bn, warps] : {Shape{128, 128, 4}, {128, 128, 8}, {128, 256, 8}, {256, 128, 8}, {64, 128, 4},
                               {64, 64, 4}, {16, 16, 1}})
    for (int64_t bk : {32, 64})
      for (int64_t stages : {2, 3, 4}) {
        MatmulConfig config = default_config({});
        config.block_m = bm, config.block_n = bn, config.num_warps = static_cast<int>(warps);
        config.block_k = bk, config.num_stages = stages;
        int t = index++ % 4;
        Case c{1000, 520, 1000, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 1, 1.0, "tile", config};
        double err = runCase(c, stream);
        INFO(describe(c) << " block " << bm << "x" << bn << "x" << bk << " warps " << warps << " stages " << stages
                         << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
}

TEST_CASE("matmul on the device: 1000^3, f32 output, alpha and bias", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (DType out : {dtype, DType::F32}) {
      if (dtype == DType::F32 && out != dtype)
        continue;
      Case c{1000, 1000, 1000, dtype, out, out == DType::F32, false, true, 0.5};
      double err = runCase(c, stream);
      INFO(describe(c) << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
  // Large N and M tiles with a long K loop and every transpose.
  for (int t = 0; t < 4; ++t) {
    Case c{4097, 129, 4097, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 2, -2.0};
    double err = runCase(c, stream);
    INFO(describe(c) << ": relative error " << err);
    CHECK(err < tolerance(c.dtype, c.out, c.k));
  }
}

TEST_CASE("matmul on the device: f64 through the reference kernel", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  for (auto [m, n, k] : std::vector<Shape>{{1, 1, 1}, {17, 127, 1000}, {127, 17, 17}})
    for (int t = 0; t < 4; ++t) {
      Case c{m, n, k, DType::F64, DType::F64, bool(t & 1), bool(t & 2), t == 1, 1.25, "reference"};
      double err = runCase(c, stream);
      INFO(describe(c) << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
}

TEST_CASE("dot results feed reductions, elementwise math and a second dot on the device", "[gpu][matmul]") {
  using namespace tokamax::dsl;
  for (auto [m, n, d, warps] : std::vector<std::tuple<int64_t, int64_t, int64_t, int>>{
           {64, 64, 32, 4}, {16, 32, 16, 1}, {32, 16, 64, 2}, {128, 64, 64, 8}}) {
    // o = softmax(q k^T) v, cs = column sums of q k^T.
    Kernel k("attention_block", {warps});
    auto q = k.input("q", DType::BF16, {m, d});
    auto kt = k.input("k", DType::BF16, {n, d});
    auto v = k.input("v", DType::BF16, {n, d});
    auto o = k.output("o", DType::F32, {m, d});
    auto cs = k.output("cs", DType::F32, {n});
    Value s = dot(q.load({0, 0}, {m, d}), kt.load({0, 0}, {n, d}).trans(), 0.0);
    Value p = exp(s - s.max(1).expand(1));
    cs.store({0}, s.sum(0));
    o.store({0, 0}, dot(p.to(DType::BF16), v.load({0, 0}, {n, d}), 0.0) / p.sum(1).expand(1));

    std::vector<double> qv = randomValues(m * d, DType::BF16, 1), kv = randomValues(n * d, DType::BF16, 2),
                        vv = randomValues(n * d, DType::BF16, 3);
    auto bytes = [](const std::vector<double> &x, DType t) {
      std::vector<uint8_t> b(x.size() * dtype_size(t));
      for (size_t i = 0; i < x.size(); ++i)
        store_from_double(t, b.data() + i * dtype_size(t), x[i]);
      return b;
    };
    std::vector<uint8_t> qb = bytes(qv, DType::BF16), kb = bytes(kv, DType::BF16), vb = bytes(vv, DType::BF16),
                         ob(m * d * 4), cb(n * 4);
    std::vector<HostArg> args{HostArg::tensor(qb.data(), qb.size()), HostArg::tensor(kb.data(), kb.size()),
                              HostArg::tensor(vb.data(), vb.size()), HostArg::tensor(ob.data(), ob.size()),
                              HostArg::tensor(cb.data(), cb.size())};
    run_on_device(k, args, Device::get());

    std::vector<double> sref(m * n), pref(m * n), oref(m * d, 0.0), csref(n, 0.0), rowsum(m, 0.0);
    for (int64_t i = 0; i < m; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d; ++c)
          acc += qv[i * d + c] * kv[j * d + c];
        sref[i * n + j] = acc;
        mx = std::max(mx, acc);
        csref[j] += acc;
      }
      for (int64_t j = 0; j < n; ++j) {
        double e = std::exp(sref[i * n + j] - mx);
        rowsum[i] += e;
        uint8_t one[2];
        store_from_double(DType::BF16, one, e);  // p is rounded to bf16 before the second dot
        pref[i * n + j] = load_as_double(DType::BF16, one);
      }
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j)
          acc += pref[i * n + j] * vv[j * d + c];
        oref[i * d + c] = acc / rowsum[i];
      }
    }
    std::vector<double> og(m * d), cg(n);
    for (int64_t i = 0; i < m * d; ++i)
      og[i] = load_as_double(DType::F32, ob.data() + 4 * i);
    for (int64_t j = 0; j < n; ++j)
      cg[j] = load_as_double(DType::F32, cb.data() + 4 * j);
    INFO(m << "x" << n << "x" << d << " on " << warps << " warps");
    CHECK(test::rel_error(og, oref) < 2e-3);  // exp is approximate; p is bf16
    CHECK(test::rel_error(cg, csref) < 1e-5);
  }
}

TEST_CASE("matmul on the device refuses a null a or c before launching; the context stays usable",
          "[gpu][matmul]") {
  // Regression: a null pointer was launched, and CUDA_ERROR_ILLEGAL_ADDRESS then poisoned
  // the process's context.
  Stream stream = Stream::create(Device::get());
  Tensor a = Tensor::empty({64, 64}, DType::BF16), b = Tensor::empty({64, 64}, DType::BF16);
  Tensor c = Tensor::empty({64, 64}, DType::F32);
  const int64_t shape[] = {64, 64};
  TensorView nullA(0, DType::BF16, shape, a.view().device()), nullC(0, DType::F32, shape, c.view().device());
  CHECK_THROWS_WITH(matmul(nullA, b, c, stream), Catch::Contains("a has no data"));
  CHECK_THROWS_WITH(matmul(a, b, nullC, stream), Catch::Contains("c has no data"));
  CHECK_NOTHROW(matmul(a, b, c, stream));
  CHECK_NOTHROW(stream.synchronize());
}

TEST_CASE("matmul on the device: empty products; M or N = 0 is a no-op, K = 0 gives bias or 0", "[gpu][matmul]") {
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  const int64_t m = 37, n = 24;
  std::vector<float> biasValues(n), garbage(m * n, std::nanf(""));
  for (int64_t j = 0; j < n; ++j)
    biasValues[j] = 0.5f * float(j) - 3.0f;
  const int64_t biasShape[] = {n}, cShape[] = {m, n};
  Tensor bias = Tensor::from_host_floats(biasValues, biasShape, DType::F32, device);
  const int64_t aShape[] = {m, 0}, bShape[] = {0, n};
  TensorView a(0, DType::BF16, aShape, device.ordinal()), b(0, DType::BF16, bShape, device.ordinal());
  for (const char *impl : {"", "hopper", "tile", "reference"}) {
    INFO("implementation \"" << impl << "\"");
    MatmulOptions options;
    options.implementation = impl;
    Tensor c = Tensor::from_host_floats(garbage, cShape, DType::F32, device);
    matmul(a, b, c, stream, options);
    stream.synchronize();
    for (double v : c.to_host_doubles())
      CHECK(v == 0.0);
    c = Tensor::from_host_floats(garbage, cShape, DType::F32, device);
    options.bias = bias.view();
    matmul(a, b, c, stream, options);
    stream.synchronize();
    std::vector<double> got = c.to_host_doubles();
    for (int64_t i = 0; i < m * n; ++i)
      CHECK(got[i] == biasValues[i % n]);
    // No rows: a no-op (nothing launched, the context stays usable).
    const int64_t emptyA[] = {0, 16}, kb[] = {16, n}, emptyC[] = {0, n};
    Tensor bb = Tensor::empty(kb, DType::BF16, device);
    matmul(TensorView(0, DType::BF16, emptyA, device.ordinal()), bb, TensorView(0, DType::F32, emptyC, device.ordinal()),
           stream, options);
    CHECK_NOTHROW(stream.synchronize());
  }
}
