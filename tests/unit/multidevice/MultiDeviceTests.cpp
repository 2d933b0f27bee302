//===- MultiDeviceTests.cpp - Calls on the second device, null driver -------===//
//
// ctest runs these under the null driver (multi-device-unit-tests-null-driver): two
// H200-like devices. Like a real driver it fails a launch whose function or stream
// belongs to another context than the current one, and its launch log keeps the context
// of each launch, so these tests see that a call on device 1's tensors runs in device
// 1's context with kernels loaded there, that calls on both devices at once do not mix
// them up, that devices of one kind share compiled kernels and autotuning results, and
// that a call mixing devices is refused before anything launches. Without a driver they
// report themselves skipped.
//
//===----------------------------------------------------------------------===//
#include "unit/capi/CApiTestUtil.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

using namespace capi_test;
using namespace tokamax;
using Catch::Matchers::Contains;

namespace {

/// Whether the null driver runs the test with its two devices; when not, says so. Only the
/// null driver: the tests' tensors hold no data a real kernel could read safely (page
/// tables, group sizes), and its log is what they check.
bool haveTwoDevices() {
  if (!haveDevice())
    return false;
  if (!nullDriverFunction<void *(size_t)>("tokamax_null_cuda_logged_context")) {
    WARN("SKIPPED: runs under the null driver only (multi-device-unit-tests-null-driver)");
    return false;
  }
  return Device::count() >= 2;
}

/// The calling thread's current context is `device`'s.
void checkCurrentIs(const Device &device) {
  auto *current = nullDriverFunction<void *()>("tokamax_null_cuda_current_context");
  REQUIRE(current);
  CHECK(current() == static_cast<void *>(device.context()));
}

/// The contexts the launches of `run` were made in, from the null driver's launch log
/// (empty under another driver). For one thread at a time.
template <class Run> std::vector<void *> launchContexts(Run &&run) {
  auto *log = nullDriverFunction<void(size_t)>("tokamax_null_cuda_log_launches");
  auto *logged = nullDriverFunction<size_t(size_t, void **, uint64_t *)>("tokamax_null_cuda_logged_launch");
  auto *context = nullDriverFunction<void *(size_t)>("tokamax_null_cuda_logged_context");
  if (!log || !logged || !context) {
    run();
    return {};
  }
  log(1);  // every kernel has a first parameter
  run();
  void *function = nullptr;
  uint64_t word = 0;
  std::vector<void *> contexts;
  for (size_t i = 0, n = logged(0, &function, &word); i < n; ++i)
    contexts.push_back(context(i));
  log(0);
  return contexts;
}

/// Every launch of `run` was made in `device`'s context, and there was at least one.
template <class Run> void checkLaunchesOn(Device &device, Run &&run) {
  const std::vector<void *> contexts = launchContexts(run);
  CHECK_FALSE(contexts.empty());
  for (void *c : contexts)
    CHECK(c == static_cast<void *>(device.context()));
}

/// A small call of one op: its inputs (absent: nullopt) and options, as the C ABI takes them.
struct OpCase {
  const char *op;
  std::vector<std::optional<ArgSpec>> inputs;
  const char *options = nullptr;
};

ArgSpec f32(std::vector<int64_t> shape) { return {std::move(shape), DType::F32}; }
ArgSpec i32(std::vector<int64_t> shape) { return {std::move(shape), DType::I32}; }

/// Every op family the C ABI binds, forward and VJP.
std::vector<OpCase> opCases() {
  const ArgSpec x = f32({4, 64}), row = f32({4}), col = f32({64});
  const ArgSpec q = f32({2, 9, 4, 16}), kv = f32({2, 11, 2, 16}), lse = f32({2, 4, 9});
  const ArgSpec pages = f32({3, 8, 2, 16}), table = i32({2, 2}), lengths = i32({2});
  const std::nullopt_t none = std::nullopt;
  return {
      {"layer_norm", {x, col, none}},
      {"layer_norm_vjp", {x, x, col, row, row}},
      {"rms_norm", {x, col}},
      {"rms_norm_vjp", {x, x, col, row}},
      {"attention", {q, kv, kv, none, none, none, none, none}, R"({"is_causal": true})"},
      {"attention_vjp", {q, q, kv, kv, q, lse, none, none, none, none, none}, R"({"is_causal": true})"},
      {"gated_linear_unit", {f32({5, 8}), f32({8, 2, 6})}},
      {"gated_linear_unit_vjp", {f32({5, 6}), f32({5, 8}), f32({8, 2, 6})}},
      {"ragged_dot", {f32({7, 8}), f32({3, 8, 5}), i32({3})}},
      {"ragged_dot_vjp", {f32({7, 5}), f32({7, 8}), f32({3, 8, 5}), i32({3})}},
      {"linear_softmax_cross_entropy_loss", {f32({4, 8}), f32({8, 10}), i32({4})}, R"({"reduction": "sum"})"},
      {"linear_softmax_cross_entropy_loss_vjp", {f32({1}), f32({4, 8}), f32({8, 10}), i32({4}), row},
       R"({"reduction": "sum"})"},
      {"softmax_cross_entropy", {f32({3, 10}), i32({3})}},
      {"softmax_cross_entropy_vjp", {f32({3}), f32({3, 10}), i32({3}), f32({3})}},
      {"paged_attention", {f32({2, 1, 4, 16}), pages, pages, table, lengths}, R"({"lse": true})"},
      {"paged_kv_append", {f32({2, 1, 2, 16}), f32({2, 1, 2, 16}), table, lengths},
       R"({"num_pages": 3, "page_size": 8})"},
  };
}

/// A case's call made through the C ABI (host descriptors: only their specs are read).
Call makeCall(const OpCase &c) {
  std::vector<std::unique_ptr<CTensor>> tensors;
  std::vector<const tkx_tensor *> inputs;
  for (const std::optional<ArgSpec> &spec : c.inputs) {
    tensors.push_back(spec ? std::make_unique<CTensor>(spec->dtype, spec->shape) : nullptr);
    inputs.push_back(spec ? tensors.back()->c() : nullptr);
  }
  return make_call(c.op, inputs, c.options);
}

/// Device tensors for every argument of a bound call (absent ones stay default views).
struct DeviceArgs {
  std::vector<Tensor> owned;
  std::vector<TensorView> inputs, outputs;
  std::vector<tkx_tensor> descs;  // the same tensors for the C ABI (null data: absent)

