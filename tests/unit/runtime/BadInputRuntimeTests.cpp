//===- BadInputRuntimeTests.cpp - What users get wrong: runtime/, autotune/ -===//
//
// One TEST_CASE per public function (or small group) of runtime/ and autotune/ that can
// be called without a GPU: each bad argument must be a tokamax::Error naming it, raised
// before the driver is touched (so these run, and mean the same, on machines without
// one). The device-only entry points are in tests/gpu/framework/BadInputGpuTests.cpp.
//
//===----------------------------------------------------------------------===//
#include "common/BadInput.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/TensorMap.h>
#include <tokamax/runtime/Timing.h>

using namespace tokamax;
using namespace tokamax::bad_input;

namespace {

constexpr DType F32 = DType::F32;
const DType kBogusDType = static_cast<DType>(42);
const int64_t kHuge = int64_t(1) << 40;

std::vector<int64_t> dims(std::initializer_list<int64_t> d) { return d; }

} // namespace

//===----------------------------------------------------------------------===//
// Tensor.h, DType.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: TensorView construction and access", "[bad-input][runtime]") {
  const std::vector<int64_t> shape = {4, 3}, threeStrides = {3, 1, 1}, overflowing = {kHuge, kHuge};
  const TensorView v(0x1000, F32, dims({2, 3, 4}));
  check_refusals({
      {"strides of another rank", [&] { TensorView(0x1000, F32, shape, threeStrides); },
       {"shape [4, 3] has rank 2 but 3 strides were given"}},
      {"more than 2^63 elements", [&] { TensorView(0x1000, F32, overflowing); }, {"[1099511627776, 1099511627776]", "2^63"}},
      {"strided, more than 2^63 elements", [&] { TensorView(0x1000, F32, overflowing, dims({kHuge, 1})); }, {"2^63"}},
      {"dim past the rank", [&] { (void)v.dim(3); }, {"dim index 3 out of range for a rank-3 tensor of shape [2, 3, 4]"}},
      {"stride before the first dim", [&] { (void)v.stride(-4); }, {"dim index -4"}},
      {"host_view of a negative dim", [] { host_view(nullptr, F32, {-1}); }, {"negative size -1 for dim 0"}},
  });
}

TEST_CASE("bad input: dtype names and conversions", "[bad-input][runtime]") {
  double cell = 0;
  check_refusals({
      {"empty name", [] { parse_dtype(""); }, {"unknown dtype ''", "bf16, f16, f32"}},
      {"numpy spelling", [] { parse_dtype("bfloat16"); }, {"unknown dtype 'bfloat16'"}},
      {"dtype out of the enum", [] { (void)dtype_name(kBogusDType); }, {"invalid DType value 42"}},
      {"load of a bogus dtype", [&] { (void)load_as_double(kBogusDType, &cell); }, {"invalid DType value 42"}},
      {"store of a bogus dtype", [&] { store_from_double(kBogusDType, &cell, 1.0); }, {"invalid DType value 42"}},
  });
}

//===----------------------------------------------------------------------===//
// Memory.h, TensorMap.h (refused before the driver is loaded)
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: copies and memsets with null addresses", "[bad-input][runtime]") {
  // Regression: null addresses went to the driver (a host fault, or a poisoned context).
  std::vector<uint8_t> host(16);
  const uint64_t device = 0x100000;  // never dereferenced: the null side is refused first
  check_refusals({
      {"null dst", [&] { copy_host_to_device(0, host.data(), 16); }, {"copy_host_to_device: dst is a null pointer"}},
      {"null src", [&] { copy_host_to_device(device, nullptr, 16); }, {"copy_host_to_device: src is a null pointer"}},
      {"null host dst", [&] { copy_device_to_host(nullptr, device, 16); }, {"copy_device_to_host: dst is a null pointer"}},
      {"null device src", [&] { copy_device_to_host(host.data(), 0, 16); }, {"copy_device_to_host: src is a null pointer"}},
      {"null d2d src", [&] { copy_device_to_device(device, 0, 16); }, {"copy_device_to_device: src is a null pointer"}},
      {"null memset dst", [] { memset_d8(0, 0, 16); }, {"memset_d8: dst is a null pointer"}},
  });
  // Nothing to move: a no-op, whatever the addresses.
  CHECK_NOTHROW(copy_host_to_device(0, nullptr, 0));
  CHECK_NOTHROW(memset_d8(0, 0, 0));
}

