//===- Hopper.cpp - matmul's hopper implementation (sm_90a) ----------------===//
//
// TMA into shared-memory rings, wgmma, a producer warpgroup, a persistent grid: the
// kernel (tma_dot's main loop, or the DSL's Hopper primitives with tma_ring), its
// heuristic, search space and config checks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/matmul/Common.h"

#include <tokamax/dsl/Pipeline.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax {

using namespace dsl;
using matmul_impl::epilogue;
using matmul_impl::Params;

std::string hopper_unsupported(const MatmulSpec &spec) {
  if (spec.dtype != DType::BF16 && spec.dtype != DType::F16 && !is_fp8(spec.dtype))
    return fmt::format("the hopper matmul takes bf16, f16, f8e4m3 or f8e5m2, got {}", dtype_name(spec.dtype));
  if (is_fp8(spec.dtype) && (spec.trans_a || !spec.trans_b))
    return fmt::format("the hopper matmul reads {} operands K-major only: a as [M, K] and b as [N, K] (trans_b)",
                       dtype_name(spec.dtype));
  int64_t rowA = spec.trans_a ? spec.m : spec.k,
          rowB = spec.trans_b ? spec.b_stored_k() : spec.n;
  if (!rows_of_16_bytes(spec))
    return fmt::format("the hopper matmul needs rows of a and b that are multiples of 16 bytes (TMA); a's rows "
                       "have {} elements, b's {}",
                       rowA, rowB);
  return {};
}

MatmulConfig default_hopper_config(const MatmulSpec &spec, int sm_count) {
  MatmulConfig config;
  config.block_m = 128;
  config.block_n = spec.n > 128 ? 256 : std::max<int64_t>(64, dsl::next_power_of_two(spec.n));
  while (spec.c_cols > 0 && config.block_n > 64 && spec.n % config.block_n != 0)
    config.block_n /= 2;  // a window of c: its tiles end at its end
  // An f32 c with rows of 16-byte multiples accumulates by TMA reduce-adds (the epilogue);
  // otherwise the epilogue holds c's tile beside the accumulator.
  const bool reduceAdd = spec.out_dtype == DType::F32 && spec.c_stored_n() * 4 % 16 == 0 && dtype_size(spec.dtype) == 2;
  if (spec.accumulate && !reduceAdd) {
    config.block_n = std::min<int64_t>(config.block_n, 128);
    config.rebalance_registers = true;  // 168 registers a thread spilled; the consumers get 232
  }
  config.block_k = 128 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));  // 128-byte rows
  config.num_warps = 8;
  // 128 x 256 x 64 bf16 (or x 128 fp8) stages are 48 KiB: four fit in the 227 KiB a program may use.
  config.num_stages = config.block_n == 256 ? 4 : 6;
  if (spec.accumulate && !reduceAdd)  // c's f32 tile meets the accumulator's layout through 64 KiB of shared memory
    config.num_stages = 4;
  config.programs = sm_count;
  return config;
}

