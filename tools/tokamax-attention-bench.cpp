// tokamax-attention-bench: dot_product_attention TFLOP/s and memory, forward and
// forward + backward, beside the peers' numbers (bench/peers/attention.py).
//
//   shapes (bf16, T = S, K = N, Hv = H):  S1 = B 32, T 2048, N 16, H 64
//                                         S2 = B 4,  T 4096, N 32, H 128
//                                         S3 = B 8,  T 8192, N 16, H 128
//          (--shapes S1,S3 picks some; --quick runs one small shape, "Q" = B 2, T 512,
//          N 4, H 64, with few iterations: a smoke run)
//   rows:  each implementation (--impl, default tile,chunked,reference; hopper too on
//          sm_90a), causal and not,
//          "fwd" (the forward with its lse residual) and "fwd+bwd" (forward, then the VJP)
//   time:  median of tokamax::benchmark() with CUDA events, L2 flushed before each run;
//          iterations drop (to 3 at least) where one call takes long (~10 s a row)
//   TFLOP/s: fwd = 4 B N T S H, halved when causal; fwd+bwd = 3.5x fwd (backward 2.5x)
//   peak:  extra device memory of one call (measured as peakExtraBytes describes); each
//          row runs in a process of its own (runInChild says why)
//   reference: skipped where its f32 logits [B, N, T, S] (and dS for the VJP) exceed 80%
//          of the free memory; an implementation's NotSupported is printed (and kept in
//          the JSON) as the row
//   --json FILE: the rows; --peers FILE: the JSON attention.py writes (rows keyed by
//          shape, causal, pass, backend), printed per row as ours / peer TFLOP/s in %
//
// Usage: tokamax-attention-bench [--shapes S1,S2,S3] [--impl tile,chunked,reference] [--iters N]
//                                [--config JSON] [--vjp-config JSON] [--json FILE] [--peers FILE]
//                                [--quick] [--autotune] [--nondeterministic] [--bnth] [--varlen]
//                                [--lengths] [--fp8]
//   --config: the config every row's forward and VJP use (e.g. '{"block_q":128,
//             "block_kv":64,"num_warps":8}'), instead of each implementation's own;
//   --vjp-config: the VJP's alone ("heuristic": the VJP's own choice, where --config
//             holds forward-only keys such as "overlap")
//   --nondeterministic: the VJP with AttentionOptions::deterministic = false (the hopper
//             VJP's opt-in "fused_dq": 1 then adds dq in any order instead of in turns)
//   --bnth: q, k, v, out and the gradients in SDPA's [B, N, T, H] layout, read in place
//   --varlen: the same tokens as B packed sequences of T (AttentionOptions::cu_seqlens_q /
//             cu_seqlens_kv, q [B T, N, H], lse [N, B T]): the packed kernels at the dense
//             rows' FLOPs, to set beside a run without it (equal total tokens)
//   --lengths: the dense calls with q_seq_lengths / kv_seq_lengths, every one T: the
//             kernels that mask by run-time lengths, at the same FLOPs (what --varlen's
//             kernels share with them, to tell packing's cost from the masks')
//   --autotune: each row first autotunes its calls (the forward, and the VJP for
//             fwd+bwd) among the row's implementation's configs, then times the tuned
//             calls; the row prints the tuning time and the configs chosen
//   --fp8:    dot_product_attention_fp8 (q, k, v f8e4m3 with descales, out bf16) at the
//             same shapes and FLOPs: forward rows only (fwd+bwd rows say it has no VJP)
#include "OpBenchUtil.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/AttentionFp8.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace tokamax;
using json = nlohmann::json;