TEST_CASE("bad input: encode_tensor_map", "[bad-input][runtime]") {
  auto encode = [](uint64_t address, DType dtype, int64_t rows, int64_t cols, uint32_t inner, uint32_t outer,
                   uint32_t swizzle = 128) {
    return [=] { encode_tensor_map("a", address, dtype, rows, cols, inner, outer, swizzle); };
  };
  check_refusals({
      {"no rows", encode(0x1000, F32, 0, 16, 16, 16), {"a: TMA needs rows of a multiple of 16 bytes, got [0, 16]"}},
      {"12-byte rows", encode(0x1000, F32, 8, 3, 4, 8), {"got [8, 3] f32"}},
      {"misaligned address", encode(0x1004, F32, 8, 16, 16, 8), {"16-byte aligned address, got 0x1004"}},
      {"48-byte swizzle", encode(0x1000, F32, 8, 16, 8, 8, 48), {"swizzle must be 32, 64 or 128 bytes, got 48"}},
      {"box wider than the swizzle", encode(0x1000, F32, 8, 64, 64, 8), {"box 8 x 64 exceeds the 128-byte swizzle"}},
      {"box of no rows", encode(0x1000, F32, 8, 16, 16, 0), {"box 0 x 16"}},
      {"box over 256 rows", encode(0x1000, F32, 512, 16, 16, 512), {"box 512 x 16"}},
      {"f64", encode(0x1000, DType::F64, 8, 2, 2, 8), {"a: TMA cannot move f64 tensors"}},
      {"batches not dividing the rows", [] { encode_tensor_map("a", 0x1000, F32, 10, 16, 16, 8, 128, 4); },
       {"a: TMA batches of 4 rows must divide the 10 rows"}},
  });
}

//===----------------------------------------------------------------------===//
// Benchmark.h, Timing.h
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: benchmark, time_on_stream", "[bad-input][benchmark]") {
  Stream stream = Stream::wrap(nullptr);
  const std::function<void()> work = [] {}, none;
  check_refusals({
      {"no iterations", [&] { benchmark(stream, work, TimingMethod::CudaEvents, 0); }, {"iterations must be >= 1 (got 0)"}},
      {"negative warmup", [&] { benchmark(stream, work, TimingMethod::CudaEvents, 5, -1); }, {"warmup must be >= 0 (got -1)"}},
      {"no work", [&] { benchmark(stream, none); }, {"benchmark: no work to time"}},
      // Regression: a negative count sized a vector of events (std::length_error).
      {"negative iterations", [&] { time_on_stream(stream, work, 0, -3); }, {"time_on_stream: iterations must be >= 1 (got -3)"}},
      {"negative warmup", [&] { time_on_stream(stream, work, -1, 5); }, {"time_on_stream: warmup must be >= 0 (got -1)"}},
      {"no work to time", [&] { time_on_stream(stream, none, 0, 5); }, {"time_on_stream: no work to time"}},
  });
}

TEST_CASE("bad input: TensorSpec, random_host_values, standardize", "[bad-input][benchmark]") {
  check_refusals({
      {"negative dim", [] { random_host_values({{4, -2}, F32}, 0); }, {"negative dimension in shape [4, -2]"}},
      // Regression: the count wrapped, and the host buffer was sized from it.
      {"more than 2^63 elements", [] { random_host_values({{kHuge, kHuge}, F32}, 0); }, {"has more than 2^63 elements"}},
      {"overflow in numel", [] { (void)TensorSpec({{kHuge, kHuge, kHuge}, F32}).numel(); }, {"2^63"}},
  });
  CHECK(random_host_values({{0, 5}, F32}, 0).empty());
}

