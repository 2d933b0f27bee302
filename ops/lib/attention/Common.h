//===- Common.h - Attention problems, kernel specs, plans -*- C++ -*-===//
//
// Internal to ops/lib/attention. A bound call becomes a Problem (batch dims flattened
// to B, bias / mask as 4-D broadcast shapes [b, n, t, s] whose entries are 1 or full);
// an implementation (one file each, with its typed config, checks, heuristic, search
// space and plan) plans it as launches of kernels, each built from one KernelSpec (its
// IR is a pure function of the spec; key() hashes every field).
//
// Kernels see q [B, T, N, H], k [B, S, K, H], v [B, S, K, Hv], out [B, T, N, Hv],
// lse / delta [B, N, T], logits / dS workspaces [B, N, T, S], bias / mask [b, n, t, s],
// seq lengths [B], sinks / dsinks [N], the dsinks partial sums [N, B x query blocks].
// Packed (Problem::varlen): q [1, total_q, N, H], ..., the call's lse [1, N, total_q]
// and the cu_seqlens arrays [B + 1] instead of the seq lengths; the VJP's delta and its
// copy of lse are [B, N, T] (padded per sequence) all the same.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/attention/Binding.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Attention.h>

#include <array>
#include <map>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace tokamax::attention_detail {

using ops_detail::ComputedKey;
using ops_detail::ConfigKey;
using ops_detail::ImplKind;
using ops_detail::KeyUse;

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
  bool sinks = false;    ///< forward: a sink logit per head joins each row's softmax sum
  bool dsinks = false;   ///< VJP: the caller wants dsinks
  /// VJP: reruns must give the same bits (the "deterministic" attribute, absent = true):
  /// the hopper VJP's fused dq then orders its adds (KernelSpec::ordered_dq).
  bool deterministic = true;
  /// q, k, v, out and their gradients lie in memory as [B, heads, seq, dim] (the "layout"
  /// attribute "bnth"); the kernels index them as [B, seq, heads, dim] all the same,
  /// through strides (rows_operand), and TMA reads them as [B heads, seq, dim].
  bool heads_major = false;
  /// Packed variable-length sequences (attention_varlen): B sequences whose rows lie
  /// packed in q [total_q, N, H], k / v [total_kv, K, *], out [total_q, N, Hv], lse
  /// [N, total_q] (the VJP's delta and padded lse [B, N, T]); T and S are the max lengths (the grid's), the kernels index the
  /// packed tensors as [1, total, heads, dim] from each sequence's first row (the
  /// cu_seqlens arrays, [B + 1], in the seq-length slots: q_lengths and kv_lengths are
  /// set), and causal / window masks align each sequence's last query with its last key.
  bool varlen = false;
  int64_t total_q = 0, total_kv = 0;
  /// fp8 q, k and v (attention_fp8, forward only): `dtype` is f8e4m3 or f8e5m2, out
  /// bf16 (out_dtype). Optional f32 descales, one per (batch row, kv head): the logits
  /// are scale q k^T q_descale k_descale, out is softmax V v_descale. The hopper forward
  /// reads V transposed ([B K, Hv, S rounded up to 16], vt_shape: wgmma takes fp8 B
  /// operands K-major only), a copy its plan writes first (v_transpose_kernel).
  bool fp8 = false;
  bool q_descale = false, k_descale = false, v_descale = false;

  int64_t group() const { return N / K; }
  /// out's dtype: bf16 for fp8 inputs, else the inputs'.
  DType out_dtype() const { return fp8 ? DType::BF16 : dtype; }
  /// The hopper fp8 forward's transposed V: [B K, Hv, S rounded up to 16 keys] (TMA
  /// strides are whole 16-byte chunks); keys from S on are zeros.
  std::vector<int64_t> vt_shape() const { return {B * K, Hv, (S + 15) / 16 * 16}; }
  /// Bytes of one [B, N, T, S] buffer in the compute dtype.
  double logits_bytes() const;
};

