// tokamax-ragged-dot-bench: ragged_dot (grouped matmul) TFLOP/s, forward and forward +
// backward, beside our dense matmul at the same FLOPs and the peers' numbers
// (bench/peers/ragged_dot.py: torch's grouped mm).
//
//   shape:  R1 = 8 groups, M 32768, K 4096, N 4096 (bf16), random group sizes summing
//           to M (fixed seed, the same as the peers script's); --quick: Q = 8 groups,
//           M 4096, K 1024, N 1024
//   rows:   each implementation (--impl; default the one auto picks on this device, hopper
//           on sm_90a), "fwd" and "fwd+bwd" (the
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
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace tokamax;
using tools::randomTensor;

namespace {

struct Shape {
  std::string name;
  int64_t groups, m, k, n;
};
const Shape kShape{"R1", 8, 32768, 4096, 4096}, kQuickShape{"Q", 8, 4096, 1024, 1024};

/// The implementation auto picks for the forward at `s` on this device (without --impl).
std::string autoImplementation(const Shape &s) {
  const ArgSpec lhs{{s.m, s.k}, DType::BF16}, rhs{{s.groups, s.k, s.n}, DType::BF16},
      sizes{{s.groups}, DType::I32}, out{{s.m, s.n}, DType::BF16};
  return ragged_dot_op().select(bind_ragged_dot(lhs, rhs, sizes, out), std::nullopt, Device::get().arch()).name();
}

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

std::string title(const Shape &s) {
  return fmt::format("ragged_dot bf16, {} = {} groups, M {}, K {}, N {} on {}; group sizes [{}]", s.name, s.groups,
                     s.m, s.k, s.n, Device::get().name(), fmt::join(groupSizes(s), ", "));
}

/// Measures `row` at `s` on `stream`: its impl (pass fwd or fwd+bwd), or our dense
/// matmul (pass "dense").
void measureRow(const Shape &s, const tools::OpBenchArgs &args, Stream &stream, tools::OpRow &row) {
  Tensor lhs = randomTensor({s.m, s.k}, 1.0, stream, 1);
  Tensor rhs = randomTensor({s.groups, s.k, s.n}, 1 / std::sqrt(double(s.k)), stream, 2);
  Tensor dout = randomTensor({s.m, s.n}, 1.0, stream, 3);
  std::vector<int32_t> hostSizes = groupSizes(s);
  Tensor sizes = Tensor::empty({s.groups}, DType::I32);
  sizes.copy_from_host(hostSizes.data(), hostSizes.size() * sizeof(int32_t));
  Tensor out = Tensor::empty({s.m, s.n}, DType::BF16), dlhs = Tensor::empty({s.m, s.k}, DType::BF16),
         drhs = Tensor::empty({s.groups, s.k, s.n}, DType::BF16);
  Tensor dense = row.pass == "dense" ? randomTensor({s.k, s.n}, 1 / std::sqrt(double(s.k)), stream, 4)
                                     : Tensor::empty({1}, DType::BF16);
  RaggedDotOptions options{row.impl, args.config};
  auto call = [&] {
    if (row.pass == "dense") {
      matmul(lhs, dense, out, stream);
      return;
    }
    ragged_dot(lhs, rhs, sizes, out, stream, options);
    if (row.pass != "fwd")
      ragged_dot_vjp(dout, lhs, rhs, sizes, dlhs, drhs, stream, options);
  };
  row.first_call_ms = tools::syncedMs(stream, call);
  const double fwdFlops = 2.0 * double(s.m) * double(s.k) * double(s.n);
  tools::timeCalls(row, stream, call, args.iters, row.pass == "fwd+bwd" ? 3 * fwdFlops : fwdFlops);
}

} // namespace

int main(int argc, char **argv) {
  return tools::runTflopsBench("tokamax-ragged-dot-bench", argc, argv, kShape, kQuickShape, title, measureRow,
                               /*moreRows=*/{{"matmul", "dense"}}, autoImplementation);
}
