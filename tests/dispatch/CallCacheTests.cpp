// The eager call cache: a repeated call replays its plan (also with other addresses);
// every change the resolved call depends on misses.
#include "dispatch/DispatchTestUtil.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

using namespace tokamax;
using Catch::Matchers::Contains;
using test::cache_outcome;

#define SKIP_TEST_WITH_ONE_DEVICE                                                                    \
  do {                                                                                             \
    WARN("one device: skipped (the null driver has two)");                                         \
    return;                                                                                        \
  } while (false)

namespace {

Tensor random(std::vector<int64_t> shape, DType dtype, uint32_t seed) {
  return standardize({std::move(shape), dtype}, seed, Device::get());
}

/// layer_norm [1, 64] bf16 with an f32 scale, and the variants of it the tests call.
struct NormCall {
  Stream stream = Stream::create(Device::get());
  Tensor x = random({1, 64}, DType::BF16, 1), scale = random({64}, DType::F32, 2);
  Tensor y = Tensor::empty({1, 64}, DType::BF16);

  void operator()(const TensorView &xv, const TensorView *s, const TensorView &yv, const NormOptions &o = {},
                  const TensorView *offset = nullptr, const TensorView *mean = nullptr,
                  const TensorView *rstd = nullptr) {
    layer_norm(xv, s, offset, yv, stream, o, mean, rstd);
  }
  void base() { (*this)(x, &scale.view(), y); }
  BoundArgs bound() const {
    return bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y), std::nullopt,
                           std::nullopt, -1, 1e-5);
  }
  /// A valid tile config with `rows` rows per program.
  Config config(int64_t rows) const {
    Config c{{"block_rows", rows}, {"num_warps", 1}};
    REQUIRE_FALSE(layer_norm_op().implementation("tile").check_config(bound(), c));
    return c;
  }
};

/// A change of the call misses once, then hits; the unchanged call still hits.
template <class Variant> void checkMissesThenHits(NormCall &call, Variant &&variant) {
  CHECK(cache_outcome(variant).miss());
  CHECK(cache_outcome(variant).hit());
  CHECK(cache_outcome([&] { call.base(); }).hit());
}

} // namespace

TEST_CASE("a repeated eager call replays its cached plan, whatever its tensors' addresses", "[dispatch][cache]") {
  NormCall call;
  call.base();
  CHECK(cache_outcome([&] { call.base(); }).hit());
  Tensor x2 = random({1, 64}, DType::BF16, 3), y2 = Tensor::empty({1, 64}, DType::BF16);
  CHECK(cache_outcome([&] { call(x2, &call.scale.view(), y2); }).hit());
  CHECK(call_cache_stats().entries >= 1);
}

TEST_CASE("every change of shape, dtype, strides or arguments misses the call cache", "[dispatch][cache]") {
  NormCall call;
  call.base();
  Tensor x2 = random({2, 64}, DType::BF16, 4), y2 = Tensor::empty({2, 64}, DType::BF16);
  checkMissesThenHits(call, [&] { call(x2, &call.scale.view(), y2); });
  Tensor xh = random({1, 64}, DType::F16, 5), yh = Tensor::empty({1, 64}, DType::F16);
  checkMissesThenHits(call, [&] { call(xh, &call.scale.view(), yh); });
  // Same shape, still contiguous (a unit dim's stride is free), other strides.
  const int64_t shape[] = {1, 64}, strides[] = {4096, 1};
  TensorView xs(call.x.data(), DType::BF16, shape, strides), ys(call.y.data(), DType::BF16, shape, strides);
  checkMissesThenHits(call, [&] { call(xs, &call.scale.view(), ys); });
  checkMissesThenHits(call, [&] { call(call.x, nullptr, call.y); });
  Tensor offset = random({64}, DType::F32, 6);
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {}, &offset.view()); });
  Tensor mean = Tensor::empty({1}, DType::F32), rstd = Tensor::empty({1}, DType::F32);
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {}, nullptr, &mean.view(), &rstd.view()); });
}

TEST_CASE("every change of options misses the call cache", "[dispatch][cache]") {
  NormCall call;
  call.base();
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.epsilon = 1e-3}); });
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.axis = 1}); });
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.implementation = "reference"}); });
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.implementation = "tile"}); });
  const Config one = call.config(1), two = call.config(2);
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.config = one}); });
  checkMissesThenHits(call, [&] { call(call.x, &call.scale.view(), call.y, {.config = two}); });
}

