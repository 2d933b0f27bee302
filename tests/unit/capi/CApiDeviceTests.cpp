//===- CApiDeviceTests.cpp - Device runs through the C ABI, null driver -----===//
//
// ctest runs these under the null driver (capi-unit-tests-null-driver: two H200-like
// devices whose memory is host memory and whose launches do nothing), so they check
// dispatch, the workspace contract and allocation, never numbers. Without a driver they
// report themselves skipped.
//
//===----------------------------------------------------------------------===//
#include "unit/capi/CApiTestUtil.h"

#include "dispatch/DispatchTestUtil.h"

#include <fmt/format.h>

#include <cstdlib>

using namespace capi_test;
using tokamax::DType;

namespace {

/// Tensors of a layer_norm VJP on device 0 (the null driver's memory is host memory).
struct VjpCase {
  static constexpr int64_t rows = 64, cols = 40;
  CTensor dy{DType::F32, {rows, cols}, 0}, x{DType::F32, {rows, cols}, 0}, scale{DType::F32, {cols}, 0},
      mean{DType::F32, {rows}, 0}, rstd{DType::F32, {rows}, 0}, dx{DType::F32, {rows, cols}, 0},
      dscale{DType::F32, {cols}, 0}, doffset{DType::F32, {cols}, 0};
  std::vector<const tkx_tensor *> inputs() const { return descs({&dy, &x, &scale, &mean, &rstd}); }
  std::vector<const tkx_tensor *> outputs() const { return descs({&dx, &dscale, &doffset}); }
  /// Every tensor of the case, in argument order.
  std::vector<const CTensor *> all() const { return {&dy, &x, &scale, &mean, &rstd, &dx, &dscale, &doffset}; }
};

/// Which tensor of `c` (index in all()) and byte offset `address` points at, or (-1, address).
std::pair<int, uint64_t> whereIn(const VjpCase &c, uint64_t address) {
  const auto tensors = c.all();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto base = reinterpret_cast<uint64_t>(tensors[i]->desc.data);
    if (address >= base && address < base + tensors[i]->nbytes())
      return {int(i), address - base};
  }
  return {-1, address};
}

/// A launch the null driver logged: its function and first parameter word.
struct Launch {
  void *function;
  uint64_t word;
};

/// The launches `run` makes, from the null driver's log (empty under another driver).
template <class Run> std::vector<Launch> launchesOf(Run &&run) {
  auto *log = nullDriverFunction<void(size_t)>("tokamax_null_cuda_log_launches");
  auto *logged = nullDriverFunction<size_t(size_t, void **, uint64_t *)>("tokamax_null_cuda_logged_launch");
  if (!log || !logged) {
    run();
    return {};
  }
  log(1);  // every kernel has a first parameter
  run();
  std::vector<Launch> launches;
  Launch l{};
  for (size_t i = 0, n = logged(0, &l.function, &l.word); i < n; ++i) {
    logged(i, &l.function, &l.word);
    launches.push_back(l);
  }
  log(0);
  return launches;
}

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

TEST_CASE("capi: a repeated device run replays the cached plan: the same kernels at the new addresses",
          "[capi][null-driver]") {
  if (!haveDevice())
    return;
  VjpCase a, b;
  Call call = make_call("layer_norm_vjp", a.inputs());
  size_t bytes = 0;
  REQUIRE(tkx_call_workspace_bytes(call.get(), 0, &bytes) == TKX_OK);
  Scratch scratch(bytes);
  tokamax::clear_call_cache();
  auto runCase = [&](const tkx_call *c, const VjpCase &tensors) {
    const tkx_status s = runOn(c, tensors, scratch.data(), bytes);
    INFO(tkx_last_error());
    REQUIRE(s == TKX_OK);
  };
  std::vector<Launch> first, second;
  CHECK(test::cache_outcome([&] { first = launchesOf([&] { runCase(call.get(), a); }); }).miss());
  CHECK(test::cache_outcome([&] { second = launchesOf([&] { runCase(call.get(), b); }); }).hit());
  if (first.empty()) {
    WARN("not under the null driver: launches not logged");
    return;
  }
  REQUIRE(second.size() == first.size());
  bool movedAny = false;
  for (size_t i = 0; i < first.size(); ++i) {
    INFO("launch " << i);
    CHECK(second[i].function == first[i].function);
    const auto [tensorA, offsetA] = whereIn(a, first[i].word);
    const auto [tensorB, offsetB] = whereIn(b, second[i].word);
    CHECK(whereIn(a, second[i].word).first == -1);  // nothing of the first run's tensors
    CHECK(tensorB == tensorA);                      // the same argument at its new address
    CHECK(offsetB == offsetA);
    movedAny |= tensorB >= 0;
  }
  CHECK(movedAny);

  // A call bound alike (a framework binding again) shares the entry.
  Call again = make_call("layer_norm_vjp", b.inputs());
  CHECK(test::cache_outcome([&] { runCase(again.get(), a); }).hit());
}

TEST_CASE("capi: a config scope opened between runs re-resolves a cached call", "[capi][null-driver]") {
  if (!haveDevice())
    return;
  VjpCase c;
  Call scoped = make_call("layer_norm_vjp", c.inputs(), R"({"implementation": "tile"})");
  Call five = make_call("layer_norm_vjp", c.inputs(),
                        R"({"implementation": "tile", "config": {"block_rows": 2, "num_warps": 1, "programs": 5}})");
  size_t heuristic = 0, tuned = 0;
  REQUIRE(tkx_call_workspace_bytes(scoped.get(), 0, &heuristic) == TKX_OK);
  REQUIRE(tkx_call_workspace_bytes(five.get(), 0, &tuned) == TKX_OK);
  Scratch scratch(std::max(heuristic, tuned));
  auto run = [&](size_t bytes) { return runOn(scoped.get(), c, scratch.data(), bytes); };
  REQUIRE(run(heuristic) == TKX_OK);
  CHECK(test::cache_outcome([&] { CHECK(run(heuristic) == TKX_OK); }).hit());

  const std::string result = std::string(R"({"format": "tokamax-autotuning", "version": 1, "device": null, "entries": [)") +
                             R"({"args": )" + tkx_call_json(scoped.get()) +
                             R"(, "implementation": "tile", "config": {"block_rows": 2, "num_warps": 1, "programs": 5}, "candidates": []}]})";
  uint64_t id = 0;
  REQUIRE(tkx_config_scope_push(result.c_str(), &id) == TKX_OK);
  CHECK(test::cache_outcome([&] { CHECK(run(tuned) == TKX_OK); }).miss());
  CHECK(test::cache_outcome([&] { CHECK(run(tuned) == TKX_OK); }).hit());
  if (tuned > heuristic)  // the replay under the scope asks for the scope's config's scratch
    CHECK(run(heuristic) == TKX_WORKSPACE_TOO_SMALL);
  else
    WARN("the scope's config needs no more scratch than the heuristic's: its workspace not compared");
  REQUIRE(tkx_config_scope_pop(id) == TKX_OK);
  CHECK(run(heuristic) == TKX_OK);  // back to the heuristic's config
  CHECK(test::cache_outcome([&] { CHECK(run(heuristic) == TKX_OK); }).hit());
}
