//===- Kernels.cpp - The grouped kernels of ragged_dot ----------------===//
//
// The group sizes stay on the device: every program scans them (G scalar loads, G is
// at most a few hundred in mixture-of-experts layers) to find what it computes.
//
// rows_kernel: row tiles are numbered group by group (group g has ceil(size_g /
// block_m) of them), then the tiles of the rows past the last group, which store zeros;
// tiles past those have nothing to do. A tile's lhs block may reach into the next
// group's rows: those rows' results are dropped by a masked store, and each output row
// depends on its own lhs row only.
//
// groups_kernel: the program of tile (i, j) of drhs[g] sums lhs_g^T dout_g over the
// group's rows for that [block_m, block_n] tile; rows of other groups are masked to
// zero in both operands (with the cp.async ring: only in the step after the group's
// whole steps).
//
// Both grids are 1-D, in grouped order (matmul's grouped_block): kGroupTiles consecutive
// row tiles walk across the column tiles together, so the programs resident at once
// share a few blocks of each operand in L2. With row tiles fastest every wave read its own
// lhs blocks from DRAM for each column tile: at 8 groups, M 32768, K N 4096 the forward
// would read lhs's 256 MiB 32 times.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/ragged_dot/Common.h"

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Pipeline.h>

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <functional>
#include <utility>