namespace {

struct Shape {
  std::string name;
  int64_t b, t, n, h;
};
const std::vector<Shape> kShapes = {{"S1", 32, 2048, 16, 64}, {"S2", 4, 4096, 32, 128}, {"S3", 8, 8192, 16, 128}};
const Shape kQuickShape = {"Q", 2, 512, 4, 64};

/// How --config reaches the rows' child processes.
constexpr const char *kConfigVariable = "TOKAMAX_ATTENTION_BENCH_CONFIG";
constexpr const char *kVjpConfigVariable = "TOKAMAX_ATTENTION_BENCH_VJP_CONFIG";
constexpr const char *kAutotuneVariable = "TOKAMAX_ATTENTION_BENCH_AUTOTUNE";
constexpr const char *kNondeterministicVariable = "TOKAMAX_ATTENTION_BENCH_NONDETERMINISTIC";
constexpr const char *kBnthVariable = "TOKAMAX_ATTENTION_BENCH_BNTH";
constexpr const char *kVarlenVariable = "TOKAMAX_ATTENTION_BENCH_VARLEN";
constexpr const char *kLengthsVariable = "TOKAMAX_ATTENTION_BENCH_LENGTHS";
constexpr const char *kFp8Variable = "TOKAMAX_ATTENTION_BENCH_FP8";
/// --vjp-config's value for the VJP's own choice (beside a forward-only --config).
constexpr const char *kVjpHeuristic = "heuristic";

/// q's shape (k, v, out and the gradients share it: T = S, N = K) in the row's layout.
std::vector<int64_t> qShapeOf(int64_t b, int64_t t, int64_t n, int64_t h) {
  return std::getenv(kBnthVariable) ? std::vector<int64_t>{b, n, t, h} : std::vector<int64_t>{b, t, n, h};
}

struct Row : tools::OpRow {
  bool causal = false;
  int64_t peak_extra_bytes = -1;
  double tune_s = 0;               ///< --autotune: the tuning time
  std::string config, vjp_config;  ///< --autotune: the configs chosen
};

/// The device's free memory through cuMemGetInfo of the driver library (dlopen'ed by its
/// name, as the runtime loads it; the same library once loaded).
class FreeMemory {
public:
  FreeMemory() {
    if (void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
      get_ = reinterpret_cast<GetInfoFn>(dlsym(lib, "cuMemGetInfo_v2"));
  }
  bool available() const { return get_ != nullptr; }
  /// Free bytes on the calling thread's current context (0 when the call fails).
  size_t operator()() const {
    size_t free = 0, total = 0;
    return get_ && get_(&free, &total) == 0 ? free : 0;
  }

private:
  using GetInfoFn = int (*)(size_t *, size_t *);
  GetInfoFn get_ = nullptr;
};

/// Peak device memory one call of `work` adds beyond what exists before it (its inputs
/// and outputs are allocated by then): free memory before the call minus the least free
/// memory seen while it runs (a thread samples cuMemGetInfo every ~50 us until the
/// stream is synchronised) and after it (scratch the op takes from its stream's
/// workspace stays allocated, so it shows there). `fresh` must be a stream no earlier
/// call used, whose workspace starts empty. Granularity is the driver's (2 MiB pages); a
/// temporary buffer freed between two samples can be missed.
int64_t peakExtraBytes(const FreeMemory &freeMemory, Device &device, Stream &fresh, const std::function<void()> &work) {
  if (!freeMemory.available())
    return -1;
  fresh.synchronize();
  const size_t before = freeMemory();
  std::atomic<size_t> lowest{before};
  // A jthread: when `work` throws (a config the op refuses), unwinding stops and joins it.
  std::jthread sampler([&](std::stop_token stop) {
    device.make_current();
    while (!stop.stop_requested()) {
      const size_t now = freeMemory();
      if (now && now < lowest.load())
        lowest.store(now);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  work();
  fresh.synchronize();
  sampler.request_stop();
  sampler.join();
  const size_t after = std::min(lowest.load(), freeMemory());
  return before > after ? int64_t(before - after) : 0;
}

/// The tensors of one shape: q, k, v and dout random (out, lse, dq, dk, dv unset).
struct Buffers {
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
};

/// A tensor of `dtype` holding 1 Mi values of random_host_values (standardize's:
/// magnitudes in [0.05, 3], random signs, so logits of a few units at the default scale)
/// over and over, starting `phase` values in: the inputs differ without generating
/// hundreds of millions of values on the host for every row (timing does not depend on
/// them). `twice`: the values twice over, as `dtype`'s bytes.
Tensor patterned(const std::vector<int64_t> &shape, DType dtype, const std::vector<uint8_t> &twice, size_t phase,
                 Device &device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  const size_t bytes = dtype_size(dtype), period = twice.size() / bytes / 2;
  for (size_t at = 0; at < size_t(t.numel()); at += period)
    copy_host_to_device(t.data() + at * bytes, twice.data() + phase % period * bytes,
                        std::min(period, size_t(t.numel()) - at) * bytes);
  return t;
}

/// The period of patterned's values, twice over, as `dtype`'s bytes.
std::vector<uint8_t> patternOf(DType dtype) {
  const int64_t period = int64_t(1) << 20;
  const size_t bytes = dtype_size(dtype);
  std::vector<uint8_t> twice(2 * period * bytes);
  const std::vector<double> values = random_host_values(TensorSpec{{period}, DType::BF16}, 1);
  for (int64_t i = 0; i < 2 * period; ++i)
    store_from_double(dtype, &twice[size_t(i) * bytes], values[i % period]);
  return twice;
}

Buffers makeBuffers(const Shape &s, Device &device) {
  const std::vector<int64_t> qShape = qShapeOf(s.b, s.t, s.n, s.h), lseShape = {s.b, s.n, s.t};
  const std::vector<uint8_t> twice = patternOf(DType::BF16);
  auto input = [&](size_t phase) { return patterned(qShape, DType::BF16, twice, phase, device); };
  return Buffers{input(0), input(262147), input(524309), input(786433),
                 Tensor::empty(qShape, DType::BF16, device), Tensor::empty(lseShape, DType::F32, device),
                 Tensor::empty(qShape, DType::BF16, device), Tensor::empty(qShape, DType::BF16, device),
                 Tensor::empty(qShape, DType::BF16, device)};
}

/// --autotune: the row's calls tuned among `impl`'s configs (the time and the choices go
/// into the row), for the timing to run in the result's scope.
AutotuningResult tuneRow(const Shape &s, const std::string &pass, const std::string &impl,
                         const AttentionOptions &options, const AttentionOptions &vjpOptions, Row &row) {
  const ArgSpec qs{qShapeOf(s.b, s.t, s.n, s.h), DType::BF16};
  const ArgSpec lse = attention_lse_spec(qs, options.layout);
  std::vector<BoundArgs> calls{bind_attention({qs, qs, qs, {}, {}, {}, {}, qs, lse}, options)};
  if (pass != "fwd")
    calls.push_back(bind_attention_vjp({qs, qs, qs, qs, qs, lse, {}, {}, {}, {}, qs, qs, qs, {}}, vjpOptions));
  AutotuneOptions tuning;
  tuning.implementations = {impl};
  tuning.progress = false;
  tuning.update_cache = false;
  const auto start = std::chrono::steady_clock::now();
  AutotuningResult result = autotune(calls, tuning);
  row.tune_s = tools::elapsedMs(start) / 1000;
  auto chosen = [&](const BoundArgs &args) {
    const TuningEntry *e = result.find(args);
    return e ? e->config.to_json() : std::string("?");
  };
  row.config = chosen(calls[0]);
  if (calls.size() > 1)
    row.vjp_config = chosen(calls[1]);
  return result;
}

/// One row, in this process (a child of the table's: see runInChild). The first call
/// compiles (or reads the disk cache), loads the kernels and takes the stream workspace;
/// its peak extra memory is measured, so the figure includes the kernels' code (a few
/// MiB). Then a second call gives the time of one, from which the iterations follow
/// (~10 s a row, 3 at least), and benchmark() times them.
Row measureRow(const Shape &s, bool causal, const std::string &pass, const std::string &impl, int iters) {
  Row row{{.shape = s.name, .pass = pass, .impl = impl}, causal};
  if (std::getenv(kFp8Variable) && pass != "fwd") {
    row.status = "skipped: fp8 attention is forward only";
    return row;
  }
  Device &device = Device::get();
  const FreeMemory freeMemory;
  Buffers buf = makeBuffers(s, device);
  const double logitsBytes = 4.0 * s.b * s.n * double(s.t) * double(s.t) * (pass == "fwd" ? 1 : 2);  // + dS
  if (impl == "reference" && freeMemory() && logitsBytes > 0.8 * double(freeMemory())) {
    row.status = fmt::format("skipped: reference's f32 logits{} take {:.1f} GiB, {:.1f} GiB are free",
                             pass == "fwd" ? "" : " and dS", logitsBytes / (1 << 30),
                             double(freeMemory()) / (1 << 30));
    return row;
  }
  AttentionOptions options;
  options.is_causal = causal;
  options.implementation = impl;
  if (std::getenv(kBnthVariable))  // --bnth
    options.layout = AttentionLayout::BNTH;
  AttentionOptions vjpOptions = options;
  if (const char *config = std::getenv(kConfigVariable))  // --config, for the forward and the VJP
    options.config = vjpOptions.config = Config::from_json(config);
  if (const char *config = std::getenv(kVjpConfigVariable))  // --vjp-config, the VJP's alone
    vjpOptions.config = std::string(config) == kVjpHeuristic ? std::nullopt : std::optional(Config::from_json(config));
  if (std::getenv(kNondeterministicVariable))  // --nondeterministic
    vjpOptions.deterministic = false;
  // --varlen: the buffers as B packed sequences of T rows each.
  std::optional<Tensor> cuSeqlens, packedLse;
  std::vector<TensorView> packed;  // q, k, v, dout, out, dq, dk, dv as [B T, N, H]
  if (std::getenv(kVarlenVariable)) {
    std::vector<int32_t> cu;
    for (int64_t b = 0; b <= s.b; ++b)
      cu.push_back(int32_t(b * s.t));
    cuSeqlens.emplace(Tensor::empty({s.b + 1}, DType::I32, device));
    copy_host_to_device(cuSeqlens->data(), cu.data(), cu.size() * 4);
    packedLse.emplace(Tensor::empty({s.n, s.b * s.t}, DType::F32, device));
    const std::vector<int64_t> rows{s.b * s.t, s.n, s.h};
    for (Tensor *t : {&buf.q, &buf.k, &buf.v, &buf.dout, &buf.out, &buf.dq, &buf.dk, &buf.dv})
      packed.emplace_back(t->data(), DType::BF16, rows, t->view().device());
    for (AttentionOptions *o : {&options, &vjpOptions}) {
      o->cu_seqlens_q = o->cu_seqlens_kv = &cuSeqlens->view();
      o->max_seqlen_q = o->max_seqlen_kv = s.t;
    }
  }
  // --lengths: every sequence T long, through the length masks.
  std::optional<Tensor> lengths;
  if (std::getenv(kLengthsVariable)) {
    const std::vector<int32_t> all(size_t(s.b), int32_t(s.t));
    lengths.emplace(Tensor::empty({s.b}, DType::I32, device));
    copy_host_to_device(lengths->data(), all.data(), all.size() * 4);
    for (AttentionOptions *o : {&options, &vjpOptions})
      o->q_seq_lengths = o->kv_seq_lengths = &lengths->view();
  }
  // --fp8: q, k, v as f8e4m3 with descales (ones), the forward alone.
  struct Fp8Inputs {
    Tensor q, k, v, descale;
  };
  std::optional<Fp8Inputs> fp8;
  if (std::getenv(kFp8Variable)) {
    const std::vector<uint8_t> twice = patternOf(DType::F8E4M3);
    const std::vector<int64_t> shape = qShapeOf(s.b, s.t, s.n, s.h);
    fp8.emplace(Fp8Inputs{patterned(shape, DType::F8E4M3, twice, 0, device),
                          patterned(shape, DType::F8E4M3, twice, 262147, device),
                          patterned(shape, DType::F8E4M3, twice, 524309, device),
                          Tensor::empty({s.b, s.n}, DType::F32, device)});
    const std::vector<float> ones(size_t(s.b * s.n), 1.0f);
    copy_host_to_device(fp8->descale.data(), ones.data(), ones.size() * 4);
  }
  std::optional<AutotuningScope> tuned;
  if (std::getenv(kAutotuneVariable))
    tuned.emplace(tuneRow(s, pass, impl, options, vjpOptions, row));
  auto call = [&](Stream &stream) {
    if (fp8) {
      const TensorView *d = &fp8->descale.view();
      dot_product_attention_fp8(fp8->q, fp8->k, fp8->v, buf.out, stream, options, {d, d, d}, &buf.lse.view());
      return;
    }
    if (!packed.empty()) {
      const TensorView &q = packed[0], &k = packed[1], &v = packed[2], &dout = packed[3], &out = packed[4];
      dot_product_attention(q, k, v, out, stream, options, &packedLse->view());
      if (pass != "fwd")
        dot_product_attention_vjp(dout, q, k, v, out, packedLse->view(), packed[5], packed[6], packed[7], stream,
                                  vjpOptions);
      return;
    }
    dot_product_attention(buf.q, buf.k, buf.v, buf.out, stream, options, &buf.lse.view());
    if (pass != "fwd")
      dot_product_attention_vjp(buf.dout, buf.q, buf.k, buf.v, buf.out, buf.lse, buf.dq, buf.dk, buf.dv, stream,
                                vjpOptions);
  };
  tools::measureInto(row, [&] {
    Stream stream = Stream::create(device);
    auto once = [&] { call(stream); };
    row.first_call_ms = tools::hostMs([&] { row.peak_extra_bytes = peakExtraBytes(freeMemory, device, stream, once); });
    const double fwdFlops = 4.0 * s.b * s.n * double(s.t) * double(s.t) * s.h * (causal ? 0.5 : 1.0);
    tools::timeCalls(row, stream, once, iters, pass == "fwd" ? fwdFlops : 3.5 * fwdFlops);
  });
  return row;
}

json toJson(const Row &r) {
  json j = tools::rowJson(r);
  j.update(json{{"causal", r.causal}, {"peak_extra_bytes", r.peak_extra_bytes}, {"tune_s", r.tune_s},
                 {"config", r.config}, {"vjp_config", r.vjp_config}});
  return j;
}

Row fromJson(const json &j) {
  Row r;
  r.shape = j.at("shape").get<std::string>(), r.pass = j.at("pass").get<std::string>();
  r.impl = j.at("impl").get<std::string>(), r.status = j.at("status").get<std::string>();
  r.causal = j.at("causal").get<bool>();
  r.ms = j.at("ms").get<double>(), r.tflops = j.at("tflops").get<double>();
  r.first_call_ms = j.at("first_call_ms").get<double>(), r.iterations = j.at("iterations").get<int>();
  r.peak_extra_bytes = j.at("peak_extra_bytes").get<int64_t>();
  r.tune_s = j.value("tune_s", 0.0);
  r.config = j.value("config", ""), r.vjp_config = j.value("vjp_config", "");
  return r;
}

/// Runs one row in a child process (this program with --row) and reads back its Row.
/// Each row gets a process of its own because device memory that one call takes from
/// its stream's workspace stays allocated until the process exits (even once the stream
/// is destroyed): in one process, rows would see each other's workspaces (a reused one
/// hides a call's need, and fresh ones add up past the device's memory). A child that
/// dies (out of memory, a fault) fails its row only.
Row runInChild(const std::string &self, const Shape &s, bool causal, const std::string &pass, const std::string &impl,
               int iters) {
  const std::string command =
      fmt::format("'{}' --row {} {} {} {} {} 2>&1", self, s.name, causal ? 1 : 0, pass, impl, iters);
  std::string output;
  if (FILE *pipe = popen(command.c_str(), "r")) {
    char chunk[4096];
    for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;)
      output.append(chunk, n);
    const int status = pclose(pipe);
    const size_t marker = output.rfind("\nROW ");  // the child's last line
    if (status == 0 && marker != std::string::npos)
      return fromJson(json::parse(output.substr(marker + 5, output.find('\n', marker + 1) - marker - 5)));
    output = fmt::format("exit status {}: {}", status, output);
  }
  Row row{{.shape = s.name, .pass = pass, .impl = impl}, causal};
  while (!output.empty() && output.back() == '\n')
    output.pop_back();
  row.status = "failed: " + output.substr(output.size() > 400 ? output.size() - 400 : 0);
  return row;
}

/// The peers' rows' key: (shape, causal, pass).
using PeerKey = std::tuple<std::string, bool, std::string>;

PeerKey peerKey(const json &r) {
  return {r.at("shape").get<std::string>(), r.at("causal").get<bool>(), r.at("pass").get<std::string>()};
}

} // namespace

int main(int argc, char **argv) try {
  // A child's row: --row SHAPE CAUSAL PASS IMPL ITERS (see runInChild).
  if (argc == 7 && std::string(argv[1]) == "--row") {
    std::vector<Shape> known = kShapes;
    known.push_back(kQuickShape);
    auto shape = std::find_if(known.begin(), known.end(), [&](const Shape &s) { return s.name == argv[2]; });
    if (shape == known.end())
      throw Error(fmt::format("--row: unknown shape \"{}\"", argv[2]));
    Row row = measureRow(*shape, std::string(argv[3]) == "1", argv[4], argv[5], std::max(1, std::atoi(argv[6])));
    fmt::print("\nROW {}\n", toJson(row).dump());
    return 0;
  }
  std::vector<Shape> shapes;
  std::vector<std::string> impls = {"tile", "chunked", "reference"};
  int iters = 20;
  bool quick = false;
  std::string jsonPath, peersPath;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--shapes" && hasValue) {
      for (const std::string &name : tools::split(argv[++i])) {
        auto it = std::find_if(kShapes.begin(), kShapes.end(), [&](const Shape &s) { return s.name == name; });
        if (it == kShapes.end())
          throw Error(fmt::format("--shapes: unknown shape \"{}\" (S1, S2, S3)", name));
        shapes.push_back(*it);
      }
    } else if ((arg == "--config" || arg == "--vjp-config") && hasValue) {
      if (arg == "--config" || std::string(argv[i + 1]) != kVjpHeuristic)
        Config::from_json(argv[i + 1]);  // fails here, not in every row
      ++i;
      setenv(arg == "--config" ? kConfigVariable : kVjpConfigVariable, argv[i], 1);
    } else if (arg == "--impl" && hasValue) {
      impls = tools::split(argv[++i]);
      for (const std::string &impl : impls)
        if (impl.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
          throw Error(fmt::format("--impl: \"{}\" is not an implementation name", impl));
    } else if (arg == "--iters" && hasValue) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--json" && hasValue) {
      jsonPath = argv[++i];
    } else if (arg == "--peers" && hasValue) {
      peersPath = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--autotune") {
      setenv(kAutotuneVariable, "1", 1);
    } else if (arg == "--nondeterministic") {
      setenv(kNondeterministicVariable, "1", 1);
    } else if (arg == "--bnth") {
      setenv(kBnthVariable, "1", 1);
    } else if (arg == "--varlen") {
      setenv(kVarlenVariable, "1", 1);
    } else if (arg == "--lengths") {
      setenv(kLengthsVariable, "1", 1);
    } else if (arg == "--fp8") {
      setenv(kFp8Variable, "1", 1);
    } else {
      fmt::print(stderr, "usage: tokamax-attention-bench [--shapes S1,S2,S3] [--impl tile,chunked,reference] "
                         "[--iters N] [--config JSON] [--vjp-config JSON] [--json FILE] [--peers FILE] [--quick] "
                         "[--autotune] [--nondeterministic] [--bnth] [--varlen] [--lengths] [--fp8]\n");
      return 2;
    }
  }
  if (std::getenv(kVarlenVariable) && (std::getenv(kBnthVariable) || std::getenv(kAutotuneVariable)))
    throw Error("--varlen: packed sequences are [B T, N, H] (not --bnth), and their calls are not tuned here "
                "(not --autotune)");
  if (std::getenv(kFp8Variable) &&
      (std::getenv(kBnthVariable) || std::getenv(kVarlenVariable) || std::getenv(kAutotuneVariable)))
    throw Error("--fp8: dot_product_attention_fp8 takes BTNH tensors (not --bnth), no packed sequences (not "
                "--varlen), and its calls are not tuned here (not --autotune)");
  if (std::getenv(kLengthsVariable) && std::getenv(kVarlenVariable))
    throw Error("--lengths: the dense calls' lengths; packed calls (--varlen) have cu_seqlens instead");
  if (quick) {
    shapes = {kQuickShape};
    iters = std::min(iters, 3);
  } else if (shapes.empty()) {
    shapes = kShapes;
  }

