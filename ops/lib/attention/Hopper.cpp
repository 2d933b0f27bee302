//===- Hopper.cpp - sm_90a attention: TMA rings, warp roles, wgmma ----------===//
//
// The implementations' configs, checks and plans; the kernels are in HopperKernels.cpp.
//
// Configs. Every program holds 16 x num_warps rows (4 or 8 warps: each consumer warp
// owns 16, whole warpgroups): the forward's queries ("block_q" must say so) with
// "block_kv" keys a step. The VJP's dk/dv programs hold keys and walk "block_q" queries
// a step, its dq programs hold queries and walk "block_kv" keys (blocks are copied a
// batch row at a time: any T and S); "stages" are the rings' slots. The held blocks,
// the rings and the registers of the scores and accumulators must fit. The forward's
// "overlap" issues each step's Q K^T before the previous step's P V, so the softmax runs
// while the tensor cores work; "pingpong" (8 warps) has the two consumer warpgroups take
// turns issuing their products; "exp2_fma" computes that many eighths of the softmax's
// exponentials on the FMA pipes (the special-function unit bounds the step at head dim 64).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace tokamax::attention_detail {

struct HopperForwardConfig {
  int64_t block_q = 128;   ///< "block_q": the queries a program holds, 16 x num_warps
  int64_t block_kv = 128;  ///< "block_kv": keys a step
  int64_t num_warps = 8;   ///< "num_warps": consumer warps
  int64_t stages = 2;      ///< "stages": the rings' slots (absent: 2)
  bool overlap = false;    ///< "overlap": each step's Q K^T issued before the previous step's P V
  bool pingpong = false;   ///< "pingpong": the consumer warpgroups take turns issuing products
  /// "exp2_fma": eighths of the softmax's exponentials on the FMA pipes (KernelSpec::exp2_fma)
  int64_t exp2_fma = 0;
  /// "blocks_per_sm": programs meant to share an SM (1 or 2; KernelSpec::blocks_per_sm):
  /// one's loads, prologue and epilogue overlap the other's products
  int64_t blocks_per_sm = 1;
  /// "interleave_v" (fp8, opt-in until timed on a GPU): V's transpose stores each 16 keys
  /// in the order the accumulator holds P's columns, so P V reads P's registers as they are
  /// (KernelSpec::interleave_v)
  bool interleave_v = false;

  static constexpr auto keys = std::tuple{ConfigKey{"block_q", &HopperForwardConfig::block_q},
                                          ConfigKey{"block_kv", &HopperForwardConfig::block_kv},
                                          ConfigKey{"num_warps", &HopperForwardConfig::num_warps},
                                          ConfigKey{"stages", &HopperForwardConfig::stages, KeyUse::Defaulted},
                                          ConfigKey{"overlap", &HopperForwardConfig::overlap, KeyUse::Optional},
                                          ConfigKey{"pingpong", &HopperForwardConfig::pingpong, KeyUse::Optional},
                                          ConfigKey{"exp2_fma", &HopperForwardConfig::exp2_fma, KeyUse::Optional},
                                          ConfigKey{"blocks_per_sm", &HopperForwardConfig::blocks_per_sm,
                                                    KeyUse::Optional},
                                          ConfigKey{"interleave_v", &HopperForwardConfig::interleave_v,
                                                    KeyUse::Optional}};
  static std::optional<std::string> refused_key(const std::string &key) {
    return fmt::format("unknown key \"{}\" for hopper", key);
  }
  bool operator==(const HopperForwardConfig &) const = default;
};

