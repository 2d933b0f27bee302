//===- MatmulDetail.h - Shared between the matmul kernels and its op -*- C++ -*-===//
#pragma once

#include "ops/lib/KernelExecutor.h"

#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Arch.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tokamax {

/// The implementations of the tiled product ops (gated_linear_unit, ragged_dot, the
/// cross-entropy), in auto's order, and their names ("reference", "tile", "hopper").
enum class ProductImpl : uint8_t { Reference, Tile, Hopper };
const char *impl_name(ProductImpl impl);

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

/// Throws Error (bad spec) or NotSupported (f64 off the reference kernel) naming the
/// problem; `reference`: the spec is for matmul_reference_kernel.
void check_matmul_spec(const MatmulSpec &spec, bool reference);
/// The dtype rules alone (bind_matmul: any extent may be 0).
void check_matmul_dtypes(const MatmulSpec &spec, bool reference);
/// Why the tile kernel (mma.sync) cannot serve `spec`'s dtype (f64, fp8); empty when it can.
std::string tile_unsupported(const MatmulSpec &spec);
/// Whether the rows of a and b (as stored) are whole 16-byte chunks: TMA (hopper) and
/// the tile kernel's cp.async ring need it; the tile kernel falls back to masked loads.
bool rows_of_16_bytes(const MatmulSpec &spec);

/// Block origin (m0, n0) of tile `pid` in grouped order: group_m consecutive tiles walk
/// down M before moving along N, so the B blocks they share stay in L2.
std::pair<dsl::Value, dsl::Value> grouped_block(dsl::Value pid, int64_t gridM, int64_t gridN, int64_t groupM,
                                                int64_t bm, int64_t bn);
/// acc + a @ b by exact multiply-adds in acc's dtype (a [bm, bk], b [bk, bn] in it):
/// the reference kernels' product, no tensor cores.
dsl::Value exact_product(const dsl::Value &a, const dsl::Value &b, const dsl::Value &acc);

/// One step's blocks at k0, copied by TensorArg::load_async into slot `slot` of the
/// caller's shared buffers (one buffer per block, `stages` slots each).
using RingCopies = std::function<std::vector<dsl::Value>(const dsl::Value &k0, const dsl::Value &slot)>;
/// One step's products: (k0, the accumulators, the step's blocks) -> the accumulators.
using RingProducts = std::function<std::vector<dsl::Value>(const dsl::Value &k0, std::vector<dsl::Value> accs,
                                                           std::vector<dsl::Value> blocks)>;
/// A main loop over k0 in [lo, hi) by `step` whose blocks come through rings of `stages`
/// slots, copied stages - 1 steps ahead; copies past hi read what the tensors hold there
/// (zeros past their ends) and go unused.
///   - cp.async (`tma` null): step j waits for its own copies, then refills the slot step
///     j - 1 read (one wait and barrier per step), then runs its products;
///   - TMA (`tma`: one barrier per slot, `copies` issues load_tma on barrier `slot`):
///     step j waits for its slot's barrier phase, runs its products (which may leave
///     their own dots in flight, but not step j - 1's), then, after a barrier of the
///     program, refills the slot step j - 1 read; the copies past hi are awaited after
///     the loop so none lands after the program ends.
std::vector<dsl::Value> ring_loop(dsl::Kernel &k, const dsl::Value &lo, const dsl::Value &hi, int64_t step,
                                  int64_t stages, std::vector<dsl::Value> accs, const RingCopies &copies,
                                  const RingProducts &products, const dsl::Mbarriers *tma = nullptr);

/// The rings of a warp-specialized TMA main loop (Kernel::specialized_loop): `stages`
/// slots; step i uses slot i % stages. `full`: one barrier per slot, whose phase
/// completes when the step's copies (TensorArg::load_tma on barrier `slot`) have landed;
/// `empty`: one per slot, whose phase completes when every consumer thread has released
/// the slot (a fresh slot's "previous phase" counts as complete).
struct TmaRing {
  int64_t stages = 0;
  dsl::Mbarriers full, empty;

