// A must-hit kernel cache filled by `tokamax-compile precompile --arch sm_90a` (the
// registered kernels) serves the headline gradient (examples/attention.cpp) on an
// sm_90a device: every kernel its Function plan launches was precompiled, the hopper
// attention VJP's and the glue's included; one it lacks fails the run, naming it.
// Hidden: ctest's dispatch-headline-must-hit-null-driver runs it against that cache
// (TOKAMAX_CACHE_DIR) with TOKAMAX_CACHE_MUST_HIT=1.
#include "common/HeadlineGrad.h"

#include <catch2/catch.hpp>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

using namespace tokamax;

TEST_CASE("a must-hit cache precompiled for sm_90a serves the headline gradient's plan", "[.][must-hit]") {
  REQUIRE(DiskCache::must_hit_by_environment());
  Device &device = Device::get();
  REQUIRE(device.arch() == "sm_90a");
  const std::vector<int64_t> &shape = test::kHeadlineShape;
  const Function g = test::headline_grad("hopper", shape);
  Stream stream = Stream::create(device);
  Tensor x = Tensor::empty(shape, DType::BF16), scale = Tensor::empty({shape.back()}, DType::F32);
  Tensor dx = Tensor::empty(shape, DType::BF16), dscale = Tensor::empty({shape.back()}, DType::F32);
  TensorView in[] = {x, scale}, out[] = {dx, dscale};
  CHECK_NOTHROW(g.run(in, out, stream));
  stream.synchronize();
}