struct HopperVjpConfig {
  int64_t dkdv_query_step = 64;  ///< "block_q": queries a dk/dv step
  int64_t dq_key_step = 128;     ///< "block_kv": keys a dq step
  int64_t num_warps = 8;         ///< "num_warps": consumer warps; both kernels hold 16 x num_warps rows
  int64_t stages = 2;            ///< "stages": the rings' slots (absent: 2)
  /// "fused_dq": the dk/dv programs also add each step's dS K into an f32 dq sum (TMA
  /// reduce-adds) and no dq kernel runs: 5 products a block pair instead of 7. A
  /// deterministic call (the default) orders each query block's adds by key block
  /// (semaphores: KernelSpec::ordered_dq); with deterministic = false they land in no
  /// fixed order. Opt-in only (slower than the 7-product VJP so far): never in the
  /// heuristic or the search space.
  bool fused_dq = false;
  /// "stats_ahead": each dk/dv step's lse and delta are loaded by the step before and
  /// carried (hopper_dkdv_kernel), where the registers allow. Opt-in only: ptxas injects
  /// a warpgroup.wait (C7517) into the step at H 64 with 64-query steps, and serializes
  /// the wgmma (C7518) with 4 warps and 32-query steps; to be measured.
  bool stats_ahead = false;

  static constexpr auto keys = std::tuple{ConfigKey{"block_q", &HopperVjpConfig::dkdv_query_step},
                                          ConfigKey{"block_kv", &HopperVjpConfig::dq_key_step},
                                          ConfigKey{"num_warps", &HopperVjpConfig::num_warps},
                                          ConfigKey{"stages", &HopperVjpConfig::stages, KeyUse::Defaulted},
                                          ConfigKey{"fused_dq", &HopperVjpConfig::fused_dq, KeyUse::Optional},
                                          ConfigKey{"stats_ahead", &HopperVjpConfig::stats_ahead, KeyUse::Optional}};
  static std::optional<std::string> refused_key(const std::string &key) {
    return fmt::format("unknown key \"{}\" for hopper's VJP", key);
  }
  bool operator==(const HopperVjpConfig &) const = default;
};

