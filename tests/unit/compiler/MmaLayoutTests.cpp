//===- MmaLayoutTests.cpp - mma.sync accumulator and dot-operand layouts --===//
//
// The layout algebra (Layout.h) for tile.dot on tensor cores: the accumulator layout
// matches the PTX ISA fragment of mma.m16n8k16 (c0,c1 at row groupID, columns
// 2*threadID_in_group + {0,1}; c2,c3 at row groupID + 8), the operand layouts match the
// A and B fragments of m16n8k16 (bf16/f16) and m16n8k8 (tf32), and over small shapes
// and warp grids every element is held and owned exactly once (replicas included).
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Layout.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace tokamax::compiler;

namespace {

std::vector<int64_t> powersOfTwo(int64_t max) {
  std::vector<int64_t> v;
  for (int64_t p = 1; p <= max; p *= 2)
    v.push_back(p);
  return v;
}

/// Every element held by some (lane, warp, register) and owned exactly once; "" or the
/// first violation.
std::string checkOwnership(const Distribution &dist, const std::vector<int64_t> &shape) {
  int64_t elements = 1;
  for (int64_t s : shape)
    elements *= s;
  std::vector<int> held(elements, 0), owned(elements, 0);
  for (unsigned warp = 0; warp < dist.num_warps(); ++warp)
    for (unsigned lane = 0; lane < 32; ++lane) {
      bool threadOwns = dist.thread_owns(lane, warp);
      for (int64_t r = 0; r < dist.num_registers(); ++r) {
        std::vector<int64_t> c = dist.coords(lane, warp, r);
        int64_t index = 0;
        for (size_t d = 0; d < shape.size(); ++d) {
          if (c[d] < 0 || c[d] >= shape[d])
            return "lane " + std::to_string(lane) + " register " + std::to_string(r) + " is outside the tile";
          index = index * shape[d] + c[d];
        }
        ++held[index];
        if (threadOwns && dist.register_owns(r))
          ++owned[index];
      }
    }
  for (int64_t i = 0; i < elements; ++i) {
    if (held[i] == 0)
      return "element " + std::to_string(i) + " is held by no thread";
    if (owned[i] != 1)
      return "element " + std::to_string(i) + " has " + std::to_string(owned[i]) + " owners";
  }
  return "";
}

/// The registers of one thread, by their (unwrapped) offset.
std::map<std::vector<int64_t>, int64_t> byOffset(const Distribution &dist) {
  std::map<std::vector<int64_t>, int64_t> map;
  for (int64_t r = 0; r < dist.num_registers(); ++r)
    map.emplace(dist.register_offset(r), r);
  return map;
}

std::vector<std::vector<unsigned>> warpGrids(unsigned warps) {
  std::vector<std::vector<unsigned>> grids;
  for (unsigned wm = 1; wm <= warps; wm *= 2)
    grids.push_back({wm, warps / wm});
  return grids;
}

} // namespace

TEST_CASE("mma accumulator layout is the PTX m16n8k16 C fragment", "[layout][mma]") {
  Distribution dist = Distribution::mma(MmaLayout{{1, 1}}, {16, 8});
  REQUIRE(dist.num_registers() == 4);
  CHECK(dist.contiguous_registers() == 2u);
  CHECK(dist.parent().order == std::vector<unsigned>{1, 0});
  for (unsigned lane = 0; lane < 32; ++lane) {
    int64_t group = lane / 4, inGroup = lane % 4;
    INFO("lane " << lane);
    CHECK(dist.coords(lane, 0, 0) == std::vector<int64_t>{group, 2 * inGroup});
    CHECK(dist.coords(lane, 0, 1) == std::vector<int64_t>{group, 2 * inGroup + 1});
    CHECK(dist.coords(lane, 0, 2) == std::vector<int64_t>{group + 8, 2 * inGroup});
    CHECK(dist.coords(lane, 0, 3) == std::vector<int64_t>{group + 8, 2 * inGroup + 1});
    CHECK(dist.thread_owns(lane, 0));
  }
  CHECK(checkOwnership(dist, {16, 8}) == "");
}