TEST_CASE("autotuning scopes and config changes miss the call cache", "[dispatch][cache]") {
  NormCall call;
  call.base();
  const Config tuned = call.config(2);
  auto result = std::make_shared<AutotuningResult>();
  result->add({call.bound(), "tile", tuned, {}});
  {
    AutotuningScope scope(result);
    CHECK(cache_outcome([&] { call.base(); }).miss());
    CHECK(cache_outcome([&] { call.base(); }).hit());
    // A result changed while its scope is open (through a non-const pointer).
    result->add({call.bound(), "reference", Config{}, {}});
    CHECK(cache_outcome([&] { call.base(); }).miss());
    CHECK(cache_outcome([&] { call.base(); }).hit());
  }
  CHECK(cache_outcome([&] { call.base(); }).miss());  // the results changed the config epoch
  CHECK(cache_outcome([&] { call.base(); }).hit());
  notify_config_change();
  CHECK(cache_outcome([&] { call.base(); }).miss());
  CHECK(cache_outcome([&] { call.base(); }).hit());
}

TEST_CASE("reading an autotuning result leaves cached calls current", "[dispatch][cache]") {
  // The per-device autotuning cache reads its file during a call's first resolution: the
  // call it resolves must stay cached.
  NormCall call;
  AutotuningResult tuned(DeviceInfo::of(Device::get()));
  tuned.add(TuningEntry{call.bound(), "tile", call.config(1), {}});
  const std::string text = tuned.dumps();
  call.base();
  CHECK(cache_outcome([&] {
          CHECK(AutotuningResult::loads(text).size() == 1);
          call.base();
        }).hit());
}

TEST_CASE("another device misses the call cache; the thread's current context does not matter", "[dispatch][cache]") {
  if (Device::count() < 2)
    SKIP_TEST_WITH_ONE_DEVICE;
  NormCall call;
  call.base();
  Device &first = Device::get(0), &other = Device::get(1);
  Stream otherStream = Stream::create(other);
  Tensor x1 = standardize({{1, 64}, DType::BF16}, 1, other), s1 = standardize({{64}, DType::F32}, 2, other);
  Tensor y1 = Tensor::empty({1, 64}, DType::BF16, other);
  auto onOther = [&] { layer_norm(x1, &s1.view(), nullptr, y1, otherStream); };
  CHECK(cache_outcome(onOther).miss());
  CHECK(cache_outcome(onOther).hit());
  CHECK(cache_outcome([&] { call.base(); }).hit());
  // A call runs with its tensors' device current (the per-device autotuning cache answers
  // for it), whichever context the thread had: the same call under another one hits.
  auto underOther = [&] {
    other.make_current();
    call.base();
  };
  CHECK(cache_outcome(underOther).hit());
  first.make_current();
  CHECK(cache_outcome(onOther).hit());
}

TEST_CASE("a scope on one thread leaves another thread's cached calls alone", "[dispatch][cache]") {
  NormCall call;
  call.base();
  CHECK(cache_outcome([&] { call.base(); }).hit());
  auto result = std::make_shared<const AutotuningResult>();  // built before: no epoch change below
  std::thread other([&] {
    AutotuningScope scope(result);
    Device::get(0).make_current();
    test::CacheOutcome o = cache_outcome([&] { call.base(); });
    INFO("hits " << o.hits << ", misses " << o.misses);
    CHECK(o.miss());  // its own signature
    call.stream.synchronize();
  });
  other.join();
  CHECK(cache_outcome([&] { call.base(); }).hit());
  std::thread plain([&] {
    Device::get(0).make_current();
    CHECK(cache_outcome([&] { call.base(); }).hit());  // no scope: the same key as this thread's
  });
  plain.join();
}

TEST_CASE("dropping the JIT's kernels makes cached calls resolve again", "[dispatch][cache]") {
  NormCall call;
  call.base();
  call.stream.synchronize();  // on a GPU: nothing runs from the modules clear() unloads
  Jit::instance().clear();
  CHECK(cache_outcome([&] { call.base(); }).miss());
  CHECK(cache_outcome([&] { call.base(); }).hit());
}

TEST_CASE("calls the uncached path refuses are refused every time", "[dispatch][cache]") {
  NormCall call;
  call.base();
  Tensor wide = Tensor::empty({2, 64}, DType::BF16);
  TensorView misaligned(wide.data() + 2, DType::BF16, std::vector<int64_t>{1, 64});
  for (int i = 0; i < 2; ++i) {
    test::CacheOutcome o = cache_outcome([&] {
      CHECK_THROWS_WITH(call(misaligned, &call.scale.view(), call.y), Contains("16-byte aligned"));
    });
    CHECK(o.miss());
  }
  TensorView null(0, DType::BF16, std::vector<int64_t>{1, 64});
  CHECK_THROWS_WITH(call(null, &call.scale.view(), call.y), Contains("no data"));
  CHECK_THROWS_WITH(call(call.x, &call.scale.view(), call.y, {.implementation = "nonesuch"}),
                    Contains("unknown implementation"));
  CHECK(cache_outcome([&] { call.base(); }).hit());
}

