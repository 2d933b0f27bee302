//===- Kernels.cpp - Matrix multiplication: tile and reference kernels -------===//
#include <tokamax/ops/Matmul.h>

#include "ops/lib/matmul/Common.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Pipeline.h>

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tokamax {

using namespace dsl;

void check_matmul_spec(const MatmulSpec &spec, bool reference) {
  // (The op serves empty products without a kernel; a kernel needs every extent.)
  if (spec.m < 1 || spec.n < 1 || spec.k < 1)
    throw Error(fmt::format("matmul: needs M, N, K >= 1, got {} x {} x {}", spec.m, spec.n, spec.k));
  check_matmul_dtypes(spec, reference);
}

void check_matmul_dtypes(const MatmulSpec &spec, bool reference) {
  if (!is_floating(spec.dtype))
    throw Error(fmt::format("matmul: dtype must be bf16, f16, f32, f64, f8e4m3 or f8e5m2, got {}",
                            dtype_name(spec.dtype)));
  if (spec.dtype == DType::F64 && !reference)
    throw NotSupported("matmul: f64 has no tensor-core path; use matmul_reference_kernel "
                       "(the CUDA cores, or the CPU interpreter)");
  DType wide = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  DType narrow = is_fp8(spec.dtype) ? DType::BF16 : spec.dtype;  // fp8 products come out as bf16 or f32
  if (spec.out_dtype != narrow && spec.out_dtype != wide)
    throw Error(fmt::format("matmul: c must be {} or {} for {} inputs, got {}", dtype_name(narrow),
                            dtype_name(wide), dtype_name(spec.dtype), dtype_name(spec.out_dtype)));
}

std::string tile_unsupported(const MatmulSpec &spec) {
  if (spec.dtype == DType::F64 || is_fp8(spec.dtype))
    return fmt::format("the tile kernel (mma.sync) takes bf16, f16 or f32, got {}", dtype_name(spec.dtype));
  return {};
}

bool rows_of_16_bytes(const MatmulSpec &spec) {
  int64_t rowA = spec.trans_a ? spec.m : spec.k, rowB = spec.trans_b ? spec.k : spec.n;
  int64_t perRow = 16 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));
  return rowA % perRow == 0 && rowB % perRow == 0;
}

namespace {

struct Params {
  TensorArg a, b, bias, c;
  Value alpha;
};

Params declare(Kernel &k, const MatmulSpec &spec, DType scalar) {
  Params p;
  p.a = k.input("a", spec.dtype, spec.trans_a ? std::vector<int64_t>{spec.k, spec.m} : std::vector<int64_t>{spec.m, spec.k});
  p.b = k.input("b", spec.dtype, spec.trans_b ? std::vector<int64_t>{spec.n, spec.k} : std::vector<int64_t>{spec.k, spec.n});
  if (spec.has_bias)
    p.bias = k.input("bias", spec.out_dtype, {spec.n});
  p.c = k.output("c", spec.out_dtype, {spec.m, spec.n});
  p.alpha = k.scalar("alpha", scalar);
  return p;
}

Value cast(const Value &v, DType dtype) { return v.dtype() == dtype ? v : v.to(dtype); }

/// [bm, bk] block of op(a) and [bk, bn] block of op(b) at (m0, k0) and (k0, n0).
Value blockA(const MatmulSpec &spec, const Params &p, Value m0, Value k0, int64_t bm, int64_t bk) {
  return spec.trans_a ? p.a.load({k0, m0}, {bk, bm}).trans() : p.a.load({m0, k0}, {bm, bk});
}
Value blockB(const MatmulSpec &spec, const Params &p, Value k0, Value n0, int64_t bk, int64_t bn) {
  return spec.trans_b ? p.b.load({n0, k0}, {bn, bk}).trans() : p.b.load({k0, n0}, {bk, bn});
}

/// alpha * acc (+ bias) (+ c with spec.accumulate), stored to c at (m0, n0), through TMA
/// when `tma`.
void epilogue(const MatmulSpec &spec, const Params &p, Value acc, Value m0, Value n0, int64_t bn, bool tma = false) {
  Value out = acc * cast(p.alpha, acc.dtype());
  if (spec.has_bias)
    out = out + cast(p.bias.load({n0}, {bn}), acc.dtype()).expand(0);
  if (spec.accumulate)
    out = out + cast(p.c.load({m0, n0}, {acc.shape()[0], bn}), acc.dtype());
  if (tma)
    p.c.tma_store({m0, n0}, cast(out, spec.out_dtype));
  else
    p.c.store({m0, n0}, cast(out, spec.out_dtype));
}

} // namespace