/// Reads a validated BoundArgs of attention / attention_vjp.
Problem problem_of(const BoundArgs &args);
/// The same for attention_varlen / attention_varlen_vjp (Varlen.cpp).
Problem varlen_problem_of(const BoundArgs &args);
/// Reads q's, k's and v's dims into `p` ([B..., seq, heads, dim], heads before seq where
/// `heads_major`): batch, B, T, S, N, K, H, Hv.
void read_dims(const ArgSpec &q, const ArgSpec &k, const ArgSpec &v, bool heads_major, Problem &p);
/// Reads those attributes into `p` (and q's dtype and its compute dtype).
void read_attributes(const BoundArgs &args, DType dtype, Problem &p);
/// A packed call's specs from the API's tensors: throws Error where the options mix
/// packed sequences with what they exclude (one cu_seqlens array, bias, mask, seq
/// lengths, BNTH), or the VJP asks for dbias.
AttentionVarlenSpecs varlen_specs(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &out,
                                  const AttentionOptions &o, const TensorView *lse);
AttentionVarlenVjpSpecs varlen_vjp_specs(const TensorView &dout, const TensorView &q, const TensorView &k,
                                         const TensorView &v, const TensorView &out, const TensorView &lse,
                                         const TensorView &dq, const TensorView &dk, const TensorView &dv,
                                         const AttentionOptions &o, const TensorView *dsinks);
void check_varlen_dbias(const TensorView *dbias);
/// Host arrays (the interpreter's calls, before any kernel): each cu_seqlens starts at 0,
/// never decreases, ends at its tensor's rows, and no sequence is longer than its
/// max_seqlen. (On a device the kernels clamp each sequence to its rows and the max.)
void check_host_cu_seqlens(const Problem &p, const TensorView &cu_seqlens_q, const TensorView &cu_seqlens_kv);
/// lse (and the forward's delta) as the call holds them: [B, N, T], or (packed)
/// [1, N, total_q].
std::vector<int64_t> row_stats_shape(const Problem &p);
/// lse and delta as the VJP's dk/dv and dq kernels read them: [B, N, T], packed calls
/// too (the delta kernel writes a packed call's lse padded per sequence, +inf past its
/// rows, beside its delta, 0 there), so that their loads are the dense calls' own.
std::vector<int64_t> vjp_row_stats_shape(const Problem &p);
/// Why reference does not serve a packed call (hopper, tile and chunked do).
std::optional<std::string> varlen_why_not(const Problem &p);

/// Whose rows an operand holds: queries (q, out, dout, dq: T of them per batch row, or
/// total_q packed) or keys (k, v, dk, dv: S, or total_kv).
enum class RowSide : uint8_t { Queries, Keys };

