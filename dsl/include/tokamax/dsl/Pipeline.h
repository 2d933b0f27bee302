//===- Pipeline.h - Hopper pipeline kit: rings, ring loops, block order -*- C++ -*-===//
//
// Main loops that stream operand blocks through shared-memory rings, written against
// the DSL's primitives (TensorArg::load_async / load_tma, Kernel::mbarriers / wait /
// arrive, Kernel::specialized_loop / specialized_steps, dot_async / dot_wait):
//   - ring_loop: one loop whose blocks come through cp.async or TMA rings, copied
//     stages - 1 steps ahead by every thread (cp.async) or one (TMA);
//   - TmaRing + tma_ring_loop: a warp-specialized loop whose producer warpgroup refills
//     each slot once the consumers release it;
//   - tma_tile_loop: the same over several tiles of K steps (persistent grids), the
//     producer running ahead across tile boundaries;
//   - grouped_block: the L2-friendly order of a grid's output tiles.
// The ops' kernels (matmul, attention, gated_linear_unit, ragged_dot, the
// cross-entropy, the norms' staged VJP) build their main loops from these.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <functional>
#include <utility>
#include <vector>

namespace tokamax::dsl {

/// Block origin (m0, n0) of tile `pid` in grouped order: group_m consecutive tiles walk
/// down M before moving along N, so the B blocks they share stay in L2.
TOKAMAX_API std::pair<Value, Value> grouped_block(Value pid, int64_t gridM, int64_t gridN, int64_t groupM,
                                                int64_t bm, int64_t bn);

/// One step's blocks at k0, copied by TensorArg::load_async into slot `slot` of the
/// caller's shared buffers (one buffer per block, `stages` slots each).
using RingCopies = std::function<std::vector<Value>(const Value &k0, const Value &slot)>;
/// One step's products: (k0, the accumulators, the step's blocks) -> the accumulators.
using RingProducts = std::function<std::vector<Value>(const Value &k0, std::vector<Value> accs,
                                                           std::vector<Value> blocks)>;
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
TOKAMAX_API std::vector<Value> ring_loop(Kernel &k, const Value &lo, const Value &hi, int64_t step,
                                  int64_t stages, std::vector<Value> accs, const RingCopies &copies,
                                  const RingProducts &products, const Mbarriers *tma = nullptr);

/// The rings of a warp-specialized TMA main loop (Kernel::specialized_loop): `stages`
/// slots; step i uses slot i % stages. `full`: one barrier per slot, whose phase
/// completes when the step's copies (TensorArg::load_tma on barrier `slot`) have landed;
/// `empty`: one per slot, whose phase completes when every consumer thread has released
/// the slot (a fresh slot's "previous phase" counts as complete).
struct TOKAMAX_API TmaRing {
  int64_t stages = 0;
  Mbarriers full, empty;

  /// Declares the barriers: `copies` TMA copies a step, `consumer_warps` releasing warps.
  static TmaRing make(Kernel &k, int64_t stages, int64_t copies, int consumer_warps);
  Value slot(const Value &step) const { return step % Value(stages); }
  /// Producer: wait until step `step` may refill its slot.
  void wait_free(Kernel &k, const Value &step) const;
  /// Consumers: wait until step `step`'s copies have landed.
  void wait_full(Kernel &k, const Value &step) const;
  /// Consumers: step `step`'s slot may be refilled.
  void release(Kernel &k, const Value &step) const;
};

/// One step's TMA copies into the caller's rings at `slot`, on barrier `slot` of the
/// ring's `full` (as many copies as TmaRing::make was told).
using TmaRingCopies = std::function<std::vector<Value>(const Value &k0, const Value &slot)>;
/// A warp-specialized main loop of `steps` steps (an i32, possibly computed in the
/// kernel), k0 = i * `step`, through `ring`: the producer warpgroup refills each slot
/// once it is released and copies the step's blocks; the consumers wait for them and run
/// `products`, which may leave their own step's dots in flight (dot_wait(.., 1)) but no
/// earlier one's, then release the previous step's slot. Returns the accumulators with
/// every dot completed.
TOKAMAX_API std::vector<Value> tma_ring_loop(Kernel &k, const Value &steps, int64_t step, const TmaRing &ring,
                                      std::vector<Value> accs, const TmaRingCopies &copies,
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
  std::function<std::vector<Value>(const Value &tile, const Value &k0, const Value &slot)> copies;
  std::function<std::vector<Value>(const std::vector<Value> &blocks, const std::vector<Value> &accs,
                                        const Value &fresh)>
      products;
  std::function<std::vector<Value>(const Value &tile, const std::vector<Value> &accs,
                                        std::vector<Value> extras)>
      done;
};
TOKAMAX_API std::vector<Value> tma_tile_loop(Kernel &k, const Value &tiles, int64_t steps, int64_t step,
                                      const TmaRing &ring, const std::vector<Value> &zeros,
                                      std::vector<Value> extras, const TmaTileLoop &body);

} // namespace tokamax::dsl