TEST_CASE("mma accumulator warps tile the block, then repeat", "[layout][mma]") {
  // 64x32 on warpsPerCTA = [2, 2] (the TileTypes.td picture): warp w at (w / 2, w % 2),
  // each warp 2 x 2 instruction tiles 32 rows / 16 columns apart.
  Distribution dist = Distribution::mma(MmaLayout{{2, 2}}, {64, 32});
  REQUIRE(dist.num_registers() == 16);
  for (unsigned warp = 0; warp < 4; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < 16; ++r) {
        int64_t rep = r / 4, c = r % 4, rm = rep / 2, rn = rep % 2;
        std::vector<int64_t> expected{rm * 32 + (warp / 2) * 16 + lane / 4 + 8 * (c / 2),
                                      rn * 16 + (warp % 2) * 8 + 2 * (lane % 4) + c % 2};
        INFO("warp " << warp << " lane " << lane << " register " << r);
        CHECK(dist.coords(lane, warp, r) == expected);
      }
  CHECK(checkOwnership(dist, {64, 32}) == "");
}

TEST_CASE("mma accumulators of small shapes own every element once", "[layout][mma]") {
  int checked = 0;
  for (int64_t m : powersOfTwo(128))
    for (int64_t n : powersOfTwo(128))
      for (unsigned warps : {1u, 2u, 4u, 8u})
        for (const auto &grid : warpGrids(warps)) {
          MmaLayout layout{grid};
          Distribution dist = Distribution::mma(layout, {m, n});
          std::string ownership = checkOwnership(dist, {m, n});
          if (!ownership.empty()) {
            INFO(m << "x" << n << " " << layout.to_string());
            CHECK(ownership == "");
          }
          // Without wrap-around a thread holds distinct elements only.
          if (m >= 16 * int64_t(grid[0]) && n >= 8 * int64_t(grid[1]))
            CHECK(dist.num_registers() * 32 * warps == m * n);
          ++checked;
        }
  CHECK(checked > 0);
}

TEST_CASE("slices of mma accumulators own every element once", "[layout][mma]") {
  // Row and column reductions of an accumulator (softmax over a dot result).
  for (int64_t m : powersOfTwo(128))
    for (int64_t n : powersOfTwo(64))
      for (unsigned warps : {1u, 4u, 8u})
        for (const auto &grid : warpGrids(warps))
          for (unsigned kept : {0u, 1u}) {
            std::vector<int64_t> shape{kept == 0 ? m : n};
            Distribution dist = Distribution::mma(MmaLayout{grid}, shape, {kept});
            std::string ownership = checkOwnership(dist, shape);
            if (!ownership.empty()) {
              INFO(m << "x" << n << " " << MmaLayout{grid}.to_string() << " keeping " << kept);
              CHECK(ownership == "");
            }
          }
}

TEST_CASE("dot operand layouts are the PTX A and B fragments", "[layout][mma]") {
  MmaLayout one{{1, 1}};
  for (unsigned kWidth : {2u, 1u}) {
    int64_t k = 8 * kWidth;
    Distribution a = Distribution::dot_operand(DotOperandLayout{0, one, kWidth}, {16, k});
    Distribution b = Distribution::dot_operand(DotOperandLayout{1, one, kWidth}, {k, 8});
    REQUIRE(a.num_registers() == 4 * kWidth);
    REQUIRE(b.num_registers() == 2 * kWidth);
    auto aRegs = byOffset(a), bRegs = byOffset(b);
    for (unsigned lane = 0; lane < 32; ++lane) {
      int64_t g = lane / 4, t = lane % 4;
      INFO("k_width " << kWidth << " lane " << lane);
      // Fragment registers a_i / b_i (PTX ISA order) and their elements.
      for (int64_t i = 0; i < 4 * int64_t(kWidth); ++i) {
        int64_t row, col;
        if (kWidth == 2) {  // a0..a7: (g | g+8, 2t + {0,1} | +8)
          row = g + 8 * ((i / 2) % 2);
          col = 2 * t + i % 2 + 8 * (i / 4);
        } else {  // a0..a3: (g, t) (g+8, t) (g, t+4) (g+8, t+4)
          row = g + 8 * (i % 2);
          col = t + 4 * (i / 2);
        }
        int64_t offRow = row - g, offCol = col - kWidth * t;
        REQUIRE(aRegs.count({offRow, offCol}) == 1);
        CHECK(a.coords(lane, 0, aRegs[{offRow, offCol}]) == std::vector<int64_t>{row, col});
      }
      for (int64_t i = 0; i < 2 * int64_t(kWidth); ++i) {
        // b0..b3: (2t + {0,1} | +8, g); tf32 b0, b1: (t | t+4, g)
        int64_t row = kWidth == 2 ? 2 * t + i % 2 + 8 * (i / 2) : t + 4 * i;
        int64_t offRow = row - kWidth * t;
        REQUIRE(bRegs.count({offRow, 0}) == 1);
        CHECK(b.coords(lane, 0, bRegs[{offRow, 0}]) == std::vector<int64_t>{row, g});
      }
    }
    CHECK(checkOwnership(a, {16, k}) == "");
    CHECK(checkOwnership(b, {k, 8}) == "");
  }
}