  /// Declares the barriers: `copies` TMA copies a step, `consumer_warps` releasing warps.
  static TmaRing make(dsl::Kernel &k, int64_t stages, int64_t copies, int consumer_warps);
  dsl::Value slot(const dsl::Value &step) const { return step % dsl::Value(stages); }
  /// Producer: wait until step `step` may refill its slot.
  void wait_free(dsl::Kernel &k, const dsl::Value &step) const;
  /// Consumers: wait until step `step`'s copies have landed.
  void wait_full(dsl::Kernel &k, const dsl::Value &step) const;
  /// Consumers: step `step`'s slot may be refilled.
  void release(dsl::Kernel &k, const dsl::Value &step) const;
};

/// One step's TMA copies into the caller's rings at `slot`, on barrier `slot` of the
/// ring's `full` (as many copies as TmaRing::make was told).
using TmaRingCopies = std::function<std::vector<dsl::Value>(const dsl::Value &k0, const dsl::Value &slot)>;
/// A warp-specialized main loop of `steps` steps (an i32, possibly computed in the
/// kernel), k0 = i * `step`, through `ring`: the producer warpgroup refills each slot
/// once it is released and copies the step's blocks; the consumers wait for them and run
/// `products`, which may leave their own step's dots in flight (dot_wait(.., 1)) but no
/// earlier one's, then release the previous step's slot. Returns the accumulators with
/// every dot completed.
std::vector<dsl::Value> tma_ring_loop(dsl::Kernel &k, const dsl::Value &steps, int64_t step, const TmaRing &ring,
                                      std::vector<dsl::Value> accs, const TmaRingCopies &copies,
                                      const RingProducts &products);

/// A warp-specialized loop over `tiles` tiles of `steps` K steps each (k0 = K step x
/// `step`) through `ring`: tiles outside, each tile's steps inside (Kernel::
/// specialized_steps), each step's products in flight until the next step's are issued.
/// The producer runs ahead across tile boundaries. `copies(tile, k0, slot)` issues a
/// step's TMA copies; `products(blocks, accs, fresh)` issues one dot_async per
/// accumulator (as many as `zeros`), starting from zero where `fresh` holds (a tile's
/// first step); `done(tile, accs, extras)` runs on the completed accumulators after a
/// tile's last step and returns the carried `extras` (row statistics, or none). Returns
/// the extras.
struct TmaTileLoop {
  std::function<std::vector<dsl::Value>(const dsl::Value &tile, const dsl::Value &k0, const dsl::Value &slot)> copies;
  std::function<std::vector<dsl::Value>(const std::vector<dsl::Value> &blocks, const std::vector<dsl::Value> &accs,
                                        const dsl::Value &fresh)>
      products;
  std::function<std::vector<dsl::Value>(const dsl::Value &tile, const std::vector<dsl::Value> &accs,
                                        std::vector<dsl::Value> extras)>
      done;
};
std::vector<dsl::Value> tma_tile_loop(dsl::Kernel &k, const dsl::Value &tiles, int64_t steps, int64_t step,
                                      const TmaRing &ring, const std::vector<dsl::Value> &zeros,
                                      std::vector<dsl::Value> extras, const TmaTileLoop &body);

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

/// Shared memory one hopper program may use, and what its parts take: the ring of
/// num_stages [block_m + block_n][block_k] slices of `elem_bytes` elements (each stage
/// 1 KiB-aligned) with two mbarriers per stage (plus 1 KiB of alignment slack), and the
/// TMA store's two [block_m][128-byte] strips (plus 1 KiB).
inline constexpr int64_t kHopperSharedLimit = Arch::parse("sm_90a").shared_memory_per_block();
inline int64_t hopper_ring_bytes(const MatmulConfig &c, int64_t elem_bytes) {
  const int64_t stage = ((c.block_m + c.block_n) * c.block_k * elem_bytes + 1023) / 1024 * 1024;
  return c.num_stages * stage + 16 * c.num_stages + 1024;
}
inline int64_t hopper_store_strip_bytes(const MatmulConfig &c) { return 2 * c.block_m * 128 + 1024; }

} // namespace tokamax
