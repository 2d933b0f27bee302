//===- Configs.cpp - Attention configs: heuristics, search spaces, checks ---===//
//
// Every implementation takes block_q (query rows per program), block_kv (keys per
// step), num_warps and, for the flash kernels, prefetch and async_copy (the blocks a
// loop walks go through a cp.async ring of `stages` slots, default 2, in shared memory
// instead of registers; the tile heuristic's choice wherever the head dims allow it),
// and with async_copy "wgmma" (1: on sm_90a the products read the ring on wgmma; 2: the
// forward also issues the next step's Q K^T before this step's softmax; opt-in until
// measured on the device). The tile heuristic starts from
// FlashAttention-2's defaults (64-row query blocks, 64-key steps, 4 warps; 128-row blocks
// for the forward at H <= 64, as measured; narrower steps and more warps as the head dim
// grows so the accumulator and scores stay in registers); exact (f32 / f64) products
// use small blocks, since their [rows, keys, 16] partial products live in registers.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/AttentionDetail.h"
#include "ops/lib/Dispatch.h"

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::attention_detail {

namespace {

bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }
bool usesTensorCores(const Problem &p, Impl impl) { return impl != Impl::Reference && isHalf(p.dtype); }

int64_t pow2AtLeast(int64_t v, int64_t floor) {
  int64_t x = floor;
  while (x < v)
    x *= 2;
  return x;
}

/// 32-bit registers per thread the accumulators and one score block need.
int64_t registerEstimate(const Problem &p, const Config &c) {
  int64_t threads = 32 * c.get("num_warps");
  int64_t dims = padded_head_dim(p.H) + padded_head_dim(p.Hv);
  int64_t words = c.get("block_q") * (padded_head_dim(p.Hv) + c.get("block_kv")) +
                  (p.vjp ? c.get("block_kv") * dims : 0);
  if (c.get_or("prefetch", 0) && !c.get_or("async_copy", 0))  // the next step's blocks, 16-bit
    words += (p.vjp ? c.get("block_q") : c.get("block_kv")) * dims / 2;
  return words * (p.compute == DType::F64 ? 2 : 1) / threads;
}

/// Shared-memory bytes of the cp.async ring (every stage of the blocks a loop walks)
/// plus the staging of the operands held across it.
int64_t sharedEstimate(const Problem &p, const Config &c) {
  if (!c.get_or("async_copy", 0))
    return 0;
  int64_t dims = padded_head_dim(p.H) + padded_head_dim(p.Hv);
  int64_t rows = std::max(c.get("block_q"), c.get("block_kv"));
  return c.get_or("stages", 2) * rows * dims * 2 + rows * dims * 2;
}

bool isHeadDimOfOneBox(int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128 || d == 256; }

/// The hopper kernels' keys. Every program holds 16 x num_warps rows (4 or 8 warps: each
/// consumer warp owns 16, whole warpgroups): the forward's queries (block_q must say so)
/// with block_kv keys a step. The VJP's dk/dv programs hold keys and walk block_q queries
/// a step, its dq programs hold queries and walk block_kv keys (blocks are copied a batch
/// row at a time: any T and S); stages are the rings' slots. The held blocks, the
/// rings and the registers of the scores and accumulators must fit. The forward's
/// "overlap" (in the search space) issues each step's Q K^T before the previous step's
/// P V, so the softmax runs while the tensor cores work; "pingpong" (8 warps, the
/// heuristic's) has the two consumer warpgroups take turns issuing their products.
std::optional<std::string> checkHopper(const Problem &p, const Config &c) {
  for (const auto &[key, value] : c.values)
    if (key != "block_q" && key != "block_kv" && key != "num_warps" && key != "stages" &&
        ((key != "overlap" && key != "pingpong") || p.vjp))
      return fmt::format("unknown key \"{}\" for hopper{}", key, p.vjp ? "'s VJP" : "");
  for (const char *flag : {"overlap", "pingpong"})
    if (c.get_or(flag, 0) != 0 && c.get_or(flag, 0) != 1)
      return fmt::format("{} must be 0 or 1, got {}", flag, c.get(flag));
  const int64_t bq = c.get("block_q"), bkv = c.get("block_kv"), w = c.get("num_warps"), stages = c.get_or("stages", 2);
  const int64_t held = 16 * w, dims = p.H + p.Hv;
  if (w != 4 && w != 8)
    return fmt::format("hopper needs num_warps 4 or 8 (whole consumer warpgroups), got {}", w);
  if (c.get_or("pingpong", 0) && w != 8)
    return fmt::format("pingpong needs two consumer warpgroups (num_warps 8), got {} warps", w);
  if (!p.vjp && bq != held)
    return fmt::format("the hopper forward needs block_q = 16 * num_warps, got block_q {} with {} warps", bq, w);
  if (p.vjp && (bq < 16 || bq > 256 || (bq & (bq - 1))))
    return fmt::format("block_q (the hopper dk/dv step) must be a power of two in [16, 256], got {}", bq);
  if (bkv < 16 || bkv > 256 || (bkv & (bkv - 1)))
    return fmt::format("hopper needs block_kv a power of two in [16, 256], got {}", bkv);
  if (stages < 2 || stages > 4)
    return fmt::format("stages (the rings' slots) must be 2, 3 or 4, got {}", stages);
  // Forward: Q held, K / V streamed. VJP: K / V or Q / dO held, the other streamed.
  const int64_t step = p.vjp ? std::max(bq, bkv) : bkv;
  const int64_t shared = (held * (p.vjp ? dims : p.H) + stages * step * dims) * 2;
  if (shared > ops_detail::kHopperSharedBudget)
    return fmt::format("the held block and {} stages of {}-row blocks need {} KiB of shared memory (at most 220)",
                       stages, step, shared / 1024);
  // Registers per consumer thread (its 16 rows over a warp): the forward's scores and
  // accumulator; dk/dv's S, dP and both accumulators; dq's S, dP and accumulator.
  const int64_t words = p.vjp ? std::max(2 * bq + dims, 2 * bkv + p.H) / 2
                              : (bkv * (c.get_or("overlap", 0) ? 3 : 2) / 2 + p.Hv) / 2;  // + P, 16-bit
  if (words > 192)
    return fmt::format("block_q {} x block_kv {} needs ~{} registers per thread for the scores and the accumulators "
                       "(at most 192)",
                       bq, bkv, words);
  return std::nullopt;
}

} // namespace

