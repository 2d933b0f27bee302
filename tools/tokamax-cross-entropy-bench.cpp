// tokamax-cross-entropy-bench: linear_softmax_cross_entropy_loss time and peak extra
// device memory, forward and forward + backward, beside the peers' numbers
// (bench/peers/cross_entropy.py: torch's matmul + cross_entropy).
//
//   shape:  X1 = B 8192, D 4096, V 131072 (bf16, mean); --quick: Q = B 1024, D 1024, V 16384
//   rows:   each implementation (--impl, default tile), "fwd" and "fwd+bwd" (the
//           forward, then the VJP)
//   time:   median of tokamax::benchmark() with CUDA events, L2 flushed before each run
//   TFLOP/s: fwd = 2 B D V; fwd+bwd = 3x fwd (dx and dw; the VJP's recomputation of the
//           logits is not counted, as a peer that keeps them does not do it)
//   extra memory: device memory taken by the call beyond its inputs and the gradients
//           it returns (lse, loss and the calls' scratch), as the drop of free memory from
//           before the first call to after it (the scratch stays cached)
//   --config JSON: the forward's and the VJP's config (each call drops the other's own
//           keys: split_v is the forward's, block_d and chunk_v the VJP's); --json FILE: the rows;
//   --peers FILE: the JSON cross_entropy.py writes, printed per row as time and memory
//           ratios
//
// Usage: tokamax-cross-entropy-bench [--impl tile,reference] [--iters N] [--config JSON]
//                                    [--json FILE] [--peers FILE] [--quick]
#include "OpBenchUtil.h"

#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace tokamax;
using json = nlohmann::json;

namespace {

struct Shape {
  std::string name;
  int64_t b, d, v;
};
const Shape kShape{"X1", 8192, 4096, 131072}, kQuickShape{"Q", 1024, 1024, 16384};

struct Row : tools::OpRow {
  double extra_mib = 0;
};

Tensor labelTensor(int64_t b, int64_t v, Stream &stream) {
  std::vector<int32_t> host(static_cast<size_t>(b));
  uint64_t s = 12345;
  for (int32_t &l : host) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    l = int32_t((s >> 33) % uint64_t(v));
  }
  Tensor t = Tensor::empty({b}, DType::I32);
  t.copy_from_host(host.data(), host.size() * sizeof(int32_t));
  stream.synchronize();
  return t;
}

Row measureRow(const Shape &s, const std::string &pass, const std::string &impl, int iters,
               const std::optional<Config> &config) {
  Row row{{.shape = s.name, .pass = pass, .impl = impl}};
  tools::measureInto(row, [&] {
    Device &device = Device::get();
    Stream stream = Stream::create(device);
    Tensor x = tools::randomTensor({s.b, s.d}, 1.0, stream, 1);
    Tensor w = tools::randomTensor({s.d, s.v}, 1 / std::sqrt(double(s.d)), stream, 2);
    Tensor labels = labelTensor(s.b, s.v, stream);
    const bool backward = pass != "fwd";
    // The gradients exist before the memory is measured: they are the call's results.
    std::optional<Tensor> dx, dw;
    if (backward) {
      dx = Tensor::empty({s.b, s.d}, DType::BF16);
      dw = Tensor::empty({s.d, s.v}, DType::BF16);
    }
    stream.synchronize();
    const size_t freeBefore = device.free_memory();
    Tensor loss = Tensor::empty({1}, DType::F32), lse = Tensor::empty({s.b}, DType::F32);
    Tensor dloss = Tensor::empty({1}, DType::F32);
    dloss.copy_from_host(std::vector<float>{1.0f}.data(), sizeof(float));
    auto without = [&](std::initializer_list<const char *> keys) {
      std::optional<Config> c = config;
      if (c)
        for (const char *key : keys)
          c->values.erase(key);
      return c;
    };
    const CrossEntropyOptions options{LossReduction::Mean, -100, impl, without({"block_d", "chunk_v"})};
    const CrossEntropyOptions vjpOptions{LossReduction::Mean, -100, impl, without({"split_v"})};
    auto call = [&] {
      linear_softmax_cross_entropy_loss(x, w, labels, loss, lse, stream, options);
      if (backward)
        linear_softmax_cross_entropy_loss_vjp(dloss, x, w, labels, lse, *dx, *dw, stream, vjpOptions);
    };
    row.first_call_ms = tools::syncedMs(stream, call);
    row.extra_mib = double(freeBefore - std::min(freeBefore, device.free_memory())) / (1 << 20);
    const double fwdFlops = 2.0 * double(s.b) * double(s.d) * double(s.v);
    tools::timeCalls(row, stream, call, iters, backward ? 3 * fwdFlops : fwdFlops);
  });
  return row;
}

/// A peer's figures for a row.
struct PeerRow {
  double ms = 0, extra_mib = 0;
};

/// The rows that ran, of cross_entropy.py's JSON.
std::optional<PeerRow> peerRow(const json &r) {
  if (r.value("status", "ok") != "ok")
    return std::nullopt;
  return PeerRow{r.at("ms").get<double>(), r.at("extra_mib").get<double>()};
}

} // namespace

int main(int argc, char **argv) try {
  auto [impls, jsonPath, peersPath, config, iters, quick] = tools::parseOpBenchArgs("tokamax-cross-entropy-bench", argc, argv);
  const auto peers = tools::readShapePassPeers(peersPath, peerRow);
  const Shape s = quick ? kQuickShape : kShape;
  fmt::print("linear_softmax_cross_entropy_loss bf16 mean, {} = B {}, D {}, V {} on {}\n", s.name, s.b, s.d, s.v,
             Device::get().name());
  fmt::print("{:<10} {:<8} {:>10} {:>9} {:>10} {:>14}", "impl", "pass", "ms", "TFLOP/s", "extra MiB",
             "first call ms");
  for (const std::string &b : peers.backends)
    fmt::print(" {:>26}", "speed / memory vs " + b);
  fmt::print("\n");
  json rows = json::array();
  for (const std::string &impl : impls)
    for (const char *pass : {"fwd", "fwd+bwd"}) {
      Row r = measureRow(s, pass, impl, iters, config);
      if (r.status != "ok") {
        fmt::print("{:<10} {:<8} {}\n", impl, pass, r.status);
      } else {
        fmt::print("{:<10} {:<8} {:>10.3f} {:>9.1f} {:>10.1f} {:>14.0f}", impl, pass, r.ms, r.tflops, r.extra_mib,
                   r.first_call_ms);
        for (const std::string &b : peers.backends) {
          const PeerRow *theirs = peers.find({s.name, pass}, b);
          fmt::print(" {:>26}", theirs ? fmt::format("{:.2f}x / {:.1f}% of {:.0f} MiB", theirs->ms / r.ms,
                                                     100 * r.extra_mib / std::max(theirs->extra_mib, 1e-9),
                                                     theirs->extra_mib)
                                       : "-");
        }
        fmt::print("\n");
      }
      json row = tools::rowJson(r);
      row["extra_mib"] = r.extra_mib;
      rows.push_back(row);
    }
  tools::writeRows(jsonPath, rows);
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-cross-entropy-bench: {}\n", e.what());
  return 1;
}