namespace {

bool isHeadDimOfOneBox(int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128 || d == 256; }
bool isStep(int64_t v) { return v >= 16 && v <= 256 && !(v & (v - 1)); }

std::optional<std::string> whyNot(const Problem &p) {
  if (auto no = grid_why_not(p))
    return no;
  if (!is_half(p.dtype) && !p.fp8)
    return fmt::format("hopper serves bf16 and f16 (wgmma), not {}; use tile, chunked or reference",
                       dtype_name(p.dtype));
  if (p.fp8 && (p.H < 32 || p.Hv < 32))  // fp8 wgmma steps through K 32 at a time
    return fmt::format("hopper's fp8 forward needs head dims of 32, 64, 128 or 256 (fp8 products take K 32 at a "
                       "time), got H {} and Hv {}; use reference",
                       p.H, p.Hv);
  if (!isHeadDimOfOneBox(p.H) || !isHeadDimOfOneBox(p.Hv))
    return fmt::format("hopper needs head dims of 16, 32, 64, 128 or 256 (one TMA box a row block), got H {} and "
                       "Hv {}; use tile",
                       p.H, p.Hv);
  return std::nullopt;
}

/// The narrowest key step: 32 for fp8 (P V's K, 32 a wgmma), else 16.
int64_t minKeyStep(const Problem &p) { return p.fp8 ? 32 : 16; }

std::optional<std::string> checkWarps(int64_t w) {
  if (w != 4 && w != 8)
    return fmt::format("hopper needs num_warps 4 or 8 (whole consumer warpgroups), got {}", w);
  return std::nullopt;
}

/// The key step and the rings' slots. (Whether the held block, the rings and the rest
/// fit shared memory is the compiler's figure: check_flash_shared_memory.)
std::optional<std::string> checkRingKeys(int64_t keyStep, int64_t stages) {
  if (!isStep(keyStep))
    return fmt::format("hopper needs block_kv a power of two in [16, 256], got {}", keyStep);
  if (stages < 2 || stages > 4)
    return fmt::format("stages (the rings' slots) must be 2, 3 or 4, got {}", stages);
  return std::nullopt;
}

/// `words` 32-bit registers a consumer thread (its 16 rows over a warp) for the scores
/// and the accumulators.
std::optional<std::string> checkRegisters(int64_t bq, int64_t bkv, int64_t words) {
  if (words > 192)
    return fmt::format("block_q {} x block_kv {} needs ~{} registers per thread for the scores and the accumulators "
                       "(at most 192)",
                       bq, bkv, words);
  return std::nullopt;
}

/// The dk/dv kernel's fused dq: each step's dS K ([block_q, H] in the mma layout, every
/// consumer warp along its rows) goes to TMA's reduce-add in 128-byte strips of 32 f32
/// columns, beside S^T, dP^T and the dk and dv accumulators in registers. What fits
/// (ptxas, sm_90a, B 4, T = S 2048, N 8): one consumer warpgroup with 64-query steps at
/// H 64 (225 registers, 254 causal, no spills). 8 warps would need 128-query steps (16
/// rows a warp): 100 bytes of spills. At H 128 the unfused kernel already takes 254
/// registers: 112 bytes of spills (180 causal). At H 32 dS K ([64, 32]) runs on
/// mma.sync, which serializes the step's wgmma.
std::optional<std::string> checkFusedDq(const Problem &p, const HopperVjpConfig &c) {
  if (p.varlen)
    return std::string("fused_dq's dq sum is padded per batch row: packed sequences take the dq kernel");
  if (p.H != 64 || p.Hv > 64)
    return fmt::format("fused_dq adds dS K [64, H] by TMA, its accumulator beside dk's and dv's in registers: H 64 "
                       "and Hv up to 64, got H {} and Hv {}",
                       p.H, p.Hv);
  if (c.num_warps != 4 || c.dkdv_query_step != 64)
    return fmt::format("fused_dq runs dk/dv on one consumer warpgroup with 64-query steps (num_warps 4, block_q 64: "
                       "dS K's rows, 16 a warp, beside S^T, dP^T, dk and dv in registers), got block_q {} with {} "
                       "warps",
                       c.dkdv_query_step, c.num_warps);
  return std::nullopt;
}

/// The spec of a hopper call's kernels.
KernelSpec hopperSpec(const Problem &p, int64_t bq, int64_t bkv, int64_t warps, int64_t stages) {
  KernelSpec s = block_spec(p, products_of(p), {bq, bkv, warps});
  s.split_edges = true;
  s.stages = static_cast<int>(stages);
  s.tma = true;
  return s;
}

KernelSpec forwardSpec(const Problem &p, const HopperForwardConfig &c) {
  KernelSpec s = hopperSpec(p, c.block_q, c.block_kv, c.num_warps, c.stages);
  s.overlap = c.overlap;
  s.ping_pong = c.pingpong;
  s.exp2_fma = static_cast<int>(c.exp2_fma);
  s.blocks_per_sm = static_cast<int>(c.blocks_per_sm);
  s.interleave_v = c.interleave_v;
  return s;
}

KernelSpec vjpSpec(const Problem &p, const HopperVjpConfig &c) {
  KernelSpec s = hopperSpec(p, c.dkdv_query_step, c.dq_key_step, c.num_warps, c.stages);
  s.stats_ahead = c.stats_ahead;
  s.ordered_dq = c.fused_dq && p.deterministic;
  return s;
}

/// `preferred` where check takes it, else the first of its smaller variants it takes
/// (`smaller` gives the next, nullopt past the last); `preferred` where none fits.
template <class Impl>
typename Impl::Config firstFitting(const Problem &p, const typename Impl::Config &preferred,
                                   const std::function<std::optional<typename Impl::Config>(
                                       const typename Impl::Config &)> &smaller) {
  for (std::optional<typename Impl::Config> c = preferred; c; c = smaller(*c))
    if (!Impl::check(p, *c))
      return *c;
  return preferred;
}

} // namespace

//===----------------------------------------------------------------------===//
// The forward
//===----------------------------------------------------------------------===//

std::optional<std::string> HopperForward::why_not(const Problem &p) { return whyNot(p); }

