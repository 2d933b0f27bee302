//===- Products.h - What the tiled product ops share ----------------*- C++ -*-===//
//
// gated_linear_unit, ragged_dot and the cross-entropy tile their products like matmul
// does: one implementation enum, the matmul kernels their VJPs launch for dx / dw, the
// exact product of the reference kernels, and (gated_linear_unit, ragged_dot) the typed
// configs of their block sizes and rings, with their checks and search spaces.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/TypedConfig.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Op.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax {

/// The implementations of the tiled product ops (gated_linear_unit, ragged_dot, the
/// cross-entropy), in auto's order, and their names ("reference", "tile", "hopper");
/// each op declares them with TOKAMAX_IMPLEMENTATION_MEMBERS (ImplementationAdapter.h).
using ProductImpl = ops_detail::ImplKind;
using ops_detail::impl_name;
/// How the product ops' typed configs list their keys (TypedConfig.h).
using ops_detail::ConfigKey;
using ops_detail::KeyUse;

/// "tile serves bf16 and f16 (tensor cores), not f32; use reference": the tensor-core
/// implementations (tile, hopper) of every tiled product op; nullopt for reference.
std::optional<std::string> why_not_tensor_cores(ProductImpl impl, DType dtype);
/// Why hopper cannot copy `operands` by TMA: their rows (of 16-bit elements) must be
/// whole 16-byte chunks, so the extents `first` and `second` (named) multiples of 8.
std::optional<std::string> why_not_tma_rows(const char *operands, const char *first_name, int64_t first,
                                            const char *second_name, int64_t second);

//===----------------------------------------------------------------------===//
// Typed configs of gated_linear_unit and ragged_dot (same keys as their string maps)
//===----------------------------------------------------------------------===//

/// The output tile [block_m, block_n], the reduction step block_k and the warps: every
/// tiled product kernel's keys, and the reference implementations' whole config.
struct ProductBlocks {
  int64_t block_m = 0, block_n = 0, block_k = 0, num_warps = 0;

  static constexpr auto keys = std::tuple{
      ConfigKey{"block_m", &ProductBlocks::block_m}, ConfigKey{"block_n", &ProductBlocks::block_n},
      ConfigKey{"block_k", &ProductBlocks::block_k},
      ConfigKey{"num_warps", &ProductBlocks::num_warps}};
  bool operator==(const ProductBlocks &) const = default;
};

/// How a tile kernel streams its operand blocks: loads into registers one step ahead, or
/// (async_copy) a cp.async ring of `stages` slots (3 where absent), or with tma (sm_90a)
/// TMA rings a producer warpgroup refills, products on wgmma.
struct ProductRing {
  bool async_copy = false;
  std::optional<int64_t> stages;
  bool tma = false;

  static constexpr auto keys = std::tuple{
      ConfigKey{"async_copy", &ProductRing::async_copy, KeyUse::Optional},
      ConfigKey{"stages", &ProductRing::stages, KeyUse::Optional},
      ConfigKey{"tma", &ProductRing::tma, KeyUse::Optional}};
  bool operator==(const ProductRing &) const = default;
};

/// The tile implementations' config: blocks and operand ring.
struct TileBlocks : ProductBlocks, ProductRing {
  static constexpr auto keys = std::tuple_cat(ProductBlocks::keys, ProductRing::keys);
  bool operator==(const TileBlocks &) const = default;
};

/// The hopper implementations' config: the tile kernels with TMA rings always on, so
/// the blocks and the rings' depth only; async_copy, tma and wgmma are refused by name.
struct HopperBlocks : ProductBlocks {
  std::optional<int64_t> stages;  ///< the TMA rings' slots (3 where absent)

  static constexpr auto keys = std::tuple_cat(
      ProductBlocks::keys,
      std::tuple{ConfigKey{"stages", &HopperBlocks::stages, KeyUse::Optional}});
  static std::optional<std::string> refused_key(const std::string &key);
  bool operator==(const HopperBlocks &) const = default;

  /// The ring the tile kernels run: TMA, `stages` deep.
  ProductRing ring() const { return {.async_copy = true, .stages = stages, .tma = true}; }
};

