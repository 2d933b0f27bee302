//===- BadInputGpuTests.cpp - What users get wrong at device entry points ----===//
//
// The device-only counterparts of tests/unit/BadInput*Tests.cpp: allocation, copies,
// modules, and the ops' Stream entry points. Every refusal must come before a launch
// (a bad launch would poison the context), so the last check runs a kernel on the same
// context and expects it to work.
//
//===----------------------------------------------------------------------===//
#include "common/BadInput.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Module.h>
#include <tokamax/runtime/Stream.h>

using namespace tokamax;
using namespace tokamax::bad_input;

namespace {

constexpr DType F32 = DType::F32;

/// The same device memory, but claiming to be on another device.
TensorView elsewhere(const Tensor &t) { return on_device(t.view(), t.view().device() + 1); }

} // namespace

TEST_CASE("bad input on the device: devices, allocation, copies, modules", "[gpu][bad-input]") {
  Tensor t = Tensor::empty({2, 2}, F32);
  std::vector<uint8_t> host(64);
  const std::vector<uint8_t> noImage;
  const std::vector<float> three(3, 1.0f);
  const std::vector<int64_t> square = {2, 2}, negative = {2, -3}, deep(9, 1);
  const int64_t huge = int64_t(1) << 40;
  check_refusals({
      {"negative ordinal", [] { Device::get(-1); }, {"device ordinal -1 out of range"}},
      {"ordinal past the last device", [] { Device::get(Device::count()); }, {"out of range"}},
      {"negative dim", [&] { Tensor::empty(negative, F32); }, {"negative size -3 for dim 1"}},
      {"rank 9", [&] { Tensor::empty(deep, F32); }, {"tensor rank 9 exceeds the maximum of 8"}},
      {"more than 2^63 elements", [&] { Tensor::empty({huge, huge}, F32); }, {"2^63"}},
      {"values for another shape", [&] { Tensor::from_host_floats(three, square, F32); },
       {"from_host_floats: 3 values given for shape [2, 2] (4 elements)"}},
      {"upload of the wrong size", [&] { t.copy_from_host(host.data(), 3); }, {"copy_from_host", "needs 16 bytes, got 3"}},
      {"download of the wrong size", [&] { t.copy_to_host(host.data(), 8); }, {"copy_to_host", "got a 8-byte buffer"}},
      {"null upload source", [&] { t.copy_from_host(nullptr, 16); }, {"src is a null pointer"}},
      {"negative standardize dim", [] { standardize({{4, -1}, F32}, 0, Device::get()); }, {"negative dimension"}},
      {"empty cubin", [&] { Module::load_cubin(noImage, Device::get()); }, {"load_cubin: the image is empty"}},
      {"PTX that is not PTX", [] { Module::load_ptx("this is not PTX", Device::get()); }, {}},
  });
  const std::string ptx = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry noop() { ret; }\n";
  Module module = Module::load_ptx(ptx, Device::get());
  CHECK_THROWS_WITH(module.function("nope"), Catch::Contains("kernel 'nope' not found"));
}

TEST_CASE("bad input on the device: op entry points refuse before launching", "[gpu][bad-input]") {
  Stream stream = Stream::create(Device::get());
  Tensor x = Tensor::empty({4, 64}, F32), y = Tensor::empty({4, 64}, F32), rstd = Tensor::empty({4}, F32);
  Tensor a = Tensor::empty({64, 64}, DType::BF16), b = Tensor::empty({64, 64}, DType::BF16);
  Tensor c = Tensor::empty({64, 64}, F32), cPlus = Tensor::empty({64 * 64 + 8}, F32);
  Tensor q = Tensor::empty({1, 4, 2, 32}, F32), kv = Tensor::empty({1, 5, 1, 32}, F32);
  Tensor out = Tensor::empty({1, 4, 2, 32}, F32);
  const int64_t cShape[] = {64, 64};
  const TensorView misalignedC(cPlus.data() + 4, F32, cShape, cPlus.view().device());
  const Function loss = Function::trace({ArgSpec{{4, 64}, F32}}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(in[0])};
  });
  Tensor total = Tensor::empty({1}, F32);
  const TensorView twoInputs[] = {x.view(), x.view()}, lossOut[] = {total.view()};
  const int64_t half[] = {64, 32}, rowStrides[] = {64, 1};
  const TensorView stridedB(b.data(), DType::BF16, half, rowStrides, b.view().device());
  check_refusals({
      {"null x", [&] { layer_norm(null_view(F32, {4, 64}), nullptr, nullptr, y, stream); }, {"layer_norm: x has no data"}},
      {"y on another device", [&] { rms_norm(x, nullptr, elsewhere(y), stream); },
       {"rms_norm: y is on device", "but earlier tensors are on device"}},
      {"out on another device", [&] { gelu(x, elsewhere(y), stream); }, {"gelu: x is on device", "but out is on device"}},
      {"null softmax y", [&] { softmax(x, null_view(F32, {4, 64}), stream); }, {"softmax: y has no data"}},
      {"misaligned c", [&] { matmul(a, b, misalignedC, stream); }, {"'c' must be 16-byte aligned"}},
      {"strided b", [&] { matmul(a, stridedB, c, stream); },
       {"matmul: b must be contiguous"}},
      {"b on another device", [&] { matmul(a, elsewhere(b), c, stream); }, {"matmul: b is on device"}},
      {"null q", [&] { dot_product_attention(null_view(F32, {1, 4, 2, 32}), kv, kv, out, stream); }, {"q has no data"}},
      {"two inputs for one", [&] { loss.run(twoInputs, lossOut, stream); }, {"expected 1 inputs and 1 outputs, got 2 and 1"}},
  });
  // Empty tensors are a no-op on the device too (null views included).
  CHECK_NOTHROW(softmax(null_view(F32, {0, 64}), null_view(F32, {0, 64}), stream));
  CHECK_NOTHROW(copy(null_view(F32, {0}), null_view(F32, {0}), stream));
  // Nothing bad was launched: the context still runs kernels.
  CHECK_NOTHROW(gelu(x, y, stream));
  CHECK_NOTHROW(stream.synchronize());
}
