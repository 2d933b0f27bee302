// tokamax-glu-bench: gated_linear_unit TFLOP/s, forward and forward + backward, beside
// the peers' numbers (bench/peers/glu.py: cuBLAS's two GEMMs plus an elementwise kernel).
//
//   shape:  G1 = M 8192, K 4096, N 14336 (bf16, swish); --quick: Q = M 1024, K 1024, N 2048
//   rows:   each implementation (--impl; default the one auto picks on this device, hopper
//           on sm_90a), "fwd" and "fwd+bwd" (the
//           forward, then the VJP)
//   time:   median of tokamax::benchmark() with CUDA events, L2 flushed before each run
//   TFLOP/s: fwd = 4 M K N (two products); fwd+bwd = 3x fwd (the VJP's dx and dweights);
//           fwd+bwd keeps the forward's pre-activations for the VJP, as the peer's
//           autograd keeps its two GEMMs' outputs
//   --config JSON: the forward's and the VJP's config; --json FILE: the rows;
//   --peers FILE: the JSON glu.py writes, printed per row as ours / peer in %
//
// Usage: tokamax-glu-bench [--impl tile,reference] [--iters N] [--config JSON] [--json FILE]
//                          [--peers FILE] [--quick]
#include "OpBenchUtil.h"

#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

using namespace tokamax;
using tools::randomTensor;

namespace {

struct Shape {
  std::string name;
  int64_t m, k, n;
};
const Shape kShape{"G1", 8192, 4096, 14336}, kQuickShape{"Q", 1024, 1024, 2048};

std::string title(const Shape &s) {
  return fmt::format("gated_linear_unit bf16 swish, {} = M {}, K {}, N {} on {}", s.name, s.m, s.k, s.n,
                     Device::get().name());
}

/// The implementation auto picks for the forward at `s` on this device (without --impl).
std::string autoImplementation(const Shape &s) {
  const ArgSpec x{{s.m, s.k}, DType::BF16}, w{{s.k, 2, s.n}, DType::BF16}, out{{s.m, s.n}, DType::BF16};
  return gated_linear_unit_op()
      .select(bind_gated_linear_unit(x, w, out, GluActivation::Swish), std::nullopt, Device::get().arch())
      .name();
}

/// Measures `row` (its impl and pass) at `s` on `stream`.
void measureRow(const Shape &s, const tools::OpBenchArgs &args, Stream &stream, tools::OpRow &row) {
  Tensor x = randomTensor({s.m, s.k}, 1.0, stream, 1);
  Tensor w = randomTensor({s.k, 2, s.n}, 1 / std::sqrt(double(s.k)), stream, 2);
  Tensor dout = randomTensor({s.m, s.n}, 1.0, stream, 3);
  Tensor out = Tensor::empty({s.m, s.n}, DType::BF16), dx = Tensor::empty({s.m, s.k}, DType::BF16),
         dw = Tensor::empty({s.k, 2, s.n}, DType::BF16);
  const bool backward = row.pass != "fwd";
  std::optional<Tensor> h;
  if (backward)
    h = Tensor::empty({s.m, 2, s.n}, DType::BF16);
  GluOptions options{"swish", row.impl, args.config};
  auto call = [&] {
    if (!backward) {
      gated_linear_unit(x, w, out, stream, options);
      return;
    }
    gated_linear_unit(x, w, out, *h, stream, options);
    gated_linear_unit_vjp(dout, x, w, *h, dx, dw, stream, options);
  };
  row.first_call_ms = tools::syncedMs(stream, call);
  const double fwdFlops = 4.0 * double(s.m) * double(s.k) * double(s.n);
  tools::timeCalls(row, stream, call, args.iters, row.pass == "fwd" ? fwdFlops : 3 * fwdFlops);
}

} // namespace

int main(int argc, char **argv) {
  return tools::runTflopsBench("tokamax-glu-bench", argc, argv, kShape, kQuickShape, title, measureRow,
                               /*moreRows=*/{}, autoImplementation);
}