  DeviceArgs(const Op &op, const BoundArgs &bound, Device &device) {
    owned.reserve(bound.args.size());
    for (size_t i = 0; i < bound.args.size(); ++i) {
      std::vector<TensorView> &side = i < op.num_inputs() ? inputs : outputs;
      if (!bound.args[i]) {
        side.emplace_back();
        descs.push_back({});
        continue;
      }
      owned.push_back(Tensor::empty(bound.args[i]->shape, bound.args[i]->dtype, device));
      side.push_back(owned.back().view());
      tkx_tensor d{};
      d.struct_size = sizeof(tkx_tensor);
      d.dtype = int32_t(bound.args[i]->dtype);
      d.rank = int32_t(bound.args[i]->shape.size());
      d.shape = bound.args[i]->shape.data();
      d.device = device.ordinal();
      d.data = reinterpret_cast<void *>(owned.back().data());
      descs.push_back(d);
    }
  }
  /// Descriptor pointers of the inputs (first) or the outputs, null where absent.
  std::vector<const tkx_tensor *> side(const Op &op, bool in) const {
    std::vector<const tkx_tensor *> out;
    for (size_t i = in ? 0 : op.num_inputs(); i < (in ? op.num_inputs() : descs.size()); ++i)
      out.push_back(descs[i].data ? &descs[i] : nullptr);
    return out;
  }
};

/// layer_norm [rows, cols] f32 with a scale, all on one device.
struct NormTensors {
  Tensor x, scale, y, mean, rstd;
  NormTensors(Device &device, int64_t rows = 4, int64_t cols = 64)
      : x(Tensor::empty({rows, cols}, DType::F32, device)), scale(Tensor::empty({cols}, DType::F32, device)),
        y(Tensor::empty({rows, cols}, DType::F32, device)), mean(Tensor::empty({rows}, DType::F32, device)),
        rstd(Tensor::empty({rows}, DType::F32, device)) {}
  void run(Stream &stream) { layer_norm(x, &scale.view(), nullptr, y, stream, {}, &mean.view(), &rstd.view()); }
  BoundArgs bound() const {
    return bind_layer_norm(ArgSpec::of(x), ArgSpec::of(scale), std::nullopt, ArgSpec::of(y), ArgSpec::of(mean),
                           ArgSpec::of(rstd), -1, 1e-5);
  }
};

/// Puts a file back as it was when the guard was made (absent: removed), and drops the
/// autotuning cache's copies in memory: a test's entries must not reach later runs.
struct RestoreFile {
  std::filesystem::path path;
  std::optional<std::string> before;
  explicit RestoreFile(std::filesystem::path p) : path(std::move(p)) {
    if (std::ifstream in{path, std::ios::binary})
      before = std::string(std::istreambuf_iterator<char>(in), {});
  }
  ~RestoreFile() {
    if (before)
      std::ofstream(path, std::ios::binary | std::ios::trunc) << *before;
    else
      std::filesystem::remove(path);
    reset_autotuning_cache();
  }
};

} // namespace