HopperForwardConfig HopperForward::heuristic(const Problem &p) {
  // 128-row query blocks on two consumer warpgroups where T fills them; the widest key
  // step that keeps the scores and accumulator in registers (no wider than S needs).
  // Two consumer warpgroups take turns (ping-pong): on the H200 2-5 % ahead at every
  // benchmark shape, causal or not (e.g. (4, 4096, 32, 128) 545.6 TFLOP/s against 517.8).
  // Where no pair is hidden each step's Q K^T is also issued before the previous P V
  // (overlap): on the H100 (32, 2048, 16, 64) 427.2 against 402.4, (4, 4096, 32, 128)
  // 640.5 against 613.9; under a causal mask it lost (326.5 -> 312.1 at the first).
  // At head dim 64 with no pair hidden, 256-key steps without overlap (which has no
  // registers for them) went further: on the H100 (32, 2048, 16, 64) 439.3 / 439.2
  // against 423.8 / 420.9 with 128-key steps and overlap, one call; causal they lost
  // (323.7 against 326.5), at head dim 128 they pass shared memory.
  // Where pairs are hidden only at the sequences' ends (lengths, packed sequences),
  // 128-key steps with overlap too: on the H100 packed S1 / S2 406.1 / 640.3 against
  // 394.8 / 608.3 without, length-masked 409.1 / 631.6 against 396.6 / 615.8 (one call;
  // 256-key steps spill with lengths).
  const int64_t dim = std::max(padded_head_dim(p.H), padded_head_dim(p.Hv));
  const bool edgesOnly = !p.causal && p.left < 0 && p.right < 0 && !p.mask;
  const bool hidesNothing = edgesOnly && !p.q_lengths && !p.kv_lengths;
  auto blocks = [&](int64_t warps, int64_t keyStep) {
    return HopperForwardConfig{.block_q = 16 * warps,
                               .block_kv = keyStep,
                               .num_warps = warps,
                               .stages = 2,
                               .overlap = warps == 8 && edgesOnly && keyStep < 256,
                               .pingpong = warps == 8};
  };
  // Where those blocks pass a block's shared memory, narrower key steps, then 4 warps:
  // at head dim 256 the 128 x 64 forward holds Q, the K / V rings and the output staged
  // for its store in 256 KiB, 128 x 32 in 192 KiB.
  // (fp8: 128-key steps, as 256 beside P's shuffles into fp8 operands spill at head dim 64.)
  // Packed sequences at head dim 64 take the 256-key steps too: their edge masks come from
  // cu_seqlens at the last step alone, and ptxas assembles those steps without spills
  // (sm_90a; the kernels masking by q / kv lengths spill 16 bytes there).
  const bool wideSteps = dim == 64 && !p.fp8 && (hidesNothing || (p.varlen && edgesOnly));
  const int64_t widest = dim <= 128 ? (wideSteps ? 256 : 128) : 64;
  const int64_t narrowest = minKeyStep(p);
  const int64_t keyStep = std::min<int64_t>(widest, pow2_at_least(p.S, narrowest));
  // Under a causal mask at head dim 64, two programs an SM of one consumer warpgroup each
  // (64 queries, 128-key steps, no overlap): one's loads, prologue and epilogue run
  // beside the other's products. On an H200 (32, 2048, 16, 64) 353.2 / 352.6 TFLOP/s
  // against 324.1 / 324.1 (8 warps, ping-pong), one call; with overlap 326; without a
  // mask 430 against 440, and at head dim 128 (64-key steps) 491 against 549.
  if (p.causal && dim == 64 && p.T > 64) {
    const HopperForwardConfig two{.block_q = 64, .block_kv = keyStep, .num_warps = 4, .stages = 2, .blocks_per_sm = 2};
    if (!check(p, two))
      return two;
  }
  return firstFitting<HopperForward>(p, blocks(p.T > 64 ? 8 : 4, keyStep),
                                     [&](const HopperForwardConfig &c) -> std::optional<HopperForwardConfig> {
                                       if (c.block_kv > narrowest)
                                         return blocks(c.num_warps, c.block_kv / 2);
                                       if (c.num_warps == 8)
                                         return blocks(4, keyStep);
                                       return std::nullopt;
                                     });
}