/// Strides of a [B, rows, heads, dim] operand (q, k, v, out and their gradients):
/// row-major, or over [B, heads, rows, dim] memory where heads_major.
std::vector<int64_t> rows_operand_strides(const Problem &p, int64_t rows, int64_t heads, int64_t dim);
/// The 3-D view TMA copies of such an operand read, a batch of it per (batch row, head)
/// rows: [B, rows, heads x dim], or [B x heads, rows, dim] where heads_major; packed
/// [1, total, heads x dim]. rows: T for the query side, S for the key side.
std::vector<int64_t> tma_rows_shape(const Problem &p, RowSide side, int64_t heads, int64_t dim);
/// The flat [B N T] view of lse and delta the hopper VJP kernels read.
int64_t flat_row_stats(const Problem &p);

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
  FusedDkDvDq,   ///< hopper, per KV block: dk, dv, and each step's dS K added into an f32 dq sum
  DqFromSum,     ///< dq = scale * the f32 dq sum (rows padded to block_q)
  DsinksReduce,  ///< dsinks = -(the delta kernel's partial sums, added in a fixed order)
  VTranspose,    ///< fp8 hopper forward: v [B, S, K, Hv] -> vt [B K, Hv, S padded] (Problem::vt_shape)
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
  /// The hopper dk/dv kernel with each step's lse and delta loaded a whole step ahead and
  /// carried (config "stats_ahead", opt-in): see hopper_dkdv_kernel.
  bool stats_ahead = false;
  /// Blocks of the kernel meant to share an SM (dsl::KernelOptions::blocks_per_sm; the
  /// hopper forward's config "blocks_per_sm"): its shared memory must fit that share. In
  /// the key and name only where not 1.
  int blocks_per_sm = 1;
  /// Eighths of the softmax's exponentials (each thread's registers, 1 of 8 per step)
  /// computed by a polynomial on the FMA pipes instead of the special-function unit
  /// (dsl::exp2 with a share; config "exp2_fma"): where the unit bounds the step, the
  /// hopper forward at head dim 64. In the key and name only where nonzero.
  int exp2_fma = 0;
  /// fp8: V's transpose stores each 16 keys in the order a product's accumulator holds
  /// P's columns and P V reads P's registers as they are (tile.dot's a_k_interleaved;
  /// the hopper forward's config "interleave_v"). In the key and name only where set.
  bool interleave_v = false;
  /// stats_ahead where it applies (the hopper dk/dv kernels): in their key and name.
  bool carriesStats() const {
    return stats_ahead && tma && (kind == KernelKind::FlashDkDv || kind == KernelKind::FusedDkDvDq);
  }
  /// The kernels the sinks change, a variant of their own (in their key and name, "_sink"):
  /// the forward's (the flash forward, the reference's row statistics) and the VJP's delta
  /// (which also writes the dsinks partial sums) and their reduction. dq, dk and dv take
  /// the lse the sinks are in as before: their kernels are a call's without sinks.
  bool usesSinks() const {
    if (kind == KernelKind::FlashForward || kind == KernelKind::RowStats)
      return p.sinks;
    return p.dsinks && (kind == KernelKind::Delta || kind == KernelKind::DsinksReduce);
  }
  /// The hopper fused-dq plan of a deterministic call (Problem::deterministic): each dk/dv
  /// program waits for its turn at each query block before adding dS K into the dq sum,
  /// key blocks in ascending order, through an i32 counter per (batch row, query head,
  /// query block) that the plan zeroes (hopper_dkdv_kernel says why the order is fixed
  /// and cannot deadlock).
  bool ordered_dq = false;
  /// ordered_dq where it applies (the fused dk/dv kernel): in its key and name ("_ordered").
  bool ordersDq() const { return ordered_dq && tma && kind == KernelKind::FusedDkDvDq; }

  KernelKey key() const;
  std::string name() const;
};

dsl::Kernel build_kernel(const KernelSpec &spec);

/// The padded tile extent of a head dim (a power of two >= 16).
int64_t padded_head_dim(int64_t d);
/// The smallest power-of-two multiple of `floor` (itself one) at least `v`.
int64_t pow2_at_least(int64_t v, int64_t floor);
bool is_half(DType d);
/// Tensor cores for bf16 / f16 (and fp8, whose forward only hopper serves on them),
/// exact multiply-adds otherwise.
Product products_of(const Problem &p);

/// An fp8 call's tensors (attention_fp8's q, k, v, q_descale?, k_descale?, v_descale?,
/// q_seq_lengths?, kv_seq_lengths? | out, lse?) in attention's order with the descales
/// after sinks: q, k, v, bias, mask, q_seq_lengths, kv_seq_lengths, sinks, q_descale,
/// k_descale, v_descale | out, lse (absent ones empty views).
struct AttentionOrder {
  std::vector<TensorView> in, out;
};
AttentionOrder fp8_attention_order(std::span<const TensorView> in, std::span<const TensorView> out);
/// Reads a validated BoundArgs of attention_fp8 (Fp8.cpp).
Problem fp8_problem_of(const BoundArgs &args);

//===----------------------------------------------------------------------===//
// Configs the implementations share
//===----------------------------------------------------------------------===//

/// What no implementation serves: programs run over (blocks, heads, batch rows), and
/// grid y and z stop at 65535.
std::optional<std::string> grid_why_not(const Problem &p);

