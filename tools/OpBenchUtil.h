// What the op benchmarks (tokamax-glu-bench, tokamax-ragged-dot-bench,
// tokamax-cross-entropy-bench, and in part tokamax-attention-bench) share: random bf16
// device tensors, comma lists, the command line, the timing of a row, the peers' JSON
// (rows of shape, pass, backend and figures, as bench/peers/*.py write them), the
// --json file, and all of a benchmark that compares TFLOP/s with the peers'.
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tokamax::tools {

inline double elapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// A bf16 device tensor of about-normal values with standard deviation `stddev`.
inline Tensor randomTensor(std::vector<int64_t> shape, double stddev, Stream &stream, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  std::vector<uint16_t> host(size_t(t.numel()));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t &v : host) {  // sum of 4 uniforms: close enough to normal for timing
    double u = 0;
    for (int i = 0; i < 4; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      u += double(s >> 11) * 0x1.0p-53 - 0.5;
    }
    uint8_t bytes[2];
    store_from_double(DType::BF16, bytes, u * 1.732 * stddev);
    v = uint16_t(bytes[0] | (bytes[1] << 8));
  }
  t.copy_from_host(host.data(), host.size() * 2);
  stream.synchronize();
  return t;
}

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string &list) {
  std::vector<std::string> items;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start)
      items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

/// The command line every op benchmark takes, in this order (so a structured binding can
/// name the fields).
struct OpBenchArgs {
  std::vector<std::string> impls{"tile"};
  std::string json, peers;
  std::optional<Config> config;
  int iters = 20;
  bool quick = false;
};

/// Parses `tool`'s command line: [--impl a,b] [--iters N] [--config JSON] [--json FILE]
/// [--peers FILE] [--quick]; throws Error with the usage on anything else, and when the
/// driver reports no CUDA device.
inline OpBenchArgs parseOpBenchArgs(const char *tool, int argc, char **argv) {
  OpBenchArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--impl" && hasValue)
      a.impls = split(argv[++i]);
    else if (arg == "--iters" && hasValue)
      a.iters = std::max(3, std::atoi(argv[++i]));
    else if (arg == "--config" && hasValue)
      a.config = Config::from_json(argv[++i]);
    else if (arg == "--json" && hasValue)
      a.json = argv[++i];
    else if (arg == "--peers" && hasValue)
      a.peers = argv[++i];
    else if (arg == "--quick")
      a.quick = true;
    else
      throw Error(fmt::format("usage: {} [--impl tile,reference] [--iters N] [--config JSON] [--json FILE] "
                              "[--peers FILE] [--quick] (unknown argument \"{}\")",
                              tool, arg));
  }
  if (Device::count() == 0)
    throw Error(fmt::format("{} needs a CUDA device; the driver reports none", tool));
  return a;
}

/// One row of an op benchmark: an implementation's pass at a shape, as printed and as
/// written to --json.
struct OpRow {
  std::string shape, pass, impl, status = "ok";  ///< status: "ok" or why the row did not run
  double ms = 0, tflops = 0, first_call_ms = 0;
  int iterations = 0;
};

/// The JSON of the fields every op benchmark's row has.
inline nlohmann::json rowJson(const OpRow &r) {
  return {{"shape", r.shape}, {"pass", r.pass}, {"impl", r.impl}, {"status", r.status}, {"ms", r.ms},
          {"tflops", r.tflops}, {"iterations", r.iterations}, {"first_call_ms", r.first_call_ms}};
}

/// Runs `measure`, which fills `row`; the op's refusal (NotSupported) or failure (Error)
/// becomes the row's status instead.
inline void measureInto(OpRow &row, const std::function<void()> &measure) {
  try {
    measure();
  } catch (const NotSupported &e) {
    row.status = fmt::format("not supported: {}", e.what());
  } catch (const Error &e) {
    row.status = fmt::format("failed: {}", e.what());
  }
}

