//===- Common.cpp - What the attention implementations share ---------------===//
//
// Kernel specs (keys, names, builders); the block configs of every implementation but
// hopper and the flash config of chunked and tile (their checks, defaults and search
// spaces); the flash plan of chunked, tile and hopper.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"
#include "ops/lib/framework/SharedMemory.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace tokamax::attention_detail {

int64_t padded_head_dim(int64_t d) {
  int64_t p = 16;
  while (p < d)
    p *= 2;
  return p;
}

int64_t pow2_at_least(int64_t v, int64_t floor) {
  int64_t x = floor;
  while (x < v)
    x *= 2;
  return x;
}

bool is_half(DType d) { return d == DType::BF16 || d == DType::F16; }

Product products_of(const Problem &p) { return is_half(p.dtype) || p.fp8 ? Product::Mma : Product::Fma; }

std::vector<int64_t> rows_operand_strides(const Problem &p, int64_t rows, int64_t heads, int64_t dim) {
  if (p.heads_major)
    return {heads * rows * dim, dim, rows * dim, 1};
  return {rows * heads * dim, heads * dim, dim, 1};
}

std::vector<int64_t> tma_rows_shape(const Problem &p, RowSide side, int64_t heads, int64_t dim) {
  const bool queries = side == RowSide::Queries;
  if (p.varlen)
    return {1, queries ? p.total_q : p.total_kv, heads * dim};
  const int64_t rows = queries ? p.T : p.S;
  if (p.heads_major)
    return {p.B * heads, rows, dim};
  return {p.B, rows, heads * dim};
}

int64_t flat_row_stats(const Problem &p) { return p.B * p.N * p.T; }

double Problem::logits_bytes() const {
  return static_cast<double>(B) * N * T * S * dtype_size(compute);
}

KernelKey KernelSpec::key() const {
  KernelKey h("attention");
  auto mix = [&](uint64_t v) { h.add(v); };
  auto mixDouble = [&](double d) { h.add(d); };
  mix(static_cast<uint64_t>(kind));
  mix(p.vjp);
  for (int64_t v : {p.B, p.T, p.S, p.N, p.K, p.H, p.Hv, p.left, p.right})
    mix(static_cast<uint64_t>(v));
  mix(static_cast<uint64_t>(p.dtype));
  mix(static_cast<uint64_t>(p.compute));
  mixDouble(p.scale);
  mixDouble(p.softcap);
  mix(p.causal);
  for (const auto *bc : {&p.bias, &p.mask}) {
    mix(bc->has_value());
    if (*bc) {
      for (int64_t d : (*bc)->shape)
        mix(static_cast<uint64_t>(d));
      mix(static_cast<uint64_t>((*bc)->dtype));
    }
  }
  mix(p.q_lengths);
  mix(p.kv_lengths);
  mix(p.lse_out);
  mix(p.dbias);
  mix(static_cast<uint64_t>(product));
  mix(static_cast<uint64_t>(block_q));
  mix(static_cast<uint64_t>(block_kv));
  mix(static_cast<uint64_t>(num_warps));
  mix(split_edges);
  mix(prefetch);
  mix(async_copy);
  mix(static_cast<uint64_t>(stages));
  mix(wgmma);
  mix(overlap);
  mix(tma);
  mix(ping_pong);
  if (carriesStats())  // (absent from the keys of every other kernel, which stay as they were)
    mix(stats_ahead);
  if (usesSinks())  // (likewise)
    mix(true);
  if (p.varlen) {  // (likewise)
    mix(0x7a91e4);
    mix(static_cast<uint64_t>(p.total_q));
    mix(static_cast<uint64_t>(p.total_kv));
  }
  if (ordersDq())  // (likewise)
    mix(ordered_dq);
  if (p.heads_major)  // (likewise)
    mix(uint64_t(0xb7));
  if (exp2_fma != 0)  // (likewise)
    mix(uint64_t(0xe200) + static_cast<uint64_t>(exp2_fma));
  if (blocks_per_sm != 1)  // (likewise)
    mix(uint64_t(0xb100) + static_cast<uint64_t>(blocks_per_sm));
  if (p.fp8)  // (likewise)
    mix(uint64_t(0xf800) + uint64_t(p.q_descale) + 2 * uint64_t(p.k_descale) + 4 * uint64_t(p.v_descale));
  if (interleave_v)  // (likewise)
    mix(uint64_t(0x1e7));
  return h;
}

