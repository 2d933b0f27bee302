// GPU numerics of gated_linear_unit (forward and VJP) through the device path (op ->
// implementation choice -> JIT -> launch) against the float64 reference of
// unit/GluReference.h: every dtype and activation at a small odd shape, odd and large
// shapes on both tile main loops, a slice of the benchmark shape; outputs start as NaN
// (unwritten elements show) and a second run must reproduce them bit for bit.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/gated_linear_unit/GluTestCase.h"

#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <string>
#include <vector>

using namespace tokamax;
using namespace glu_test;

namespace {

/// Runs the call on the device twice into NaN-filled outputs (gpu_test::run_twice).
Runner onDevice(bool vjp) {
  return [vjp](const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
    gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs,
                                     const std::vector<Tensor> &outputs) {
      if (vjp)
        gated_linear_unit_vjp(inputs[0], inputs[1], inputs[2], outputs[0], outputs[1], stream, c.options());
      else
        gated_linear_unit(inputs[0], inputs[1], outputs[0], stream, c.options());
    });
  };
}

/// The VJP on the device from the forward's pre-activations (the forward run first with
/// them, as the peers' autograd keeps their two GEMMs' outputs).
Runner vjpFromPreactivations() {
  return [](const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
    gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs,
                                     const std::vector<Tensor> &outputs) {
      std::vector<int64_t> hShape = c.lead;
      hShape.push_back(2);
      hShape.push_back(c.n);
      Tensor h = Tensor::empty(hShape, c.dtype), y = Tensor::empty(c.outShape(), c.dtype);
      gated_linear_unit(inputs[1], inputs[2], y, h, stream, c.options());
      gated_linear_unit_vjp(inputs[0], inputs[1], inputs[2], h, outputs[0], outputs[1], stream, c.options());
      stream.synchronize();  // h and y live until the VJP has read h
    });
  };
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

/// x's leading dims, K and N of a case.
struct Shape {
  std::vector<int64_t> lead;
  int64_t k, n;
};

} // namespace

TEST_CASE("gated_linear_unit on the device: every dtype and activation match float64", "[gpu][glu]") {
  uint64_t seed = 500;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (const char *activation : {"swish", "gelu_tanh", "gelu", "sigmoid", "relu", "none"}) {
      Case c{{17}, 40, 24, dtype, activation, std::nullopt, std::nullopt};  // auto: tile for bf16 / f16
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
      if (dtype == DType::BF16 || dtype == DType::F16) {
        c.implementation = "reference";
        check(checkForward(c, seed++, onDevice(false)));
        check(checkVjp(c, seed++, onDevice(true)));
      }
    }
}

