//===- Common.h - gated_linear_unit problems, kernels, implementations -*- C++ -*-===//
//
// Internal to ops/lib/gated_linear_unit. A bound call becomes a Problem (x's leading dims flattened to
// M); kernels see x [M, K], weights [K, 2, N], out / dout [M, N] and the VJP's dh
// workspace [M, 2, N]. A kernel's IR is a pure function of its GateKernelSpec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/GatedLinearUnit.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::glu_detail {

using Impl = ProductImpl;

struct Problem {
  bool vjp = false;
  int64_t M = 0, K = 0, N = 0;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< accumulation: f32, f64 for f64
  GluActivation activation = GluActivation::Swish;
  /// The forward writes the pre-activations [M, 2, N] (its optional output), the VJP
  /// reads them (its optional input) instead of recomputing them.
  bool preactivations = false;
};

/// Reads a validated BoundArgs of gated_linear_unit / gated_linear_unit_vjp.
Problem problem_of(const BoundArgs &args);

/// The kernel computing both products of an output tile: the forward writes the gated
/// tile to out; the VJP's reads dout and writes dh = [da, db] instead.
struct GateKernelSpec {
  Problem p;
  bool exact = false;        ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_m = 128, block_n = 128, block_k = 32, group_m = 8;
  int num_warps = 8;
  bool async_copy = false;   ///< x, W0, W1 blocks through a cp.async ring
  int64_t stages = 3;        ///< the ring's slots
  /// With async_copy, on sm_90a: every warp along M (16 rows each) and the products read
  /// the ring's weight blocks on wgmma (dsl::KernelOptions::wgmma_dots); mma.sync elsewhere.
  bool wgmma = false;
  /// With async_copy, on sm_90a only: the blocks come by TMA (weights read as [K, 2N]),
  /// a producer warpgroup refilling the rings (dsl::Kernel::specialized_loop), and both
  /// products read both operands from shared memory on wgmma.
  bool tma = false;
  /// With tma: a persistent grid of this many programs walking the tiles (0: one per
  /// tile), so the producer loads a tile's blocks while the consumers gate the last one.
  int64_t programs = 0;
  /// With tma, forward only: the gated tiles leave through shared memory by TMA stores
  /// (the consumers go on to the next tile's products while they are written out).
  bool tma_store = false;
  /// Not the gate kernel's (run's plan): both products x W on the plan's matmul kernel
  /// into the call's scratch ([M, 2N] in x's dtype, as a peer's two GEMMs write them),
  /// then gate_apply_kernel, instead of the gate kernel.
  bool unfused = false;

  KernelKey key() const;
};

dsl::Kernel gate_kernel(const GateKernelSpec &spec);

/// The gate over the pre-activations h = [a, b] = x W ([M, 2, N], x's dtype), the
/// unfused plan's second step: forward out = act(a) * b; VJP dh = [dout * b * act'(a),
/// dout * act(a)] into dh, which may be h itself (gated in place).
dsl::Kernel gate_apply_kernel(const Problem &p);
KernelKey gate_apply_key(const Problem &p);

/// act(x), and g * act'(x), elementwise in x's dtype (f32 or f64).
dsl::Value activate(GluActivation activation, const dsl::Value &x);
dsl::Value activate_vjp(GluActivation activation, const dsl::Value &x, const dsl::Value &g);

//===----------------------------------------------------------------------===//
// Configs
//===----------------------------------------------------------------------===//

/// tile's config: the blocks and the operand ring (TileBlocks), and the gate kernel's own keys.
struct TileConfig : TileBlocks {
  int64_t group_m = 8;  ///< row tiles walking the column tiles together (L2 reuse)
  /// With async_copy, on sm_90a: the products read the ring's weight blocks on wgmma
  /// (every warp along M); opt-in until measured on the device.
  bool wgmma = false;
  /// With tma: a persistent grid of this many programs (-1: one per SM, 0: one per tile).
  std::optional<int64_t> programs;
  /// Both products on the matmul kernel, then the gate (GateKernelSpec::unfused).
  bool unfused = false;
  /// With tma, forward only: 1 stores the gated tiles by TMA (GateKernelSpec::tma_store).
  std::optional<int64_t> tma_store;

