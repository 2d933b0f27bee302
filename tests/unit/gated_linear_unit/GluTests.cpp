// gated_linear_unit on the interpreter against float64: every dtype and activation,
// forward and VJP, odd shapes (M 1, 17, 1000; K and N not multiples of the blocks), both
// main loops of the tile kernel (cp.async ring, masked register loads) and reference.
#include <catch2/catch.hpp>

#include "unit/gated_linear_unit/GluTestCase.h"

#include <tokamax/ops/GatedLinearUnit.h>

#include <algorithm>

using namespace tokamax;
using namespace glu_test;

namespace {

const char *const kActivations[] = {"swish", "gelu_tanh", "gelu", "sigmoid", "relu", "none"};

/// Small blocks, so that odd shapes give many programs and partial edge blocks.
Config smallTile(bool ring) {
  Config c{{"block_m", 16}, {"block_n", 16}, {"block_k", 16}, {"num_warps", 1}};
  if (ring)
    c.set("async_copy", 1).set("stages", 3);
  return c;
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

} // namespace

TEST_CASE("gated_linear_unit: every dtype and activation, forward and VJP, match float64", "[glu]") {
  uint64_t seed = 100;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (const char *activation : kActivations) {
      const bool half = dtype == DType::BF16 || dtype == DType::F16;
      for (const char *impl : {"tile", "reference"}) {
        if (!half && std::string(impl) == "tile")
          continue;
        Case c{{3, 7}, 40, 24, dtype, activation, impl, std::nullopt};
        check(checkForward(c, seed++));
        check(checkVjp(c, seed++));
      }
    }
}

TEST_CASE("gated_linear_unit: odd shapes on both tile main loops and reference", "[glu]") {
  uint64_t seed = 300;
  struct Shape {
    int64_t m, k, n;
  };
  for (Shape s : {Shape{1, 37, 23}, Shape{17, 40, 24}, Shape{1000, 24, 40}, Shape{17, 5, 3}, Shape{33, 72, 48}}) {
    const bool ring = s.k % 8 == 0 && s.n % 8 == 0;
    check(checkForward({{s.m}, s.k, s.n, DType::BF16, "swish", "tile", smallTile(ring)}, seed++));
    check(checkVjp({{s.m}, s.k, s.n, DType::BF16, "swish", "tile", smallTile(ring)}, seed++));
    check(checkForward({{s.m}, s.k, s.n, DType::F16, "gelu_tanh", "tile", std::nullopt}, seed++));
    check(checkVjp({{s.m}, s.k, s.n, DType::F32, "gelu", "reference", std::nullopt}, seed++));
    check(checkForward({{s.m}, s.k, s.n, DType::F64, "sigmoid", "reference", std::nullopt}, seed++));
  }
  // The wgmma config (every warp along M; the interpreter runs its dots as any other).
  Config wgmma{{"block_m", 64}, {"block_n", 32}, {"block_k", 16}, {"num_warps", 4},
               {"async_copy", 1}, {"stages", 2}, {"wgmma", 1}};
  check(checkForward({{33}, 72, 48, DType::BF16, "gelu", "tile", wgmma}, seed++));
  check(checkVjp({{100}, 72, 48, DType::F16, "relu", "tile", wgmma}, seed++));
  // The tma config: TMA rings with a producer warpgroup (the interpreter runs each step's
  // copies, then its products), the weights read as [K, 2N]: N 40 puts W1's first
  // columns in W0's last block, K 72 leaves a partial last slice.
  for (int64_t n : {40, 48}) {
    Config tma{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4},
               {"async_copy", 1}, {"stages", 2}, {"tma", 1}};
    check(checkForward({{33}, 72, n, DType::BF16, "swish", "tile", tma}, seed++));
    check(checkVjp({{100}, 72, n, DType::F16, "gelu_tanh", "tile", tma}, seed++));
    // hopper: the same gate kernels, its VJP's dx and dweights on the hopper matmul.
    Config hopper{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2}};
    check(checkForward({{33}, 72, n, DType::BF16, "swish", "hopper", hopper}, seed++));
    check(checkVjp({{100}, 72, n, DType::F16, "gelu_tanh", "hopper", hopper}, seed++));
    check(checkVjp({{3, 11}, 72, n, DType::BF16, "sigmoid", "hopper", std::nullopt}, seed++));
  }
  // Persistent programs walking several tiles each (12 tiles of 64 x 64 over 2 and 5
  // programs; the producer loads a tile's blocks while the consumers gate the last).
  for (int64_t programs : {2, 5}) {
    Config persistent{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 3},
                      {"programs", programs}};
    check(checkForward({{200}, 72, 136, DType::BF16, "gelu", "hopper", persistent}, seed++));
    check(checkVjp({{4, 50}, 72, 136, DType::F16, "swish", "hopper", persistent}, seed++));
    // The gated tiles stored by TMA (partial tiles at M 200 and N 136 clipped).
    check(checkForward({{200}, 72, 136, DType::F16, "swish", "hopper", Config(persistent).set("tma_store", 1)},
                       seed++));
  }
  check(checkForward({{33}, 72, 40, DType::BF16, "gelu_tanh", "hopper",
                      Config{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2},
                             {"tma_store", 1}}},
                     seed++));
  // The configs glu-fused times at G1: [128, 128] tiles of both products, 64-wide K steps
  // through four slots (K 320: five steps, the slots wrap), one program walking every
  // tile of M 300 x N 200 (partial tiles at both edges), stored by TMA.
  check(checkForward({{300}, 320, 200, DType::BF16, "swish", "hopper",
                      Config{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"group_m", 8}, {"num_warps", 8},
                             {"stages", 4}, {"programs", 1}, {"tma_store", 1}}},
                     seed++));
  // unfused: both products on the matmul kernel, then the gate (or its gradient, in
  // place) in an elementwise kernel; odd M and N leave partial blocks in both kernels.
  for (const char *impl : {"tile", "hopper"}) {
    Config unfused{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2}, {"unfused", 1}};
    if (std::string(impl) == "tile")
      unfused.set("async_copy", 1);
    check(checkForward({{37}, 72, 136, DType::BF16, "swish", impl, unfused}, seed++));
    check(checkVjp({{37}, 72, 136, DType::BF16, "swish", impl, unfused}, seed++));
    check(checkForward({{3, 50}, 40, 40, DType::F16, "gelu", impl, unfused}, seed++));
    check(checkVjp({{3, 50}, 40, 40, DType::F16, "gelu", impl, unfused}, seed++));
  }
  for (const char *activation : kActivations) {
    Config unfused = Config(smallTile(false)).set("unfused", 1);
    check(checkForward({{1}, 24, 8, DType::BF16, activation, "tile", unfused}, seed++));
    check(checkVjp({{1}, 24, 8, DType::BF16, activation, "tile", unfused}, seed++));
  }
  // A six-slot ring (TMA rings go to 8) over 9 K steps: the slots wrap past the first
  // phase while the producer runs six steps ahead.
  Config deep{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 6}, {"programs", 2}};
  check(checkForward({{150}, 288, 72, DType::BF16, "swish", "hopper", deep}, seed++));
  check(checkVjp({{70}, 288, 72, DType::BF16, "gelu", "hopper", Config(deep).set("programs", 0)}, seed++));
}