bool async_copy_serves(const Problem &p, Impl impl) {
  return impl == Impl::Tile && isHalf(p.dtype) && p.H % 8 == 0 && p.Hv % 8 == 0;
}

std::optional<std::string> why_not(const Problem &p, Impl impl) {
  // Programs run over (blocks, heads, batch rows): grid y and z stop at 65535.
  if (p.B > 65535 || std::max(p.N, p.K) > 65535)
    return fmt::format("{} batch rows and {} heads: at most 65535 of each", p.B, std::max(p.N, p.K));
  switch (impl) {
  case Impl::Tile:
    if (!isHalf(p.dtype))
      return fmt::format("tile serves bf16 and f16 (tensor cores), not {}; use chunked or reference",
                         dtype_name(p.dtype));
    return std::nullopt;
  case Impl::Chunked:
    return std::nullopt;
  case Impl::Hopper:
    if (!isHalf(p.dtype))
      return fmt::format("hopper serves bf16 and f16 (wgmma), not {}; use tile, chunked or reference",
                         dtype_name(p.dtype));
    if (!isHeadDimOfOneBox(p.H) || !isHeadDimOfOneBox(p.Hv))
      return fmt::format("hopper needs head dims of 16, 32, 64, 128 or 256 (one TMA box a row block), got H {} and "
                         "Hv {}; use tile",
                         p.H, p.Hv);
    if (p.vjp && std::max(p.H, p.Hv) > 128)
      return fmt::format("the hopper VJP holds dk and dv in registers: head dims up to 128, got H {} and Hv {}; use "
                         "tile",
                         p.H, p.Hv);
    return std::nullopt;
  case Impl::Reference: {
    // The logits (and, for the VJP, dS) buffers: refuse what no GPU could hold.
    double bytes = p.logits_bytes() * (p.vjp ? 2 : 1);
    if (bytes > 256.0 * (1ull << 30))
      return fmt::format("reference materialises {:.1f} GiB of logits; use chunked or tile", bytes / (1ull << 30));
    return std::nullopt;
  }
  }
  return "unknown implementation";
}