  static constexpr auto keys = std::tuple_cat(
      TileBlocks::keys, std::tuple{ConfigKey{"group_m", &TileConfig::group_m, KeyUse::Defaulted},
                                   ConfigKey{"wgmma", &TileConfig::wgmma, KeyUse::Optional},
                                   ConfigKey{"programs", &TileConfig::programs, KeyUse::Optional},
                                   ConfigKey{"unfused", &TileConfig::unfused, KeyUse::Optional},
                                   ConfigKey{"tma_store", &TileConfig::tma_store, KeyUse::Optional}});
  bool operator==(const TileConfig &) const = default;
};

/// hopper's: tile's kernel with TMA rings always on (no async_copy, tma or wgmma key).
struct HopperConfig : HopperBlocks {
  int64_t group_m = 8;
  std::optional<int64_t> programs;   ///< as tile's
  bool unfused = false;              ///< as tile's
  std::optional<int64_t> tma_store;  ///< as tile's

  static constexpr auto keys = std::tuple_cat(
      HopperBlocks::keys,
      std::tuple{ConfigKey{"group_m", &HopperConfig::group_m, KeyUse::Defaulted},
                 ConfigKey{"programs", &HopperConfig::programs, KeyUse::Optional},
                 ConfigKey{"unfused", &HopperConfig::unfused, KeyUse::Optional},
                 ConfigKey{"tma_store", &HopperConfig::tma_store, KeyUse::Optional}});
  bool operator==(const HopperConfig &) const = default;

  /// The tile config it runs.
  TileConfig as_tile() const;
};

//===----------------------------------------------------------------------===//
// What the implementations share (Common.cpp)
//===----------------------------------------------------------------------===//

/// Whether the tile kernel can stream its blocks with cp.async: 16-bit dtypes and rows of
/// x (K) and of each weight half (N) of whole 16-byte chunks.
bool async_copy_serves(const Problem &p);

/// The tensor-core gate kernel at a tile config (the ring only where async_copy_serves);
/// `sm_count` resolves "programs": -1 (one per SM).
GateKernelSpec tensor_core_spec(const Problem &p, const TileConfig &c, int sm_count);
/// What tile and hopper check of a tile config: block sizes, group_m, programs, the
/// ring's and wgmma's keys, the registers and the gate kernel's shared memory.
std::optional<std::string> check_tensor_core_config(const Problem &p, const TileConfig &c);

/// Runs the call: tensors in the op's argument order (inputs, then outputs).
///   forward:  the gate kernel at `gate` (out);
///   VJP:      the gate VJP kernel (dh [M, 2, N] in x's dtype, in the call's scratch),
///             then dx = dh @ weights^T and dweights = x^T @ dh, as [M, 2N] / [K, 2N]
///             matrices, on the `products` matmul kernel.
///   unfused:  instead of the gate kernel, x @ weights on the `products` matmul kernel
///             into the scratch, then gate_apply_kernel (out, or dh in place);
///   with the pre-activations (any config): the forward computes them so, into its
///             output instead of the scratch; the VJP's gate_apply_kernel reads them
///             and writes dh into the scratch (they stay as they were).
void run(const Problem &p, const GateKernelSpec &gate, MatmulKernelKind products, std::span<const TensorView> inputs,
         std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

//===----------------------------------------------------------------------===//
// The implementations, in auto's order (Tile.cpp, Hopper.cpp, Reference.cpp)
//===----------------------------------------------------------------------===//

/// Tensor cores (mma.sync; opt-in wgmma and TMA rings on sm_90a), the VJP's dx and
/// dweights on the tile matmul.
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Tile, glu_detail::Problem, TileConfig) };

/// sm_90a: the gate kernel always on TMA rings and wgmma, the VJP's dx and dweights on
/// the hopper matmul.
struct Hopper { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Hopper, glu_detail::Problem, HopperConfig) };

/// Exact multiply-adds in the accumulation dtype: every dtype, every GPU.
struct Reference { TOKAMAX_IMPLEMENTATION_MEMBERS(Impl::Reference, glu_detail::Problem, ProductBlocks) };

} // namespace tokamax::glu_detail