TEST_CASE("dot operands follow the accumulator's warps and replicate over the others",
          "[layout][mma]") {
  for (int64_t m : powersOfTwo(128))
    for (int64_t n : powersOfTwo(128))
      for (int64_t k : {16, 32, 64})
        for (unsigned warps : {1u, 2u, 4u, 8u})
          for (const auto &grid : warpGrids(warps))
            for (unsigned kWidth : {2u, 1u}) {
              MmaLayout parent{grid};
              Distribution acc = Distribution::mma(parent, {m, n});
              Distribution a = Distribution::dot_operand({0, parent, kWidth}, {m, k});
              Distribution b = Distribution::dot_operand({1, parent, kWidth}, {k, n});
              INFO(m << "x" << n << "x" << k << " " << parent.to_string() << " k_width " << kWidth);
              CHECK(a.num_warps() == warps);
              CHECK(b.num_warps() == warps);
              std::string ownA = checkOwnership(a, {m, k}), ownB = checkOwnership(b, {k, n});
              if (!ownA.empty() || !ownB.empty()) {
                CHECK(ownA == "");
                CHECK(ownB == "");
              }
              // Each warp's A rows are its accumulator rows, its B columns the accumulator
              // columns (a thread's own A rows are its accumulator rows too).
              bool rowsMatch = true, colsMatch = true;
              for (unsigned warp = 0; warp < warps; ++warp) {
                std::vector<int64_t> rows, aRows, cols, bCols;
                for (unsigned lane = 0; lane < 32; ++lane) {
                  std::vector<int64_t> own, ownA;
                  for (int64_t r = 0; r < acc.num_registers(); ++r) {
                    own.push_back(acc.coords(lane, warp, r)[0]);
                    cols.push_back(acc.coords(lane, warp, r)[1]);
                  }
                  for (int64_t r = 0; r < a.num_registers(); ++r)
                    ownA.push_back(a.coords(lane, warp, r)[0]);
                  for (int64_t r = 0; r < b.num_registers(); ++r)
                    bCols.push_back(b.coords(lane, warp, r)[1]);
                  for (auto *v : {&own, &ownA}) {
                    std::sort(v->begin(), v->end());
                    v->erase(std::unique(v->begin(), v->end()), v->end());
                  }
                  rowsMatch = rowsMatch && own == ownA;
                }
                for (auto *v : {&cols, &bCols}) {
                  std::sort(v->begin(), v->end());
                  v->erase(std::unique(v->begin(), v->end()), v->end());
                }
                colsMatch = colsMatch && cols == bCols;
              }
              CHECK(rowsMatch);
              CHECK(colsMatch);
            }
}

TEST_CASE("default mma layouts use every warp and keep warp tiles square-ish", "[layout][mma]") {
  for (int64_t m : powersOfTwo(256))
    for (int64_t n : powersOfTwo(256))
      for (unsigned warps : {1u, 2u, 4u, 8u, 16u}) {
        MmaLayout layout = default_mma_layout(m, n, warps);
        INFO(m << "x" << n << " on " << warps << " warps: " << layout.to_string());
        REQUIRE(layout.warps_per_cta.size() == 2);
        CHECK(layout.num_warps() == warps);
      }
  CHECK(default_mma_layout(128, 128, 4).warps_per_cta == std::vector<unsigned>{2, 2});
  CHECK(default_mma_layout(128, 128, 8).warps_per_cta == std::vector<unsigned>{4, 2});
  CHECK(default_mma_layout(16, 256, 4).warps_per_cta == std::vector<unsigned>{1, 4});
  CHECK(default_mma_layout(256, 8, 4).warps_per_cta == std::vector<unsigned>{4, 1});
}
