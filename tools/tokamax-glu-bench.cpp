// tokamax-glu-bench: gated_linear_unit TFLOP/s, forward and forward + backward, beside
// the peers' numbers (bench/peers/glu.py: cuBLAS's two GEMMs plus an elementwise kernel).
//
//   shape:  G1 = M 8192, K 4096, N 14336 (bf16, swish); --quick: Q = M 1024, K 1024, N 2048
//   rows:   each implementation (--impl, default tile), "fwd" and "fwd+bwd" (the
//           forward, then the VJP)
//   time:   median of tokamax::benchmark() with CUDA events, L2 flushed before each run
//   TFLOP/s: fwd = 4 M K N (two products); fwd+bwd = 3x fwd (the VJP's dx and dweights;
//           its recomputation of the pre-activations is not counted, as a peer that
//           saves them does not do it)
//   --config JSON: the forward's and the VJP's config; --json FILE: the rows;
//   --peers FILE: the JSON glu.py writes, printed per row as ours / peer in %
//
// Usage: tokamax-glu-bench [--impl tile,reference] [--iters N] [--config JSON] [--json FILE]
//                          [--peers FILE] [--quick]
#include "OpBenchUtil.h"

#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace tokamax;
using json = nlohmann::json;
using tools::elapsedMs;
using tools::PeerTable;
using tools::randomTensor;
using tools::readPeers;

namespace {

struct Shape {
  std::string name;
  int64_t m, k, n;
};
const Shape kShape{"G1", 8192, 4096, 14336}, kQuickShape{"Q", 1024, 1024, 2048};

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
    Tensor x = randomTensor({s.m, s.k}, 1.0, stream, 1);
    Tensor w = randomTensor({s.k, 2, s.n}, 1 / std::sqrt(double(s.k)), stream, 2);
    Tensor dout = randomTensor({s.m, s.n}, 1.0, stream, 3);
    Tensor out = Tensor::empty({s.m, s.n}, DType::BF16), dx = Tensor::empty({s.m, s.k}, DType::BF16),
           dw = Tensor::empty({s.k, 2, s.n}, DType::BF16);
    GluOptions options{"swish", impl, config};
    auto call = [&] {
      gated_linear_unit(x, w, out, stream, options);
      if (pass != "fwd")
        gated_linear_unit_vjp(dout, x, w, dx, dw, stream, options);
    };
    auto t0 = std::chrono::steady_clock::now();
    call();
    stream.synchronize();
    row.first_call_ms = elapsedMs(t0);
    t0 = std::chrono::steady_clock::now();
    call();
    stream.synchronize();
    row.iterations = std::clamp(int(10000.0 / std::max(elapsedMs(t0), 1e-3)), 3, iters);
    BenchmarkData t = benchmark(stream, call, TimingMethod::CudaEvents, row.iterations, /*warmup=*/1,
                                /*flush_l2=*/true);
    const double fwdFlops = 4.0 * double(s.m) * double(s.k) * double(s.n);
    row.ms = t.median;
    row.tflops = (pass == "fwd" ? fwdFlops : 3 * fwdFlops) / t.median / 1e9;
  } catch (const NotSupported &e) {
    row.status = fmt::format("not supported: {}", e.what());
  } catch (const Error &e) {
    row.status = fmt::format("failed: {}", e.what());
  }
  return row;
}

} // namespace

int main(int argc, char **argv) try {
  auto [impls, jsonPath, peersPath, config, iters, quick] = tools::parseOpBenchArgs("tokamax-glu-bench", argc, argv);
  std::vector<std::string> backends;
  PeerTable peers = peersPath.empty() ? PeerTable{} : readPeers(peersPath, backends);
  const Shape s = quick ? kQuickShape : kShape;
  fmt::print("gated_linear_unit bf16 swish, {} = M {}, K {}, N {} on {}\n", s.name, s.m, s.k, s.n,
             Device::get().name());
  fmt::print("{:<10} {:<8} {:>10} {:>9} {:>14}", "impl", "pass", "ms", "TFLOP/s", "first call ms");
  for (const std::string &b : backends)
    fmt::print(" {:>16}", "vs " + b);
  fmt::print("\n");
  json rows = json::array();
  for (const std::string &impl : impls)
    for (const char *pass : {"fwd", "fwd+bwd"}) {
      Row r = measureRow(s, pass, impl, iters, config);
      if (r.status != "ok") {
        fmt::print("{:<10} {:<8} {}\n", impl, pass, r.status);
      } else {
        fmt::print("{:<10} {:<8} {:>10.3f} {:>9.1f} {:>14.0f}", impl, pass, r.ms, r.tflops, r.first_call_ms);
        for (const std::string &b : backends) {
          auto peer = peers.find({s.name, pass});
          const double theirs = peer == peers.end() || !peer->second.count(b) ? 0.0 : peer->second.at(b);
          fmt::print(" {:>16}", theirs > 0 ? fmt::format("{:.0f}% of {:.0f}", 100 * r.tflops / theirs, theirs) : "-");
        }
        fmt::print("\n");
      }
      rows.push_back({{"shape", r.shape}, {"pass", r.pass}, {"impl", r.impl}, {"status", r.status}, {"ms", r.ms},
                      {"tflops", r.tflops}, {"iterations", r.iterations}, {"first_call_ms", r.first_call_ms}});
    }
  if (!jsonPath.empty()) {
    std::ofstream(jsonPath) << json{{"device", Device::get().name()}, {"rows", rows}}.dump(2) << "\n";
    fmt::print("wrote {}\n", jsonPath);
  }
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-glu-bench: {}\n", e.what());
  return 1;
}