TEST_CASE("matmul calls miss on transposes, alpha, bias, implementation and config", "[dispatch][cache]") {
  Stream stream = Stream::create(Device::get());
  Tensor a = random({64, 64}, DType::BF16, 7), b = random({64, 64}, DType::BF16, 8);
  Tensor c = Tensor::empty({64, 64}, DType::BF16), bias = random({64}, DType::BF16, 9);
  auto run = [&](const MatmulOptions &o) { return cache_outcome([&] { matmul(a, b, c, stream, o); }); };
  run({});
  CHECK(run({}).hit());
  auto variant = [&](const MatmulOptions &o) {
    CHECK(run(o).miss());
    CHECK(run(o).hit());
    CHECK(run({}).hit());
  };
  variant({.trans_b = true});
  variant({.trans_a = true});
  variant({.alpha = 0.5});
  variant({.bias = bias.view()});
  variant({.implementation = "tile"});
  MatmulSpec spec{64, 64, 64, DType::BF16, DType::BF16};
  MatmulConfig config = default_config(spec);
  variant({.implementation = "tile", .config = config});
  config.num_stages = 3;
  variant({.implementation = "tile", .config = config});
}

TEST_CASE("replayed plans fill and copy: matmul with K = 0 writes bias or zeros", "[dispatch][cache]") {
  // The null driver's device memory is host memory and its copies and memsets are real.
  Stream stream = Stream::create(Device::get());
  Tensor a = Tensor::empty({5, 0}, DType::BF16), b = Tensor::empty({0, 8}, DType::BF16);
  const std::vector<float> biasValues{1, 2, 3, 4, 5, 6, 7, 8};
  Tensor bias = Tensor::from_host_floats(biasValues, std::vector<int64_t>{8}, DType::F32);
  Tensor c = Tensor::empty({5, 8}, DType::F32);
  const std::vector<float> nans(40, std::nanf(""));
  for (int round = 0; round < 2; ++round) {  // resolved, then replayed
    c.copy_from_host(nans.data(), nans.size() * sizeof(float));
    matmul(a, b, c, stream, {.bias = bias.view()});
    stream.synchronize();
    std::vector<double> out = c.to_host_doubles();
    for (size_t i = 0; i < out.size(); ++i)
      CHECK(out[i] == biasValues[i % 8]);
    c.copy_from_host(nans.data(), nans.size() * sizeof(float));
    matmul(a, b, c, stream);
    stream.synchronize();
    for (double v : c.to_host_doubles())
      CHECK(v == 0);
  }
}

TEST_CASE("attention's sinks join the call key; sinks on another device are refused by name", "[dispatch][cache]") {
  Stream stream = Stream::create(Device::get());
  Tensor q = random({1, 16, 2, 16}, DType::BF16, 11), out = Tensor::empty({1, 16, 2, 16}, DType::BF16);
  Tensor lse = Tensor::empty({1, 2, 16}, DType::F32), dq = Tensor::empty({1, 16, 2, 16}, DType::BF16);
  Tensor dk = Tensor::empty({1, 16, 2, 16}, DType::BF16), dv = Tensor::empty({1, 16, 2, 16}, DType::BF16);
  Tensor sinks = random({2}, DType::F32, 12), moved = random({2}, DType::F32, 13);
  Tensor dsinks = Tensor::empty({2}, DType::F32);
  auto forward = [&](const TensorView *s) {
    dot_product_attention(q, q, q, out, stream, {.sinks = s, .implementation = "tile"}, &lse.view());
  };
  forward(nullptr);
  CHECK(cache_outcome([&] { forward(nullptr); }).hit());
  CHECK(cache_outcome([&] { forward(&sinks.view()); }).miss());
  CHECK(cache_outcome([&] { forward(&sinks.view()); }).hit());
  CHECK(cache_outcome([&] { forward(&moved.view()); }).hit());  // another address: the same plan
  CHECK(cache_outcome([&] { forward(nullptr); }).hit());
  auto vjp = [&](const TensorView *d) {
    dot_product_attention_vjp(q, q, q, q, out, lse, dq, dk, dv, stream,
                              {.sinks = &sinks.view(), .implementation = "tile"}, nullptr, d);
  };
  CHECK(cache_outcome([&] { vjp(&dsinks.view()); }).miss());
  CHECK(cache_outcome([&] { vjp(&dsinks.view()); }).hit());
  CHECK(cache_outcome([&] { vjp(nullptr); }).miss());  // sinks without dsinks: another call
  stream.synchronize();
  if (Device::count() < 2)
    SKIP_TEST_WITH_ONE_DEVICE;
  Tensor far = standardize({{2}, DType::F32}, 14, Device::get(1));
  CHECK_THROWS_WITH(forward(&far.view()), Contains("sinks is on device 1"));
}
