//===- Tile.cpp - matmul's tile implementation (mma.sync, sm_80+) ----------===//
//
// A block M x N per program: a cp.async ring of K slices where the rows of a and b are
// whole 16-byte chunks, else masked register loads; its heuristic (default_config),
// search space and config checks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/matmul/Common.h"

#include <tokamax/dsl/Pipeline.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax {

using namespace dsl;
using matmul_impl::blockA;
using matmul_impl::blockB;
using matmul_impl::epilogue;
using matmul_impl::Params;

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
  if (spec.windowed())
    throw NotSupported("matmul: windows of b or c (b_cols / c_cols) need the hopper kernel");
  if (std::string why = tile_unsupported(spec); !why.empty())
    throw NotSupported("matmul: " + why + "; use hopper (sm_90a) or reference");
  int64_t bm = config.block_m, bn = config.block_n, bk = config.block_k;
  Kernel k("matmul", {config.num_warps});
  Params p = matmul_impl::declare(k, spec, DType::F32);
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

namespace matmul_impl {

std::optional<std::string> Tile::why_not(const Problem &p) {
  if (std::string why = tile_unsupported(p.spec); !why.empty())
    return why;
  return std::nullopt;
}

/// One program per tile ("programs" is the hopper kernel's; the tile maps hold 0).
Tile::Config Tile::heuristic(const Problem &p) { return {default_config(p.spec), 0}; }

std::optional<std::string> Tile::check(const Problem &p, const Config &keyed) {
  if (auto problem = check_blocks(keyed))
    return problem;
  const MatmulSpec &spec = p.spec;
  const MatmulConfig c = keyed.resolved(1);
  const int64_t bytes = static_cast<int64_t>(dtype_size(spec.dtype));
  if (c.block_m < 16 || c.block_n < 16 || c.block_m > 256 || c.block_n > 256)
    return fmt::format("block_m and block_n must be in [16, 256], got {} x {}", c.block_m, c.block_n);
  // The cp.async ring (masked register loads without one: any power-of-two block_k): K
  // slices of whole mma steps.
  if (rows_of_16_bytes(spec)) {
    if (c.block_k * bytes % 32 != 0 || c.block_k * bytes > 256)
      return fmt::format("block_k must be a multiple of {} up to {} for {}, got {}", 32 / bytes, 256 / bytes,
                         dtype_name(spec.dtype), c.block_k);
    if (c.num_stages < 2 || c.num_stages > 8)
      return fmt::format("num_stages must be in [2, 8], got {}", c.num_stages);
  }
  return check_shared_memory(kind, p, keyed, matmul_kernel);
}

std::vector<Tile::Config> Tile::search_space(const Problem &p) {
  std::vector<Config> space{heuristic(p)};
  const int64_t minK = p.spec.dtype == DType::F32 ? 8 : 16;
  for (auto [bm, bn, warps] : {std::tuple<int64_t, int64_t, int>{128, 128, 4}, {128, 128, 8}, {128, 256, 8},
                               {256, 128, 8}, {64, 128, 4}, {64, 64, 4}})
    for (int64_t bk : {2 * minK, 4 * minK})
      for (int64_t stages : {3, 4}) {
        MatmulConfig c = default_config(p.spec);
        c.block_m = bm, c.block_n = bn, c.block_k = bk, c.num_warps = warps, c.num_stages = stages;
        const Config keyed(c, 0);
        add_candidate(space, keyed, check(p, keyed));
      }
  return space;
}

void Tile::execute(const Problem &p, const Config &c, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) {
  run_matmul(kind, p, c.resolved(executor.sm_count()), matmul_kernel, inputs, outputs, executor);
}

} // namespace matmul_impl
} // namespace tokamax
