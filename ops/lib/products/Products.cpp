//===- Products.cpp - What the tiled product ops share ---------------------===//
#include "ops/lib/products/Products.h"

#include "ops/lib/framework/KernelExecutor.h"

#include <fmt/format.h>

#include <algorithm>

namespace tokamax {

using namespace dsl;

Value exact_product(const Value &a, const Value &b, const Value &acc) {
  // [bm, bk, 1] * [1, bk, bn], summed over k.
  return acc + (a.expand(2) * b.expand(0)).sum(1);
}

std::optional<std::string> why_not_tensor_cores(ProductImpl impl, DType dtype) {
  if (impl == ProductImpl::Reference || dtype == DType::BF16 || dtype == DType::F16)
    return std::nullopt;
  return fmt::format("{} serves bf16 and f16 (tensor cores), not {}; use reference", impl_name(impl),
                     dtype_name(dtype));
}

std::optional<std::string> why_not_tma_rows(const char *operands, const char *first_name, int64_t first,
                                            const char *second_name, int64_t second) {
  if (first % 8 == 0 && second % 8 == 0)
    return std::nullopt;
  return fmt::format("hopper reads {} by TMA in rows of whole 16-byte chunks: {} {} and {} {} must be multiples of 8; "
                     "use tile",
                     operands, first_name, first, second_name, second);
}

std::vector<TileBlocks> products_detail::tile_candidates(bool ring) {
  std::vector<TileBlocks> candidates;
  for (int64_t bm : {64, 128, 256})
    for (int64_t bn : {64, 128, 256})
      for (int64_t bk : {32, 64})
        for (int64_t warps : {4, 8})
          for (int64_t stages : {0, 3, 4}) {  // 0: register loads
            if (stages && !ring)
              continue;
            const ProductRing loads = stages ? ProductRing{.async_copy = true, .stages = stages} : ProductRing{};
            candidates.push_back({{bm, bn, bk, warps}, loads});
          }
  return candidates;
}

std::optional<std::string> check_block_sizes(const ProductBlocks &b, bool tile) {
  auto isPowerOfTwo = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  const int64_t minBlock = tile ? 16 : 1;
  for (auto [key, v] : {std::pair{"block_m", b.block_m}, std::pair{"block_n", b.block_n}})
    if (!isPowerOfTwo(v) || v < minBlock || v > 256)
      return fmt::format("{} must be a power of two in [{}, 256], got {}", key, minBlock, v);
  if (!isPowerOfTwo(b.block_k) || b.block_k < minBlock || b.block_k > 128)
    return fmt::format("block_k must be a power of two in [{}, 128], got {}", minBlock, b.block_k);
  if (b.num_warps != 1 && b.num_warps != 2 && b.num_warps != 4 && b.num_warps != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", b.num_warps);
  // Exact products hold [block_m, block_k, block_n] partial products.
  if (const int64_t partials = b.block_m * b.block_k * b.block_n; !tile && partials > 8192)
    return fmt::format("block_m * block_k * block_n must be at most 8192 for exact products, got {}", partials);
  return std::nullopt;
}

ProductBlocks reference_blocks() { return {16, 16, 8, 4}; }

std::optional<std::string> check_reference_blocks(const ProductBlocks &b) {
  return check_block_sizes(b, /*tile=*/false);
}

std::vector<ProductBlocks> reference_search_space() {
  std::vector<ProductBlocks> space{reference_blocks()};
  for (auto [bm, bn] : {std::pair<int64_t, int64_t>{16, 32}, {32, 16}})
    products_detail::add_new(space, ProductBlocks{bm, bn, 8, 4},
                             [](const ProductBlocks &c) { return !check_reference_blocks(c); });
  return space;
}

std::optional<std::string> check_ring_keys(const ProductRing &r, bool serves, int64_t K, int64_t N) {
  if (r.async_copy && !serves)
    return fmt::format("async_copy needs bf16 / f16 with K and N multiples of 8 (rows of 16-byte chunks), got "
                       "K {}, N {}",
                       K, N);
  // TMA rings wait on each slot's own barrier, so they may be deeper than a cp.async ring
  // (whose waits count the copies in flight).
  const int64_t most = r.tma ? 8 : 4;
  if (r.stages && (!r.async_copy || *r.stages < 2 || *r.stages > most))
    return most == 4 ? fmt::format("stages (the cp.async ring's slots) must be 2, 3 or 4 with \"async_copy\": 1, "
                                   "got {}",
                                   *r.stages)
                     : fmt::format("stages (the TMA ring's slots) must be 2 to 8, got {}", *r.stages);
  return std::nullopt;
}

std::optional<std::string> check_tma_ring_keys(const ProductBlocks &b, const ProductRing &r, int64_t elem_bytes) {
  if (!r.tma)
    return std::nullopt;
  if (!r.async_copy || b.block_m != 16 * b.num_warps || b.num_warps % 4 != 0)
    return fmt::format("tma (TMA rings and a producer warpgroup, sm_90a) needs \"async_copy\": 1, 4 or 8 warps and "
                       "block_m = 16 * num_warps, got block_m {} with {} warps",
                       b.block_m, b.num_warps);
  return check_tma_block_shape(b.block_k, "block_n", b.block_n, elem_bytes);
}

std::optional<std::string> HopperBlocks::refused_key(const std::string &key) {
  if (key == "async_copy" || key == "tma" || key == "wgmma")
    return fmt::format("unknown key \"{}\" for hopper (its kernels are always on TMA rings)", key);
  return std::nullopt;
}

std::optional<std::string> check_tma_block_shape(int64_t bk, const char *cols_key, int64_t cols, int64_t elem_bytes) {
  if (bk * elem_bytes != 32 && bk * elem_bytes != 64 && bk * elem_bytes != 128)
    return fmt::format("tma needs block_k of 32, 64 or 128 bytes (a swizzle row), got {}", bk);
  if (cols * elem_bytes % 128 != 0)
    return fmt::format("tma needs {} of whole 128-byte rows ({} elements), got {}", cols_key, 128 / elem_bytes, cols);
  return std::nullopt;
}

void launch_matmul_step(ops_detail::KernelExecutor &ex, const char *op, MatmulKernelKind kind, const MatmulSpec &spec,
                        TensorView a, TensorView b, TensorView c, int64_t window) {
  static const char *names[] = {"reference", "tile", "hopper"};
  MatmulConfig mc = kind == MatmulKernelKind::Hopper ? default_hopper_config(spec, ex.sm_count())
                    : kind == MatmulKernelKind::Tile ? default_config(spec)
                                                     : MatmulConfig{};
  KernelKey key = ops_detail::specializationKey(
      fmt::format("{}_matmul_{}", op, names[int(kind)]).c_str(),
      {spec.m, spec.n, spec.k, int64_t(spec.dtype), int64_t(spec.out_dtype), spec.trans_a, spec.trans_b,
       spec.accumulate, spec.b_cols, spec.c_cols, mc.block_m, mc.block_n, mc.block_k, mc.group_m, mc.num_warps,
       mc.num_stages, mc.warp_specialize, mc.cluster_m, mc.tma_store, mc.programs, mc.rebalance_registers});
  ex.launch(
      key,
      [=] {
        switch (kind) {
        case MatmulKernelKind::Hopper: return matmul_hopper_kernel(spec, mc);
        case MatmulKernelKind::Tile: return matmul_kernel(spec, mc);
        case MatmulKernelKind::Reference: break;
        }
        return matmul_reference_kernel(spec);
      },
      spec.windowed() ? std::vector<ops_detail::KernelExecutor::Arg>{std::move(a), std::move(b), std::move(c),
                                                                     ops_detail::KernelExecutor::Arg::value(1.0),
                                                                     ops_detail::KernelExecutor::Arg::value(double(window))}
                      : std::vector<ops_detail::KernelExecutor::Arg>{std::move(a), std::move(b), std::move(c),
                                                                     ops_detail::KernelExecutor::Arg::value(1.0)});
}

} // namespace tokamax
