// The hot paths allocate nothing: a cached eager call (layer_norm and its VJP, matmul) and
// a Function run, eager or replayed as a graph, once resolved. This binary replaces the
// global operator new, which libtokamax's allocations go through, to count them.
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> allocations{0};
thread_local bool counting = false;
} // namespace

void *operator new(std::size_t bytes) {
  if (counting)
    allocations.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(bytes ? bytes : 1))
    return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

using namespace tokamax;

namespace {

/// Allocations made by 100 calls of `call` after one warm-up call.
template <class Call> uint64_t allocationsOf(Call &&call) {
  call();
  const uint64_t before = allocations.load();
  counting = true;
  for (int i = 0; i < 100; ++i)
    call();
  counting = false;
  return allocations.load() - before;
}

Tensor random(std::vector<int64_t> shape, DType dtype, uint32_t seed) {
  return standardize({std::move(shape), dtype}, seed, Device::get());
}

} // namespace

TEST_CASE("cached eager calls allocate nothing", "[dispatch][cache]") {
  Stream stream = Stream::create(Device::get());
  Tensor x = random({4, 64}, DType::BF16, 1), scale = random({64}, DType::F32, 2), dy = random({4, 64}, DType::BF16, 3);
  Tensor y = Tensor::empty({4, 64}, DType::BF16), dx = Tensor::empty({4, 64}, DType::BF16);
  Tensor mean = Tensor::empty({4}, DType::F32), rstd = Tensor::empty({4}, DType::F32);
  Tensor dscale = Tensor::empty({64}, DType::F32);
  CHECK(allocationsOf([&] { layer_norm(x, &scale.view(), nullptr, y, stream, {}, &mean.view(), &rstd.view()); }) == 0);
  // The count sees the library's allocations: the uncached path (Op::run) makes some.
  BoundArgs bound = bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y), ArgSpec::of(mean),
                                    ArgSpec::of(rstd), -1, 1e-5);
  TensorView in[] = {x, scale, TensorView()}, out[] = {y, mean, rstd};
  CHECK(allocationsOf([&] { layer_norm_op().run(bound, in, out, stream); }) > 0);
  CHECK(allocationsOf([&] {
          layer_norm_vjp(dy, x, &scale.view(), mean, rstd, dx, &dscale.view(), nullptr, stream);
        }) == 0);
  Tensor a = random({64, 64}, DType::BF16, 4), b = random({64, 64}, DType::BF16, 5), c = Tensor::empty({64, 64}, DType::BF16);
  CHECK(allocationsOf([&] { matmul(a, b, c, stream); }) == 0);
}

TEST_CASE("Function runs allocate nothing once planned, eager or as a graph", "[dispatch][graph]") {
  Function loss = Function::trace({ArgSpec{{4, 64}, DType::BF16}, ArgSpec{{64}, DType::F32}},
                                  [](Tracer &t, std::span<const Sym> in) {
                                    return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
                                  });
  Function g = grad(loss, {0, 1});
  Stream stream = Stream::create(Device::get());
  Tensor x = random({4, 64}, DType::BF16, 6), scale = random({64}, DType::F32, 7);
  Tensor dx = Tensor::empty({4, 64}, DType::BF16), dscale = Tensor::empty({64}, DType::F32);
  TensorView in[] = {x, scale}, out[] = {dx, dscale};
  CHECK(allocationsOf([&] { g.run(in, out, stream); }) == 0);
  CHECK(allocationsOf([&] { g.run(in, out, stream, {.graph = true}); }) == 0);
}
