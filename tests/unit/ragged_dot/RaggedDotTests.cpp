// ragged_dot on the interpreter against float64: every dtype, forward and VJP, odd
// shapes (M 1, 17, 1000; K and N not multiples of the blocks), random group sizes with
// empty groups, one group holding every row, sizes summing to less than M (zero rows)
// and sizes past M or negative (clamped), on tile (tensor-core dots; both main loops:
// the cp.async ring and masked register loads) and reference.
#include <catch2/catch.hpp>

#include "unit/ragged_dot/RaggedDotTestCase.h"
#include "common/ScopedState.h"

#include <tokamax/ops/RaggedDot.h>

using namespace tokamax;
using namespace ragged_test;

namespace {

/// Small blocks, so that odd shapes give many programs and partial edge blocks; `ring`:
/// through the cp.async ring.
Config smallTile(bool ring) {
  Config c{{"block_m", 16}, {"block_n", 16}, {"block_k", 16}, {"num_warps", 1}};
  if (ring)
    c.set("async_copy", 1).set("stages", 3);
  return c;
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

} // namespace

TEST_CASE("ragged_dot: every dtype, forward and VJP, match float64", "[ragged_dot]") {
  uint64_t seed = 100;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (const char *impl : {"tile", "reference"}) {
      const bool half = dtype == DType::BF16 || dtype == DType::F16;
      if (!half && std::string(impl) == "tile")
        continue;
      Case c{45, 40, 24, {7, 0, 20, 18}, dtype, impl, std::nullopt};
      check(checkForward(c, seed++));
      check(checkVjp(c, seed++));
    }
}

TEST_CASE("ragged_dot: odd shapes and random group sizes", "[ragged_dot]") {
  uint64_t seed = 300;
  struct Shape {
    int64_t m, k, n, g;
  };
  for (Shape s : {Shape{1, 37, 23, 3}, Shape{17, 40, 24, 5}, Shape{1000, 24, 40, 8}, Shape{17, 5, 3, 1},
                  Shape{33, 72, 48, 6}}) {
    std::vector<int32_t> sizes = randomSizes(s.g, s.m, seed);
    const bool ring = s.k % 8 == 0 && s.n % 8 == 0;
    check(checkForward({s.m, s.k, s.n, sizes, DType::BF16, "tile", smallTile(ring)}, seed++));
    check(checkVjp({s.m, s.k, s.n, sizes, DType::BF16, "tile", smallTile(ring)}, seed++));
    check(checkVjp({s.m, s.k, s.n, sizes, DType::F16, "tile", smallTile(false)}, seed++));
    check(checkForward({s.m, s.k, s.n, sizes, DType::F16, "tile", std::nullopt}, seed++));
    check(checkVjp({s.m, s.k, s.n, sizes, DType::F32, "reference", std::nullopt}, seed++));
    check(checkForward({s.m, s.k, s.n, sizes, DType::F64, "reference", std::nullopt}, seed++));
  }
}

TEST_CASE("ragged_dot: the tma config (TMA rings, a producer warpgroup) matches float64", "[ragged_dot]") {
  // Groups whose rows share row tiles (each tile's rows of other groups are computed and
  // not stored), empty groups, dlhs columns past K reaching the next group's rhs rows, K
  // a multiple of block_k as the forward needs, 2 and 3 ring slots.
  uint64_t seed = 700;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{100, 64, 72}, {37, 96, 40}})
    for (int64_t stages : {2, 3}) {
      Config tma{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4},
                 {"async_copy", 1}, {"stages", stages}, {"tma", 1}};
      std::vector<int32_t> sizes = randomSizes(5, m, seed);
      check(checkForward({m, k, n, sizes, DType::BF16, "tile", tma}, seed++));
      check(checkVjp({m, k, n, sizes, DType::F16, "tile", tma}, seed++));
      // hopper runs the same kernels with TMA always on (its config has no such keys).
      Config hopper{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", stages}};
      check(checkForward({m, k, n, sizes, DType::F16, "hopper", hopper}, seed++));
      check(checkVjp({m, k, n, sizes, DType::BF16, "hopper", std::nullopt}, seed++));
    }
  // A six-slot ring (TMA rings go to 8) over 7 K steps: the slots wrap.
  Config deep{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 6}};
  std::vector<int32_t> sizes = randomSizes(4, 90, seed);
  check(checkForward({90, 224, 72, sizes, DType::BF16, "hopper", deep}, seed++));
  check(checkVjp({90, 224, 72, sizes, DType::F16, "hopper", deep}, seed++));
  // Persistent rows kernels (hopper's programs): each
  // program walks several tiles, each tile's rows found from the groups' starts; empty
  // groups, a zero tail (sizes short of M), a last column tile past N, and dlhs steps past
  // N. The VJP's drhs runs on wgmma there (the interpreter runs the same tile IR).
  // With tma_store, whole tiles leave by TMA stores and a group's partial tile (or the
  // zero tail's) element by element: groups of 64 rows exactly (whole tiles only), uneven
  // groups, and one tile a program (programs 0).
  for (int64_t programs : {1, 3})
    for (int64_t tmaStore : {0, 1}) {
      Config persistent{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4},
                        {"stages", 3},   {"programs", programs}};
      if (tmaStore)
        persistent.set("tma_store", 1);
      INFO("tma_store " << tmaStore);
      for (const std::vector<int32_t> &groups :
           {randomSizes(5, 100, seed), std::vector<int32_t>{0, 40, 0, 30}, std::vector<int32_t>{64, 0, 64}}) {
        const int64_t m = groups.back() == 64 ? 128 : 100;
        check(checkForward({m, 64, 136, groups, DType::BF16, "hopper", persistent}, seed++));
        check(checkVjp({m, 64, 136, groups, DType::F16, "hopper", persistent}, seed++));
      }
    }
  Config perTile{{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2}, {"tma_store", 1}};
  check(checkForward({100, 64, 136, randomSizes(5, 100, seed), DType::BF16, "hopper", perTile}, seed++));
  check(checkVjp({100, 64, 136, randomSizes(5, 100, seed), DType::F16, "hopper", perTile}, seed++));
  // The heuristic's blocks at the bench ([128, 256] tiles stored by TMA, persistent) with
  // the forward's ring at four slots (gpu-check's ragged-stages times it): K 320 walks
  // five 64-wide steps, so the slots wrap; a partial last column tile at N 296.
  Config fourSlots{{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"num_warps", 8},
                   {"stages", 4},    {"programs", 2},   {"tma_store", 1}};
  check(checkForward({300, 320, 296, randomSizes(3, 300, seed), DType::BF16, "hopper", fourSlots}, seed++));
}

TEST_CASE("ragged_dot: one group holding every row, empty groups, short and overlong sizes", "[ragged_dot]") {
  uint64_t seed = 500;
  const std::vector<std::vector<int32_t>> cases{
      {0, 0, 50, 0},     // one group holds every row, the others are empty
      {0, 0, 0},         // no rows in any group: out is zero
      {10, 3, 0, 9},     // sums to 22 < 50: rows 22.. are zero
      {30, 40, 7},       // sums past M: the second group ends at row 50, the third is empty
      {-5, 20, 100, 4},  // negative counts as empty
  };
  for (const auto &sizes : cases) {
    for (bool ring : {false, true}) {
      check(checkForward({50, 24, 40, sizes, DType::BF16, "tile", smallTile(ring)}, seed++));
      check(checkVjp({50, 24, 40, sizes, DType::BF16, "tile", smallTile(ring)}, seed++));
    }
    check(checkForward({50, 24, 40, sizes, DType::F64, "reference", std::nullopt}, seed++));
    check(checkVjp({50, 24, 40, sizes, DType::F64, "reference", std::nullopt}, seed++));
  }
}
