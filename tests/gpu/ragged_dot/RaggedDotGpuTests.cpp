// GPU numerics of ragged_dot (forward and VJP) through the device path (op ->
// implementation choice -> JIT -> launch) against the float64 reference of
// unit/RaggedDotTestCase.h: every dtype, odd shapes with random group sizes (empty
// groups, one group holding every row, sizes short of M and past it), the search space,
// rows of the benchmark shape; outputs start as NaN (unwritten elements show) and a
// second run must reproduce them bit for bit.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/ragged_dot/RaggedDotTestCase.h"
#include "common/ScopedState.h"

#include <tokamax/ops/RaggedDot.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <string>
#include <vector>

using namespace tokamax;
using namespace ragged_test;

namespace {

/// Runs the call on the device twice into NaN-filled outputs (gpu_test::run_twice).
Runner onDevice(bool vjp) {
  return [vjp](const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
    gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs,
                                     const std::vector<Tensor> &outputs) {
      if (vjp)
        ragged_dot_vjp(inputs[0], inputs[1], inputs[2], inputs[3], outputs[0], outputs[1], stream, c.options());
      else
        ragged_dot(inputs[0], inputs[1], inputs[2], outputs[0], stream, c.options());
    });
  };
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

/// The forward and the VJP of `c` on the device against float64, seeds `seed` and the next.
void checkForwardAndVjp(const Case &c, uint64_t &seed) {
  check(checkForward(c, seed++, onDevice(false)));
  check(checkVjp(c, seed++, onDevice(true)));
}

struct Shape {
  int64_t m, k, n, g;
};

/// hopper's rows kernels on [128, bn] tiles (bn 128 and 256) with each of `programs` (and
/// `extra` keys), bf16, for each shape: random group sizes, forward and VJP. Returns the
/// next seed.
uint64_t checkHopperRows(uint64_t seed, std::initializer_list<Shape> shapes, std::initializer_list<int64_t> programs,
                     const Config &extra) {
  for (Shape s : shapes)
    for (int64_t bn : {128, 256})
      for (int64_t p : programs) {
        Config config{{"block_m", 128}, {"block_n", bn}, {"block_k", 64},
                      {"num_warps", 8}, {"stages", 3},   {"programs", p}};
        for (const auto &[key, value] : extra.values)
          config.set(key, value);
        checkForwardAndVjp(Case{s.m, s.k, s.n, randomSizes(s.g, s.m, seed), DType::BF16, "hopper", config}, seed);
      }
  return seed;
}

} // namespace

TEST_CASE("ragged_dot on the device: every dtype matches float64", "[gpu][ragged_dot]") {
  uint64_t seed = 500;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    Case c{45, 40, 24, {7, 0, 20, 18}, dtype, std::nullopt, std::nullopt};  // auto: tile for bf16 / f16
    checkForwardAndVjp(c, seed);
    if (dtype == DType::BF16 || dtype == DType::F16) {
      c.implementation = "reference";
      checkForwardAndVjp(c, seed);
    }
  }
}

TEST_CASE("ragged_dot on the device: the tma config (TMA rings, a producer warpgroup)", "[gpu][ragged_dot][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the tma config"))
    return;
  uint64_t seed = 900;
  int index = 0;
  for (Shape s : {Shape{1, 64, 136, 3}, Shape{1000, 512, 1000, 8}, Shape{1554, 1024, 2048, 64}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      const int warps = index % 2 ? 8 : 4;
      Config config{{"block_m", 16 * warps}, {"block_n", index % 3 ? 128 : 64}, {"block_k", 32 << (index % 2)},
                    {"num_warps", warps}, {"async_copy", 1}, {"stages", 2 + index % 3}, {"tma", 1}};
      ++index;
      Case c{s.m, s.k, s.n, randomSizes(s.g, s.m, seed), dtype, "tile", config};
      checkForwardAndVjp(c, seed);
    }
}