MatmulConfig default_config(const MatmulSpec &spec) {
  MatmulConfig config;
  config.block_m = std::clamp<int64_t>(dsl::next_power_of_two(spec.m), 16, 128);
  config.block_n = std::clamp<int64_t>(dsl::next_power_of_two(spec.n), 16, 128);
  int64_t minK = spec.dtype == DType::F32 ? 8 : 16;  // one mma K step (k16, tf32 k8)
  if (rows_of_16_bytes(spec)) {
    // cp.async ring: 64-byte K slices (two mma steps), four stages (16 KiB each at
    // 128 x 128 bf16), 64 x 64 warp tiles: 4 warps at 128 x 128.
    config.block_k = 32 / static_cast<int64_t>(dtype_size(spec.dtype)) * 2;
    config.num_stages = 4;
    config.num_warps = static_cast<int>(std::clamp<int64_t>(config.block_m * config.block_n / 4096, 1, 8));
    return config;
  }
  // Register prefetch: one K block of two mma steps, so that both operands' staging
  // tiles fit twice in 48 KiB (double-buffered: one barrier per block).
  config.block_k = std::clamp<int64_t>(dsl::next_power_of_two(spec.k), minK, 2 * minK);
  // About a 32x64 warp tile: 8 warps for 128x128 blocks, fewer for small blocks.
  config.num_warps = static_cast<int>(std::clamp<int64_t>(config.block_m * config.block_n / 2048, 1, 8));
  return config;
}

Kernel matmul_kernel(const MatmulSpec &spec, const MatmulConfig &config) {
  check_matmul_spec(spec, false);
  if (std::string why = tile_unsupported(spec); !why.empty())
    throw NotSupported("matmul: " + why + "; use hopper (sm_90a) or reference");
  int64_t bm = config.block_m, bn = config.block_n, bk = config.block_k;
  Kernel k("matmul", {config.num_warps});
  Params p = declare(k, spec, DType::F32);
  int64_t gridM = cdiv(spec.m, bm), gridN = cdiv(spec.n, bn);
  k.grid(gridM * gridN);
  auto [m0, n0] = grouped_block(k.program_id(0), gridM, gridN, config.group_m, bm, bn);
  Value acc = k.full({bm, bn}, 0.0, DType::F32);

  if (rows_of_16_bytes(spec)) {
    // Rows of whole 16-byte chunks: the cp.async ring streams both operands.
    CpAsyncDotOptions options{.block_k = bk, .stages = config.num_stages, .trans_a = spec.trans_a,
                              .trans_b = spec.trans_b};
    epilogue(spec, p, cp_async_dot(p.a, p.b, m0, n0, acc, options), m0, n0, bn);
    return k;
  }
  // Otherwise masked register loads: the k-loop carries the accumulator and the next
  // blocks, each iteration issuing the loads of block k + bk before the dot of block k.
  std::vector<Value> out = k.loop(
      0, spec.k, bk, {acc, blockA(spec, p, m0, 0, bm, bk), blockB(spec, p, 0, n0, bk, bn)},
      [&](Value k0, std::vector<Value> carried) -> std::vector<Value> {
        Value next = k0 + Value(bk);
        Value a = blockA(spec, p, m0, next, bm, bk), b = blockB(spec, p, next, n0, bk, bn);
        return {dot(carried[1], carried[2], carried[0]), a, b};
      });
  epilogue(spec, p, out[0], m0, n0, bn);
  return k;
}