/// The blocks of every implementation but hopper: a forward or dq program holds block_q
/// queries and walks block_kv keys a step; a dk/dv program holds block_kv keys and walks
/// block_q queries a step (the reference: the [block_q, block_kv] tiles of its logits).
struct BlockConfig {
  int64_t block_q = 64;   ///< "block_q"
  int64_t block_kv = 64;  ///< "block_kv"
  int64_t num_warps = 4;  ///< "num_warps"
  bool operator==(const BlockConfig &) const = default;
};
/// Blocks of powers of two in [16, 256] on 1, 2, 4 or 8 warps.
std::optional<std::string> check_block_shape(const BlockConfig &b);
/// 32-bit registers per thread the accumulators and one score block need; `prefetched`:
/// also the next step's blocks, carried in registers.
int64_t register_estimate(const Problem &p, const BlockConfig &b, bool prefetched);
/// Refuses blocks whose accumulators alone pass the register file (256 a thread).
std::optional<std::string> check_registers(const Problem &p, const BlockConfig &b, bool prefetched);
/// Exact (f32 / f64, the reference) products keep [rows, keys, 16] partial products in
/// registers: 16-row blocks, 32-key steps (16 in f64), 4 warps.
BlockConfig exact_blocks(const Problem &p);
/// `first`, then 16- and 32-wide blocks on 4 warps whose registers fit (128 a thread).
std::vector<BlockConfig> exact_block_space(const Problem &p, const BlockConfig &first);

/// The flash kernels' keys. Chunked and tile take the same ones, so that a tile config
/// runs on chunked: having no cp.async ring, it walks through registers whatever
/// "async_copy" and "wgmma" say.
struct FlashConfig : BlockConfig {
  bool prefetch = false;    ///< "prefetch": each loop reads its next blocks a step ahead, in registers
  bool async_copy = false;  ///< "async_copy": the blocks a loop walks go through a cp.async ring
  int64_t stages = 2;       ///< "stages": the ring's slots (blocks are copied stages - 1 steps ahead)
  bool wgmma = false;       ///< on sm_90a the products read the ring on wgmma
  bool overlap = false;     ///< with wgmma, the forward issues the next step's Q K^T before this softmax

  /// "wgmma" is one key for both flags, as result files have it: 0, 1 (wgmma) or 2 (wgmma
  /// and overlap). to_config writes that form back, and nothing without wgmma (heuristics
  /// and search spaces never set it).
  static void read_wgmma(FlashConfig &c, int64_t level);
  static std::optional<int64_t> write_wgmma(const FlashConfig &c);
  static constexpr auto keys = std::tuple{
      ConfigKey{"block_q", &FlashConfig::block_q},
      ConfigKey{"block_kv", &FlashConfig::block_kv},
      ConfigKey{"num_warps", &FlashConfig::num_warps},
      ConfigKey{"prefetch", &FlashConfig::prefetch, KeyUse::Optional},
      ConfigKey{"async_copy", &FlashConfig::async_copy, KeyUse::Optional},
      ConfigKey{"stages", &FlashConfig::stages, KeyUse::Optional},
      ComputedKey<FlashConfig>{"wgmma", &FlashConfig::read_wgmma, &FlashConfig::write_wgmma}};
  bool operator==(const FlashConfig &) const = default;
};
/// The ring's keys, then the blocks' shape and registers.
std::optional<std::string> check_flash(const Problem &p, const FlashConfig &c);
/// FlashAttention-2's defaults on tensor cores (64-row query blocks, 64-key steps, 4
/// warps; narrower steps and more warps as the head dim grows, so the accumulator and
/// scores stay in registers); exact_blocks for exact products.
FlashConfig flash_defaults(const Problem &p);
/// `first`, then on tensor cores 64- and 128-row blocks by 32- to 128-key steps on 4 or
/// 8 warps, their loops through registers, one step ahead and (where `ring`) a cp.async
/// ring of 2 or 3 stages, where their registers fit (128) and `valid` (the
/// implementation's check) takes them.
std::vector<FlashConfig> flash_search_space(const Problem &p, const FlashConfig &first, bool ring,
                                           const std::function<bool(const FlashConfig &)> &valid);

//===----------------------------------------------------------------------===//
// Plans the implementations share
//===----------------------------------------------------------------------===//

using Arg = ops_detail::KernelExecutor::Arg;

/// Reshaped views of the call's tensors and workspaces on one device.
struct Views {
  const Problem &p;
  int device;