TEST_CASE("gated_linear_unit: the forward's pre-activations, and the VJP that reads them", "[glu][preactivations]") {
  // The forward writes h = x W ([M, 2, N]) and out from it; the VJP given h reads it (no
  // recomputation, h left as it was). On hopper's and tile's unfused configs the same
  // kernels run with and without h, so out, dx and dweights must be bitwise the same;
  // every implementation also against float64.
  uint64_t seed = 700;
  struct Run {
    const char *impl;
    DType dtype;
    std::optional<Config> config;
  };
  const Config unfused{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2},
                       {"unfused", 1}};
  for (const Run &r : {Run{"hopper", DType::BF16, unfused}, Run{"tile", DType::F16, Config(unfused).set("async_copy", 1)},
                       Run{"tile", DType::BF16, std::nullopt}, Run{"reference", DType::F32, std::nullopt},
                       Run{"reference", DType::F64, std::nullopt}})
    for (const std::vector<int64_t> &lead : {std::vector<int64_t>{37}, std::vector<int64_t>{3, 11}}) {
      const int64_t k = 72, n = 40, m = attention_test::product(lead);
      Case c{lead, k, n, r.dtype, "gelu_tanh", r.impl, r.config};
      INFO(c.name());
      Inputs in = randomInputs(c, seed++);
      HostBuffer x(c.dtype, c.xShape(), in.x), w(c.dtype, c.wShape(), in.w), dout(c.dtype, c.outShape(), in.dout);
      std::vector<int64_t> hShape = lead;
      hShape.push_back(2);
      hShape.push_back(n);
      HostBuffer out(c.dtype, c.outShape()), h(c.dtype, hShape), plain(c.dtype, c.outShape());
      gated_linear_unit_host(x.view(), w.view(), out.view(), h.view(), c.options());
      gated_linear_unit_host(x.view(), w.view(), plain.view(), c.options());
      // h against x W in float64 (x and W as rounded to the dtype), within the dtype's rounding.
      std::vector<double> xr = x.values(), wr = w.values(), want(size_t(m * 2 * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < 2 * n; ++j) {
          double sum = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            sum += xr[size_t(i * k + kk)] * wr[size_t(kk * 2 * n + j)];
          want[size_t(i * 2 * n + j)] = sum;
        }
      const Comparison ch = attention_test::compare("preactivations", h.values(), want, h.shape, gluTolerance(c.dtype), 1e-3);
      INFO(ch.message);
      CHECK(ch.ok);
      const Comparison co = attention_test::compare("out", out.values(),
                                                    forward(in.x, in.w, m, k, n, GluActivation::GeluTanh),
                                                    out.shape, gluTolerance(c.dtype), 1e-3);
      INFO(co.message);
      CHECK(co.ok);
      const bool sameKernels = r.config && r.config->get("unfused") == 1;
      if (sameKernels)
        CHECK(out.storage == plain.storage);

      const std::vector<uint64_t> hBefore = h.storage;
      HostBuffer dx(c.dtype, c.xShape()), dw(c.dtype, c.wShape()), dxPlain(c.dtype, c.xShape()),
          dwPlain(c.dtype, c.wShape());
      gated_linear_unit_vjp_host(dout.view(), x.view(), w.view(), h.view(), dx.view(), dw.view(), c.options());
      gated_linear_unit_vjp_host(dout.view(), x.view(), w.view(), dxPlain.view(), dwPlain.view(), c.options());
      CHECK(h.storage == hBefore);
      Gradients ref = vjp(in.dout, in.x, in.w, m, k, n, GluActivation::GeluTanh);
      const Comparison cx = attention_test::compare("dx", dx.values(), ref.dx, dx.shape, gluTolerance(c.dtype), 1e-3);
      const Comparison cw = attention_test::compare("dweights", dw.values(), ref.dw, dw.shape, gluTolerance(c.dtype), 1e-3);
      INFO(cx.message << "\n" << cw.message);
      CHECK(cx.ok);
      CHECK(cw.ok);
      if (sameKernels) {
        CHECK(dx.storage == dxPlain.storage);
        CHECK(dw.storage == dwPlain.storage);
      }
      // The VJP reads h, not x W: zero pre-activations give act(0) = 0 and b = 0, so dh,
      // dx and dweights are zeros.
      HostBuffer zeros(c.dtype, hShape, std::vector<double>(size_t(m * 2 * n), 0.0));
      gated_linear_unit_vjp_host(dout.view(), x.view(), w.view(), zeros.view(), dx.view(), dw.view(), c.options());
      const std::vector<double> dxZero = dx.values(), dwZero = dw.values();
      CHECK(std::all_of(dxZero.begin(), dxZero.end(), [](double v) { return v == 0; }));
      CHECK(std::all_of(dwZero.begin(), dwZero.end(), [](double v) { return v == 0; }));
    }
  // K = 0: out and the pre-activations are zeros.
  HostBuffer x(DType::BF16, {3, 0}), w(DType::BF16, {0, 2, 5}), out(DType::BF16, {3, 5}), h(DType::BF16, {3, 2, 5});
  gated_linear_unit_host(x.view(), w.view(), out.view(), h.view(), {"swish", "tile", std::nullopt});
  for (int64_t i = 0; i < h.numel(); ++i)
    CHECK(h.at(i) == 0);
}