std::string hopper_unsupported(const MatmulSpec &spec) {
  if (spec.dtype != DType::BF16 && spec.dtype != DType::F16 && !is_fp8(spec.dtype))
    return fmt::format("the hopper matmul takes bf16, f16, f8e4m3 or f8e5m2, got {}", dtype_name(spec.dtype));
  if (is_fp8(spec.dtype) && (spec.trans_a || !spec.trans_b))
    return fmt::format("the hopper matmul reads {} operands K-major only: a as [M, K] and b as [N, K] (trans_b)",
                       dtype_name(spec.dtype));
  int64_t rowA = spec.trans_a ? spec.m : spec.k, rowB = spec.trans_b ? spec.k : spec.n;
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
  if (spec.accumulate) {  // the epilogue holds c's tile beside the accumulator
    config.block_n = std::min<int64_t>(config.block_n, 128);
    config.rebalance_registers = true;  // 168 registers a thread spilled; the consumers get 232
  }
  config.block_k = 128 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));  // 128-byte rows
  config.num_warps = 8;
  // 128 x 256 x 64 bf16 (or x 128 fp8) stages are 48 KiB: four fit in the 227 KiB a program may use.
  config.num_stages = config.block_n == 256 ? 4 : 6;
  if (spec.accumulate)  // c's f32 tile meets the accumulator's layout through 64 KiB of shared memory
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
  Params p = declare(k, spec, DType::F32);
  // a's and b's copies; in order no consumer releases a slot (the block barrier orders refills).
  const TmaRing ring = config.warp_specialize ? TmaRing::make(k, stages, 2, config.num_warps)
                                              : TmaRing{stages, k.mbarriers(stages, 2), {}};
  SharedBuffer aRing = k.shared_buffer(stages), bRing = k.shared_buffer(stages);
  auto copies = [&](const Value &m0, const Value &n0, const Value &k0, const Value &slot) {
    Value a = spec.trans_a ? p.a.load_tma({k0, m0}, {bk, bm}, aRing, slot, ring.full, slot)
                           : p.a.load_tma({m0, k0}, {bm, bk}, aRing, slot, ring.full, slot);
    Value b = spec.trans_b ? p.b.load_tma({n0, k0}, {bn, bk}, bRing, slot, ring.full, slot)
                           : p.b.load_tma({k0, n0}, {bk, bn}, bRing, slot, ring.full, slot);
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
  // TMA stores need rows of c of whole 16-byte chunks and room for two [bm][128-byte]
  // strips beside the ring (1 KiB of slack each); otherwise the threads store.
  const int64_t outBytes = static_cast<int64_t>(dtype_size(spec.out_dtype));
  bool tmaStore = config.tma_store && spec.n * outBytes % 16 == 0 && bn * outBytes % 128 == 0 &&
                  hopper_ring_bytes(config, static_cast<int64_t>(dtype_size(spec.dtype))) +
                          hopper_store_strip_bytes(config) <=
                      kHopperSharedLimit;
  if (config.tma_ring)
    return tma_ring_kernel(spec, config, tmaStore);
  Kernel k("matmul_hopper", {config.num_warps});
  Params p = declare(k, spec, DType::F32);
  // Work is handed out in units of `cluster` vertically adjacent blocks (one per CTA of
  // a cluster; a unit hanging below M computes zeros and stores nothing).
  int64_t gridM = cdiv(cdiv(spec.m, bm), cluster), gridN = cdiv(spec.n, bn), units = gridM * gridN;
  TmaDotOptions options{.block_k = config.block_k, .stages = config.num_stages, .trans_a = spec.trans_a,
                        .trans_b = spec.trans_b, .warp_specialize = config.warp_specialize,
                        .cluster_m = cluster, .a_in_registers = config.a_in_registers};
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

Kernel matmul_reference_kernel(const MatmulSpec &spec) {
  check_matmul_spec(spec, true);
  constexpr int64_t bm = 16, bn = 16, bk = 8;
  DType accType = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  Kernel k("matmul_reference", {4});
  Params p = declare(k, spec, accType);
  k.grid(cdiv(spec.m, bm), cdiv(spec.n, bn));
  Value m0 = k.program_id(0) * Value(bm), n0 = k.program_id(1) * Value(bn);
  Value acc = k.full({bm, bn}, 0.0, accType);
  std::vector<Value> out = k.loop(0, spec.k, bk, {acc}, [&](Value k0, std::vector<Value> carried) {
    Value a = cast(blockA(spec, p, m0, k0, bm, bk), accType);
    Value b = cast(blockB(spec, p, k0, n0, bk, bn), accType);
    return std::vector<Value>{exact_product(a, b, carried[0])};
  });
  epilogue(spec, p, out[0], m0, n0, bn);
  return k;
}

} // namespace tokamax
