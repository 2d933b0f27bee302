// What the op benchmarks (tokamax-glu-bench, tokamax-ragged-dot-bench,
// tokamax-cross-entropy-bench) share: random bf16 device tensors, comma lists, and the
// peers' JSON (rows of shape, pass, backend and TFLOP/s, as bench/peers/*.py write them).
#pragma once

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
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

} // namespace tokamax::tools
