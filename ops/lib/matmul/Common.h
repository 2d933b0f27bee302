//===- Common.h - What matmul's implementations share -----------*- C++ -*-===//
//
// The problem a bound call poses, the config as its map holds it, the kernels' shared
// parts (parameters, blocks of op(a) and op(b), the epilogue), the plan every
// implementation runs, and the implementations: Hopper (Hopper.cpp), Tile (Tile.cpp),
// Reference (Reference.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/TypedConfig.h"

#include <tokamax/runtime/Arch.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Matmul.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax {

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

/// Shared memory one hopper program may use, and what its parts take, as the hopper
/// kernel sizes them to decide whether the TMA store's strips fit beside the ring: the
/// ring of num_stages [block_m + block_n][block_k] slices of `elem_bytes` elements (each
/// stage 1 KiB-aligned) with two mbarriers per stage (plus 1 KiB of alignment slack), and
/// the TMA store's two [block_m][128-byte] strips (plus 1 KiB). (Configs are checked
/// against the compiler's figure: check_shared_memory.)
inline constexpr int64_t kHopperSharedLimit = Arch::parse("sm_90a").shared_memory_per_block();
inline int64_t hopper_ring_bytes(const MatmulConfig &c, int64_t elem_bytes) {
  const int64_t stage = ((c.block_m + c.block_n) * c.block_k * elem_bytes + 1023) / 1024 * 1024;
  return c.num_stages * stage + 16 * c.num_stages + 1024;
}
inline int64_t hopper_store_strip_bytes(const MatmulConfig &c) { return 2 * c.block_m * 128 + 1024; }

