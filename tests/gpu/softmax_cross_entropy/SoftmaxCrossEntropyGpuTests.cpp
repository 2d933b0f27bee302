// GPU numerics of softmax_cross_entropy (forward and VJP) through the device path (op ->
// implementation choice -> JIT -> launch) against the float64 reference of
// unit/SoftmaxCrossEntropyTestCase.h: every dtype, labels out of range, odd shapes, every
// search-space config, rows of the cross-entropy benchmark's vocabulary; outputs start as
// NaN (unwritten elements show) and a second run must reproduce them bit for bit.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/softmax_cross_entropy/SoftmaxCrossEntropyTestCase.h"

#include <tokamax/ops/SoftmaxCrossEntropy.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <vector>

using namespace tokamax;
using namespace sce_test;

namespace {

/// Runs the call on the device twice into NaN-filled outputs (gpu_test::run_twice).
Runner onDevice(bool vjp) {
  return [vjp](const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
    gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs,
                                     const std::vector<Tensor> &outputs) {
      if (vjp)
        softmax_cross_entropy_vjp(inputs[0], inputs[1], inputs[2], inputs[3], outputs[0], stream, c.options());
      else
        softmax_cross_entropy(inputs[0], inputs[1], outputs[0], outputs[1], stream, c.options());
    });
  };
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

} // namespace

TEST_CASE("softmax_cross_entropy on the device: every dtype, odd shapes, match float64",
          "[gpu][softmax_cross_entropy]") {
  uint64_t seed = 100;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (auto [b, v] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {77, 1000}, {77, 4099}, {1000, 32000}})
      for (const char *impl : {"tile", "reference"}) {
        if (dtype == DType::F64 && std::string(impl) == "tile")
          continue;
        Case c{b, v, dtype, true, impl, std::nullopt};
        check(checkForward(c, seed++, onDevice(false)));
        check(checkVjp(c, seed++, onDevice(true)));
      }
}

TEST_CASE("softmax_cross_entropy on the device: every search-space config, the benchmark's vocabulary",
          "[gpu][softmax_cross_entropy]") {
  uint64_t seed = 500;
  for (bool vjp : {false, true}) {
    ArgSpec logits{{300, 5001}, DType::BF16}, rows = softmax_cross_entropy_row_spec(logits);
    ArgSpec labels{{300}, DType::I32};
    const BoundArgs b = vjp ? bind_softmax_cross_entropy_vjp(rows, logits, labels, rows, logits)
                            : bind_softmax_cross_entropy(logits, labels, rows, rows);
    for (const auto &impl : find_op(b.op)->implementations())
      for (const Config &config : impl->search_space(b)) {
        Case c{300, 5001, DType::BF16, true, impl->name(), config};
        check(vjp ? checkVjp(c, seed++, onDevice(true)) : checkForward(c, seed++, onDevice(false)));
      }
  }
  // B 64 rows of V 131072 (the cross-entropy benchmark's vocabulary), auto.
  Case big{64, 131072, DType::BF16, true, std::nullopt, std::nullopt};
  check(checkForward(big, seed++, onDevice(false)));
  check(checkVjp(big, seed++, onDevice(true)));
}
