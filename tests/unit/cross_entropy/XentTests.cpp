// linear_softmax_cross_entropy_loss on the interpreter against float64: every dtype and
// reduction, ignore_index and out-of-range labels, forward and VJP, odd shapes (B 1, 17,
// 1000; D and V not multiples of the blocks, V over several tiles), tile and reference.
#include <catch2/catch.hpp>

#include "unit/cross_entropy/XentTestCase.h"

using namespace tokamax;
using namespace xent_test;

namespace {

const LossReduction kReductions[] = {LossReduction::None, LossReduction::Sum, LossReduction::Mean};

/// Small blocks, so that odd shapes give many programs, several V tiles and edge blocks.
/// Small blocks; the forward's V in 3 splits, the VJP's in chunks of 64 columns.
Config smallTile(bool vjp) {
  Config c{{"block_b", 16}, {"block_v", 32}, {"block_k", 16}, {"num_warps", 1}};
  if (vjp)
    c.set("block_d", 16).set("chunk_v", 64);
  else
    c.set("split_v", 3);
  return c;
}

void check(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

} // namespace

TEST_CASE("cross_entropy: every dtype and reduction, forward and VJP, match float64", "[cross_entropy]") {
  uint64_t seed = 100;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (LossReduction reduction : kReductions)
      for (const char *impl : {"tile", "reference"}) {
        const bool half = dtype == DType::BF16 || dtype == DType::F16;
        if (!half && std::string(impl) == "tile")
          continue;
        Case c{17, 40, 100, dtype, reduction, Labels::SomeIgnored, impl};
        check(checkForward(c, seed++));
        check(checkVjp(c, seed++));
      }
}

TEST_CASE("cross_entropy: odd shapes, several V tiles, tile and reference", "[cross_entropy]") {
  uint64_t seed = 300;
  struct Shape {
    int64_t b, d, v;
  };
  for (Shape s : {Shape{1, 37, 130}, Shape{17, 40, 200}, Shape{1000, 24, 72}, Shape{17, 5, 3}}) {
    for (bool vjp : {false, true}) {
      Case tile{s.b, s.d, s.v, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "tile", smallTile(vjp)};
      std::optional<Config> refConfig;
      if (vjp)  // exact products over several chunks of V
        refConfig = Config{{"block_b", 16}, {"block_v", 16}, {"block_k", 8}, {"block_d", 16}, {"num_warps", 4},
                           {"chunk_v", 32}};
      Case ref{s.b, s.d, s.v, DType::F32, LossReduction::Sum, Labels::InRange, "reference", refConfig};
      check(vjp ? checkVjp(tile, seed++) : checkForward(tile, seed++));
      check(vjp ? checkVjp(ref, seed++) : checkForward(ref, seed++));
    }
    Case f16{s.b, s.d, s.v, DType::F16, LossReduction::None, Labels::SomeIgnored, "tile", std::nullopt};
    check(checkForward(f16, seed++));
  }
}

TEST_CASE("cross_entropy: ignore_index, all rows ignored, labels out of range", "[cross_entropy]") {
  uint64_t seed = 500;
  for (LossReduction reduction : kReductions) {
    // Another ignore_index, a label past V and one below 0: NaN rows (and NaN reductions).
    Case other{17, 24, 70, DType::BF16, reduction, Labels::SomeIgnored, "tile", std::nullopt, 3};
    check(checkForward(other, seed++));
    check(checkVjp(other, seed++));
    for (Labels labels : {Labels::AllIgnored, Labels::OutOfRange})
      for (DType dtype : {DType::BF16, DType::F64}) {
        Case c{dtype == DType::F64 ? 18 : 17, 24, 70, dtype, reduction, labels, std::nullopt, std::nullopt};
        check(checkForward(c, seed++));
        check(checkVjp(c, seed++));
      }
  }
}

TEST_CASE("cross_entropy: all ignored rows give a NaN mean and zero gradients", "[cross_entropy]") {
  Case c{5, 8, 20, DType::F32, LossReduction::Mean, Labels::AllIgnored, "reference", std::nullopt};
  Inputs in = randomInputs(c, 7);
  HostBuffer x(c.dtype, {c.b, c.d}, in.x), w(c.dtype, {c.d, c.v}, in.w), labels = labelBuffer(c, in);
  HostBuffer loss(c.compute(), {1}), lse(c.compute(), {c.b});
  interpretForward(c, {&x, &w, &labels}, {&loss, &lse});
  CHECK(std::isnan(loss.at(0)));
  HostBuffer dloss(c.compute(), {1}, {1.0}), dx(c.dtype, {c.b, c.d}), dw(c.dtype, {c.d, c.v});
  interpretVjp(c, {&dloss, &x, &w, &labels, &lse}, {&dx, &dw});
  for (double v : dx.values())
    CHECK(v == 0.0);
  for (double v : dw.values())
    CHECK(v == 0.0);
}

TEST_CASE("cross_entropy: the tma config (TMA rings, a producer warpgroup, wgmma) matches float64",
          "[cross_entropy][hopper]") {
  // The interpreter runs the same kernels (each step's copies, then its product). V over
  // several tiles with a partial last one, D over several steps with a partial last
  // slice, B past the last row block; the forward in splits of V, the VJP in chunks.
  uint64_t seed = 700;
  struct Shape {
    int64_t b, d, v;
  };
  for (Shape s : {Shape{70, 40, 200}, Shape{1, 64, 136}, Shape{150, 24, 72}})
    for (int variant = 0; variant < 2; ++variant)
      for (bool vjp : {false, true}) {
        const int64_t warps = variant ? 8 : 4;
        Config c{{"block_b", 16 * warps}, {"block_v", variant ? 128 : 64}, {"block_k", variant ? 32 : 16},
                 {"num_warps", warps}, {"tma", 1}, {"stages", variant ? 3 : 2}};
        if (vjp)
          c.set("block_d", 16).set("chunk_v", 2 * c.get("block_v"));
        else
          c.set("split_v", 2);
        INFO(s.b << "x" << s.d << "x" << s.v << " " << c.to_json());
        Case tile{s.b, s.d, s.v, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "tile", c};
        check(vjp ? checkVjp(tile, seed++) : checkForward(tile, seed++));
        // hopper: the same kernels (TMA always on), its VJP's dx and dw on the hopper
        // matmul (dx accumulated over the chunks in f32, dw through a [D, chunk] panel).
        Config h{{"block_b", 16 * warps}, {"block_v", c.get("block_v")}, {"block_k", c.get("block_k")},
                 {"num_warps", warps}, {"stages", c.get("stages")}};
        if (vjp)
          h.set("chunk_v", c.get("chunk_v"));
        else
          h.set("split_v", 2);
        INFO("hopper " << h.to_json());
        Case hopper{s.b, s.d, s.v, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "hopper", h};
        check(vjp ? checkVjp(hopper, seed++) : checkForward(hopper, seed++));
      }
}

TEST_CASE("cross_entropy: hopper at its heuristic, f16, every reduction, matches float64", "[cross_entropy][hopper]") {
  // One chunk of V and several (the VJP's chunk at the heuristic covers V here; 64
  // columns make three chunks, the last partial).
  uint64_t seed = 760;
  for (LossReduction reduction : kReductions)
    for (DType dtype : {DType::BF16, DType::F16})
      for (bool vjp : {false, true}) {
        Case heuristic{33, 48, 136, dtype, reduction, Labels::SomeIgnored, "hopper", std::nullopt};
        INFO(dtype_name(dtype) << " reduction " << int(reduction) << (vjp ? " vjp" : ""));
        check(vjp ? checkVjp(heuristic, seed++) : checkForward(heuristic, seed++));
      }
  Case chunked{40, 32, 136, DType::BF16, LossReduction::Sum, Labels::SomeIgnored, "hopper",
               Config{{"block_b", 64}, {"block_v", 64}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2},
                      {"chunk_v", 64}}};
  check(checkVjp(chunked, seed++));
  // A chunk of three 128-column tiles (V 296 in one 384-column chunk): dw's window of 384
  // columns takes 128-wide matmul tiles (256 would reach past the window).
  check(checkVjp(Case{40, 32, 296, DType::BF16, LossReduction::Sum, Labels::SomeIgnored, "hopper",
                      Config{{"block_b", 64}, {"block_v", 128}, {"block_k", 32}, {"num_warps", 4}, {"stages", 2}}},
                 seed++));
  // 256-column logit tiles (the search space's wide configs): V over three, the last
  // partial; the forward in two splits, the VJP in chunks of two tiles.
  Config wide{{"block_b", 128}, {"block_v", 256}, {"block_k", 32}, {"num_warps", 8}, {"stages", 3}};
  check(checkForward(Case{130, 40, 600, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "hopper",
                          Config(wide).set("split_v", 2)},
                     seed++));
  check(checkVjp(Case{130, 40, 600, DType::BF16, LossReduction::Mean, Labels::SomeIgnored, "hopper",
                      Config(wide).set("chunk_v", 512)},
                 seed++));
}
