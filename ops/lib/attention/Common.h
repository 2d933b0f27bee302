//===- Common.h - Attention problems, kernel specs, plans -*- C++ -*-===//
//
// Internal to ops/lib/attention. A bound call becomes a Problem (batch dims flattened
// to B, bias / mask as 4-D broadcast shapes [b, n, t, s] whose entries are 1 or full);
// an implementation plans it as launches of kernels, each built from one KernelSpec
// (its IR is a pure function of the spec; key() hashes every field).
//
// Kernels see q [B, T, N, H], k [B, S, K, H], v [B, S, K, Hv], out [B, T, N, Hv],
// lse / delta [B, N, T], logits / dS workspaces [B, N, T, S], bias / mask [b, n, t, s],
// seq lengths [B].
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Attention.h>

#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::attention_detail {

using Impl = ops_detail::ImplKind;  ///< reference, chunked, tile or hopper
using ops_detail::impl_name;

/// A broadcastable operand (bias or mask) as [b, n, t, s], each 1 or the full extent.
struct Broadcast {
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  DType dtype = DType::F32;
};

struct Problem {
  bool vjp = false;
  std::vector<int64_t> batch;  ///< the batch dims (B is their product)
  int64_t B = 1, T = 1, S = 1, N = 1, K = 1, H = 1, Hv = 1;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< f32; f64 for f64 inputs (also lse's dtype)
  double scale = 1;
  bool causal = false;
  int64_t left = -1, right = -1;  ///< local window sides; -1 = unbounded
  double softcap = 0;             ///< 0 = none
  std::optional<Broadcast> bias, mask;
  bool q_lengths = false, kv_lengths = false;
  bool lse_out = false;  ///< forward: the caller wants lse
  bool dbias = false;    ///< VJP: the caller wants dbias

  int64_t group() const { return N / K; }
  /// Bytes of one [B, N, T, S] buffer in the compute dtype.
  double logits_bytes() const;
};

/// Reads a validated BoundArgs of attention / attention_vjp.
Problem problem_of(const BoundArgs &args);

enum class KernelKind : uint8_t {
  FlashForward,  ///< online softmax over KV blocks -> out, lse
  Delta,         ///< delta = rowsum(dout * out)
  FlashDkDv,     ///< per KV block: dk, dv (and dS into a workspace for dbias)
  FlashDq,       ///< per query block: dq
  DbiasReduce,   ///< dS [B, N, T, S] summed over bias's broadcast dims -> dbias
  Logits,        ///< reference: masked, capped logits -> [B, N, T, S]
  RowStats,      ///< reference: lse of each logits row (max, then sum)
  Output,        ///< reference: out = exp(logits - lse) @ v
  RefDs,         ///< reference: dS = P * (dP - delta) (soft-cap chain applied)
  RefDq,         ///< reference: dq = scale * dS @ k
  RefDkDv,       ///< reference: dk = scale * dS^T @ q, dv = P^T @ dout (GQA groups summed)
};

/// How a kernel forms its products: tensor cores (tile.dot, bf16/f16) or exact
/// multiply-adds in the compute dtype over column chunks (f32, f64, the reference).
enum class Product : uint8_t { Mma, Fma };

struct KernelSpec {
  KernelKind kind = KernelKind::FlashForward;
  Problem p;
  Product product = Product::Mma;
  int64_t block_q = 64, block_kv = 64;
  int num_warps = 4;
  /// Flash kernels: KV blocks that no mask touches run a loop without mask arithmetic.
  bool split_edges = false;
  /// Flash kernels: each loop reads its next blocks one step ahead (config "prefetch").
  bool prefetch = false;
  /// Flash kernels on tensor cores: the blocks each loop walks are copied into a
  /// shared ring with cp.async ahead of their step and read by the products
  /// from there (config "async_copy"; rows of whole 16-byte chunks only).
  bool async_copy = false;
  /// Slots of that ring (config "stages"): blocks are copied stages - 1 steps ahead.
  int stages = 2;
  /// With async_copy, on sm_90a: products read their ring blocks on wgmma (config
  /// "wgmma"; dsl::KernelOptions::wgmma_dots).
  bool wgmma = false;
  /// Forward with wgmma: each step issues the next step's Q K^T (asynchronously) before
  /// its own softmax, so the two overlap (config "wgmma": 2; the ring needs 3+ stages).
  bool overlap = false;
  /// The hopper kernels (sm_90a, HopperKernels.cpp): a row block held by TMA, the blocks
  /// it meets streamed through TMA rings a producer warpgroup refills
  /// (dsl::Kernel::specialized_loop), products on wgmma; q, k, v and dout are read as
  /// [B T, N H], [B S, K H], [B S, K Hv], [B T, N Hv] (TMA tensor maps are 2-D).
  bool tma = false;
  /// The hopper forward with two consumer warpgroups (config "pingpong"): they take turns
  /// issuing their products (dsl::Kernel::turn_wait / turn_pass), so one's softmax runs
  /// while the other's products do.
  bool ping_pong = false;

  KernelKey key() const;
  std::string name() const;
};

dsl::Kernel build_kernel(const KernelSpec &spec);

//===----------------------------------------------------------------------===//
// Plans (Plans.cpp) and configs (Configs.cpp)
//===----------------------------------------------------------------------===//

/// Runs the call: tensors in the op's argument order (inputs, then outputs).
void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

std::optional<std::string> why_not(const Problem &p, Impl impl);
Config heuristic(const Problem &p, Impl impl);
std::vector<Config> search_space(const Problem &p, Impl impl);
std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &config);

/// Whether the tile kernels can copy their blocks with cp.async (tensor-core dtypes,
/// head dims of whole 16-byte chunks); a config asking for it elsewhere gets the
/// register path.
bool async_copy_serves(const Problem &p, Impl impl);

/// The padded tile extent of a head dim (a power of two >= 16).
int64_t padded_head_dim(int64_t d);

} // namespace tokamax::attention_detail
