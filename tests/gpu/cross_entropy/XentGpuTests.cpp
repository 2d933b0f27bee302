// GPU numerics of linear_softmax_cross_entropy_loss (forward and VJP) through the device
// path (op -> implementation choice -> JIT -> launch) against the float64 reference of
// unit/XentReference.h: every dtype and reduction, ignore_index and labels out of range,
// odd shapes over many V tiles, the search space, rows of the benchmark shape; outputs
// start as NaN (unwritten elements show) and a second run must reproduce them bit for
// bit (no float atomics).
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/cross_entropy/XentTestCase.h"

#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <string>
#include <vector>

using namespace tokamax;
using namespace xent_test;

namespace {

/// Runs the call on the device twice into NaN-filled outputs (gpu_test::run_twice).
Runner onDevice(bool vjp) {
  return [vjp](const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
    gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs,
                                     const std::vector<Tensor> &outputs) {
      if (vjp)
        linear_softmax_cross_entropy_loss_vjp(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], outputs[0],
                                              outputs[1], stream, c.options());
      else
        linear_softmax_cross_entropy_loss(inputs[0], inputs[1], inputs[2], outputs[0], outputs[1], stream,
                                          c.options());
    });
  };
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

} // namespace

TEST_CASE("cross_entropy on the device: every dtype and reduction match float64", "[gpu][cross_entropy]") {
  uint64_t seed = 500;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (LossReduction reduction : {LossReduction::None, LossReduction::Sum, LossReduction::Mean})
      for (Labels labels : {Labels::SomeIgnored, Labels::AllIgnored, Labels::OutOfRange}) {
        Case c{17, 40, 300, dtype, reduction, labels, std::nullopt, std::nullopt};  // auto: tile for bf16 / f16
        check(checkForward(c, seed++, onDevice(false)));
        check(checkVjp(c, seed++, onDevice(true)));
        if (dtype == DType::BF16 || dtype == DType::F16) {
          c.implementation = "reference";
          check(checkForward(c, seed++, onDevice(false)));
          check(checkVjp(c, seed++, onDevice(true)));
        }
      }
}

TEST_CASE("cross_entropy on the device: odd and large shapes, the search space", "[gpu][cross_entropy]") {
  uint64_t seed = 700;
  struct Shape {
    int64_t b, d, v;
  };
  for (Shape s : {Shape{1, 37, 23}, Shape{17, 4096, 1000}, Shape{1000, 520, 5001}, Shape{1000, 1001, 999}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c{s.b, s.d, s.v, dtype, LossReduction::Mean, Labels::SomeIgnored, "tile", std::nullopt};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
  for (bool vjp : {false, true}) {
    ArgSpec x{{300, 259}, DType::BF16}, w{{259, 1031}, DType::BF16}, labels{{300}, DType::I32};
    ArgSpec loss = cross_entropy_loss_spec(x, w, LossReduction::Sum), lse = cross_entropy_lse_spec(x, w);
    BoundArgs b = bind_linear_softmax_cross_entropy_loss(x, w, labels, loss, lse, LossReduction::Sum, -100);
    if (vjp)
      b = bind_linear_softmax_cross_entropy_loss_vjp(loss, x, w, labels, lse, x, w, LossReduction::Sum, -100);
    for (const Config &config : find_op(b.op)->implementation("tile").search_space(b)) {
      Case c{300, 259, 1031, DType::BF16, LossReduction::Sum, Labels::SomeIgnored, "tile", config};
      check(vjp ? checkVjp(c, seed++, onDevice(true)) : checkForward(c, seed++, onDevice(false)));
    }
  }
}

TEST_CASE("cross_entropy on the device: rows of the benchmark shape (D 4096, V 131072)", "[gpu][cross_entropy]") {
  // B 16 keeps the float64 reference to ~1e10 multiply-adds; the kernels are the
  // benchmark's, with fewer row blocks.
  Case c{16, 4096, 131072, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, std::nullopt, std::nullopt};
  check(checkForward(c, 900, onDevice(false)));
  check(checkVjp(c, 901, onDevice(true)));
}

TEST_CASE("cross_entropy on the device: the tma config (TMA rings, wgmma) matches float64",
          "[gpu][cross_entropy][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the tma config"))
    return;
  // D and V multiples of 8 (TMA rows), neither a multiple of the blocks; B past the last
  // row block; 4 and 8 warps, V in splits (forward) and chunks (VJP).
  uint64_t seed = 1100;
  struct Shape {
    int64_t b, d, v;
  };
  for (Shape s : {Shape{300, 264, 1032}, Shape{17, 4096, 5000}})
    for (int64_t warps : {4, 8}) {
      Config c{{"block_b", 16 * warps}, {"block_v", 128}, {"block_k", 64}, {"num_warps", warps}, {"tma", 1},
               {"stages", warps == 8 ? 3 : 4}};
      Config vjp = c;
      vjp.set("block_d", 64).set("chunk_v", 512);
      c.set("split_v", 3);
      INFO(s.b << "x" << s.d << "x" << s.v << " " << c.to_json());
      check(checkForward(Case{s.b, s.d, s.v, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "tile", c},
                         seed++, onDevice(false)));
      check(checkVjp(Case{s.b, s.d, s.v, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "tile", vjp}, seed++,
                     onDevice(true)));
    }
}

TEST_CASE("cross_entropy on the device: hopper (TMA rings, dx and dw on the hopper matmul) matches float64",
          "[gpu][cross_entropy][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  // Its heuristic: V in splits (forward) and one chunk or several (VJP: dx accumulated
  // over the chunks on the matmul, dw through the panel); then a config of 64-row tiles
  // and 256-column chunks, so the last chunk is partial.
  uint64_t seed = 1200;
  struct Shape {
    int64_t b, d, v;
  };
  for (Shape s : {Shape{300, 264, 1032}, Shape{17, 4096, 5000}, Shape{16, 4096, 131072}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      INFO(s.b << "x" << s.d << "x" << s.v << " " << dtype_name(dtype));
      Case c{s.b, s.d, s.v, dtype, LossReduction::Mean, Labels::SomeIgnored, "hopper", std::nullopt};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
  Config small{{"block_b", 64}, {"block_v", 128}, {"block_k", 64}, {"num_warps", 4}, {"stages", 4}, {"chunk_v", 256}};
  check(checkVjp(Case{300, 264, 1032, DType::BF16, LossReduction::Sum, Labels::SomeIgnored, "hopper", small}, seed++,
                 onDevice(true)));
  // The search space's 256-column logit tiles (3 and 4 slots), V's last tile partial.
  for (int64_t stages : {3, 4}) {
    Config wide{{"block_b", 128}, {"block_v", 256}, {"block_k", 64}, {"num_warps", 8}, {"stages", stages}};
    INFO("wide " << wide.to_json());
    check(checkForward(Case{300, 264, 1032, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "hopper",
                            Config(wide).set("split_v", 2)},
                       seed++, onDevice(false)));
    check(checkVjp(Case{300, 264, 1032, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "hopper", wide},
                   seed++, onDevice(true)));
  }
}
