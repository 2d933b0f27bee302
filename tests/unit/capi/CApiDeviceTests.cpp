//===- CApiDeviceTests.cpp - Device runs through the C ABI, null driver -----===//
//
// ctest runs these under the null driver (capi-unit-tests-null-driver: two H200-like
// devices whose memory is host memory and whose launches do nothing), so they check
// dispatch, the workspace contract and allocation, never numbers. Without a driver they
// report themselves skipped.
//
//===----------------------------------------------------------------------===//
#include "unit/capi/CApiTestUtil.h"

#include <tokamax/runtime/Device.h>

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

using namespace capi_test;
using tokamax::DType;

namespace {

/// Whether a driver reports a device; when not, the test says so and returns.
bool haveDevice() {
  try {
    if (tokamax::Device::count() > 0)
      return true;
  } catch (const std::exception &) {
  }
  WARN("SKIPPED: no CUDA driver or device (ctest runs these under the null driver: capi-unit-tests-null-driver)");
  return false;
}

/// The null driver's count of cuMemAlloc calls, or -1 under another driver.
long deviceAllocations() {
  const char *path = std::getenv("TOKAMAX_CUDA_DRIVER");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  auto *count = lib ? reinterpret_cast<size_t (*)()>(dlsym(lib, "tokamax_null_cuda_allocations")) : nullptr;
  long n = count ? static_cast<long>(count()) : -1;
  if (lib)
    dlclose(lib);
  return n;
}

/// Tensors of a layer_norm VJP on device 0 (the null driver's memory is host memory).
struct VjpCase {
  static constexpr int64_t rows = 64, cols = 40;
  CTensor dy{DType::F32, {rows, cols}, 0}, x{DType::F32, {rows, cols}, 0}, scale{DType::F32, {cols}, 0},
      mean{DType::F32, {rows}, 0}, rstd{DType::F32, {rows}, 0}, dx{DType::F32, {rows, cols}, 0},
      dscale{DType::F32, {cols}, 0}, doffset{DType::F32, {cols}, 0};
  std::vector<const tkx_tensor *> inputs() const { return descs({&dy, &x, &scale, &mean, &rstd}); }
  std::vector<const tkx_tensor *> outputs() const { return descs({&dx, &dscale, &doffset}); }
};

tkx_status runOn(const tkx_call *call, const VjpCase &c, void *workspace, size_t bytes) {
  auto in = c.inputs(), out = c.outputs();
  return tkx_call_run(call, in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), nullptr, workspace, bytes);
}

/// 16-byte aligned scratch the caller owns.
struct Scratch {
  std::vector<CTensor::Chunk> chunks;
  explicit Scratch(size_t bytes) : chunks(bytes / 16 + 2) {}
  void *data() { return chunks.data(); }
};

} // namespace

TEST_CASE("capi: a device run takes exactly the reported workspace and allocates nothing", "[capi][null-driver]") {
  if (!haveDevice())
    return;
  VjpCase c;
  Call call = make_call("layer_norm_vjp", c.inputs());
  size_t bytes = 0;
  REQUIRE(tkx_call_workspace_bytes(call.get(), 0, &bytes) == TKX_OK);
  REQUIRE(bytes > 0);  // the VJP's partial column sums
  Scratch scratch(bytes);

  // One byte less: too small, naming both sizes; a null workspace gives 0 bytes.
  const std::string needed = fmt::format("needs {} bytes", bytes), given = fmt::format("holds {}", bytes - 1);
  CHECK_STATUS(runOn(call.get(), c, scratch.data(), bytes - 1), TKX_WORKSPACE_TOO_SMALL, "tkx_call_run",
               needed.c_str(), given.c_str());
  CHECK_STATUS(runOn(call.get(), c, nullptr, bytes), TKX_WORKSPACE_TOO_SMALL, "holds 0");
  CHECK_STATUS(runOn(call.get(), c, static_cast<char *>(scratch.data()) + 8, bytes), TKX_INVALID_ARGUMENT,
               "16-byte aligned");

  // Exactly the reported bytes: runs (the first run compiles and loads the kernels).
  const tkx_status first = runOn(call.get(), c, scratch.data(), bytes);
  INFO(tkx_last_error());
  REQUIRE(first == TKX_OK);
  const long before = deviceAllocations();
  CHECK(runOn(call.get(), c, scratch.data(), bytes) == TKX_OK);
  if (before >= 0)
    CHECK(deviceAllocations() == before);  // the caller's workspace, no buffer of ours
  else
    WARN("not under the null driver: device allocations not counted");

  // A call that needs no scratch runs with a null workspace.
  Call fwd = make_call("layer_norm", descs({&c.x, &c.scale, nullptr}), R"({"residuals": false})");
  size_t none = 1;
  REQUIRE(tkx_call_workspace_bytes(fwd.get(), 0, &none) == TKX_OK);
  CHECK(none == 0);
  auto in = descs({&c.x, &c.scale, nullptr});
  auto out = descs({&c.dx, nullptr, nullptr});
  CHECK(tkx_call_run(fwd.get(), in.data(), 3, out.data(), 3, nullptr, nullptr, 0) == TKX_OK);
}