namespace tokamax::ragged_detail {

using namespace dsl;

KernelKey RowsKernelSpec::key() const {
  return ops_detail::specializationKey(trans_rhs ? "ragged_dot_dlhs" : "ragged_dot",
                                       {M, R, C, G, int64_t(dtype), int64_t(compute), blocks.exact, blocks.block_m,
                                        blocks.block_n, blocks.block_k, blocks.num_warps, blocks.async_copy,
                                        blocks.stages, blocks.tma, blocks.programs, blocks.tma && blocks.tma_store});
}

KernelKey GroupsKernelSpec::key() const {
  return ops_detail::specializationKey("ragged_dot_drhs", {M, K, N, G, int64_t(dtype), int64_t(compute), blocks.exact,
                                                           blocks.block_m, blocks.block_n, blocks.block_k,
                                                           blocks.num_warps, blocks.async_copy, blocks.stages,
                                                           blocks.tma && blocks.drhs_wgmma});
}

/// Row tiles (of rows_kernel) or K tiles (of groups_kernel) that walk across the column
/// tiles together.
constexpr int64_t kGroupTiles = 8;

int64_t row_programs(int64_t M, int64_t G, int64_t block_m) {
  // sum_g ceil(s_g / bm) + ceil((M - sum s_g) / bm) < M / bm + G + 1.
  return cdiv(M, block_m) + G;
}

namespace {

/// Group g's size as the kernels read it: max(group_sizes[g], 0), ending by row M.
Value groupEnd(const TensorArg &sizes, const Value &g, const Value &start, int64_t M) {
  Value size = maximum(sizes.load({g}, {1}).max(0), 0);
  return minimum(start + size, Value(M));
}

/// The rows [row0, row_end) program `t` of rows_kernel owns, and its group (-1 past
/// every group: the zero tail or nothing).
struct RowTile {
  Value row0, row_end, group, found;
};

RowTile findRowTile(Kernel &k, const TensorArg &sizes, int64_t G, int64_t M, int64_t bm, const Value &t) {
  Value zero = k.constant(0, DType::I32), none = k.constant(-1, DType::I32);
  // Carried: the group's first row, the row tiles before it, and what t found.
  std::vector<Value> r = k.loop(0, G, 1, {zero, zero, none, zero, zero}, [&](Value g, std::vector<Value> c) {
    const Value &start = c[0], &before = c[1];
    Value end = groupEnd(sizes, g, start, M);
    Value tiles = (end - start + Value(bm - 1)) / Value(bm);
    Value hit = (t >= before) & (t < before + tiles);
    return std::vector<Value>{end, before + tiles, where(hit, g, c[2]), where(hit, start + (t - before) * bm, c[3]),
                              where(hit, end, c[4])};
  });
  Value found = r[2] >= 0;
  Value tail = r[0] + (t - r[1]) * bm;  // past the groups' tiles: rows after the last group
  return {where(found, r[3], tail), where(found, r[4], k.constant(double(M), DType::I32)), r[2], found};
}

/// Every group's first row tile and first row, and at index G the zero tail's: scalars
/// a persistent program reads once, from which each of its tiles' rows follow without
/// loads (its producer warpgroup computes with values from before the loop only).
struct GroupStarts {
  std::vector<Value> tile, row;
};

GroupStarts groupStarts(Kernel &k, const TensorArg &sizes, int64_t G, int64_t M, int64_t bm) {
  GroupStarts s;
  Value start = k.constant(0, DType::I32), before = start;
  for (int64_t g = 0; g < G; ++g) {
    s.tile.push_back(before);
    s.row.push_back(start);
    Value end = groupEnd(sizes, k.constant(double(g), DType::I32), start, M);
    before = before + (end - start + Value(bm - 1)) / Value(bm);
    start = end;
  }
  s.tile.push_back(before);
  s.row.push_back(start);
  return s;
}

/// findRowTile from the groups' starts: row tile `t`'s rows and group.
RowTile rowTileAt(Kernel &k, const GroupStarts &s, int64_t M, int64_t bm, const Value &t) {
  const size_t G = s.tile.size() - 1;
  Value row0 = s.row[G] + (t - s.tile[G]) * Value(bm);  // past the groups' tiles: the zero tail
  Value rowEnd = k.constant(double(M), DType::I32), group = k.constant(-1, DType::I32);
  for (size_t g = 0; g < G; ++g) {
    Value hit = (t >= s.tile[g]) & (t < s.tile[g + 1]);
    row0 = where(hit, s.row[g] + (t - s.tile[g]) * Value(bm), row0);
    rowEnd = where(hit, s.row[g + 1], rowEnd);
    group = where(hit, k.constant(double(g), DType::I32), group);
  }
  return {row0, rowEnd, group, group >= 0};
}

/// The [rows, cols] operand blocks of one reduction step at k0.
using StepBlocks = std::function<std::pair<Value, Value>(const Value &k0)>;

/// acc + sum over k0 in [lo, hi) step block_k of a(k0) @ b(k0): exact multiply-adds
/// in acc's dtype, or tensor-core dots with the next step's blocks loaded before this
/// step's product.
Value productLoop(Kernel &k, const Blocks &s, const Value &lo, const Value &hi, const Value &acc,
                  const StepBlocks &blocks) {
  if (s.exact) {
    const DType c = acc.dtype();
    return k.loop(lo, hi, s.block_k, {acc}, [&](Value k0, std::vector<Value> carried) {
      auto [a, b] = blocks(k0);
      return std::vector<Value>{exact_product(a.to(c), b.to(c), carried[0])};
    })[0];
  }
  auto [a0, b0] = blocks(lo);
  return k.loop(lo, hi, s.block_k, {acc, a0, b0}, [&](Value k0, std::vector<Value> c) {
    auto [a, b] = blocks(k0 + Value(s.block_k));
    return std::vector<Value>{dot(c[1], c[2], c[0]), a, b};
  })[0];
}

void checkExtents(const char *what, int64_t a, int64_t b, int64_t c, int64_t g) {
  if (a < 1 || b < 1 || c < 1 || g < 1)
    throw Error(fmt::format("ragged_dot: the {} kernel needs every extent >= 1, got {} x {} x {} with {} groups", what,
                            a, b, c, g));
}

/// Stores a rows kernel's tile: only its group's rows (the block's other rows belong to
/// the next group's programs) and columns below C.
void storeRows(Kernel &k, const RowsKernelSpec &s, const TensorArg &out, const RowTile &tile, const Value &n0,
               const Value &acc) {
  const int64_t bm = s.blocks.block_m;
  auto masked = [&] {
    Value rows = tile.row0 + k.arange(0, bm), cols = n0 + k.arange(0, s.blocks.block_n);
    Value mask = (rows < tile.row_end).expand(1) & (cols < Value(s.C)).expand(0);
    store(out.ptr() + (rows.expand(1) * Value(s.C) + cols.expand(0)), acc.to(s.dtype), mask);
  };
  if (!(s.blocks.tma && s.blocks.tma_store))
    return masked();
  // TMA drops only what passes the tensor (columns past C, rows past M), so a tile with
  // rows of the next group (or none left) stores element by element.
  Value rows = tile.row_end - tile.row0;
  k.when(rows >= Value(bm), [&] { out.tma_store({tile.row0, n0}, acc.to(s.dtype)); });
  k.when(rows < Value(bm), masked);
}

/// The TMA copies of one step of a rows kernel's tile: lhs's block (rows past M where
/// the tile has no group: TMA reads zeros) and group g's rhs block.
std::vector<Value> rowsCopies(const RowsKernelSpec &s, const TensorArg &lhs, const TensorArg &rhs,
                              const SharedBuffer (&rings)[2], const TmaRing &ring, const RowTile &tile,
                              const Value &n0, const Value &k0, const Value &slot) {
  const int64_t bm = s.blocks.block_m, bn = s.blocks.block_n, bk = s.blocks.block_k;
  Value g = maximum(tile.group, 0), lhsRow = where(tile.found, tile.row0, Value(s.M));
  return {lhs.load_tma({lhsRow, k0}, {bm, bk}, rings[0], slot, ring.full, slot),
          s.trans_rhs ? rhs.load_tma({g * Value(s.C) + n0, k0}, {bn, bk}, rings[1], slot, ring.full, slot)
                      : rhs.load_tma({g * Value(s.R) + k0, n0}, {bk, bn}, rings[1], slot, ring.full, slot)};
}

/// The rows kernel on a persistent grid: program p walks tiles p, p + P, ... (grouped
/// order, as the one-program-a-tile grid numbers them) through tma_tile_loop, each tile's
/// first product from zero, its store while the producer loads the next tile's blocks.
void persistentRows(Kernel &k, const RowsKernelSpec &s, const TensorArg &lhs, const TensorArg &rhs,
                    const TensorArg &sizes, const TensorArg &out, int64_t rowTiles, int64_t gridN) {
  const int64_t bm = s.blocks.block_m, bn = s.blocks.block_n, bk = s.blocks.block_k;
  const int64_t programs = s.blocks.programs, units = rowTiles * gridN;
  k.grid(programs);
  Value pid = k.program_id(0);
  const GroupStarts starts = groupStarts(k, sizes, s.G, s.M, bm);
  auto tileAt = [&](const Value &tile) {
    auto [t, n0] = grouped_block(pid + tile * Value(programs), rowTiles, gridN, kGroupTiles, 1, bn);
    return std::pair{rowTileAt(k, starts, s.M, bm, t), n0};
  };
  const TmaRing ring = TmaRing::make(k, s.blocks.stages, 2, s.blocks.num_warps);
  const SharedBuffer rings[2] = {k.shared_buffer(s.blocks.stages), k.shared_buffer(s.blocks.stages)};
  TmaTileLoop body;
  body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
    auto [t, n0] = tileAt(tile);
    return rowsCopies(s, lhs, rhs, rings, ring, t, n0, k0, slot);
  };
  body.products = [&](const std::vector<Value> &b, const std::vector<Value> &accs, const Value &fresh) {
    return std::vector<Value>{dot_async(b[0], s.trans_rhs ? b[1].trans() : b[1], accs[0], fresh)};
  };
  body.done = [&](const Value &tile, const std::vector<Value> &accs, std::vector<Value>) {
    auto [t, n0] = tileAt(tile);
    storeRows(k, s, out, t, n0, accs[0]);
    return std::vector<Value>{};
  };
  Value count = (Value(units) - pid + Value(programs - 1)) / Value(programs);
  tma_tile_loop(k, count, cdiv(s.R, bk), bk, ring, {k.full({bm, bn}, 0.0, s.compute)}, {}, body);
}

} // namespace