TEST_CASE("gated_linear_unit on the device: odd and large shapes, both tile main loops", "[gpu][glu]") {
  uint64_t seed = 700;
  for (const Shape &s : {Shape{{1}, 37, 23}, Shape{{17}, 4096, 136}, Shape{{4, 250}, 520, 1000},
                         Shape{{1000}, 1001, 999}, Shape{{2, 777}, 1024, 2048}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c{s.lead, s.k, s.n, dtype, "swish", "tile", std::nullopt};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
  // Each config of the search space at one ring shape and one odd shape.
  for (auto [k, n] : {std::pair<int64_t, int64_t>{256, 264}, {259, 131}}) {
    BoundArgs b = bind_gated_linear_unit({{300, k}, DType::BF16}, {{k, 2, n}, DType::BF16}, {{300, n}, DType::BF16},
                                         GluActivation::GeluTanh);
    for (const Config &config : gated_linear_unit_op().implementation("tile").search_space(b)) {
      Case c{{300}, k, n, DType::BF16, "gelu_tanh", "tile", config};
      check(checkForward(c, seed++, onDevice(false)));
    }
  }
}

TEST_CASE("gated_linear_unit on the device: TMA rings and a producer warpgroup (tma)", "[gpu][glu][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the tma config"))
    return;
  uint64_t seed = 900;
  // Ragged K and N (a W0 block reaching into W1's columns, K past the last slice), 1-4
  // warpgroups' worth of rows, 32- to 128-byte K slices, 2-4 stages, forward and VJP.
  int index = 0;
  for (const Shape &s : {Shape{{1}, 72, 40}, Shape{{17}, 4096, 136}, Shape{{4, 250}, 520, 1000}, Shape{{1000}, 1000, 1000}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      const int warps = index % 2 ? 8 : 4;
      Config config{{"block_m", 16 * warps}, {"block_n", index % 3 ? 128 : 64}, {"block_k", 64 >> (index % 3)},
                    {"num_warps", warps}, {"async_copy", 1}, {"stages", 2 + index % 3}, {"tma", 1}};
      ++index;
      Case c{s.lead, s.k, s.n, dtype, index % 2 ? "swish" : "gelu", "tile", config};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
}

TEST_CASE("gated_linear_unit on the device: rows of the benchmark shape (K 4096, N 14336)", "[gpu][glu]") {
  // M 64 keeps the float64 reference to ~1e10 multiply-adds; the kernels are the
  // benchmark's, with fewer row blocks.
  Case c{{64}, 4096, 14336, DType::BF16, "swish", std::nullopt, std::nullopt};
  check(checkForward(c, 900, onDevice(false)));
  check(checkVjp(c, 901, onDevice(true)));
}

TEST_CASE("gated_linear_unit on the device: hopper (TMA rings, dx and dweights on the hopper matmul)",
          "[gpu][glu][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  uint64_t seed = 950;
  int index = 0;
  for (const Shape &s : {Shape{{1}, 72, 40}, Shape{{17}, 4096, 136}, Shape{{4, 250}, 520, 1000}, Shape{{1000}, 1000, 1000}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c{s.lead, s.k, s.n, dtype, index++ % 2 ? "swish" : "gelu", "hopper", std::nullopt};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
}

TEST_CASE("gated_linear_unit on the device: both products on the matmul, then the gate (unfused)",
          "[gpu][glu][unfused]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  // hopper's and tile's matmul kernels; odd shapes, then rows of the bench shape.
  uint64_t seed = 1000;
  int index = 0;
  for (const Shape &s : {Shape{{1}, 72, 40}, Shape{{4, 250}, 520, 1000}, Shape{{64}, 4096, 14336}})
    for (const char *impl : {"hopper", "tile"}) {
      Config config{{"block_m", 128}, {"block_n", 128}, {"block_k", 32}, {"num_warps", 8}, {"stages", 3},
                    {"unfused", 1}};
      if (std::string(impl) == "tile")
        config.set("async_copy", 1);
      const DType dtype = index % 2 ? DType::F16 : DType::BF16;
      Case c{s.lead, s.k, s.n, dtype, index++ % 3 ? "swish" : "gelu_tanh", impl, config};
      check(checkForward(c, seed++, onDevice(false)));
      check(checkVjp(c, seed++, onDevice(true)));
    }
}

TEST_CASE("gated_linear_unit on the device: the VJP from the forward's pre-activations", "[gpu][glu][preactivations]") {
  // auto (hopper on sm_90a), tile's gate kernel config, and reference (f32).
  uint64_t seed = 1100;
  int index = 0;
  for (const Shape &s : {Shape{{1}, 72, 40}, Shape{{4, 250}, 520, 1000}, Shape{{64}, 4096, 14336}})
    for (const char *impl : {"auto", "tile", "reference"}) {
      const bool reference = std::string(impl) == "reference";
      if (reference && s.n > 1000)
        continue;  // the float64 host reference of the exact kernels at the bench shape is slow
      const DType dtype = reference ? DType::F32 : index % 2 ? DType::F16 : DType::BF16;
      std::optional<std::string> implementation;
      if (std::string(impl) != "auto")
        implementation = impl;
      Case c{s.lead, s.k, s.n, dtype, index++ % 2 ? "swish" : "gelu", implementation, std::nullopt};
      check(checkVjp(c, seed++, vjpFromPreactivations()));
    }
}

TEST_CASE("gated_linear_unit on the device: hopper on persistent grids", "[gpu][glu][tma_ring][persistent]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  // Programs that walk several tiles each (one per SM, and 5 for many tiles a program):
  // the producer loads a tile's blocks while the consumers gate the last one. These grids
  // once did not finish on an H200 (before the producer's copies ran on one thread).
  uint64_t seed = 980;
  for (int64_t programs : {-1, 5})
    for (int64_t bk : {32, 64}) {
      // The forward's [128, 128] tiles; the VJP's gate kernel also holds dout, da and db,
      // so its tiles are [128, 64] (the hopper heuristics' shapes).
      Config forward{{"block_m", 128}, {"block_n", 128}, {"block_k", bk}, {"group_m", 8},
                     {"num_warps", 8},   {"stages", bk == 64 ? 4 : 3}, {"programs", programs}};
      Config vjp = Config(forward).set("block_n", 64).set("stages", 2);
      INFO(forward.to_json() << " " << vjp.to_json());
      check(checkForward(Case{{1000}, 1000, 1000, DType::BF16, "swish", "hopper", forward}, seed++, onDevice(false)));
      check(checkVjp(Case{{1000}, 1000, 1000, DType::BF16, "swish", "hopper", vjp}, seed++, onDevice(true)));
      // The forward's gated tiles stored by TMA (the edges' partial tiles clipped by the
      // tensor map: M and N 1000, then N 136 and one row).
      Config stored = Config(forward).set("tma_store", 1);
      INFO(stored.to_json());
      check(checkForward(Case{{1000}, 1000, 1000, DType::BF16, "swish", "hopper", stored}, seed++, onDevice(false)));
      check(checkForward(Case{{3, 77}, 520, 136, DType::F16, "gelu", "hopper", stored}, seed++, onDevice(false)));
      check(checkForward(Case{{1}, 64, 1000, DType::BF16, "relu", "hopper", stored}, seed++, onDevice(false)));
    }
}