namespace {

/// The hopper kernel's main loop on the DSL's Hopper primitives: a's [bm, block_k] (or
/// [block_k, bm]) and b's [block_k, bn] (or [bn, block_k]) slices per K step through TMA
/// rings, both read by wgmma from shared memory; each step's product stays in flight
/// until the next one has been issued.
///   - in order (no warp_specialize): one program per tile, every warp waits, multiplies
///     and refills (ring_loop);
///   - warp-specialized: a producer warpgroup (Kernel::specialized_loop) walks the K
///     steps, refilling a slot once every consumer thread has released it. With a
///     persistent grid (`programs` fewer than the tiles: tiles p, p + P, ... in grouped
///     order) a loop over the program's tiles holds their K steps (tma_tile_loop): the
///     consumers store each tile after its last step and start the next from zero, while
///     the producer loads the next tile's slices.
Kernel tma_ring_kernel(const MatmulSpec &spec, const MatmulConfig &config, bool tmaStore) {
  const int64_t bm = config.block_m, bn = config.block_n, bk = config.block_k, stages = config.num_stages;
  const int64_t gridM = cdiv(spec.m, bm), gridN = cdiv(spec.n, bn), units = gridM * gridN, steps = cdiv(spec.k, bk);
  const int64_t programs = config.programs == 0 || config.programs >= units ? units : config.programs;
  const bool persistent = config.warp_specialize && programs < units;
  // The persistent producer's nested tile / step loops spill at 24 registers (8-40
  // bytes); at 40 the consumers keep 232, more than a 128 x 256 accumulator needs.
  Kernel k("matmul_hopper_tma_ring", {.num_warps = config.num_warps,
                                      .mma_rows_per_warp = true,
                                      .wgmma_dots = true,
                                      .producer_registers = persistent ? 40 : 24});
  Params p = matmul_impl::declare(k, spec, DType::F32);
  // a's and b's copies; in order no consumer releases a slot (the block barrier orders refills).
  const TmaRing ring = config.warp_specialize ? TmaRing::make(k, stages, 2, config.num_warps)
                                              : TmaRing{stages, k.mbarriers(stages, 2), {}};
  SharedBuffer aRing = k.shared_buffer(stages), bRing = k.shared_buffer(stages);
  auto copies = [&](const Value &m0, const Value &n0, const Value &k0, const Value &slot) {
    Value a = spec.trans_a ? p.a.load_tma({k0, m0}, {bk, bm}, aRing, slot, ring.full, slot)
                           : p.a.load_tma({m0, k0}, {bm, bk}, aRing, slot, ring.full, slot);
    const Value bK = spec.b_cols > 0 ? k0 + *p.window : k0;
    Value b = spec.trans_b ? p.b.load_tma({n0, bK}, {bn, bk}, bRing, slot, ring.full, slot)
                           : p.b.load_tma({bK, n0}, {bk, bn}, bRing, slot, ring.full, slot);
    return std::vector<Value>{a, b};
  };
  // A step's a and b as the product reads them (a transposed slot is a view of it).
  auto operands = [&](const std::vector<Value> &blocks) {
    return std::pair{spec.trans_a ? blocks[0].trans() : blocks[0], spec.trans_b ? blocks[1].trans() : blocks[1]};
  };
  // The step's product, left in flight until the next one is issued.
  RingProducts products = [&](const Value &, std::vector<Value> accs, std::vector<Value> blocks) {
    auto [a, b] = operands(blocks);
    return std::vector<Value>{dot_wait(dot_async(a, b, accs[0]), 1)};
  };
  Value zeros = k.full({bm, bn}, 0.0, DType::F32);
  if (!persistent) {
    k.grid(units);
    auto [m0, n0] = grouped_block(k.program_id(0), gridM, gridN, config.group_m, bm, bn);
    TmaRingCopies step = [&](const Value &k0, const Value &slot) { return copies(m0, n0, k0, slot); };
    std::vector<Value> acc =
        config.warp_specialize
            ? tma_ring_loop(k, Value(steps), bk, ring, {zeros}, step, products)
            : ring_loop(k, 0, Value(spec.k), bk, stages, {zeros}, step, products, &ring.full);
    epilogue(spec, p, config.warp_specialize ? acc[0] : dot_wait(acc[0], 0), m0, n0, bn, tmaStore);
    return k;
  }
  // Persistent: a loop over the program's tiles holding their K steps, each step's
  // product left in flight until the next step's is issued. A tile's first product
  // starts from zero (dot_async's `fresh`: no select on registers in flight); its store
  // follows the tile's completed products, while the producer loads the next tile's.
  k.grid(programs);
  Value pid = k.program_id(0);
  Value tiles = (Value(units) - pid + Value(programs - 1)) / Value(programs);
  auto origin = [&](const Value &tile) {
    return grouped_block(pid + tile * Value(programs), gridM, gridN, config.group_m, bm, bn);
  };
  TmaTileLoop body;
  body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
    auto [m0, n0] = origin(tile);
    return copies(m0, n0, k0, slot);
  };
  body.products = [&](const std::vector<Value> &blocks, const std::vector<Value> &accs, const Value &fresh) {
    auto [a, b] = operands(blocks);
    return std::vector<Value>{dot_async(a, b, accs[0], fresh)};
  };
  body.done = [&](const Value &tile, const std::vector<Value> &accs, std::vector<Value>) {
    auto [m0, n0] = origin(tile);
    epilogue(spec, p, accs[0], m0, n0, bn, tmaStore);
    return std::vector<Value>{};
  };
  tma_tile_loop(k, tiles, steps, bk, ring, {zeros}, {}, body);
  return k;
}

} // namespace