TEST_CASE("every op runs on device 1's tensors in device 1's context: Op::run and the C ABI",
          "[multi-device][null-driver]") {
  if (!haveTwoDevices())
    return;
  Device &first = Device::get(0), &second = Device::get(1);
  Stream stream = Stream::create(second);
  for (const OpCase &c : opCases()) {
    INFO(c.op);
    Call call = makeCall(c);
    const BoundArgs bound = BoundArgs::from_json(tkx_call_json(call.get()));
    const Op &op = *find_op(c.op);
    DeviceArgs args(op, bound, second);
    first.make_current();  // the thread's own (allocating made device 1's current): calls give it back
    checkLaunchesOn(second, [&] { op.run(bound, args.inputs, args.outputs, stream); });
    checkCurrentIs(first);
    // The C ABI takes the caller's workspace, of the size it asks for on device 1.
    size_t bytes = 0;
    REQUIRE(tkx_call_workspace_bytes(call.get(), 1, &bytes) == TKX_OK);
    DeviceBuffer workspace(bytes, second);
    first.make_current();
    const auto in = args.side(op, true), out = args.side(op, false);
    checkLaunchesOn(second, [&] {
      const tkx_status s = tkx_call_run(call.get(), in.data(), int32_t(in.size()), out.data(), int32_t(out.size()),
                                        stream.handle(), reinterpret_cast<void *>(workspace.ptr()), bytes);
      INFO(tkx_last_error());
      CHECK(s == TKX_OK);
    });
    checkCurrentIs(first);
  }
  // matmul has no C ABI binding: its C++ entry point (the eager call cache) and Op::run.
  Tensor a = Tensor::empty({64, 64}, DType::BF16, second), b = Tensor::empty({64, 64}, DType::BF16, second);
  Tensor out = Tensor::empty({64, 64}, DType::BF16, second);
  first.make_current();
  checkLaunchesOn(second, [&] { matmul(a, b, out, stream); });
  const BoundArgs mm = bind_matmul(ArgSpec::of(a), ArgSpec::of(b), std::nullopt, ArgSpec::of(out), false, false, 1.0);
  const TensorView mmIn[] = {a, b, TensorView()}, mmOut[] = {out};
  checkLaunchesOn(second, [&] { matmul_op().run(mm, mmIn, mmOut, stream); });
  // The scratch of device 1's stream is device 1's memory.
  auto *allocatedIn = nullDriverFunction<void *(uint64_t)>("tokamax_null_cuda_allocation_context");
  if (allocatedIn)
    CHECK(allocatedIn(stream_workspace(second, stream, 256)) == static_cast<void *>(second.context()));
  checkCurrentIs(first);
}