/// Typed config checks every tiled product kernel shares (gated_linear_unit,
/// ragged_dot), each giving the first problem found, or nullopt:
///   - block_m, block_n (powers of two to 256), block_k (to 128), both from 16 on tensor
///     cores (`tile`), num_warps 1-8; exact products' [block_m, block_k, block_n] partial
///     products at most 8192;
///   - async_copy only where `serves` (K and N rows of 16-byte chunks); stages 2-4 (2-8
///     with tma), only with it;
///   - with tma: async_copy, 4 or 8 warps, block_m = 16 x num_warps, block_k one 32-, 64-
///     or 128-byte swizzle row, block_n whole 128-byte rows.
std::optional<std::string> check_block_sizes(const ProductBlocks &b, bool tile);
std::optional<std::string> check_ring_keys(const ProductRing &r, bool serves, int64_t K, int64_t N);
std::optional<std::string> check_tma_ring_keys(const ProductBlocks &b, const ProductRing &r, int64_t elem_bytes);

namespace products_detail {
/// Appends `c` to `space` unless it is there or `valid` refuses it.
template <class C, class Valid>
void add_new(std::vector<C> &space, C c, const Valid &valid) {
  if (std::find(space.begin(), space.end(), c) == space.end() && valid(c))
    space.push_back(std::move(c));
}
/// A tile search space's blocks and rings after its heuristic, in order (block_search_space).
std::vector<TileBlocks> tile_candidates(bool ring);
} // namespace products_detail

/// The reference implementations of gated_linear_unit and ragged_dot, alike for every
/// problem: the heuristic takes matmul reference's 16 x 16 x 8 blocks on 4 warps, the
/// check is check_block_sizes' for exact products, and the search space is the heuristic
/// then two small blocks that pass it.
ProductBlocks reference_blocks();
std::optional<std::string> check_reference_blocks(const ProductBlocks &b);
std::vector<ProductBlocks> reference_search_space();

/// The search space of a tile implementation (config C: a TileBlocks with its other keys
/// at their defaults): its `heuristic` first, then block_m and block_n in {64, 128, 256}
/// x block_k {32, 64} x {4, 8} warps through register loads or, where `ring`, cp.async
/// rings of 3 or 4 stages. Only configs `valid` accepts, none twice.
template <class C, class Valid>
std::vector<C> block_search_space(C heuristic, bool ring, const Valid &valid) {
  std::vector<C> space{std::move(heuristic)};
  for (const TileBlocks &blocks : products_detail::tile_candidates(ring)) {
    C c{};
    static_cast<TileBlocks &>(c) = blocks;
    products_detail::add_new(space, std::move(c), valid);
  }
  return space;
}

/// A hopper search space (config C: a HopperBlocks and more): the heuristic, then its
/// ring depth (2, 3, 4, 6) and tile width (64, 128) varied, where `valid` (the rings must
/// fit the shared memory).
template <class C, class Valid>
std::vector<C> hopper_search_space(C heuristic, const Valid &valid) {
  std::vector<C> space{std::move(heuristic)};
  for (int64_t bn : {64, 128})
    for (int64_t stages : {2, 3, 4, 6}) {
      C c = space.front();
      c.block_n = bn;
      c.stages = stages;
      products_detail::add_new(space, std::move(c), valid);
    }
  return space;
}

/// The matmul kernel another op's plan runs for one of its products.
enum class MatmulKernelKind : uint8_t {
  Reference,  ///< exact multiply-adds (matmul_reference_kernel)
  Tile,       ///< mma.sync at default_config
  Hopper,     ///< TMA + wgmma (sm_90a) at default_hopper_config, persistent over the SMs
};
/// c (+)= op(a) @ op(b) (alpha 1, no bias; spec.accumulate adds to c) on the `kind`
/// kernel, keyed as "<op>_matmul_<kind>": the dx / dw products of the gated linear unit's
/// and the cross-entropy's VJPs. A windowed spec (b_cols / c_cols, hopper only) reads b's
/// or writes c's window from column (or row) `window` of the tensor given.
void launch_matmul_step(ops_detail::KernelExecutor &ex, const char *op, MatmulKernelKind kind, const MatmulSpec &spec,
                        TensorView a, TensorView b, TensorView c, int64_t window = 0);

/// acc + a @ b by exact multiply-adds in acc's dtype (a [bm, bk], b [bk, bn] in it):
/// the reference kernels' product, no tensor cores.
dsl::Value exact_product(const dsl::Value &a, const dsl::Value &b, const dsl::Value &acc);

/// The block shape TMA copies into wgmma's swizzled tiles need (check_tma_ring_keys, and
/// cross-entropy's tma): block_k one 32-, 64- or 128-byte swizzle row, the `cols_key`
/// block whole 128-byte rows.
std::optional<std::string> check_tma_block_shape(int64_t bk, const char *cols_key, int64_t cols, int64_t elem_bytes);

} // namespace tokamax