  TensorView as(const TensorView &t, std::vector<int64_t> shape) const {
    return TensorView(t.data(), t.dtype(), shape, device);
  }
  TensorView as(uint64_t data, DType dtype, std::vector<int64_t> shape) const {
    return TensorView(data, dtype, shape, device);
  }
  TensorView q(const TensorView &t) const { return as(t, rowsShape(p.T, p.total_q, p.N, p.H)); }
  TensorView k(const TensorView &t) const { return as(t, rowsShape(p.S, p.total_kv, p.K, p.H)); }
  TensorView v(const TensorView &t) const { return as(t, rowsShape(p.S, p.total_kv, p.K, p.Hv)); }
  TensorView o(const TensorView &t) const { return as(t, rowsShape(p.T, p.total_q, p.N, p.Hv)); }
  TensorView rows(const TensorView &t) const { return as(t, row_stats_shape(p)); }
  TensorView rows(uint64_t data) const { return as(data, p.compute, row_stats_shape(p)); }
  TensorView vjp_rows(uint64_t data) const { return as(data, p.compute, vjp_row_stats_shape(p)); }
  TensorView square(uint64_t data) const { return as(data, p.compute, {p.B, p.N, p.T, p.S}); }
  TensorView broadcast(const TensorView &t, const Broadcast &bc) const {
    return as(t, std::vector<int64_t>(bc.shape.begin(), bc.shape.end()));
  }
  /// Seq lengths [B], or (packed) cu_seqlens [B + 1].
  TensorView lengths(const TensorView &t) const { return as(t, {p.varlen ? p.B + 1 : p.B}); }

private:
  std::vector<int64_t> rowsShape(int64_t seq, int64_t total, int64_t heads, int64_t dim) const {
    return p.varlen ? std::vector<int64_t>{1, total, heads, dim} : std::vector<int64_t>{p.B, seq, heads, dim};
  }
};

/// q, k, v, bias?, mask?, q_seq_lengths?, kv_seq_lengths? (then, fp8, q_descale?,
/// k_descale?, v_descale?) as the kernels declare them (with `rows`, q, k and v as [B,
/// rows, heads x dim]: the hopper kernels' TMA views; an fp8 call's v is then its
/// transposed copy, passed as vt_shape). `optional` holds bias, mask, q_seq_lengths,
/// kv_seq_lengths and (fp8 calls) sinks, q_descale, k_descale, v_descale: attention's
/// inputs after v.
std::vector<Arg> operand_args(const Views &w, const TensorView &q, const TensorView &k, const TensorView &v,
                              std::span<const TensorView> optional, bool rows = false);

/// Launches the kernels of one call: each is `base` with its kind (and block sizes).
class Launcher {
public:
  Launcher(const KernelSpec &base, ops_detail::KernelExecutor &ex) : ex_(ex), base_(base) {}
  void launch(KernelKind kind, const std::vector<Arg> &args, int64_t block_q = 0, int64_t block_kv = 0);

private:
  ops_detail::KernelExecutor &ex_;
  KernelSpec base_;
};

/// The query rows of a delta program.
inline constexpr int64_t kDeltaRows = 64;
/// The dsinks partial sums: one per (query block of `block_q` rows, batch row) of each
/// head ([N, B x query blocks], in the compute dtype), as the delta kernel writes them.
int64_t dsinks_partials(const Problem &p, int64_t block_q);
/// The workspace pieces every VJP plan starts with: delta [B, N, T], (packed) lse
/// padded to [B, N, T] and, with dsinks, the delta kernel's partial sums.
struct DeltaWorkspace {
  size_t delta = 0, lse = 0, partials = 0;
  DeltaWorkspace(const Problem &p, ops_detail::Workspace &ws);
};
/// What the dk/dv and dq kernels read: lse and delta, [B, N, T] (vjp_row_stats_shape).
struct RowStatViews {
  TensorView lse, delta;
};
/// delta = rowsum(dout * out), the first kernel of every VJP plan (packed: with the
/// sequences' first rows from cu_seqlens_q, lse copied beside delta padded per
/// sequence); with dsinks its programs also write their partial sums of dsinks (from
/// the call's lse and sinks), which a second kernel adds up in a fixed order into
/// `dsinks`.
RowStatViews launch_delta(const Views &w, Launcher &launcher, const ops_detail::Workspace &ws,
                          const DeltaWorkspace &at, const TensorView &dout, const TensorView &out,
                          const TensorView &lse, const TensorView &sinks, const TensorView &dsinks,
                          const TensorView &cu_seqlens_q = {});