Config heuristic(const Problem &p, Impl impl) {
  const int64_t dim = std::max(padded_head_dim(p.H), padded_head_dim(p.Hv));
  if (impl == Impl::Hopper && p.vjp) {
    // 128 held rows on two consumer warpgroups; the widest query step whose S, dP, dk and
    // dv fit the registers, 128-key steps for dq. On the H100 (row blocks along grid x),
    // fwd+bwd with 64 / 128 against 64 / 64 and the causal 32 / 64: (32, 2048, 16, 64)
    // 342.5 against 338.5, causal 273.0 against 251.2; (8, 8192, 16, 128) 455.8 against
    // 452.8, causal 434.7 against 410.2.
    const int64_t warps = std::max(p.T, p.S) > 64 ? 8 : 4;
    int64_t bq = 64;
    const int64_t bkv = std::min<int64_t>(128, pow2AtLeast(p.S, 16));
    while (bq > 16 && 2 * bq + p.H + p.Hv > 384)
      bq /= 2;
    return {{"block_q", bq}, {"block_kv", bkv}, {"num_warps", warps}, {"stages", 2}};
  }
  if (impl == Impl::Hopper) {
    // 128-row query blocks on two consumer warpgroups where T fills them; the widest key
    // step that keeps the scores and accumulator in registers (no wider than S needs).
    // Two consumer warpgroups take turns (ping-pong): on the H200 2-5 % ahead at every
    // benchmark shape, causal or not (e.g. (4, 4096, 32, 128) 545.6 TFLOP/s against 517.8).
    // Where no pair is hidden each step's Q K^T is also issued before the previous P V
    // (overlap): on the H100 (32, 2048, 16, 64) 427.2 against 402.4, (4, 4096, 32, 128)
    // 640.5 against 613.9; under a causal mask it lost (326.5 -> 312.1 at the first).
    const int64_t warps = p.T > 64 ? 8 : 4;
    const int64_t bkv = std::min<int64_t>(dim <= 128 ? 128 : 64, pow2AtLeast(p.S, 16));
    Config c{{"block_q", 16 * warps}, {"block_kv", bkv}, {"num_warps", warps}, {"stages", 2}};
    if (warps == 8)
      c.set("pingpong", 1);
    const bool hidesNothing = !p.causal && p.left < 0 && p.right < 0 && !p.mask && !p.q_lengths && !p.kv_lengths;
    if (warps == 8 && hidesNothing)
      c.set("overlap", 1);
    return c;
  }
  if (!usesTensorCores(p, impl)) {
    int64_t bq = std::min<int64_t>(16, pow2AtLeast(p.T, 16));
    return {{"block_q", bq}, {"block_kv", p.compute == DType::F64 ? 16 : 32}, {"num_warps", 4}};
  }
  int64_t bq = std::min<int64_t>(64, pow2AtLeast(p.T, 16));
  // The tile forward at H 64 on the H200: 128-row blocks 236 TFLOP/s, 64-row 177 (S1).
  if (impl == Impl::Tile && !p.vjp && dim <= 64)
    bq = std::min<int64_t>(128, pow2AtLeast(p.T, 16));
  int64_t bkv = dim >= 256 ? 32 : 64;
  if (impl == Impl::Chunked && dim <= 64)
    bkv = 128;  // chunks of 128 keys
  int64_t warps = dim >= 256 ? 8 : 4;
  if (p.vjp && dim >= 128)
    bkv = 32;
  // The tile VJP at H 128 on the H200 (S2 fwd+bwd): through registers 64 x 64 on 8 warps
  // 164-172 TFLOP/s, 64 x 32 on 4 warps 131-142; through the cp.async ring 64 x 32 on 4
  // warps 242, 64 x 64 on 8 warps 232.
  if (impl == Impl::Tile && p.vjp && dim == 128 && !async_copy_serves(p, impl))
    bkv = 64, warps = 8;
  Config c{{"block_q", bq}, {"block_kv", bkv}, {"num_warps", warps}};
  if (async_copy_serves(p, impl))
    c.set("async_copy", 1);
  return c;
}