Kernel matmul_hopper_kernel(const MatmulSpec &spec, const MatmulConfig &config) {
  check_matmul_spec(spec, false);
  if (std::string why = hopper_unsupported(spec); !why.empty())
    throw NotSupported("matmul: " + why);
  if (config.programs < 0)
    throw Error(fmt::format("matmul: programs must be >= 0 (0: one program per tile), got {}", config.programs));
  if (config.cluster_m != 1 && config.cluster_m != 2)
    throw Error(fmt::format("matmul: cluster_m must be 1 or 2, got {}", config.cluster_m));
  int64_t bm = config.block_m, bn = config.block_n, cluster = config.cluster_m;
  // A window's last tile (or K slice) must end at the window's end: past it lie the
  // wider tensor's other columns, which c's stores would overwrite (and b's would feed).
  if (spec.c_cols > 0 && spec.n % bn != 0)
    throw Error(fmt::format("matmul: a window of c (c_cols {}) needs N {} to be a multiple of block_n {}",
                            spec.c_cols, spec.n, bn));
  if (spec.b_cols > 0 && spec.k % config.block_k != 0)
    throw Error(fmt::format("matmul: a window of b (b_cols {}) needs K {} to be a multiple of block_k {}",
                            spec.b_cols, spec.k, config.block_k));
  // TMA stores need rows of c of whole 16-byte chunks and room for two [bm][128-byte]
  // strips beside the ring (1 KiB of slack each); otherwise the threads store.
  const int64_t outBytes = static_cast<int64_t>(dtype_size(spec.out_dtype));
  bool tmaStore = config.tma_store && spec.c_stored_n() * outBytes % 16 == 0 && bn * outBytes % 128 == 0 &&
                  hopper_ring_bytes(config, static_cast<int64_t>(dtype_size(spec.dtype))) +
                          hopper_store_strip_bytes(config) <=
                      kHopperSharedLimit;
  if (config.tma_ring)
    return tma_ring_kernel(spec, config, tmaStore);
  Kernel k("matmul_hopper", {config.num_warps});
  Params p = matmul_impl::declare(k, spec, DType::F32);
  // Work is handed out in units of `cluster` vertically adjacent blocks (one per CTA of
  // a cluster; a unit hanging below M computes zeros and stores nothing).
  int64_t gridM = cdiv(cdiv(spec.m, bm), cluster), gridN = cdiv(spec.n, bn), units = gridM * gridN;
  TmaDotOptions options{.block_k = config.block_k, .stages = config.num_stages, .trans_a = spec.trans_a,
                        .trans_b = spec.trans_b, .warp_specialize = config.warp_specialize,
                        .cluster_m = cluster, .a_in_registers = config.a_in_registers};
  if (spec.b_cols > 0)
    options.b_k0 = *p.window;
  Value first = cluster == 1 ? k.program_id(0) : k.program_id(0) / Value(cluster);
  auto tile = [&](Value unit) {
    auto [m0, n0] = grouped_block(unit, gridM, gridN, std::max<int64_t>(1, config.group_m / cluster), bm * cluster, bn);
    Value m = cluster == 1 ? m0 : m0 + (k.program_id(0) % Value(cluster)) * Value(bm);
    Value acc = tma_dot(p.a, p.b, m, n0, k.full({bm, bn}, 0.0, DType::F32), options);
    epilogue(spec, p, acc, m, n0, bn, tmaStore);
  };
  int64_t programs = config.programs / cluster * cluster;
  if (programs == 0 || programs >= units * cluster) {
    k.grid(units * cluster);
    tile(first);
    return k;
  }
  // Persistent: program p takes units p, p + P, ... (P programs / cluster of them). With a
  // producer warpgroup, the next tile's loads overlap this tile's epilogue.
  options.rebalance_registers = config.rebalance_registers && config.warp_specialize;
  k.grid(programs);
  k.loop(first, Value(units), Value(programs / cluster), {}, [&](Value unit, std::vector<Value>) {
    tile(unit);
    return std::vector<Value>{};
  });
  return k;
}

