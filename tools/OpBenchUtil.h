// What the op benchmarks (tokamax-glu-bench, tokamax-ragged-dot-bench,
// tokamax-cross-entropy-bench) share: random bf16 device tensors, comma lists, and the
// peers' JSON (rows of shape, pass, backend and TFLOP/s, as bench/peers/*.py write them).
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <string>
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

/// (shape, pass) -> backend -> TFLOP/s (0 where the peer failed).
using PeerTable = std::map<std::pair<std::string, std::string>, std::map<std::string, double>>;

/// Reads a peers script's JSON; appends the backends met to `backends` in order.
inline PeerTable readPeers(const std::string &path, std::vector<std::string> &backends) {
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("--peers: cannot read {}", path));
  nlohmann::json doc = nlohmann::json::parse(in);
  fmt::print("peers: {} (torch {}) from {}\n", doc.value("device", "?"), doc.value("torch", "?"), path);
  PeerTable table;
  for (const nlohmann::json &r : doc.at("rows")) {
    const std::string backend = r.at("backend").get<std::string>();
    if (std::find(backends.begin(), backends.end(), backend) == backends.end())
      backends.push_back(backend);
    table[{r.at("shape").get<std::string>(), r.at("pass").get<std::string>()}][backend] =
        r.value("status", "ok") == "ok" ? r.at("tflops").get<double>() : 0.0;
  }
  return table;
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

} // namespace tokamax::tools