std::string KernelSpec::name() const {
  static const char *names[] = {"flash_forward", "delta",    "flash_dkdv",  "flash_dq",     "dbias_reduce",
                                "logits",        "row_stats", "output",      "ref_ds",       "ref_dq",
                                "ref_dkdv",      "dkdv_dq",   "dq_from_sum", "dsinks_reduce", "v_transpose"};
  return fmt::format("attention_{}{}_{}_h{}_{}x{}{}{}{}{}{}{}{}{}", names[static_cast<int>(kind)],
                     tma ? "_hopper" : "", dtype_name(p.dtype), p.H, block_q, block_kv, carriesStats() ? "_ahead" : "",
                     usesSinks() ? "_sink" : "", ordersDq() ? "_ordered" : "", p.heads_major ? "_bnth" : "",
                     p.varlen ? "_varlen" : "",
                     exp2_fma != 0 ? fmt::format("_fma{}", exp2_fma) : "",
                     blocks_per_sm != 1 ? fmt::format("_x{}", blocks_per_sm) : "", interleave_v ? "_il" : "");
}

dsl::Kernel build_kernel(const KernelSpec &s) {
  switch (s.kind) {
  case KernelKind::FlashForward:
    return s.tma ? hopper_forward_kernel(s) : flash_forward_kernel(s);
  case KernelKind::Delta:
    return delta_kernel(s);
  case KernelKind::FlashDkDv:
  case KernelKind::FusedDkDvDq:
    return s.tma ? hopper_dkdv_kernel(s) : flash_dkdv_kernel(s);
  case KernelKind::FlashDq:
    return s.tma ? hopper_dq_kernel(s) : flash_dq_kernel(s);
  case KernelKind::DbiasReduce:
    return dbias_reduce_kernel(s);
  case KernelKind::Logits:
    return logits_kernel(s);
  case KernelKind::RowStats:
    return row_stats_kernel(s);
  case KernelKind::Output:
    return output_kernel(s);
  case KernelKind::RefDs:
    return ref_ds_kernel(s);
  case KernelKind::RefDq:
    return ref_dq_kernel(s);
  case KernelKind::RefDkDv:
    return ref_dkdv_kernel(s);
  case KernelKind::DqFromSum:
    return dq_from_sum_kernel(s);
  case KernelKind::DsinksReduce:
    return dsinks_reduce_kernel(s);
  case KernelKind::VTranspose:
    return v_transpose_kernel(s);
  }
  throw Error("attention: unknown kernel kind");
}

//===----------------------------------------------------------------------===//
// Configs
//===----------------------------------------------------------------------===//

std::optional<std::string> grid_why_not(const Problem &p) {
  if (p.B > 65535 || std::max(p.N, p.K) > 65535)
    return fmt::format("{} batch rows and {} heads: at most 65535 of each", p.B, std::max(p.N, p.K));
  return std::nullopt;
}

