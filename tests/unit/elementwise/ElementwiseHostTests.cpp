// softmax, gelu, copy and vector_add on host views (the interpreter) against float64,
// their config option, empty tensors (a no-op) and null pointers (an Error).
#include <catch2/catch.hpp>

#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Op.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/Error.h>

#include <cmath>
#include <random>
#include <vector>

using namespace tokamax;

namespace {

std::vector<double> randomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 2.0);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(rng) + (x == 0 ? 1e-3 : 0);
  return v;
}

} // namespace

TEST_CASE("softmax_host and gelu_host match float64", "[elementwise][host]") {
  const int64_t rows = 5, cols = 37;
  std::vector<double> x = randomValues(rows * cols, 1), y(rows * cols, NAN);
  for (int64_t block : {1, 4}) {
    SoftmaxOptions options;
    options.config = SoftmaxConfig{block, 2};
    softmax_host(host_view(x.data(), DType::F64, {rows, cols}), host_view(y.data(), DType::F64, {rows, cols}), options);
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < cols; ++c)
        m = std::max(m, x[r * cols + c]);
      for (int64_t c = 0; c < cols; ++c)
        sum += std::exp(x[r * cols + c] - m);
      for (int64_t c = 0; c < cols; ++c)
        worst = std::max(worst, std::fabs(y[r * cols + c] - std::exp(x[r * cols + c] - m) / sum));
    }
    CHECK(worst < 1e-14);
  }
  std::vector<double> g(rows * cols, NAN);
  gelu_host(host_view(x.data(), DType::F64, {rows * cols}), host_view(g.data(), DType::F64, {rows * cols}));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(g[i] - x[i] * 0.5 * (1 + std::erf(x[i] / std::sqrt(2.0)))));
  CHECK(worst < 1e-13);
  std::vector<double> sum(rows * cols, NAN), copied(rows * cols, NAN);
  vector_add_host(host_view(x.data(), DType::F64, {rows * cols}), host_view(g.data(), DType::F64, {rows * cols}),
                  host_view(sum.data(), DType::F64, {rows * cols}));
  copy_host(host_view(x.data(), DType::F64, {rows * cols}), host_view(copied.data(), DType::F64, {rows * cols}));
  CHECK(sum[7] == x[7] + g[7]);
  CHECK(copied == x);
}

TEST_CASE("softmax and elementwise ops: empty tensors are a no-op, null pointers and bad configs an Error",
          "[elementwise][host]") {
  std::vector<float> buffer(64, 1.0f);
  // No rows / no elements: nothing runs, nothing is written.
  CHECK_NOTHROW(softmax_host(host_view(buffer.data(), DType::F32, {0, 8}), host_view(buffer.data(), DType::F32, {0, 8})));
  CHECK_NOTHROW(gelu_host(host_view(buffer.data(), DType::F32, {0}), host_view(buffer.data(), DType::F32, {0})));
  CHECK(buffer[0] == 1.0f);
  CHECK_THROWS_WITH(softmax_host(host_view(buffer.data(), DType::F32, {8, 0}), host_view(buffer.data(), DType::F32, {8, 0})),
                    Catch::Contains("last axis"));
  const int64_t shape[] = {8, 8};
  TensorView null(0, DType::F32, shape);
  CHECK_THROWS_WITH(softmax_host(null, host_view(buffer.data(), DType::F32, {8, 8})), Catch::Contains("x has no data"));
  CHECK_THROWS_WITH(gelu_host(host_view(buffer.data(), DType::F32, {8, 8}), null), Catch::Contains("out has no data"));
  SoftmaxOptions bad;
  bad.config = SoftmaxConfig{3, 4};
  CHECK_THROWS_WITH(softmax_host(host_view(buffer.data(), DType::F32, {8, 8}), host_view(buffer.data(), DType::F32, {8, 8}), bad),
                    Catch::Contains("block_rows 3"));
}