TEST_CASE("ragged_dot on the device: hopper at its heuristic", "[gpu][ragged_dot][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  uint64_t seed = 950;
  // K 528: 16-wide steps (the widest dividing it), 1024: 64-wide, the ring wrapping.
  for (Shape s : {Shape{1, 64, 136, 3}, Shape{1000, 528, 1000, 8}, Shape{1554, 1024, 2048, 64}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c{s.m, s.k, s.n, randomSizes(s.g, s.m, seed), dtype, "hopper", std::nullopt};
      checkForwardAndVjp(c, seed);
    }
}

TEST_CASE("ragged_dot on the device: odd shapes and group sizes", "[gpu][ragged_dot]") {
  uint64_t seed = 700;
  for (Shape s : {Shape{1, 37, 23, 3}, Shape{17, 4096, 136, 4}, Shape{1000, 520, 1000, 8}, Shape{1000, 1001, 999, 16},
                  Shape{1554, 1024, 2048, 64}})
    for (DType dtype : {DType::BF16, DType::F16}) {
      Case c{s.m, s.k, s.n, randomSizes(s.g, s.m, seed), dtype, "tile", std::nullopt};
      checkForwardAndVjp(c, seed);
    }
  for (const std::vector<int32_t> &sizes : std::vector<std::vector<int32_t>>{
           {0, 0, 300, 0}, {0, 0, 0, 0}, {10, 3, 0, 90}, {100, 400, 7, 1}, {-5, 20, 1000, 4}}) {
    Case c{300, 264, 136, sizes, DType::BF16, "tile", std::nullopt};
    checkForwardAndVjp(c, seed);
  }
  // Each config of the search space.
  BoundArgs b = bind_ragged_dot({{300, 259}, DType::BF16}, {{5, 259, 131}, DType::BF16}, {{5}, DType::I32},
                                {{300, 131}, DType::BF16});
  for (const Config &config : ragged_dot_op().implementation("tile").search_space(b)) {
    Case c{300, 259, 131, randomSizes(5, 300, seed), DType::BF16, "tile", config};
    checkForwardAndVjp(c, seed);
  }
}

TEST_CASE("ragged_dot on the device: rows of the benchmark shape (K 4096, N 4096, 8 groups)", "[gpu][ragged_dot]") {
  // M 256 keeps the float64 reference small; the kernels are the benchmark's heuristic
  // family with fewer row blocks.
  Case c{256, 4096, 4096, randomSizes(8, 256, 42), DType::BF16, std::nullopt, std::nullopt};
  check(checkForward(c, 900, onDevice(false)));
  check(checkVjp(c, 901, onDevice(true)));
}

TEST_CASE("ragged_dot on the device: hopper's rows kernels on a persistent grid", "[gpu][ragged_dot][persistent]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  // One program an SM (each walks several tiles) and a small grid (many tiles each), at
  // [128, 128] and [128, 256] tiles; the VJP's drhs runs on wgmma from its cp.async ring.
  checkHopperRows(1200, {Shape{1000, 512, 1000, 8}, Shape{1554, 256, 512, 16}, Shape{300, 1024, 1024, 8}}, {-1, 7},
                  Config{});
}

TEST_CASE("ragged_dot on the device: hopper's rows kernels store whole tiles by TMA", "[gpu][ragged_dot][tma_store]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  // tma_store: a tile whose rows all belong to its group leaves by TMA stores, a group's
  // partial last tile (and the zero tail's) by masked stores; persistent and one program a
  // tile, groups of whole tiles and uneven ones, [128, 128] and [128, 256] tiles.
  uint64_t seed =
      checkHopperRows(1300, {Shape{1000, 512, 1000, 8}, Shape{1554, 256, 512, 16}}, {-1, 0}, Config{{"tma_store", 1}});
  Config config{{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"num_warps", 8},
                {"stages", 3},    {"programs", -1}, {"tma_store", 1}};
  Case whole{1024, 512, 512, {256, 0, 512, 128, 128}, DType::F16, "hopper", config};
  checkForwardAndVjp(whole, seed);
}