Kernel rows_kernel(const RowsKernelSpec &s) {
  checkExtents(s.trans_rhs ? "dlhs" : "forward", s.M, s.R, s.C, s.G);
  const int64_t bm = s.blocks.block_m, bn = s.blocks.block_n, bk = s.blocks.block_k;
  const bool tma = s.blocks.tma;
  const int64_t rowTiles = row_programs(s.M, s.G, bm), gridN = cdiv(s.C, bn);
  const bool persistent = tma && s.blocks.programs > 0 && s.blocks.programs < rowTiles * gridN;
  if (persistent && s.G > kPersistentMaxGroups)
    throw Error(fmt::format("ragged_dot: a persistent rows kernel serves at most {} groups, got {}",
                            kPersistentMaxGroups, s.G));
  // The producer's one thread computes each step's group offsets: 40 registers (at 24
  // ptxas spilled), which leaves the consumers 232; persistent, it also holds the
  // groups' starts.
  Kernel k(s.trans_rhs ? "ragged_dot_dlhs" : "ragged_dot",
           {.num_warps = s.blocks.num_warps, .mma_rows_per_warp = tma, .wgmma_dots = tma,
            .producer_registers = persistent ? 56 : 40});
  TensorArg lhs = k.input(s.trans_rhs ? "dout" : "lhs", s.dtype, {s.M, s.R});
  // rhs as TMA reads it: 2-D, group g's rows from g R (or g C).
  TensorArg rhs = k.input("rhs", s.dtype,
                          tma           ? (s.trans_rhs ? std::vector<int64_t>{s.G * s.C, s.R}
                                                       : std::vector<int64_t>{s.G * s.R, s.C})
                          : s.trans_rhs ? std::vector<int64_t>{s.G, s.C, s.R}
                                        : std::vector<int64_t>{s.G, s.R, s.C});
  TensorArg sizes = k.input("group_sizes", DType::I32, {s.G});
  TensorArg out = k.output(s.trans_rhs ? "dlhs" : "out", s.dtype, {s.M, s.C});
  if (persistent) {
    persistentRows(k, s, lhs, rhs, sizes, out, rowTiles, gridN);
    return k;
  }
  k.grid(rowTiles * gridN);
  const std::pair<Value, Value> origin = grouped_block(k.program_id(0), rowTiles, gridN, kGroupTiles, 1, bn);
  RowTile tile = findRowTile(k, sizes, s.G, s.M, bm, origin.first);
  const Value n0 = origin.second;
  Value g = maximum(tile.group, 0);  // the tail's loads read group 0; its loop runs no step
  StepBlocks blocks = [&](const Value &k0) {
    Value a = lhs.load({tile.row0, k0}, {bm, bk});
    Value b = s.trans_rhs ? rhs.load({g, n0, k0}, {1, bn, bk}).reshape({bn, bk}).trans()
                          : rhs.load({g, k0, n0}, {1, bk, bn}).reshape({bk, bn});
    return std::pair{a, b};
  };
  Value steps = where(tile.found, k.constant(double(s.R), DType::I32), k.constant(0, DType::I32));
  Value zero = k.constant(0, DType::I32), acc = k.full({bm, bn}, 0.0, s.compute);
  if (tma) {
    // A block of group g's rhs stays in g's rows: R is a multiple of block_k (forward,
    // check_config); the dlhs's rows past C reach the next group's, which feed only
    // output columns past C, never stored.
    // Every program runs all of K (a trip count the compiler knows: a loop that may run
    // no step would join the accumulator's in-flight registers at its exit, and ptxas
    // would serialize the wgmma chain); the zero tail reads lhs rows past M, which TMA
    // fills with zeros.
    const TmaRing ring = TmaRing::make(k, s.blocks.stages, 2, s.blocks.num_warps);
    const SharedBuffer rings[2] = {k.shared_buffer(s.blocks.stages), k.shared_buffer(s.blocks.stages)};
    TmaRingCopies copies = [&](const Value &k0, const Value &slot) {
      return rowsCopies(s, lhs, rhs, rings, ring, tile, n0, k0, slot);
    };
    acc = tma_ring_loop(k, Value(cdiv(s.R, bk)), bk, ring, {acc}, copies,
                        [&](const Value &, std::vector<Value> accs, std::vector<Value> b) {
                          Value rhsBlock = s.trans_rhs ? b[1].trans() : b[1];
                          return std::vector<Value>{dot_wait(dot_async(b[0], rhsBlock, accs[0]), 1)};
                        })[0];
  } else if (s.blocks.async_copy) {
    const SharedBuffer rings[2] = {k.shared_buffer(s.blocks.stages), k.shared_buffer(s.blocks.stages)};
    RingCopies copies = [&](const Value &k0, const Value &slot) {
      return std::vector<Value>{lhs.load_async({tile.row0, k0}, {bm, bk}, rings[0], slot),
                                s.trans_rhs ? rhs.load_async({g, n0, k0}, {1, bn, bk}, rings[1], slot)
                                            : rhs.load_async({g, k0, n0}, {1, bk, bn}, rings[1], slot)};
    };
    acc = ring_loop(k, zero, steps, bk, s.blocks.stages, {acc}, copies,
                    [&](const Value &, std::vector<Value> accs, std::vector<Value> b) {
                      return std::vector<Value>{dot(b[0], s.trans_rhs ? b[1].trans() : b[1], accs[0])};
                    })[0];
  } else {
    acc = productLoop(k, s.blocks, zero, steps, acc, blocks);
  }
  storeRows(k, s, out, tile, n0, acc);
  return k;
}