std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &c) {
  for (const char *key : {"block_q", "block_kv", "num_warps"})
    if (!c.has(key))
      return fmt::format("missing \"{}\"", key);
  if (impl == Impl::Hopper)
    return checkHopper(p, c);
  for (const auto &[key, value] : c.values)
    if (key != "block_q" && key != "block_kv" && key != "num_warps" && key != "prefetch" && key != "async_copy" &&
        key != "stages" && key != "wgmma")
      return fmt::format("unknown key \"{}\"", key);
  if (c.has("stages") && (!c.get_or("async_copy", 0) || c.get("stages") < 2 || c.get("stages") > 4))
    return fmt::format("stages (the cp.async ring's slots) must be 2, 3 or 4 with \"async_copy\": 1, got {}",
                       c.get("stages"));
  if (c.get_or("wgmma", 0) && !c.get_or("async_copy", 0))
    return "wgmma (products reading the cp.async ring on sm_90a) needs \"async_copy\": 1";
  if (c.get_or("wgmma", 0) == 2 && c.get_or("stages", 2) < 3)
    return "wgmma 2 (the next step's Q K^T issued before this step's softmax) reads one step ahead in the ring: "
           "it needs \"stages\": 3 or 4";
  if (c.has("wgmma") && impl != Impl::Reference && (c.get("wgmma") < 0 || c.get("wgmma") > 2))
    return fmt::format("wgmma must be 0, 1 or 2, got {}", c.get("wgmma"));
  for (const char *key : {"prefetch", "async_copy", "wgmma"})
    if (c.has(key) && (impl == Impl::Reference || (key != std::string("wgmma") && c.get(key) != 0 && c.get(key) != 1)))
      return impl == Impl::Reference ? fmt::format("reference takes no \"{}\"", key)
                                     : fmt::format("{} must be 0 or 1, got {}", key, c.get(key));
  for (const char *key : {"block_q", "block_kv"}) {
    int64_t v = c.get(key);
    if (v < 16 || v > 256 || (v & (v - 1)))
      return fmt::format("{} must be a power of two in [16, 256], got {}", key, v);
  }
  int64_t w = c.get("num_warps");
  if (w != 1 && w != 2 && w != 4 && w != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", w);
  if (sharedEstimate(p, c) > ops_detail::kHopperSharedBudget)
    return fmt::format("the cp.async ring of {} stages of {} x {} blocks needs ~{} KiB of shared memory (at most 220)",
                       c.get_or("stages", 2), c.get("block_q"), c.get("block_kv"), sharedEstimate(p, c) / 1024);
  if (registerEstimate(p, c) > 256)
    return fmt::format("block_q {} x block_kv {} with {} warps needs ~{} registers per thread for the "
                       "accumulators alone",
                       c.get("block_q"), c.get("block_kv"), w, registerEstimate(p, c));
  return std::nullopt;
}

std::vector<Config> search_space(const Problem &p, Impl impl) {
  std::vector<Config> space{heuristic(p, impl)};
  if (impl == Impl::Hopper) {
    // The forward's block_q is its held rows; the VJP's, dk/dv's query step.
    for (int64_t warps : {4, 8})
      for (int64_t bq : p.vjp ? std::vector<int64_t>{32, 64, 128} : std::vector<int64_t>{16 * warps})
        for (int64_t bkv : {64, 128})
          for (int64_t stages : {2, 3})
            for (int64_t flags : {0, 1, 2, 3}) {  // overlap, pingpong: the forward's
              if (flags && p.vjp)
                continue;
              Config c{{"block_q", bq}, {"block_kv", bkv}, {"num_warps", warps}, {"stages", stages}};
              if (flags & 1)
                c.set("overlap", 1);
              if (flags & 2)
                c.set("pingpong", 1);
              if (std::find(space.begin(), space.end(), c) == space.end() && !checkHopper(p, c))
                space.push_back(c);
            }
    return space;
  }
  auto add = [&](int64_t bq, int64_t bkv, int64_t warps, int64_t prefetch = 0) {
    Config c{{"block_q", bq}, {"block_kv", bkv}, {"num_warps", warps}};
    if (prefetch == 1)
      c.set("prefetch", 1);
    if (prefetch >= 2) {
      c.set("async_copy", 1);
      if (prefetch == 3)
        c.set("stages", 3);
    }
    if (std::find(space.begin(), space.end(), c) == space.end() && !check_config(p, impl, c) &&
        registerEstimate(p, c) <= 128)
      space.push_back(c);
  };
  if (!usesTensorCores(p, impl)) {
    for (int64_t bq : {16, 32})
      for (int64_t bkv : {16, 32})
        add(bq, bkv, 4);
    return space;
  }
  for (int64_t bq : {64, 128})
    for (int64_t bkv : {32, 64, 128})
      for (int64_t warps : {4, 8})
        for (int64_t prefetch : {0, 1, 2, 3})  // registers, one step ahead, cp.async ring of 2 or 3
          if ((bq <= pow2AtLeast(p.T, 16) || bq == 64) && (prefetch < 2 || async_copy_serves(p, impl)))
            add(bq, bkv, warps, prefetch);
  return space;
}

} // namespace tokamax::attention_detail