TEST_CASE("capi: the workspace follows the config: explicit, and from a config scope", "[capi][null-driver]") {
  if (!haveDevice())
    return;
  VjpCase c;
  auto bytesOf = [](const tkx_call *call) {
    size_t bytes = 0;
    const tkx_status s = tkx_call_workspace_bytes(call, 0, &bytes);
    INFO(tkx_last_error());
    REQUIRE(s == TKX_OK);
    return bytes;
  };
  Call three = make_call("layer_norm_vjp", c.inputs(),
                         R"({"implementation": "tile", "config": {"block_rows": 2, "num_warps": 1, "programs": 3}})");
  Call five = make_call("layer_norm_vjp", c.inputs(),
                        R"({"implementation": "tile", "config": {"block_rows": 2, "num_warps": 1, "programs": 5}})");
  const size_t b3 = bytesOf(three.get()), b5 = bytesOf(five.get());
  CHECK(b5 > b3);  // a row of partial column sums per program
  Scratch scratch(b5);
  CHECK(runOn(five.get(), c, scratch.data(), b5) == TKX_OK);
  CHECK(runOn(five.get(), c, scratch.data(), b3) == TKX_WORKSPACE_TOO_SMALL);

  // The same call without a config takes a scope's: its workspace is the scope's config's.
  Call scoped = make_call("layer_norm_vjp", c.inputs(), R"({"implementation": "tile"})");
  const std::string result = std::string(R"({"format": "tokamax-autotuning", "version": 1, "device": null, "entries": [)") +
                             R"({"args": )" + tkx_call_json(scoped.get()) +
                             R"(, "implementation": "tile", "config": {"block_rows": 2, "num_warps": 1, "programs": 5}, "candidates": []}]})";
  uint64_t id = 0;
  const tkx_status pushed = tkx_config_scope_push(result.c_str(), &id);
  INFO(tkx_last_error());
  REQUIRE(pushed == TKX_OK);
  CHECK(bytesOf(scoped.get()) == b5);
  REQUIRE(tkx_config_scope_pop(id) == TKX_OK);
}

TEST_CASE("capi: precompile compiles a call's kernels for an arch with no GPU", "[capi][precompile]") {
  // Into the default kernel cache (ctest points TOKAMAX_CACHE_DIR at the build tree under the
  // null driver); compiling needs no device.
  if (!std::getenv("TOKAMAX_CACHE_DIR")) {
    WARN("SKIPPED: TOKAMAX_CACHE_DIR unset (ctest's capi-unit-tests-null-driver sets it)");
    return;
  }
  CTensor x(DType::BF16, {4, 64}), scale(DType::F32, {64});
  Call call = make_call("layer_norm", descs({&x, &scale, nullptr}));
  const tkx_status s = tkx_call_precompile(call.get(), "sm_90a");
  INFO(tkx_last_error());
  CHECK(s == TKX_OK);
}