namespace matmul_impl {

std::optional<std::string> Hopper::why_not(const Problem &p) {
  if (std::string why = hopper_unsupported(p.spec); !why.empty())
    return why;
  return std::nullopt;
}

/// One program per SM of the device, whatever default_hopper_config's count.
Hopper::Config Hopper::heuristic(const Problem &p) { return {default_hopper_config(p.spec), kOnePerSm}; }

std::optional<std::string> Hopper::check(const Problem &p, const Config &keyed) {
  if (auto problem = check_blocks(keyed))
    return problem;
  const MatmulSpec &spec = p.spec;
  const MatmulConfig c = keyed.resolved(1);
  const int64_t bytes = static_cast<int64_t>(dtype_size(spec.dtype));
  // A K-major slice row is one swizzle row of 32, 64 or 128 bytes.
  if (c.block_k * bytes != 32 && c.block_k * bytes != 64 && c.block_k * bytes != 128)
    return fmt::format("block_k must be {}, {} or {} (32-, 64- or 128-byte rows), got {}", 32 / bytes, 64 / bytes,
                       128 / bytes, c.block_k);
  if (c.block_m < 64 || c.block_m > 256 || c.block_n < 64 || c.block_n > 256)
    return fmt::format("block_m and block_n must be 64, 128 or 256, got {} x {}", c.block_m, c.block_n);
  if ((c.num_warps != 4 && c.num_warps != 8) || c.block_m % (16 * c.num_warps) != 0)
    return fmt::format("num_warps must be 4 or 8 with block_m a multiple of 16 * num_warps, got {} for {}",
                       c.num_warps, c.block_m);
  if (c.num_stages < 2)
    return fmt::format("num_stages must be >= 2, got {}", c.num_stages);
  if (c.cluster_m != 1 && c.cluster_m != 2)
    return fmt::format("cluster_m must be 1 or 2, got {}", c.cluster_m);
  if (c.cluster_m == 2 && !c.warp_specialize)
    return std::string("cluster_m = 2 needs warp_specialize");
  if (c.a_in_registers && spec.trans_a)
    return std::string("a_in_registers needs a as [M, K] (trans_a = false)");
  if (c.rebalance_registers && !c.warp_specialize)
    return std::string("rebalance_registers needs warp_specialize");
  if (c.cluster_m == 2 && !spec.trans_b && c.block_n < 128)
    return fmt::format("cluster_m = 2 with b as [K, N] needs block_n >= 128, got {}", c.block_n);
  if (c.tma_ring) {
    if (is_fp8(spec.dtype))
      return fmt::format("tma_ring takes bf16 or f16 operands, got {}", dtype_name(spec.dtype));
    if (c.programs != 0 && !c.warp_specialize)
      return fmt::format("tma_ring in order runs one program per tile (programs 0), got programs {}", c.programs);
    if (c.cluster_m != 1 || c.a_in_registers || c.rebalance_registers)
      return std::string("tma_ring does not combine with cluster_m, a_in_registers or rebalance_registers");
  }
  // The ring (and the TMA store's strips, used only where they fit beside it).
  return check_shared_memory(kind, p, keyed, matmul_hopper_kernel);
}

std::vector<Hopper::Config> Hopper::search_space(const Problem &p) {
  std::vector<Config> space{heuristic(p)};
  auto add = [&](const MatmulConfig &c, int64_t programs) {
    const Config keyed(c, programs);
    add_candidate(space, keyed, check(p, keyed));
  };
  const MatmulConfig heuristicConfig = default_hopper_config(p.spec);
  MatmulConfig c = heuristicConfig;
  for (auto [bm, bn, stages] : {std::tuple<int64_t, int64_t, int64_t>{128, 256, 4}, {128, 256, 3}, {256, 128, 4},
                                {128, 128, 6}, {128, 128, 4}})
    for (int64_t programs : {kOnePerSm, int64_t(0)})
      for (bool tma : {true, false}) {
        c.block_m = bm, c.block_n = bn, c.num_stages = stages, c.warp_specialize = true, c.tma_store = tma;
        add(c, programs);
      }
  // 2-CTA clusters: within 1 % of the default at 4096^3 on the H200, ahead for
  // 128 x 128 blocks (see docs/performance.md): one config keeps them in reach.
  c = heuristicConfig;
  c.cluster_m = 2;
  add(c, kOnePerSm);
  c = heuristicConfig;
  c.warp_specialize = false, c.cluster_m = 1;
  add(c, 0);
  // Registers moved from the producer to the consumers (setmaxnreg): 1-2 % behind the
  // default on the H200 (docs/performance.md), kept in reach for other shapes.
  c = heuristicConfig;
  c.rebalance_registers = true;
  add(c, kOnePerSm);
  // Half-width K slices (64-byte swizzle): twice the stages in the same shared memory;
  // with A from registers too (wgmma RS, a as [M, K] only), where half-width slices
  // keep the fragments of two slices in flight within a consumer's registers.
  c = heuristicConfig;
  c.block_k /= 2, c.num_stages = std::min<int64_t>(8, 2 * c.num_stages);
  add(c, kOnePerSm);
  if (!p.spec.trans_a) {
    c.a_in_registers = true;
    add(c, kOnePerSm);
  }
  return space;
}

/// Persistent over the executor's SMs (132 when only listing kernels, as on an H100 / H200).
void Hopper::execute(const Problem &p, const Config &c, std::span<const TensorView> inputs,
                     std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) {
  run_matmul(kind, p, c.resolved(executor.sm_count()), matmul_hopper_kernel, inputs, outputs, executor);
}

} // namespace matmul_impl
} // namespace tokamax