//===----------------------------------------------------------------------===//
// Op.h: the serialised forms
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: ArgSpec / BoundArgs / Config accessors and JSON", "[bad-input][op]") {
  const BoundArgs args{"x", {ArgSpec{{3}, F32}, std::nullopt}, {{"axis", "1"}, {"scale", "big"}}};
  const Config config{{"block_rows", 4}};
  check_refusals({
      {"negative shape", [] { ArgSpec::from_json(R"({"shape": [2, -1], "dtype": "f32"})"); },
       {"\"shape\" must hold non-negative integers, got [2,-1]"}},
      {"unknown dtype", [] { ArgSpec::from_json(R"({"shape": [2], "dtype": "f17"})"); }, {"unknown dtype 'f17'"}},
      {"shape not an array", [] { ArgSpec::from_json(R"({"shape": 2, "dtype": "f32"})"); },
       {"\"shape\" must be an array of integers, got 2"}},
      {"argument past the end", [&] { (void)args.arg(5); }, {"x: argument 5 is out of range (2 arguments)"}},
      {"absent argument", [&] { (void)args.arg(1); }, {"x: argument 1 is absent"}},
      {"missing attribute", [&] { (void)args.attribute("epsilon"); }, {"x: missing attribute \"epsilon\""}},
      {"attribute not a number", [&] { (void)args.float_attribute("scale"); },
       {"attribute \"scale\" must be a number, got \"big\""}},
      {"empty op name", [] { BoundArgs::from_json(R"({"op": "", "args": [], "attributes": {}})"); },
       {"\"op\" must be a non-empty string"}},
      {"attribute not a string", [] { BoundArgs::from_json(R"({"op": "x", "args": [], "attributes": {"axis": 1}})"); },
       {"attribute \"axis\" must be a string"}},
      {"config value not an integer", [] { Config::from_json(R"({"block_rows": 1.5})"); },
       {"Config: \"block_rows\" must be an integer, got 1.5"}},
      {"config key missing", [&] { (void)config.get("num_warps"); }, {"config has no \"num_warps\" (it has: block_rows)"}},
      {"empty process provider", [] { add_process_config_provider(nullptr); }, {"the provider is empty"}},
  });
}

//===----------------------------------------------------------------------===//
// Autotune.h (checked before the device is looked up)
//===----------------------------------------------------------------------===//

TEST_CASE("bad input: autotune", "[bad-input][autotune]") {
  const Op &op = layer_norm_op();
  const BoundArgs args = bind_layer_norm(ArgSpec{{4, 8}, F32}, std::nullopt, std::nullopt, ArgSpec{{4, 8}, F32},
                                         std::nullopt, std::nullopt, -1, 1e-5);
  const BoundArgs rms = bind_rms_norm(ArgSpec{{4, 8}, F32}, std::nullopt, ArgSpec{{4, 8}, F32}, std::nullopt, -1, 1e-5);
  BoundArgs noAxis = args;
  noAxis.attributes.erase("axis");
  auto options = [](auto edit) {
    AutotuneOptions o;
    o.update_cache = false;
    o.progress = false;
    edit(o);
    return o;
  };
  const AutotuneOptions plain = options([](AutotuneOptions &) {});
  check_refusals({
      {"another op's arguments", [&] { autotune(op, rms, plain); }, {"autotune layer_norm: the arguments are bound for op \"rms_norm\""}},
      {"arguments that do not validate", [&] { autotune(op, noAxis, plain); }, {"missing attribute \"axis\""}},
      {"no iterations", [&] { autotune(op, args, options([](auto &o) { o.iterations = 0; })); },
       {"autotune: iterations must be >= 1 (got 0)"}},
      {"negative warmup", [&] { autotune(op, args, options([](auto &o) { o.warmup = -2; })); },
       {"autotune: warmup must be >= 0 (got -2)"}},
      {"unknown implementation", [&] { autotune(op, args, options([](auto &o) { o.implementations = {"tile", "cuda"}; })); },
       {"unknown implementation \"cuda\"", "tile, reference"}},
      {"unregistered op", [&] { autotune({args, BoundArgs{"no_such_op", {}, {}}}, plain); },
       {"autotune: no registered op named \"no_such_op\""}},
      {"a bad call among good ones", [&] { autotune({args, noAxis}, plain); }, {"missing attribute \"axis\""}},
  });
}

TEST_CASE("bad input: AutotuningScope, the autotuning cache, loads", "[bad-input][autotune]") {
  const std::string entryWithFloatConfig = R"({"format": "tokamax-autotuning", "version": 1, "device": null,
      "entries": [{"args": {"op": "x", "args": [], "attributes": {}}, "implementation": "tile",
                   "config": {"block_rows": "four"}, "candidates": []}]})";
  check_refusals({
      {"no result", [] { AutotuningScope scope(std::shared_ptr<const AutotuningResult>{}); }, {"AutotuningScope: no result"}},
      {"result without a device", [] { update_autotuning_cache(AutotuningResult()); },
       {"update_autotuning_cache: the result names no device"}},
      {"config of strings", [&] { AutotuningResult::loads(entryWithFloatConfig); },
       {"AutotuningResult::loads", "entries[0]", "\"block_rows\" must be an integer"}},
  });
}