namespace matmul_impl {

/// A bound call of matmul: the spec, and alpha (a kernel parameter).
struct MatmulProblem {
  MatmulSpec spec;
  double alpha = 1.0;
};
MatmulProblem problem_of(const BoundArgs &args);

/// "programs" = -1 in a config: one program per SM of the device the call runs on.
inline constexpr int64_t kOnePerSm = -1;

/// MatmulConfig's keys, under its fields' names. `blocks`: block_m, block_n, block_k and
/// num_warps; `rest`: the others the maps have always held. rebalance_registers and
/// tma_ring came later: written only where set, so older maps stay valid.
constexpr auto matmul_config_keys(ops_detail::KeyUse blocks, ops_detail::KeyUse rest) {
  using ops_detail::ConfigKey;
  using ops_detail::KeyUse;
  using C = MatmulConfig;
  return std::tuple{ConfigKey{"block_m", &C::block_m, blocks},
                    ConfigKey{"block_n", &C::block_n, blocks},
                    ConfigKey{"block_k", &C::block_k, blocks},
                    ConfigKey{"group_m", &C::group_m, rest},
                    ConfigKey{"num_warps", &C::num_warps, blocks},
                    ConfigKey{"num_stages", &C::num_stages, rest},
                    ConfigKey{"warp_specialize", &C::warp_specialize, rest},
                    ConfigKey{"cluster_m", &C::cluster_m, rest},
                    ConfigKey{"tma_store", &C::tma_store, rest},
                    ConfigKey{"a_in_registers", &C::a_in_registers, rest},
                    ConfigKey{"programs", &C::programs, rest},
                    ConfigKey{"rebalance_registers", &C::rebalance_registers, KeyUse::Optional},
                    ConfigKey{"tma_ring", &C::tma_ring, KeyUse::Optional}};
}

/// The hopper and tile config: a MatmulConfig as its map holds it, "programs" as written
/// (kOnePerSm unresolved until the plan knows the device). The block shape and warps are
/// required; the other keys are always written and default, when absent, to MatmulConfig's
/// values except tma_store, off in maps that lack it.
struct KeyedMatmulConfig : MatmulConfig {
  KeyedMatmulConfig() { tma_store = false; }
  KeyedMatmulConfig(const MatmulConfig &c, int64_t programs_key) : MatmulConfig(c) { programs = programs_key; }
  /// The kernel's config: kOnePerSm as `sm_count` programs.
  MatmulConfig resolved(int sm_count) const;
  static constexpr auto keys = matmul_config_keys(ops_detail::KeyUse::Required, ops_detail::KeyUse::Defaulted);
};

/// The reference kernel's blocks are fixed: its config is empty, but it reads (and
/// ignores) the others' keys, since an explicit config meets whichever implementation
/// auto picks.
struct ReferenceConfig : KeyedMatmulConfig {
  static constexpr auto keys = matmul_config_keys(ops_detail::KeyUse::Optional, ops_detail::KeyUse::Optional);
};

/// What the hopper and tile configs must satisfy alike: programs -1, 0 or a count, block
/// sizes and num_warps powers of two, group_m >= 1.
std::optional<std::string> check_blocks(const KeyedMatmulConfig &c);
/// Appends `c` to a search space where it is valid (`problem` is nullopt) and not there yet.
void add_candidate(std::vector<KeyedMatmulConfig> &space, const KeyedMatmulConfig &c,
                   const std::optional<std::string> &problem);

/// The plan of every implementation: nothing, a zero fill or copies of bias for an empty
/// product; else one kernel, `build(spec, config)`, keyed as "matmul_<kind>" with the spec
/// and `config`, on a, b, [bias,] c and alpha.
using BuildKernel = dsl::Kernel (*)(const MatmulSpec &, const MatmulConfig &);
void run_matmul(ops_detail::ImplKind kind, const MatmulProblem &p, const MatmulConfig &config, BuildKernel build,
                std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                ops_detail::KernelExecutor &executor);

/// Why the kernel run_matmul launches for `keyed` does not fit a block's shared memory,
/// as the compiler plans it (null where it fits).
std::optional<std::string> check_shared_memory(ops_detail::ImplKind kind, const MatmulProblem &p,
                                               const KeyedMatmulConfig &keyed, BuildKernel build);

/// The kernels' parameters: a, b, [bias,] c, alpha (`scalar`: f32, or f64 for f64).
struct Params {
  dsl::TensorArg a, b, bias, c;
  dsl::Value alpha;
  /// The windows' start (MatmulSpec::b_cols / c_cols), or none.
  std::optional<dsl::Value> window;
  /// Where c's tile of product columns from n0 lies: n0, plus the window's start.
  dsl::Value c_column(const MatmulSpec &spec, const dsl::Value &n0) const {
    return spec.c_cols > 0 ? n0 + *window : n0;
  }
};
Params declare(dsl::Kernel &k, const MatmulSpec &spec, DType scalar);
dsl::Value cast(const dsl::Value &v, DType dtype);
/// [bm, bk] block of op(a) and [bk, bn] block of op(b) at (m0, k0) and (k0, n0).
dsl::Value blockA(const MatmulSpec &spec, const Params &p, dsl::Value m0, dsl::Value k0, int64_t bm, int64_t bk);
dsl::Value blockB(const MatmulSpec &spec, const Params &p, dsl::Value k0, dsl::Value n0, int64_t bk, int64_t bn);
/// alpha * acc (+ bias) (+ c with spec.accumulate), stored to c at (m0, n0), through TMA
/// when `tma`.
void epilogue(const MatmulSpec &spec, const Params &p, dsl::Value acc, dsl::Value m0, dsl::Value n0, int64_t bn,
              bool tma = false);

/// The implementations, in auto's order (TypedImplementation, ImplementationAdapter.h).

/// sm_90a: TMA rings, wgmma, a producer warpgroup, a persistent grid (Hopper.cpp).
struct Hopper { TOKAMAX_IMPLEMENTATION_MEMBERS(ops_detail::ImplKind::Hopper, MatmulProblem, KeyedMatmulConfig) };

/// mma.sync (sm_80+), a cp.async ring where the rows allow it (Tile.cpp).
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(ops_detail::ImplKind::Tile, MatmulProblem, KeyedMatmulConfig) };

/// Fixed small blocks by exact multiply-adds: every float dtype, every GPU; it takes
/// any config (ReferenceConfig) and serves every call.
struct Reference { TOKAMAX_IMPLEMENTATION_MEMBERS(ops_detail::ImplKind::Reference, MatmulProblem, ReferenceConfig) };

} // namespace matmul_impl
} // namespace tokamax
