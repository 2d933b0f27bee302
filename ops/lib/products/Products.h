//===- Products.h - What the tiled product ops share ----------------*- C++ -*-===//
//
// gated_linear_unit, ragged_dot and the cross-entropy tile their products like matmul
// does: one implementation enum, the matmul kernels their VJPs launch for dx / dw, the
// exact product of the reference kernels, and the config checks and search spaces of
// their block sizes and rings.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Op.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tokamax {

/// The implementations of the tiled product ops (gated_linear_unit, ragged_dot, the
/// cross-entropy), in auto's order, and their names ("reference", "tile", "hopper").
using ProductImpl = ops_detail::ImplKind;
using ops_detail::impl_name;

/// The matmul kernel another op's plan runs for one of its products.
enum class MatmulKernelKind : uint8_t {
  Reference,  ///< exact multiply-adds (matmul_reference_kernel)
  Tile,       ///< mma.sync at default_config
  Hopper,     ///< TMA + wgmma (sm_90a) at default_hopper_config, persistent over the SMs
};
/// c (+)= op(a) @ op(b) (alpha 1, no bias; spec.accumulate adds to c) on the `kind`
/// kernel, keyed as "<op>_matmul_<kind>": the dx / dw products of the gated linear unit's
/// and the cross-entropy's VJPs.
void launch_matmul_step(ops_detail::KernelExecutor &ex, const char *op, MatmulKernelKind kind, const MatmulSpec &spec,
                        TensorView a, TensorView b, TensorView c);

/// acc + a @ b by exact multiply-adds in acc's dtype (a [bm, bk], b [bk, bn] in it):
/// the reference kernels' product, no tensor cores.
dsl::Value exact_product(const dsl::Value &a, const dsl::Value &b, const dsl::Value &acc);

/// Config checks every tiled product kernel shares (gated_linear_unit, ragged_dot), each
/// giving the first problem found, or nullopt:
///   - block_m, block_n (powers of two to 256), block_k (to 128), both from 16 on tensor
///     cores (`tile`), num_warps 1-8; exact products' [block_m, block_k, block_n] partial
///     products at most 8192;
///   - async_copy 0 or 1, only where `serves` (K and N rows of 16-byte chunks); stages
///     2-4 (2-8 with tma), only with it;
///   - tma 0 or 1; with it async_copy, 4 or 8 warps, block_m = 16 x num_warps, block_k
///     one 32-, 64- or 128-byte swizzle row, block_n whole 128-byte rows.
std::optional<std::string> check_block_sizes(const Config &c, bool tile);
std::optional<std::string> check_ring_keys(const Config &c, bool serves, int64_t K, int64_t N);
std::optional<std::string> check_tma_ring_keys(const Config &c, int64_t elem_bytes);
/// The hopper implementations of gated_linear_unit and ragged_dot run their tile kernels
/// with TMA rings always on: their configs hold no async_copy, tma or wgmma key
/// (check_hopper_keys: the first found, named), and run as hopper_as_tile(config).
std::optional<std::string> check_hopper_keys(const Config &c);
Config hopper_as_tile(const Config &c);
/// A hopper search space: the heuristic, then its ring depth (2, 3, 4, 6) and tile width
/// (64, 128) varied, where `valid` (the rings must fit the shared memory).
std::vector<Config> hopper_search_space(Config heuristic, const std::function<bool(const Config &)> &valid);
/// The block shape TMA copies into wgmma's swizzled tiles need (check_tma_ring_keys, and
/// cross-entropy's tma): block_k one 32-, 64- or 128-byte swizzle row, the `cols_key`
/// block whole 128-byte rows.
std::optional<std::string> check_tma_block_shape(int64_t bk, const char *cols_key, int64_t cols, int64_t elem_bytes);

/// The search space of a tiled product kernel (gated_linear_unit, ragged_dot): its
/// `heuristic` first, then for `reference` two small blocks, else block_m and block_n in
/// {64, 128, 256} x block_k {32, 64} x {4, 8} warps through register loads or, where
/// `ring`, cp.async rings of 3 or 4 stages, each with the keys of `extra` (e.g. group_m).
/// Only configs `valid` accepts, none twice.
std::vector<Config> block_search_space(Config heuristic, bool reference, bool ring, const Config &extra,
                                       const std::function<bool(const Config &)> &valid);

} // namespace tokamax