/// The host time of `work` in ms.
inline double hostMs(const std::function<void()> &work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  return elapsedMs(t0);
}

/// The host time in ms of the op calls `call` queues on `stream`, until they finish. Of
/// the first calls, it is the row's first_call_ms: they compile or read the disk cache,
/// load the kernels and take the stream's workspace.
inline double syncedMs(Stream &stream, const std::function<void()> &call) {
  return hostMs([&] {
    call();
    stream.synchronize();
  });
}

/// Times the op calls `call` queues on `stream` (after their first call) into `row`: one
/// call's host time sets the iterations (~10 s a row: 3 at least, `iters` at most), then
/// the median of benchmark() with CUDA events, L2 flushed before each run; TFLOP/s count
/// `flops` a call.
inline void timeCalls(OpRow &row, Stream &stream, const std::function<void()> &call, int iters, double flops) {
  row.iterations = std::clamp(int(10000.0 / std::max(syncedMs(stream, call), 1e-3)), 3, iters);
  BenchmarkData t = benchmark(stream, call, TimingMethod::CudaEvents, row.iterations, /*warmup=*/1,
                              /*flush_l2=*/true);
  row.ms = t.median;
  row.tflops = flops / t.median / 1e9;
}

/// What a peers script's JSON (bench/peers/*.py: "device", "torch" and rows with a
/// "backend") holds for a benchmark: a value by row key and backend.
template <class Key, class Value>
struct Peers {
  std::string about;  ///< "device (torch version)"; empty without a file
  std::vector<std::string> backends;  ///< in the order the rows name them
  std::map<Key, std::map<std::string, Value>> table;

  /// `backend`'s value for `key`, or null where it has none.
  const Value *find(const Key &key, const std::string &backend) const {
    auto row = table.find(key);
    if (row == table.end())
      return nullptr;
    auto value = row->second.find(backend);
    return value == row->second.end() ? nullptr : &value->second;
  }
};

/// Reads the peers' JSON at `path` (nothing when empty): table[keyOf(row)][backend] =
/// *valueOf(row) for every row whose valueOf (a std::optional) holds a value.
template <class KeyOf, class ValueOf,
          class Key = std::invoke_result_t<KeyOf, const nlohmann::json &>,
          class Value = typename std::invoke_result_t<ValueOf, const nlohmann::json &>::value_type>
Peers<Key, Value> readPeers(const std::string &path, KeyOf keyOf, ValueOf valueOf) {
  Peers<Key, Value> peers;
  if (path.empty())
    return peers;
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("--peers: cannot read {}", path));
  nlohmann::json doc = nlohmann::json::parse(in);
  peers.about = fmt::format("{} (torch {})", doc.value("device", "?"), doc.value("torch", "?"));
  for (const nlohmann::json &r : doc.at("rows")) {
    std::optional<Value> value = valueOf(r);
    if (!value)
      continue;
    const std::string backend = r.at("backend").get<std::string>();
    if (std::find(peers.backends.begin(), peers.backends.end(), backend) == peers.backends.end())
      peers.backends.push_back(backend);
    peers.table[keyOf(r)][backend] = *value;
  }
  return peers;
}

/// A peer row's TFLOP/s, 0 where the peer failed.
inline std::optional<double> peerTflops(const nlohmann::json &r) {
  return r.value("status", "ok") == "ok" ? r.at("tflops").get<double>() : 0.0;
}

using ShapePass = std::pair<std::string, std::string>;

inline ShapePass shapePassOf(const nlohmann::json &r) {
  return {r.at("shape").get<std::string>(), r.at("pass").get<std::string>()};
}

/// Reads the peers' JSON at `path` (`--peers`; nothing when empty), printing where it
/// comes from: the peers' figure (`valueOf`) by (shape, pass) and backend.
template <class ValueOf>
auto readShapePassPeers(const std::string &path, ValueOf valueOf) {
  auto peers = readPeers(path, shapePassOf, valueOf);
  if (!path.empty())
    fmt::print("peers: {} from {}\n", peers.about, path);
  return peers;
}