TEST_CASE("a Function runs on its tensors' device", "[multi-device][null-driver]") {
  if (!haveTwoDevices())
    return;
  Function loss = Function::trace({f32({4, 64}), f32({64})}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(t.layer_norm(in[0], in[1]))};
  });
  Function g = grad(loss, {0, 1});
  // x, scale and the gradients dx, dscale on one device.
  struct Tensors {
    Tensor x, scale, dx, dscale;
    explicit Tensors(Device &d)
        : x(Tensor::empty({4, 64}, DType::F32, d)), scale(Tensor::empty({64}, DType::F32, d)),
          dx(Tensor::empty({4, 64}, DType::F32, d)), dscale(Tensor::empty({64}, DType::F32, d)) {}
  };
  Device &first = Device::get(0), &second = Device::get(1);
  Stream stream = Stream::create(second);
  const Tensors on1(second);
  const TensorView in[] = {on1.x, on1.scale}, out[] = {on1.dx, on1.dscale};
  first.make_current();
  checkLaunchesOn(second, [&] { g.run(in, out, stream); });
  checkLaunchesOn(second, [&] { g.run(in, out, stream); });  // replayed
  g.run(in, out, stream, {.graph = true});
  checkCurrentIs(first);
  // Then on device 0, with its own intermediates.
  Stream stream0 = Stream::create(first);
  const Tensors on0(first);
  const TensorView in0[] = {on0.x, on0.scale}, out0[] = {on0.dx, on0.dscale};
  second.make_current();
  checkLaunchesOn(first, [&] { g.run(in0, out0, stream0); });
  checkCurrentIs(second);
  // A copy runs with intermediates of its own; a moved-from Function has none and says so.
  Function copy = g;
  checkLaunchesOn(second, [&] { copy.run(in, out, stream); });
  Function moved = std::move(copy);
  checkLaunchesOn(second, [&] { moved.run(in, out, stream); });
  CHECK_THROWS_WITH(copy.run({}, {}, stream), Catch::Contains("Function: run of a moved-from Function"));
}

TEST_CASE("the default stream is the call's device's", "[multi-device][null-driver]") {
  if (!haveTwoDevices())
    return;
  Device &first = Device::get(0), &second = Device::get(1);
  NormTensors n(second);
  Stream legacy = Stream::wrap(nullptr);
  first.make_current();
  checkLaunchesOn(second, [&] { n.run(legacy); });
  checkCurrentIs(first);
}