std::optional<std::string> check_block_shape(const BlockConfig &b) {
  for (auto [key, v] : {std::pair{"block_q", b.block_q}, std::pair{"block_kv", b.block_kv}})
    if (v < 16 || v > 256 || (v & (v - 1)))
      return fmt::format("{} must be a power of two in [16, 256], got {}", key, v);
  const int64_t w = b.num_warps;
  if (w != 1 && w != 2 && w != 4 && w != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", w);
  return std::nullopt;
}

int64_t register_estimate(const Problem &p, const BlockConfig &b, bool prefetched) {
  const int64_t threads = 32 * b.num_warps;
  const int64_t dims = padded_head_dim(p.H) + padded_head_dim(p.Hv);
  int64_t words = b.block_q * (padded_head_dim(p.Hv) + b.block_kv) + (p.vjp ? b.block_kv * dims : 0);
  if (prefetched)  // the next step's blocks, 16-bit
    words += (p.vjp ? b.block_q : b.block_kv) * dims / 2;
  return words * (p.compute == DType::F64 ? 2 : 1) / threads;
}

std::optional<std::string> check_registers(const Problem &p, const BlockConfig &b, bool prefetched) {
  const int64_t words = register_estimate(p, b, prefetched);
  if (words > 256)
    return fmt::format("block_q {} x block_kv {} with {} warps needs ~{} registers per thread for the "
                       "accumulators alone",
                       b.block_q, b.block_kv, b.num_warps, words);
  return std::nullopt;
}

BlockConfig exact_blocks(const Problem &p) {
  return {std::min<int64_t>(16, pow2_at_least(p.T, 16)), p.compute == DType::F64 ? 16 : 32, 4};
}

std::vector<BlockConfig> exact_block_space(const Problem &p, const BlockConfig &first) {
  std::vector<BlockConfig> space{first};
  for (int64_t bq : {16, 32})
    for (int64_t bkv : {16, 32}) {
      const BlockConfig b{bq, bkv, 4};
      if (std::find(space.begin(), space.end(), b) == space.end() && !check_block_shape(b) &&
          register_estimate(p, b, false) <= 128)
        space.push_back(b);
    }
  return space;
}

void FlashConfig::read_wgmma(FlashConfig &c, int64_t level) {
  if (level < 0 || level > 2)
    throw Error(fmt::format("wgmma must be 0, 1 or 2, got {}", level));
  c.wgmma = level >= 1;
  c.overlap = level == 2;
}

std::optional<int64_t> FlashConfig::write_wgmma(const FlashConfig &c) {
  if (!c.wgmma)
    return std::nullopt;
  return c.overlap ? 2 : 1;
}

std::optional<std::string> check_flash(const Problem &p, const FlashConfig &c) {
  // Without the ring, "stages" may only restate the default (2), which it reads as absent.
  if ((c.stages != 2 && !c.async_copy) || c.stages < 2 || c.stages > 4)
    return fmt::format("stages (the cp.async ring's slots) must be 2, 3 or 4 with \"async_copy\": 1, got {}",
                       c.stages);
  if (c.wgmma && !c.async_copy)
    return "wgmma (products reading the cp.async ring on sm_90a) needs \"async_copy\": 1";
  if (c.overlap && (!c.wgmma || c.stages < 3))
    return "wgmma 2 (the next step's Q K^T issued before this step's softmax) reads one step ahead in the ring: "
           "it needs \"stages\": 3 or 4";
  if (auto bad = check_block_shape(c))
    return bad;
  return check_registers(p, c, c.prefetch && !c.async_copy);
}

std::optional<std::string> check_flash_shared_memory(const KernelSpec &base, DqPlan dq) {
  // Views without data at every operand position of attention_vjp (the forward reads fewer).
  const std::array<TensorView, 11> inputs{};
  const std::array<TensorView, 5> outputs{};
  // Each kernel is held to its share where its blocks share an SM (check_shared_memory).
  return ops_detail::check_shared_memory(
      [&](ops_detail::KernelExecutor &ex) { run_flash(base, inputs, outputs, ex, dq); });
}

FlashConfig flash_defaults(const Problem &p) {
  FlashConfig c;
  if (!is_half(p.dtype)) {
    static_cast<BlockConfig &>(c) = exact_blocks(p);
    return c;
  }
  const int64_t dim = std::max(padded_head_dim(p.H), padded_head_dim(p.Hv));
  c.block_q = std::min<int64_t>(64, pow2_at_least(p.T, 16));
  c.block_kv = dim >= 256 ? 32 : 64;
  c.num_warps = dim >= 256 ? 8 : 4;
  if (p.vjp && dim >= 128)
    c.block_kv = 32;
  return c;
}

std::vector<FlashConfig> flash_search_space(const Problem &p, const FlashConfig &first, bool ring,
                                           const std::function<bool(const FlashConfig &)> &valid) {
  std::vector<FlashConfig> space{first};
  if (!is_half(p.dtype)) {
    const std::vector<BlockConfig> exact = exact_block_space(p, first);  // first, then the others
    for (size_t i = 1; i < exact.size(); ++i)
      if (valid(FlashConfig{exact[i]}))
        space.push_back(FlashConfig{exact[i]});
    return space;
  }
  for (int64_t bq : {64, 128})
    for (int64_t bkv : {32, 64, 128})
      for (int64_t warps : {4, 8})
        for (int64_t loop : {0, 1, 2, 3}) {  // registers, one step ahead, cp.async ring of 2 or 3
          if ((bq > pow2_at_least(p.T, 16) && bq != 64) || (loop >= 2 && !ring))
            continue;
          FlashConfig c{{bq, bkv, warps}};
          c.prefetch = loop == 1;
          c.async_copy = loop >= 2;
          c.stages = loop == 3 ? 3 : 2;
          if (std::find(space.begin(), space.end(), c) == space.end() &&
              register_estimate(p, c, c.prefetch && !c.async_copy) <= 128 && valid(c))
            space.push_back(c);
        }
  return space;
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

std::vector<Arg> operand_args(const Views &w, const TensorView &q, const TensorView &k, const TensorView &v,
                              std::span<const TensorView> optional, bool rows) {
  const Problem &p = w.p;
  std::vector<Arg> args{w.q(q), w.k(k), w.v(v)};
  if (rows)
    args = {w.as(q, tma_rows_shape(p, RowSide::Queries, p.N, p.H)), w.as(k, tma_rows_shape(p, RowSide::Keys, p.K, p.H)),
            p.fp8 ? w.as(v, p.vt_shape()) : w.as(v, tma_rows_shape(p, RowSide::Keys, p.K, p.Hv))};
  if (p.bias)
    args.push_back(w.broadcast(optional[0], *p.bias));
  if (p.mask)
    args.push_back(w.broadcast(optional[1], *p.mask));
  if (p.q_lengths)
    args.push_back(w.lengths(optional[2]));
  if (p.kv_lengths)
    args.push_back(w.lengths(optional[3]));
  for (auto [present, i] : {std::pair{p.q_descale, 5}, std::pair{p.k_descale, 6}, std::pair{p.v_descale, 7}})
    if (present)
      args.push_back(w.as(optional[i], {p.B, p.K}));
  return args;
}

void Launcher::launch(KernelKind kind, const std::vector<Arg> &args, int64_t block_q, int64_t block_kv) {
  KernelSpec s = base_;
  s.kind = kind;
  if (block_q)
    s.block_q = block_q;
  if (block_kv)
    s.block_kv = block_kv;
  ex_.launch(s.key(), [s] { return build_kernel(s); }, args);
}

KernelSpec block_spec(const Problem &p, Product product, const BlockConfig &b) {
  KernelSpec s;
  s.p = p;
  s.product = product;
  s.block_q = b.block_q;
  s.block_kv = b.block_kv;
  s.num_warps = static_cast<int>(b.num_warps);
  return s;
}

std::vector<int64_t> row_stats_shape(const Problem &p) {
  return p.varlen ? std::vector<int64_t>{1, p.N, p.total_q} : std::vector<int64_t>{p.B, p.N, p.T};
}

std::vector<int64_t> vjp_row_stats_shape(const Problem &p) { return {p.B, p.N, p.T}; }

std::optional<std::string> varlen_why_not(const Problem &p) {
  if (p.varlen)
    return std::string("packed variable-length sequences are served by \"hopper\", \"tile\" and \"chunked\"");
  return std::nullopt;
}

DeltaWorkspace::DeltaWorkspace(const Problem &p, ops_detail::Workspace &ws) {
  const double bytes = double(p.B) * p.N * p.T * dtype_size(p.compute);
  delta = ws.add(bytes);
  lse = p.varlen ? ws.add(bytes) : 0;
  partials = p.dsinks ? ws.add(double(p.N) * dsinks_partials(p, kDeltaRows) * dtype_size(p.compute)) : 0;
}

RowStatViews launch_delta(const Views &w, Launcher &launcher, const ops_detail::Workspace &ws,
                          const DeltaWorkspace &at, const TensorView &dout, const TensorView &out,
                          const TensorView &lse, const TensorView &sinks, const TensorView &dsinks,
                          const TensorView &cu_seqlens_q) {
  const Problem &p = w.p;
  RowStatViews stats{p.varlen ? w.vjp_rows(ws.at(at.lse)) : w.rows(lse), w.vjp_rows(ws.at(at.delta))};
  std::vector<Arg> args{w.o(dout), w.o(out)};
  if (p.dsinks || p.varlen)
    args.emplace_back(w.rows(lse));
  if (p.dsinks)
    args.emplace_back(w.as(sinks, {p.N}));
  if (p.varlen)
    args.emplace_back(w.lengths(cu_seqlens_q));
  args.emplace_back(stats.delta);
  if (p.varlen)
    args.emplace_back(stats.lse);
  if (!p.dsinks) {
    launcher.launch(KernelKind::Delta, args, kDeltaRows);
    return stats;
  }
  TensorView partials = w.as(ws.at(at.partials), p.compute, {p.N, dsinks_partials(p, kDeltaRows)});
  args.emplace_back(partials);
  launcher.launch(KernelKind::Delta, args, kDeltaRows);
  // Lanes over the partial sums: as many as there are, up to 256.
  launcher.launch(KernelKind::DsinksReduce, {partials, w.as(dsinks, {p.N})},
                  std::min<int64_t>(256, pow2_at_least(dsinks_partials(p, kDeltaRows), 16)));
  return stats;
}

bool zero_without_queries(const Problem &p, std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  if (p.B != 0 && p.T != 0 && (!p.varlen || p.total_q != 0))
    return false;
  for (const TensorView &t : outputs)
    if (t.data())
      ex.zero(t);
  return true;
}

namespace {

void flashForward(const KernelSpec &base, std::span<const TensorView> in, std::span<const TensorView> out,
                  ops_detail::KernelExecutor &ex) {
  const Problem &p = base.p;
  Views w{p, ex.device()};
  TensorView v = in[2];
  if (p.fp8 && base.tma) {  // V transposed first: fp8 wgmma reads B K-major only
    ops_detail::Workspace ws;
    const std::vector<int64_t> vt = p.vt_shape();
    size_t at = ws.add(double(vt[0]) * vt[1] * vt[2] * dtype_size(p.dtype));
    ws.allocate(ex);
    v = w.as(ws.at(at), p.dtype, vt);
    Launcher(base, ex).launch(KernelKind::VTranspose, {w.v(in[2]), v});
  }
  std::vector<Arg> args = operand_args(w, in[0], in[1], v, in.subspan(3), base.tma);
  if (p.sinks)
    args.push_back(w.as(in[7], {p.N}));
  args.push_back(w.o(out[0]));
  if (p.lse_out)
    args.push_back(w.rows(out[1]));
  Launcher(base, ex).launch(KernelKind::FlashForward, args);
}

void flashBackward(const KernelSpec &base, std::span<const TensorView> in, std::span<const TensorView> out,
                   ops_detail::KernelExecutor &ex, DqPlan dqPlan) {
  const Problem &p = base.p;
  const bool hopper = base.tma, fusedDq = dqPlan == DqPlan::FusedSum;
  Views w{p, ex.device()};
  Launcher launcher(base, ex);
  const TensorView &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &o = in[4], &lse = in[5];
  ops_detail::Workspace ws;
  const DeltaWorkspace delta(p, ws);
  size_t ds = p.dbias ? ws.add(p.logits_bytes()) : 0;
  const int64_t sumRows = fusedDq ? dq_sum_rows(p, base.block_q) : 0;
  // With ordered adds, an i32 counter per (batch row, query head, query block) follows the
  // sum (256-byte aligned), so that one fill zeroes both.
  const bool ordered = fusedDq && base.ordered_dq;
  const double sumBytes = double(p.B) * sumRows * p.N * p.H * 4;
  const int64_t sumWords = (static_cast<int64_t>(sumBytes) + 255) / 256 * 64;
  const int64_t queryBlocks = fusedDq ? sumRows / base.block_q : 0, counters = p.B * p.N * queryBlocks;
  size_t dqSum = fusedDq ? ws.add(ordered ? double(sumWords + counters) * 4 : sumBytes) : 0;
  ws.allocate(ex);
  TensorView dsView = w.square(ws.at(ds));
  const RowStatViews stats = launch_delta(w, launcher, ws, delta, dout, o, lse, in[10], out[4], in[8]);
  if (p.dbias)
    ex.zero(dsView);  // blocks no query sees stay zero
  TensorView dqSumView, orderView;  // [B rows, N H] for TMA: the dk/dv programs add into it
  if (fusedDq) {
    dqSumView = w.as(ws.at(dqSum), DType::F32, {p.B * sumRows, p.N * p.H});
    if (ordered) {
      orderView = w.as(ws.at(dqSum) + uint64_t(sumWords) * 4, DType::I32, {p.B, p.N, queryBlocks});
      ex.zero(w.as(ws.at(dqSum), DType::F32, {sumWords + counters}));
    } else {
      ex.zero(dqSumView);
    }
  }
  std::vector<Arg> args = operand_args(w, q, k, v, in.subspan(6, 4), hopper);
  args.emplace_back(hopper ? w.as(dout, tma_rows_shape(p, RowSide::Queries, p.N, p.Hv)) : w.o(dout));
  for (const TensorView &t : {stats.lse, stats.delta})
    args.emplace_back(hopper ? w.as(t, {flat_row_stats(p)}) : t);
  // A hopper dk/dv program holds 16 x num_warps keys and walks block_q queries; a dq
  // program holds 16 x num_warps queries and walks block_kv keys.
  const int64_t held = hopper ? 16 * base.num_warps : 0;
  std::vector<Arg> dkdv = args, dq = args;
  dkdv.emplace_back(w.k(out[1]));
  dkdv.emplace_back(w.v(out[2]));
  if (p.dbias)
    dkdv.emplace_back(dsView);
  if (fusedDq) {
    dkdv.emplace_back(dqSumView);
    if (ordered)
      dkdv.emplace_back(orderView);
    launcher.launch(KernelKind::FusedDkDvDq, dkdv, 0, held);
    launcher.launch(KernelKind::DqFromSum, {w.as(dqSumView, {p.B, sumRows, p.N, p.H}), w.q(out[0])});
  } else {
    launcher.launch(KernelKind::FlashDkDv, dkdv, 0, held);
    dq.emplace_back(w.q(out[0]));
    launcher.launch(KernelKind::FlashDq, dq, held, 0);
  }
  if (p.dbias)
    launcher.launch(KernelKind::DbiasReduce, {dsView, w.broadcast(out[3], *p.bias)}, 32, 64);
}

} // namespace

int64_t dq_sum_rows(const Problem &p, int64_t query_step) { return dsl::cdiv(p.T, query_step) * query_step; }

AttentionOrder fp8_attention_order(std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView none;
  return {{in[0], in[1], in[2], none, none, in[6], in[7], none, in[3], in[4], in[5]}, {out[0], out[1]}};
}

namespace {

/// A packed call's tensors in attention's argument order (attention_varlen's inputs q, k,
/// v, cu_seqlens_q, cu_seqlens_kv, sinks | out, lse; the VJP's dout, q, k, v, out, lse,
/// cu_seqlens_q, cu_seqlens_kv, sinks | dq, dk, dv, dsinks): the cu_seqlens arrays in the
/// seq-length slots, no bias, mask or dbias.
AttentionOrder attentionOrder(const Problem &p, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView none;
  if (!p.vjp)
    return {{in[0], in[1], in[2], none, none, in[3], in[4], in[5]}, {out[0], out[1]}};
  return {{in[0], in[1], in[2], in[3], in[4], in[5], none, none, in[6], in[7], in[8]},
          {out[0], out[1], out[2], none, out[3]}};
}

} // namespace

void run_flash(const KernelSpec &base, std::span<const TensorView> in, std::span<const TensorView> out,
               ops_detail::KernelExecutor &ex, DqPlan dq) {
  if (zero_without_queries(base.p, out, ex))
    return;
  AttentionOrder packed;
  if (base.p.varlen || base.p.fp8) {
    packed = base.p.fp8 ? fp8_attention_order(in, out) : attentionOrder(base.p, in, out);
    in = packed.in;
    out = packed.out;
  }
  if (base.p.vjp)
    flashBackward(base, in, out, ex, dq);
  else
    flashForward(base, in, out, ex);
}

} // namespace tokamax::attention_detail