/// The spec every kernel of a call starts from: the problem, its products and blocks.
KernelSpec block_spec(const Problem &p, Product product, const BlockConfig &b);

/// A call without queries has empty results and no gradient for any key: zeroes the
/// outputs and says so.
bool zero_without_queries(const Problem &p, std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex);

/// How the VJP forms dq: its own kernel (recomputing S and dP: deterministic), or added up
/// by the hopper dk/dv programs into an f32 sum with TMA reduce-adds (5 products a block
/// pair instead of 7; in key-block order with the spec's ordered_dq, else in no fixed
/// order), then scaled into dq.
enum class DqPlan : uint8_t { OwnKernel, FusedSum };

/// The rows of the f32 dq sum a batch row has: T rounded up to the dk/dv query step, so
/// that no step's block reaches into the next batch row's.
int64_t dq_sum_rows(const Problem &p, int64_t query_step);

/// Why the kernels run_flash launches for `base` do not fit a block's shared memory, as
/// the compiler plans each (ops_detail::check_shared_memory); null where they fit.
std::optional<std::string> check_flash_shared_memory(const KernelSpec &base, DqPlan dq = DqPlan::OwnKernel);

/// The plan of the flash kernels (chunked, tile and, with base.tma, hopper): the forward
/// one kernel (out, lse); the VJP delta -> dk/dv (+ dS for dbias) -> dq (-> dbias
/// reduce), its workspaces (delta, dS) out of the call's one scratch buffer. With
/// DqPlan::FusedSum (hopper only): delta, zeroing the dq sum (and, with base.ordered_dq,
/// the order counters after it, in the same fill), dk/dv adding into it, then dq from it.
void run_flash(const KernelSpec &base, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
               ops_detail::KernelExecutor &ex, DqPlan dq = DqPlan::OwnKernel);

//===----------------------------------------------------------------------===//
// The implementations, one file each (auto's order: hopper, tile, chunked, reference)
//===----------------------------------------------------------------------===//

struct ReferenceConfig;      // Reference.cpp
struct HopperForwardConfig;  // Hopper.cpp
struct HopperVjpConfig;      // Hopper.cpp

/// Materialised logits, the correctness oracle (Reference.cpp).
struct Reference {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Reference, attention_detail::Problem, ReferenceConfig)
  /// Refuses a call whose logits workspace would take most of the device's memory.
  static void check_device(const Problem &p, const BoundArgs &args, Device &device);
};
/// The flash kernels, every edge masked (Chunked.cpp).
struct Chunked { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Chunked, attention_detail::Problem, FlashConfig) };
/// The flash kernels on tensor cores: split edges, a cp.async ring (Tile.cpp).
struct Tile { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Tile, attention_detail::Problem, FlashConfig) };
/// sm_90a: TMA rings, warp roles, wgmma (Hopper.cpp); the forward and the VJP take
/// different keys.
struct HopperForward {
  TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Hopper, attention_detail::Problem, HopperForwardConfig)
};
struct HopperVjp { TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Hopper, attention_detail::Problem, HopperVjpConfig) };

} // namespace tokamax::attention_detail

namespace tokamax::ops_detail {
// Each implementation's adapter is instantiated in its own file, where its config is
// complete: Op.cpp registers them without seeing the configs.
extern template class TypedImplementation<attention_detail::Reference>;
extern template class TypedImplementation<attention_detail::Chunked>;
extern template class TypedImplementation<attention_detail::Tile>;
extern template class TypedImplementation<attention_detail::HopperForward>;
extern template class TypedImplementation<attention_detail::HopperVjp>;
} // namespace tokamax::ops_detail