Kernel groups_kernel(const GroupsKernelSpec &s) {
  checkExtents("drhs", s.M, s.K, s.N, s.G);
  const int64_t bm = s.blocks.block_m, bn = s.blocks.block_n, bk = s.blocks.block_k;
  // With drhs_wgmma (hopper) the ring's whole steps run on wgmma, both slots read by the
  // tensor cores; the masked last step's blocks come from registers (mma.sync).
  const bool wgmma = s.blocks.tma && s.blocks.drhs_wgmma;
  Kernel k("ragged_dot_drhs", {.num_warps = s.blocks.num_warps, .mma_rows_per_warp = wgmma, .wgmma_dots = wgmma});
  TensorArg dout = k.input("dout", s.dtype, {s.M, s.N});
  TensorArg lhs = k.input("lhs", s.dtype, {s.M, s.K});
  TensorArg sizes = k.input("group_sizes", DType::I32, {s.G});
  TensorArg drhs = k.output("drhs", s.dtype, {s.G, s.K, s.N});
  const int64_t gridM = cdiv(s.K, bm), gridN = cdiv(s.N, bn), perGroup = gridM * gridN;
  k.grid(s.G * perGroup);
  Value pid = k.program_id(0), g = pid / Value(perGroup);
  const std::pair<Value, Value> origin = grouped_block(pid % Value(perGroup), gridM, gridN, kGroupTiles, bm, bn);
  const Value m0 = origin.first, n0 = origin.second;
  Value zero = k.constant(0, DType::I32);
  // This group's rows [start, end).
  std::vector<Value> r = k.loop(0, s.G, 1, {zero, zero, zero}, [&](Value i, std::vector<Value> c) {
    Value end = groupEnd(sizes, i, c[0], s.M);
    return std::vector<Value>{end, where(i == g, c[0], c[1]), where(i == g, end, c[2])};
  });
  const Value &start = r[1], &end = r[2];
  StepBlocks blocks = [&](const Value &r0) {
    Value inGroup = ((r0 + k.arange(0, bk)) < end).expand(1);
    Value a = where(inGroup, lhs.load({r0, m0}, {bk, bm}), 0.0);
    Value b = where(inGroup, dout.load({r0, n0}, {bk, bn}), 0.0);
    return std::pair{a.trans(), b};
  };
  Value acc = k.full({bm, bn}, 0.0, s.compute);
  if (s.blocks.async_copy) {
    // Whole steps through the ring need no mask (they start at the group's first row);
    // the rows past the last whole step take one masked step from registers.
    Value whole = start + (end - start) / Value(bk) * Value(bk);
    const SharedBuffer rings[2] = {k.shared_buffer(s.blocks.stages), k.shared_buffer(s.blocks.stages)};
    RingCopies copies = [&](const Value &r0, const Value &slot) {
      return std::vector<Value>{lhs.load_async({r0, m0}, {bk, bm}, rings[0], slot),
                                dout.load_async({r0, n0}, {bk, bn}, rings[1], slot)};
    };
    acc = ring_loop(k, start, whole, bk, s.blocks.stages, {acc}, copies,
                    [&](const Value &, std::vector<Value> accs, std::vector<Value> b) {
                      return std::vector<Value>{dot(b[0].trans(), b[1], accs[0])};
                    })[0];
    auto [a, b] = blocks(whole);
    acc = dot(a, b, acc);
  } else {
    acc = productLoop(k, s.blocks, start, end, acc, blocks);
  }
  drhs.store({g, m0, n0}, acc.to(s.dtype).reshape({1, bm, bn}));
  return k;
}

} // namespace tokamax::ragged_detail