std::vector<HopperForwardConfig> HopperForward::search_space(const Problem &p) {
  std::vector<HopperForwardConfig> space{heuristic(p)};
  for (int64_t warps : {4, 8})
    for (int64_t bkv : {64, 128, 256})
      for (int64_t stages : {2, 3})
        for (int flags : {0, 1, 2, 3}) {
          for (int64_t programs : {1, 2}) {  // two programs an SM: one consumer warpgroup each
            if (programs == 2 && warps != 4)
              continue;
            const HopperForwardConfig c{.block_q = 16 * warps, .block_kv = bkv, .num_warps = warps, .stages = stages,
                                        .overlap = (flags & 1) != 0, .pingpong = (flags & 2) != 0,
                                        .blocks_per_sm = programs};
            if (std::find(space.begin(), space.end(), c) == space.end() && !check(p, c))
              space.push_back(c);
          }
        }
  return space;
}

std::optional<std::string> HopperForward::check(const Problem &p, const HopperForwardConfig &c) {
  const int64_t w = c.num_warps;
  if (auto bad = checkWarps(w))
    return bad;
  if (c.pingpong && w != 8)
    return fmt::format("pingpong needs two consumer warpgroups (num_warps 8), got {} warps", w);
  if (c.block_q != 16 * w)
    return fmt::format("the hopper forward needs block_q = 16 * num_warps, got block_q {} with {} warps", c.block_q,
                       w);
  if (auto bad = checkRingKeys(c.block_kv, c.stages))
    return bad;
  if (c.block_kv < minKeyStep(p))
    return fmt::format("hopper's fp8 forward takes key steps of 32 or more (P V's K, 32 a product), got block_kv {}",
                       c.block_kv);
  if (c.interleave_v && !p.fp8)
    return std::string("interleave_v orders the keys of fp8 calls' transposed V; this call is not fp8");
  if (c.exp2_fma < 0 || c.exp2_fma > 8)
    return fmt::format("exp2_fma (eighths of the exponentials on the FMA pipes) must be in [0, 8], got {}",
                       c.exp2_fma);
  if (c.blocks_per_sm != 1 && c.blocks_per_sm != 2)
    return fmt::format("blocks_per_sm must be 1 or 2, got {}", c.blocks_per_sm);
  if (c.blocks_per_sm == 2 && w != 4)
    return fmt::format("blocks_per_sm 2 takes one consumer warpgroup (num_warps 4: 128 registers a thread at launch, "
                       "232 for the consumers), got {} warps",
                       w);
  if (c.exp2_fma > 2 && c.block_kv >= 256)
    return fmt::format("exp2_fma {} beside {}-key steps: the polynomial's temporaries beside the scores spill (ptxas, "
                       "sm_90a: 40 bytes from 4 eighths); at most 2 there",
                       c.exp2_fma, c.block_kv);
  // The scores and the accumulator; with overlap also the carried P, 16-bit.
  if (auto bad = checkRegisters(c.block_q, c.block_kv, (c.block_kv * (c.overlap ? 3 : 2) / 2 + p.Hv) / 2))
    return bad;
  return check_flash_shared_memory(forwardSpec(p, c));
}

void HopperForward::execute(const Problem &p, const HopperForwardConfig &c, std::span<const TensorView> inputs,
                            std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  run_flash(forwardSpec(p, c), inputs, outputs, ex);
}

//===----------------------------------------------------------------------===//
// The VJP
//===----------------------------------------------------------------------===//

std::optional<std::string> HopperVjp::why_not(const Problem &p) {
  if (auto no = whyNot(p))
    return no;
  if (std::max(p.H, p.Hv) > 128)
    return fmt::format("the hopper VJP holds dk and dv in registers: head dims up to 128, got H {} and Hv {}; use "
                       "tile",
                       p.H, p.Hv);
  return std::nullopt;
}

