// tokamax-ragged-dot-bench: ragged_dot (grouped matmul) TFLOP/s, forward and forward +
// backward, beside our dense matmul at the same FLOPs and the peers' numbers
// (bench/peers/ragged_dot.py: torch's grouped mm).
//
//   shape:  R1 = 8 groups, M 32768, K 4096, N 4096 (bf16), random group sizes summing
//           to M (fixed seed, the same as the peers script's); --quick: Q = 8 groups,
//           M 4096, K 1024, N 1024
//   rows:   each implementation (--impl, default tile), "fwd" and "fwd+bwd" (the
//           forward, then the VJP); "dense" rows: matmul [M, K] @ [K, N] (auto: hopper
//           on sm_90a), the same FLOPs as the forward
//   time:   median of tokamax::benchmark() with CUDA events, L2 flushed before each run
//   TFLOP/s: fwd = 2 M K N; fwd+bwd = 3x fwd (dlhs and drhs)
//   --config JSON: the forward's and the VJP's config; --json FILE: the rows;
//   --peers FILE: the JSON ragged_dot.py writes, printed per row as ours / peer in %
//
// Usage: tokamax-ragged-dot-bench [--impl tile,reference] [--iters N] [--config JSON]
//                                 [--json FILE] [--peers FILE] [--quick]
#include "OpBenchUtil.h"

#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

using namespace tokamax;
using json = nlohmann::json;

namespace {

struct Shape {
  std::string name;
  int64_t groups, m, k, n;
};
const Shape kShape{"R1", 8, 32768, 4096, 4096}, kQuickShape{"Q", 8, 4096, 1024, 1024};

/// Group sizes summing to m: sorted cut points of a fixed LCG, as ragged_dot.py makes them.
std::vector<int32_t> groupSizes(const Shape &s) {
  std::vector<int64_t> cuts{0, s.m};
  uint64_t state = 12345;
  for (int64_t g = 0; g + 1 < s.groups; ++g) {
    state = (state * 6364136223846793005ull + 1442695040888963407ull) % (uint64_t(1) << 63);
    cuts.push_back(int64_t((state >> 16) % uint64_t(s.m + 1)));
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> sizes;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    sizes.push_back(int32_t(cuts[i + 1] - cuts[i]));
  return sizes;
}

struct Row {
  std::string shape, pass, impl, status = "ok";
  double ms = 0, tflops = 0, first_call_ms = 0;
  int iterations = 0;
};

Row measureRow(const Shape &s, const std::string &pass, const std::string &impl, int iters,
               const std::optional<Config> &config) {
  Row row{.shape = s.name, .pass = pass, .impl = impl};
  try {
    Stream stream = Stream::create(Device::get());
    Tensor lhs = tools::randomTensor({s.m, s.k}, 1.0, stream, 1);
    Tensor rhs = tools::randomTensor({s.groups, s.k, s.n}, 1 / std::sqrt(double(s.k)), stream, 2);
    Tensor dout = tools::randomTensor({s.m, s.n}, 1.0, stream, 3);
    std::vector<int32_t> hostSizes = groupSizes(s);
    Tensor sizes = Tensor::empty({s.groups}, DType::I32);
    sizes.copy_from_host(hostSizes.data(), hostSizes.size() * sizeof(int32_t));
    Tensor out = Tensor::empty({s.m, s.n}, DType::BF16), dlhs = Tensor::empty({s.m, s.k}, DType::BF16),
           drhs = Tensor::empty({s.groups, s.k, s.n}, DType::BF16);
    Tensor dense = pass == "dense" ? tools::randomTensor({s.k, s.n}, 1 / std::sqrt(double(s.k)), stream, 4)
                                   : Tensor::empty({1}, DType::BF16);
    RaggedDotOptions options{impl, config};
    auto call = [&] {
      if (pass == "dense") {
        matmul(lhs, dense, out, stream);
        return;
      }
      ragged_dot(lhs, rhs, sizes, out, stream, options);
      if (pass != "fwd")
        ragged_dot_vjp(dout, lhs, rhs, sizes, dlhs, drhs, stream, options);
    };
    auto t0 = std::chrono::steady_clock::now();
    call();
    stream.synchronize();
    row.first_call_ms = tools::elapsedMs(t0);
    t0 = std::chrono::steady_clock::now();
    call();
    stream.synchronize();
    row.iterations = std::clamp(int(10000.0 / std::max(tools::elapsedMs(t0), 1e-3)), 3, iters);
    BenchmarkData t = benchmark(stream, call, TimingMethod::CudaEvents, row.iterations, /*warmup=*/1,
                                /*flush_l2=*/true);
    const double fwdFlops = 2.0 * double(s.m) * double(s.k) * double(s.n);
    row.ms = t.median;
    row.tflops = (pass == "fwd+bwd" ? 3 * fwdFlops : fwdFlops) / t.median / 1e9;
  } catch (const NotSupported &e) {
    row.status = fmt::format("not supported: {}", e.what());
  } catch (const Error &e) {
    row.status = fmt::format("failed: {}", e.what());
  }
  return row;
}

} // namespace

int main(int argc, char **argv) try {
  auto [impls, jsonPath, peersPath, config, iters, quick] = tools::parseOpBenchArgs("tokamax-ragged-dot-bench", argc, argv);
  std::vector<std::string> backends;
  tools::PeerTable peers = peersPath.empty() ? tools::PeerTable{} : tools::readPeers(peersPath, backends);
  const Shape s = quick ? kQuickShape : kShape;
  fmt::print("ragged_dot bf16, {} = {} groups, M {}, K {}, N {} on {}; group sizes [{}]\n", s.name, s.groups, s.m,
             s.k, s.n, Device::get().name(), fmt::join(groupSizes(s), ", "));
  fmt::print("{:<10} {:<8} {:>10} {:>9} {:>14}", "impl", "pass", "ms", "TFLOP/s", "first call ms");
  for (const std::string &b : backends)
    fmt::print(" {:>16}", "vs " + b);
  fmt::print("\n");
  json rows = json::array();
  auto report = [&](const Row &r) {
    if (r.status != "ok") {
      fmt::print("{:<10} {:<8} {}\n", r.impl, r.pass, r.status);
    } else {
      fmt::print("{:<10} {:<8} {:>10.3f} {:>9.1f} {:>14.0f}", r.impl, r.pass, r.ms, r.tflops, r.first_call_ms);
      for (const std::string &b : backends) {
        auto peer = peers.find({s.name, r.pass});
        const double theirs = peer == peers.end() || !peer->second.count(b) ? 0.0 : peer->second.at(b);
        fmt::print(" {:>16}", theirs > 0 ? fmt::format("{:.0f}% of {:.0f}", 100 * r.tflops / theirs, theirs) : "-");
      }
      fmt::print("\n");
    }
    rows.push_back({{"shape", r.shape}, {"pass", r.pass}, {"impl", r.impl}, {"status", r.status}, {"ms", r.ms},
                    {"tflops", r.tflops}, {"iterations", r.iterations}, {"first_call_ms", r.first_call_ms}});
  };
  for (const std::string &impl : impls)
    for (const char *pass : {"fwd", "fwd+bwd"})
      report(measureRow(s, pass, impl, iters, config));
  report(measureRow(s, "dense", "matmul", iters, std::nullopt));
  if (!jsonPath.empty()) {
    std::ofstream(jsonPath) << json{{"device", Device::get().name()}, {"rows", rows}}.dump(2) << "\n";
    fmt::print("wrote {}\n", jsonPath);
  }
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-ragged-dot-bench: {}\n", e.what());
  return 1;
}