/// Writes `rows` to `path` (--json; nothing when empty) with the device's name.
inline void writeRows(const std::string &path, const nlohmann::json &rows) {
  if (path.empty())
    return;
  std::ofstream(path) << nlohmann::json{{"device", Device::get().name()}, {"rows", rows}}.dump(2) << "\n";
  fmt::print("wrote {}\n", path);
}

/// The whole of a benchmark whose rows compare TFLOP/s with the peers' (glu, ragged_dot),
/// for its main to return: the command line (parseOpBenchArgs), the peers, `title(s)`
/// (what runs where) of its shape (`quickShape` with --quick), then a row per
/// implementation and pass (fwd, fwd+bwd) and one per (impl, pass) of `moreRows`, each
/// measure(s, args, stream, row) on a stream of its own, printed as impl, pass, ms,
/// TFLOP/s, first call ms and ours / the peer's TFLOP/s in % per peer backend; the rows
/// to --json. Without --impl the implementation `autoImpl(s)` names (the one auto picks
/// on this device), tile where there is none. Anything thrown ends it with status 1 and
/// the error on stderr.
template <class Shape>
int runTflopsBench(const char *tool, int argc, char **argv, const Shape &shape, const Shape &quickShape,
                   std::string (*title)(const Shape &),
                   void (*measure)(const Shape &, const OpBenchArgs &, Stream &, OpRow &),
                   const std::vector<std::pair<std::string, std::string>> &moreRows = {},
                   std::string (*autoImpl)(const Shape &) = nullptr) try {
  OpBenchArgs args = parseOpBenchArgs(tool, argc, argv);
  const auto peers = readShapePassPeers(args.peers, peerTflops);
  const Shape &s = args.quick ? quickShape : shape;
  if (autoImpl && std::none_of(argv + 1, argv + argc, [](const char *a) { return std::string(a) == "--impl"; }))
    args.impls = {autoImpl(s)};
  fmt::print("{}\n", title(s));
  fmt::print("{:<10} {:<8} {:>10} {:>9} {:>14}", "impl", "pass", "ms", "TFLOP/s", "first call ms");
  for (const std::string &b : peers.backends)
    fmt::print(" {:>16}", "vs " + b);
  fmt::print("\n");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  auto run = [&](const std::string &impl, const std::string &pass) {
    OpRow r{.shape = s.name, .pass = pass, .impl = impl};
    // A row takes up to ~10 s and its first call compiles: say what is running (stderr,
    // so the table on stdout stays clean) and print each row as soon as it is measured,
    // piped or not.
    fmt::print(stderr, "measuring {} {} ...\n", impl, pass);
    measureInto(r, [&] {
      Stream stream = Stream::create(Device::get());
      measure(s, args, stream, r);
    });
    if (r.status != "ok") {
      fmt::print("{:<10} {:<8} {}\n", r.impl, r.pass, r.status);
    } else {
      fmt::print("{:<10} {:<8} {:>10.3f} {:>9.1f} {:>14.0f}", r.impl, r.pass, r.ms, r.tflops, r.first_call_ms);
      for (const std::string &b : peers.backends) {
        const double *theirs = peers.find({r.shape, r.pass}, b);
        fmt::print(" {:>16}", theirs && *theirs > 0
                                  ? fmt::format("{:.0f}% of {:.0f}", 100 * r.tflops / *theirs, *theirs)
                                  : "-");
      }
      fmt::print("\n");
    }
    std::fflush(stdout);
    rows.push_back(rowJson(r));
  };
  for (const std::string &impl : args.impls)
    for (const char *pass : {"fwd", "fwd+bwd"})
      run(impl, pass);
  for (const auto &[impl, pass] : moreRows)
    run(impl, pass);
  writeRows(args.json, rows);
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "{}: {}\n", tool, e.what());
  return 1;
}

} // namespace tokamax::tools