  const auto peers = tools::readPeers(peersPath, peerKey, tools::peerTflops);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string device = describe(Device::get());
  fmt::print("{}\n", device);
  if (!peersPath.empty())
    fmt::print("peers: {} from {}\n", peers.about, peersPath);
  if (!FreeMemory().available())
    fmt::print("peak memory not measured: cuMemGetInfo_v2 not found\n");
  std::string header = fmt::format("\n{:<5} {:<6} {:<8} {:<10} {:>9} {:>8} {:>10} {:>6}", "shape", "causal", "pass",
                                   "impl", "ms", "TFLOP/s", "peak MiB", "iters");
  for (const std::string &b : peers.backends)
    header += fmt::format(" {:>14}", "% of " + b);
  fmt::print("{}\n", header);

  json doc = {{"device", device}, {"rows", json::array()}};
  for (const Shape &s : shapes)
    for (bool causal : {false, true})
      for (const std::string pass : {"fwd", "fwd+bwd"})
        for (const std::string &impl : impls) {
          const Row row = runInChild(self, s, causal, pass, impl, iters);
          json j = toJson(row);
          std::string line = fmt::format("{:<5} {:<6} {:<8} {:<10}", row.shape, causal ? "yes" : "no", pass, impl);
          if (row.status != "ok") {
            line += " " + row.status;
          } else {
            line += fmt::format(" {:>9.3f} {:>8.1f} {:>10.1f} {:>6}", row.ms, row.tflops,
                                row.peak_extra_bytes < 0 ? -1.0 : double(row.peak_extra_bytes) / (1 << 20),
                                row.iterations);
            for (const std::string &b : peers.backends) {
              const double *theirs = peers.find({s.name, causal, pass}, b);
              if (!theirs || *theirs <= 0) {
                line += fmt::format(" {:>14}", "-");
                continue;
              }
              line += fmt::format(" {:>13.1f}%", 100 * row.tflops / *theirs);
              j["ratio_to_" + b] = row.tflops / *theirs;
            }
          }
          if (row.tune_s > 0)
            line += fmt::format("  tuned in {:.1f} s: {}{}", row.tune_s, row.config,
                                row.vjp_config.empty() ? "" : ", VJP " + row.vjp_config);
          fmt::print("{}\n", line);
          std::fflush(stdout);
          doc["rows"].push_back(j);
          if (!jsonPath.empty())  // after every row: a run cut short keeps what it measured
            std::ofstream(jsonPath) << doc.dump(2) << "\n";
        }
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-attention-bench: error: {}\n", e.what());
  return 1;
}