HopperVjpConfig HopperVjp::heuristic(const Problem &p) {
  // 128 held rows on two consumer warpgroups; the widest query step whose S, dP, dk and
  // dv fit the registers, 128-key steps for dq. On the H100 (row blocks along grid x),
  // fwd+bwd with 64 / 128 against 64 / 64 and the causal 32 / 64: (32, 2048, 16, 64)
  // 342.5 against 338.5, causal 273.0 against 251.2; (8, 8192, 16, 128) 455.8 against
  // 452.8, causal 434.7 against 410.2.
  int64_t queryStep = 64;
  while (queryStep > 16 && 2 * queryStep + p.H + p.Hv > 384)
    queryStep /= 2;
  // On 8 warps where the registers allow (head dim 64), each step's row statistics loaded
  // by the step before (stats_ahead): on the H100 (32, 2048, 16, 64) 357.3 / 357.2
  // against 351.7 / 348.3, causal 286.8 / 286.4 against 277.1 / 279.3, alternating in
  // one call.
  HopperVjpConfig preferred{.dkdv_query_step = queryStep,
                            .dq_key_step = std::min<int64_t>(128, pow2_at_least(p.S, 16)),
                            .num_warps = std::max(p.T, p.S) > 64 ? 8 : 4,
                            .stages = 2};
  preferred.stats_ahead = preferred.num_warps == 8 && (p.H + p.Hv) / 2 + 2 * queryStep <= 192;
  // Where those pass a block's shared memory, narrower steps, then 4 warps.
  return firstFitting<HopperVjp>(p, preferred, [&](const HopperVjpConfig &c) -> std::optional<HopperVjpConfig> {
    if (std::max(c.dkdv_query_step, c.dq_key_step) > 16)
      return HopperVjpConfig{std::max<int64_t>(16, c.dkdv_query_step / 2), std::max<int64_t>(16, c.dq_key_step / 2),
                             c.num_warps, c.stages};
    if (c.num_warps == 8)
      return HopperVjpConfig{preferred.dkdv_query_step, preferred.dq_key_step, 4, c.stages};
    return std::nullopt;
  });
}

std::vector<HopperVjpConfig> HopperVjp::search_space(const Problem &p) {
  std::vector<HopperVjpConfig> space{heuristic(p)};
  for (int64_t warps : {4, 8})
    for (int64_t queryStep : {32, 64, 128})
      for (int64_t keyStep : {64, 128})
        for (int64_t stages : {2, 3}) {
          const HopperVjpConfig c{queryStep, keyStep, warps, stages};
          if (std::find(space.begin(), space.end(), c) == space.end() && !check(p, c))
            space.push_back(c);
        }
  return space;
}

std::optional<std::string> HopperVjp::check(const Problem &p, const HopperVjpConfig &c) {
  const int64_t bq = c.dkdv_query_step, bkv = c.dq_key_step;
  if (auto bad = checkWarps(c.num_warps))
    return bad;
  if (!isStep(bq))
    return fmt::format("block_q (the hopper dk/dv step) must be a power of two in [16, 256], got {}", bq);
  if (auto bad = checkRingKeys(bkv, c.stages))
    return bad;
  if (c.stats_ahead && (p.H + p.Hv) / 2 + 2 * bq > 192)
    return fmt::format("stats_ahead carries two [block_q] vectors in the scores' layout (block_q / 2 registers a "
                       "thread) beside dk, dv, S^T and dP^T: (H + Hv) / 2 + 2 block_q must be at most 192, got {} "
                       "(at H 128 with 64-query steps ptxas spills)",
                       (p.H + p.Hv) / 2 + 2 * bq);
  if (c.fused_dq) {
    if (auto bad = checkFusedDq(p, c))
      return bad;
  } else if (auto bad = checkRegisters(bq, bkv, std::max(2 * bq + p.H + p.Hv, 2 * bkv + p.H) / 2)) {
    // dk/dv's S, dP and both accumulators; dq's S, dP and accumulator.
    return bad;
  }
  return check_flash_shared_memory(vjpSpec(p, c), c.fused_dq ? DqPlan::FusedSum : DqPlan::OwnKernel);
}

void HopperVjp::execute(const Problem &p, const HopperVjpConfig &c, std::span<const TensorView> inputs,
                        std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  run_flash(vjpSpec(p, c), inputs, outputs, ex, c.fused_dq ? DqPlan::FusedSum : DqPlan::OwnKernel);
}

} // namespace tokamax::attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::attention_detail::HopperForward>;
template class tokamax::ops_detail::TypedImplementation<tokamax::attention_detail::HopperVjp>;