TEST_CASE("two threads run on devices 0 and 1 at once", "[multi-device][null-driver]") {
  if (!haveTwoDevices())
    return;
  constexpr int kIterations = 300;
  // One Function for both threads: each device runs its own plan and intermediates.
  const Function loss = Function::trace({f32({4, 64}), f32({64})}, [](Tracer &t, std::span<const Sym> in) {
    return std::vector<Sym>{t.sum(t.layer_norm(in[0], in[1]))};
  });
  const Function g = grad(loss, {0, 1});
  std::mutex mutex;
  std::vector<std::string> failures;  // Catch's macros are for the test's own thread
  std::barrier start(2);
  auto work = [&](int ordinal) {
    try {
      Device &device = Device::get(ordinal);
      Stream stream = Stream::create(device);
      NormTensors n(device);
      Tensor dy = Tensor::empty({4, 64}, DType::F32, device), dx = Tensor::empty({4, 64}, DType::F32, device);
      Tensor dscale = Tensor::empty({64}, DType::F32, device);
      Tensor q = Tensor::empty({2, 9, 4, 16}, DType::F32, device);
      Tensor kv = Tensor::empty({2, 11, 2, 16}, DType::F32, device);
      Tensor o = Tensor::empty({2, 9, 4, 16}, DType::F32, device);
      // Each thread starts on the other device's context: every call must switch.
      Device::get(1 - ordinal).make_current();
      start.arrive_and_wait();
      for (int i = 0; i < kIterations; ++i) {
        n.run(stream);
        layer_norm_vjp(dy, n.x, &n.scale.view(), n.mean, n.rstd, dx, &dscale.view(), nullptr, stream);
        dot_product_attention(q, kv, kv, o, stream, {.is_causal = true});
        const TensorView in[] = {n.x, n.scale}, out[] = {dx, dscale};
        g.run(in, out, stream, {.graph = i % 2 == 1});
      }
      stream.synchronize();
    } catch (const std::exception &e) {
      std::lock_guard lock(mutex);
      failures.push_back(fmt::format("device {}: {}", ordinal, e.what()));
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  CHECK(failures == std::vector<std::string>{});
}

TEST_CASE("concurrent first calls on two devices compile each kernel once and load it on both",
          "[multi-device][null-driver]") {
  if (!haveTwoDevices())
    return;
  // A shape no other test uses, so that its kernels are new to this process.
  constexpr int64_t kRows = 3, kCols = 136;
  std::vector<std::unique_ptr<NormTensors>> tensors;
  std::vector<Stream> streams;
  for (int d = 0; d < 2; ++d) {
    tensors.push_back(std::make_unique<NormTensors>(Device::get(d), kRows, kCols));
    streams.push_back(Stream::create(Device::get(d)));
  }
  const JitStats before = Jit::instance().stats();
  std::barrier start(2);
  std::string failures[2];
  auto first = [&](int d) {
    start.arrive_and_wait();
    try {
      tensors[d]->run(streams[d]);
    } catch (const std::exception &e) {
      failures[d] = e.what();
    }
  };
  std::thread t0(first, 0), t1(first, 1);
  t0.join();
  t1.join();
  REQUIRE(failures[0] == "");
  REQUIRE(failures[1] == "");
  const JitStats after = Jit::instance().stats();
  // Compiled, or read from the disk cache, once per kernel: the code of an architecture is
  // shared by its devices; each device loads it into its own context.
  const uint64_t code = (after.compiles - before.compiles) + (after.disk_hits - before.disk_hits);
  CHECK(code >= 1);
  CHECK(after.loads - before.loads == 2 * code);
  // Later calls on either device find their loaded kernels.
  tensors[0]->run(streams[0]);
  tensors[1]->run(streams[1]);
  const JitStats again = Jit::instance().stats();
  CHECK(again.loads == after.loads);
  CHECK(again.compiles + again.disk_hits == after.compiles + after.disk_hits);
}

TEST_CASE("devices of one kind share the per-device autotuning cache", "[multi-device][null-driver][autotune]") {
  if (!haveTwoDevices())
    return;
  Device &first = Device::get(0), &second = Device::get(1);
  const DeviceInfo a = DeviceInfo::of(first), b = DeviceInfo::of(second);
  CHECK(a.key() == b.key());
  CHECK(autotuning_cache_path(a) == autotuning_cache_path(b));
  CHECK(autotuning_cache(a) == autotuning_cache(b));  // one copy in memory
  // A result tuned on device 0 serves calls on device 1.
  NormTensors n(second, 5, 200);  // a shape of its own: the entry touches no other test
  const BoundArgs args = n.bound();
  const Implementation &tile = layer_norm_op().implementation("tile");
  std::optional<Config> tuned;
  for (const Config &c : tile.search_space(args))
    if (!(c == tile.heuristic(args)))
      tuned = c;
  REQUIRE(tuned);
  AutotuningResult result(a);
  result.add(TuningEntry{args, "tile", *tuned, {}});
  const RestoreFile restore(autotuning_cache_path(a));
  update_autotuning_cache(result);
  second.make_current();
  CHECK(layer_norm_op().resolve_config(tile, args, std::nullopt) == *tuned);
  first.make_current();
  CHECK(layer_norm_op().resolve_config(tile, args, std::nullopt) == *tuned);
}

TEST_CASE("tkx_autotune tunes on its stream's device", "[multi-device][null-driver][autotune]") {
  if (!haveTwoDevices())
    return;
  Device &first = Device::get(0), &second = Device::get(1);
  Call call = makeCall({"rms_norm", {f32({4, 64}), f32({64})}});
  const tkx_call *calls[] = {call.get()};
  Stream stream = Stream::create(second);
  const RestoreFile restore(autotuning_cache_path(DeviceInfo::of(second)));  // tuning updates it
  first.make_current();
  char *json = nullptr;
  checkLaunchesOn(second, [&] {
    const tkx_status s = tkx_autotune(calls, 1, stream.handle(), &json);
    INFO(tkx_last_error());
    CHECK(s == TKX_OK);
  });
  REQUIRE(json);
  CHECK(AutotuningResult::loads(json).size() == 1);
  tkx_free_string(json);
}

TEST_CASE("a call mixing devices, or on another device's stream, is refused before any launch",
          "[multi-device][null-driver][bad-input]") {
  if (!haveTwoDevices())
    return;
  Device &first = Device::get(0), &second = Device::get(1);
  Stream stream0 = Stream::create(first), stream1 = Stream::create(second);
  NormTensors on0(first), on1(second);
  auto refused = [&](auto &&call, const char *part1, const char *part2) {
    const std::vector<void *> launches = launchContexts([&] {
      try {
        call();
        FAIL_CHECK("not refused");
      } catch (const Error &e) {
        CHECK_THAT(e.what(), Contains(part1) && Contains(part2));
      }
    });
    CHECK(launches.empty());
  };
  SECTION("the C++ entry points") {
    refused([&] { layer_norm(on1.x, &on0.scale.view(), nullptr, on1.y, stream1); },
            "layer_norm: scale is on device 0 but x is on device 1", "every tensor of a call must be on one device");
    refused([&] { on1.run(stream0); }, "layer_norm: x is on device 1 but the stream is on device 0",
            "a stream of that device");
    const BoundArgs bound = on1.bound();
    const TensorView in[] = {on1.x, on1.scale, TensorView()}, out[] = {on1.y, on0.mean, on1.rstd};
    refused([&] { layer_norm_op().run(bound, in, out, stream1); }, "mean is on device 0 but x is on device 1",
            "one device");
    const TensorView in1[] = {on1.x, on1.scale, TensorView()}, out1[] = {on1.y, on1.mean, on1.rstd};
    refused([&] { layer_norm_op().run(bound, in1, out1, stream0); }, "x is on device 1 but the stream is on device 0",
            "layer_norm");
  }
  SECTION("a Function") {
    Function f = Function::trace({f32({4, 64}), f32({64})}, [](Tracer &t, std::span<const Sym> in) {
      return std::vector<Sym>{t.layer_norm(in[0], in[1])};
    });
    const TensorView in[] = {on1.x, on0.scale}, out[] = {on1.y};
    refused([&] { f.run(in, out, stream1); }, "argument 1 is on device 0 but argument 0 is on device 1", "Function");
    const TensorView in1[] = {on1.x, on1.scale};
    refused([&] { f.run(in1, out, stream0); }, "argument 0 is on device 1 but the stream is on device 0",
            "Function");
  }
  SECTION("the C ABI: TKX_INVALID_ARGUMENT") {
    Call call = makeCall(opCases()[0]);  // layer_norm
    const BoundArgs bound = BoundArgs::from_json(tkx_call_json(call.get()));
    DeviceArgs args(layer_norm_op(), bound, second);
    auto in = args.side(layer_norm_op(), true), out = args.side(layer_norm_op(), false);
    auto run = [&](void *stream) {
      return tkx_call_run(call.get(), in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), stream,
                          nullptr, 0);
    };
    std::vector<void *> launches = launchContexts([&] {
      CHECK_STATUS(run(stream0.handle()), TKX_INVALID_ARGUMENT, "x is on device 1 but the stream is on device 0");
      tkx_tensor scale0 = args.descs[1];
      scale0.device = 0;
      in[1] = &scale0;
      CHECK_STATUS(run(stream1.handle()), TKX_INVALID_ARGUMENT, "input 1 (scale) is on device 0",
                   "input 0 (x) is on device 1");
    });
    CHECK(launches.empty());
  }
}
