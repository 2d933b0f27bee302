//===- Tile.cpp - Split-KV decode on tensor cores, and the append's copy ---===//
//
// paged_attention's tile (FlashDecoding): the split kernel runs one program per (split,
// kv head x row block, sequence). A program holds the packed query rows of one kv head
// (its query heads x new tokens: the heads of a group share every page it loads), walks
// its share of the sequence's pages, `pages_per_step` pages a step (each page one block
// of K and of V at its page-table entry, one product each, one online-softmax update a
// step) and writes its normalized partial out and its lse (f32, -inf where it saw no
// key) to a workspace; the combine kernel merges each row's splits by their lse
// (weights exp(lse_s - max)). With one split the split kernel writes out and lse itself
// and no combine runs. The pages go through a cp.async ring of `stages` slots in shared
// memory, copied stages - 1 steps ahead, read there by the products (ldmatrix); pages
// past the split's steps or the sequence are copied from an index out of range, which
// reads zeros without touching memory. Steps whose keys every query sees run without
// mask arithmetic; the last ones hide keys past each query's position (causal among the
// new tokens) and zero V past the sequence (a page's unwritten rows may hold NaN).
//
// The heuristic (as designed, not yet measured on a GPU): 32 keys a step (a page where
// pages are larger), a ring keeping about 48 KiB of pages in flight a program within
// 72 KiB, 16-64 packed rows, and splits until about two programs per SM of an H100 /
// H200 (132) are busy, at most one split per step of the longest sequence the page
// table holds.
//
// The append: one program per new token copies its K x H row of k (and K x Hv of v)
// into row pos % page_size of page page_table[b, pos / page_size], both contiguous.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/paged_attention/Common.h"

#include "ops/lib/framework/SharedMemory.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace tokamax::paged_attention_detail {

using dsl::cdiv;
using dsl::maximum;
using dsl::minimum;
using dsl::next_power_of_two;
using dsl::where;

namespace {

/// Programs that keep an H100 / H200 busy (two per SM): the split heuristic's target.
constexpr int64_t kBusyPrograms = 2 * 132;
/// Bytes of pages the heuristic keeps in flight a program, and the shared memory its
/// ring may take: with the products' staging (36 KiB at 64-key pages: the masked steps'
/// V goes through registers) at least two programs fit an SM's 228 KiB.
constexpr int64_t kBytesInFlight = 48 << 10, kRingBytes = 72 << 10;

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }

/// The key of the split (or one-split decode) kernel: every field its IR reads.
KernelKey splitKey(const char *name, const Problem &p, const TileConfig &c) {
  KernelKey key(name);
  for (int64_t v : {p.B, p.Tq, p.N, p.K, p.H, p.Hv, p.num_pages, p.page_size, p.max_pages, int64_t(p.dtype),
                    int64_t(p.lse_out), c.block_rows, c.pages_per_step, c.num_splits, c.num_warps, c.stages})
    key.add(v);
  key.add(p.scale).add(p.softcap);
  return key;
}

/// The combine kernel's key: it reads no page, only the partials and the row packing
/// (its warps follow from them, not from the config).
KernelKey combineKey(const Problem &p, const TileConfig &c) {
  return ops_detail::specializationKey("paged_attention_combine", {p.B, p.Tq, p.N, p.K, p.Hv, int64_t(p.dtype),
                                                                   int64_t(p.lse_out), c.block_rows, c.num_splits});
}

/// Bytes of K and V pages one step reads.
int64_t stepBytesOf(const Problem &p, const TileConfig &c) {
  return c.pages_per_step * p.page_size * (p.H + p.Hv) * int64_t(dtype_size(p.dtype));
}

std::string kernelName(const char *what, const Problem &p, const TileConfig &c) {
  return fmt::format("paged_attention_{}_{}_h{}_p{}_r{}x{}s{}", what, dtype_name(p.dtype), p.H, p.page_size,
                     c.block_rows, c.pages_per_step, c.stages);
}

/// How the combine kernel reads the partials: the rows a program holds that are query
/// tokens (a row block holds `tokens` tokens; with fewer new tokens the rest are padding
/// that no one stores), the slice of Hv a program merges, the splits a step loads, warps.
struct CombineShape {
  int64_t live_rows = 16, hv_chunk = 32, splits_a_step = 8, num_warps = 4;
};
CombineShape combineShape(const Problem &p, const TileConfig &c) {
  const RowPacking rp = row_packing(p, c.block_rows);
  CombineShape cs;
  cs.live_rows = rp.heads * std::min(rp.tokens, next_power_of_two(p.Tq));
  cs.hv_chunk = std::min<int64_t>(p.Hv, 32);
  // Splits a step: up to 64 f32 in flight a thread (each split's rows and its lse, as
  // wide), at most 16: at batch 1 (4 live rows) the heuristic's 33 splits take three
  // global-memory latencies, not five. (32 a step spilled: 232 bytes at 33 splits.)
  const int64_t elements = cs.live_rows * cs.hv_chunk;
  cs.num_warps = std::clamp<int64_t>(elements / 128, 2, 4);
  cs.splits_a_step = std::clamp<int64_t>(64 * 32 * cs.num_warps / (2 * elements), 1, 16);
  return cs;
}

/// The workspace of the splits: partial out [B K R, splits, live rows, Hv] and partial
/// lse [B K R, splits, live rows, hv chunk], f32 (the split kernel's stores drop the
/// padding rows). Each lse is stored across an Hv chunk's width, so the combine loads it
/// as a tile of its rows' shape and layout (a broadcast there would pick a layout that
/// holds every column in each thread).
struct Partials {
  std::vector<int64_t> out, lse;
};
Partials partialShapes(const Problem &p, const TileConfig &c) {
  const RowPacking rp = row_packing(p, c.block_rows);
  const CombineShape cs = combineShape(p, c);
  const int64_t programs = p.B * p.K * rp.blocks;
  return {{programs, c.num_splits, cs.live_rows, p.Hv}, {programs, c.num_splits, cs.live_rows, cs.hv_chunk}};
}

/// The online softmax over the walk: row max (log2 units), row sum, accumulator.
struct Walk {
  Value m, l, acc;
};

/// Normalized rows (0 where no key was seen) and their lse in natural units (`empty`
/// where no key was seen).
std::pair<Value, Value> finish(const Walk &w, double empty) {
  Value seen = w.l > 0.0;
  Value mUse = where(w.m == -INFINITY, 0.0, w.m);
  Value rows = w.acc * where(seen, 1.0 / w.l, 0.0).expand(1);
  return {rows, where(seen, mUse * kLn2 + dsl::log(w.l), empty)};
}

/// The K and V blocks of one step: one [page_size, H] / [page_size, Hv] tile a page
/// (shared tiles on the ring).
struct StepBlocks {
  std::vector<Value> k, v;
};

Kernel splitKernel(const Problem &p, const TileConfig &c, bool direct) {
  const RowPacking rp = row_packing(p, c.block_rows);
  const int64_t rows = rp.rows, ps = p.page_size, pps = c.pages_per_step, splits = c.num_splits;
  Kernel k(kernelName(direct ? "decode" : "split", p, c), {.num_warps = int(c.num_warps)});
  DecodeOperands in = declare_decode_operands(k, p);
  DecodeOutputs outs{TensorArg(), {}};
  TensorArg partOut, partLse;
  if (direct) {
    outs = declare_decode_outputs(k, p);
  } else {
    const Partials shapes = partialShapes(p, c);
    partOut = k.output("partial_out", DType::F32, shapes.out);
    partLse = k.output("partial_lse", DType::F32, shapes.lse);
  }
  k.grid(splits, p.K * rp.blocks, p.B);
  Value split = k.program_id(0), kr = k.program_id(1), b = k.program_id(2);
  Value h = kr / rp.blocks, rb = kr % rp.blocks;
  Value t0 = rb / rp.head_blocks * rp.tokens, g0 = rb % rp.head_blocks * rp.heads;
  Value seq = sequence_length(k, p, in.seq_lengths, b);
  Value q = in.q.load({b, t0, h, g0, 0}, {1, rp.tokens, 1, rp.heads, p.H}).reshape({rows, p.H});
  // Row r is query token t0 + r / heads, at position seq - Tq + t: it sees keys up to there.
  Value position = (seq - p.Tq + t0) + k.arange(0, rows) / rp.heads;

  // This split's steps of the sequence's pages, and the first step whose keys some
  // query does not see (keys from seq - Tq + 1 on).
  Value pages = (seq + (ps - 1)) / ps;
  Value steps = (pages + (pps - 1)) / pps;
  Value perSplit = (steps + (splits - 1)) / splits;
  Value lo = minimum(split * perSplit, steps), hi = minimum(lo + perSplit, steps);
  Value unmasked = maximum(seq - (p.Tq - 1), 0) / (pps * ps);
  Value mid = minimum(maximum(unmasked, lo), hi);

  // Page j of step i; past the split's steps or the sequence's pages an index out of
  // range, whose block reads zeros without touching memory.
  auto pageId = [&](const Value &i, int64_t j) {
    Value page = i * pps + j;
    return where((i < hi) & (page < pages), page_at(in.page_table, b, page), Value(p.num_pages));
  };
  auto loadStep = [&](const Value &i) {
    StepBlocks blocks;
    for (int64_t j = 0; j < pps; ++j) {
      Value id = pageId(i, j);
      blocks.k.push_back(in.k_pages.load({id, 0, h, 0}, {1, ps, 1, p.H}).reshape({ps, p.H}));
      blocks.v.push_back(in.v_pages.load({id, 0, h, 0}, {1, ps, 1, p.Hv}).reshape({ps, p.Hv}));
    }
    return blocks;
  };

  const double factor = p.softcap > 0 ? p.softcap * kLog2e : p.scale * kLog2e;
  auto step = [&](Value i, const Walk &w, bool masked, const StepBlocks &blocks) {
    std::vector<Value> scores, values;
    Value m = w.m;
    for (int64_t j = 0; j < pps; ++j) {
      Value page = i * pps + j;
      Value s = dsl::dot(q, blocks.k[j].trans(), k.full({rows, ps}, 0.0, DType::F32));
      // Logits in log2 units: the scale (and the soft cap's) folded into one factor.
      Value x = p.softcap > 0 ? dsl::tanh(s * (p.scale / p.softcap)) * factor : s * factor;
      Value vb = blocks.v[j];
      if (masked) {
        // Keys past each row's position hidden; V past the sequence zeroed (a page's
        // unwritten rows may hold NaN, and 0 * NaN is NaN).
        Value key = page * ps + k.arange(0, ps);
        Value inSequence = key < seq;
        x = where((key.expand(0) <= position.expand(1)) & inSequence.expand(0), x, -INFINITY);
        vb = where(inSequence.expand(1), vb, 0.0);
      }
      m = maximum(m, x.max(1));
      scores.push_back(x);
      values.push_back(vb);
    }
    // A row that has seen no key keeps max -inf: exponentiate against 0 instead.
    Value mUse = where(m == -INFINITY, 0.0, m);
    Value alpha = dsl::exp2(w.m - mUse);
    Value l = w.l * alpha, acc = w.acc * alpha.expand(1);
    for (int64_t j = 0; j < pps; ++j) {
      Value prob = dsl::exp2(scores[j] - mUse.expand(1));
      l = l + prob.sum(1);
      acc = dsl::dot(prob.to(p.dtype), values[j], acc);
    }
    return Walk{m, l, acc};
  };
  Walk w{k.full({rows}, -INFINITY, DType::F32), k.full({rows}, 0.0, DType::F32),
         k.full({rows, p.Hv}, 0.0, DType::F32)};
  if (c.stages == 1) {
    for (auto [from, to, masked] : {std::tuple{lo, mid, false}, std::tuple{mid, hi, true}}) {
      std::vector<Value> state = k.loop(from, to, 1, {w.m, w.l, w.acc}, [&](Value i, std::vector<Value> cur) {
        Walk next = step(i, {cur[0], cur[1], cur[2]}, masked, loadStep(i));
        return std::vector<Value>{next.m, next.l, next.acc};
      });
      w = {state[0], state[1], state[2]};
    }
  } else {
    // The ring: every page slot of a step is a shared buffer of `stages` slots; step i
    // reads the slot copied stages - 1 steps before and copies step i + stages - 1 into
    // the slot step i - 1 read (cp.async; one wait and barrier a step).
    const int64_t stages = c.stages, copies = 2 * pps;
    std::vector<dsl::SharedBuffer> buffers;
    for (int64_t j = 0; j < copies; ++j)
      buffers.push_back(k.shared_buffer(stages));
    auto copyStep = [&](const Value &i, const Value &slot) {
      std::vector<Value> tiles;
      for (int64_t j = 0; j < pps; ++j) {
        Value id = pageId(i, j);
        tiles.push_back(in.k_pages.load_async({id, 0, h, 0}, {1, ps, 1, p.H}, buffers[2 * j], slot));
        tiles.push_back(in.v_pages.load_async({id, 0, h, 0}, {1, ps, 1, p.Hv}, buffers[2 * j + 1], slot));
      }
      return tiles;
    };
    std::vector<Value> carried{w.m, w.l, w.acc};
    for (int64_t ahead = 0; ahead + 1 < stages; ++ahead) {
      std::vector<Value> tiles = copyStep(lo + ahead, k.constant(double(ahead), DType::I32));
      carried.insert(carried.end(), tiles.begin(), tiles.end());
    }
    carried.push_back(k.constant(0, DType::I32));
    for (auto [from, to, masked] : {std::tuple{lo, mid, false}, std::tuple{mid, hi, true}})
      carried = k.loop(from, to, 1, carried, [&](Value i, std::vector<Value> cur) {
        Value slot = cur.back();
        // Step i's copies have landed, later steps' may not have, and every thread is
        // done with step i - 1's slot. (cp.async.wait_group counts at most 7 groups in
        // flight: with more, the wait also waits for some of the next step's.)
        k.wait_async(int(std::min<int64_t>(7, (stages - 2) * copies)));
        std::vector<Value> next = copyStep(i + (stages - 1), (slot + (stages - 1)) % stages);
        StepBlocks blocks;
        for (int64_t j = 0; j < pps; ++j) {
          blocks.k.push_back(cur[size_t(3 + 2 * j)]);
          blocks.v.push_back(cur[size_t(4 + 2 * j)]);
        }
        Walk nw = step(i, {cur[0], cur[1], cur[2]}, masked, blocks);
        std::vector<Value> result{nw.m, nw.l, nw.acc};
        result.insert(result.end(), cur.begin() + 3 + copies, cur.end() - 1);
        result.insert(result.end(), next.begin(), next.end());
        result.push_back((slot + 1) % stages);
        return result;
      });
    // The last copies land before the program ends.
    k.wait_async(0);
    w = {carried[0], carried[1], carried[2]};
  }
  if (direct) {
    auto [out, lse] = finish(w, INFINITY);
    store_rows(rp, outs, b, h, t0, g0, out, lse);
  } else {
    auto [out, lse] = finish(w, -INFINITY);
    Value program = b * (p.K * rp.blocks) + kr;
    partOut.store({program, split, 0, 0}, out.reshape({1, 1, rows, p.Hv}));
    const int64_t width = combineShape(p, c).hv_chunk;
    partLse.store({program, split, 0, 0}, lse.expand(1).broadcast_to({rows, width}).reshape({1, 1, rows, width}));
  }
  return k;
}

/// Merges each row's splits: out = sum_s w_s out_s / sum_s w_s with w_s = exp(lse_s - max).
/// One program per (kv head x row block, sequence, chunk of Hv): at batch 1 a handful of
/// (head, block) pairs holds every split, so the chunks of Hv widen the grid, and each
/// step loads a group of splits at once (independent loads, one latency a group, not
/// one a split), then folds them into the running max, sum and rows.
Kernel combineKernel(const Problem &p, const TileConfig &c) {
  const RowPacking rp = row_packing(p, c.block_rows);
  const CombineShape cs = combineShape(p, c);
  const int64_t live = cs.live_rows, hvc = cs.hv_chunk, S = c.num_splits;
  Kernel k(fmt::format("paged_attention_combine_{}_hv{}_r{}x{}_s{}", dtype_name(p.dtype), p.Hv, live, hvc,
                       cs.splits_a_step),
           {.num_warps = int(cs.num_warps)});
  const Partials shapes = partialShapes(p, c);
  TensorArg partOut = k.input("partial_out", DType::F32, shapes.out);
  TensorArg partLse = k.input("partial_lse", DType::F32, shapes.lse);
  DecodeOutputs outs = declare_decode_outputs(k, p);
  k.grid(p.K * rp.blocks, p.B, p.Hv / hvc);
  Value kr = k.program_id(0), b = k.program_id(1), d0 = k.program_id(2) * hvc;
  Value h = kr / rp.blocks, rb = kr % rp.blocks;
  Value t0 = rb / rp.head_blocks * rp.tokens, g0 = rb % rp.head_blocks * rp.heads;
  Value program = b * (p.K * rp.blocks) + kr;
  // Folds splits s0 .. s0 + count - 1 into {max, sum, rows}: every load first. The max
  // and the sum are kept per element of the [live, hvc] rows (each row's columns hold
  // the same value), so every tile shares the loads' layout.
  auto fold = [&](const Value &s0, int64_t count, std::vector<Value> cur) {
    std::vector<Value> lses, parts;
    for (int64_t j = 0; j < count; ++j) {
      lses.push_back(partLse.load({program, s0 + j, 0, 0}, {1, 1, live, hvc}).reshape({live, hvc}));
      parts.push_back(partOut.load({program, s0 + j, 0, d0}, {1, 1, live, hvc}).reshape({live, hvc}));
    }
    Value m = cur[0];
    for (const Value &lse : lses)
      m = maximum(m, lse);
    Value mUse = where(m == -INFINITY, 0.0, m);
    Value alpha = dsl::exp(cur[0] - mUse);
    Value l = cur[1] * alpha, acc = cur[2] * alpha;
    for (int64_t j = 0; j < count; ++j) {
      Value weight = dsl::exp(lses[size_t(j)] - mUse);
      l = l + weight;
      acc = acc + parts[size_t(j)] * weight;
    }
    return std::vector<Value>{m, l, acc};
  };
  std::vector<Value> state{k.full({live, hvc}, -INFINITY, DType::F32), k.full({live, hvc}, 0.0, DType::F32),
                           k.full({live, hvc}, 0.0, DType::F32)};
  const int64_t whole = S / cs.splits_a_step * cs.splits_a_step;
  state = k.loop(0, whole, cs.splits_a_step, state,
                 [&](Value s0, std::vector<Value> cur) { return fold(s0, cs.splits_a_step, std::move(cur)); });
  if (S > whole)
    state = fold(k.constant(double(whole), DType::I32), S - whole, std::move(state));
  Value seen = state[1] > 0.0;
  Value mUse = where(state[0] == -INFINITY, 0.0, state[0]);
  Value out = state[2] * where(seen, 1.0 / state[1], 0.0);
  Value lse = where(seen, mUse + dsl::log(state[1]), INFINITY).max(1);
  RowPacking liveRows = rp;
  liveRows.rows = live, liveRows.tokens = live / rp.heads;
  store_rows(liveRows, outs, b, h, t0, g0, out, lse, d0);
  return k;
}

} // namespace

std::optional<std::string> TileDecode::why_not(const Problem &p) {
  if (!isHalf(p.dtype))
    return fmt::format("tile serves bf16 and f16 (tensor cores), not {}; use reference", dtype_name(p.dtype));
  return std::nullopt;
}

TileConfig TileDecode::heuristic(const Problem &p) {
  TileConfig c;
  c.block_rows = std::clamp<int64_t>(next_power_of_two(p.Tq) * next_power_of_two(p.group()), 16, 64);
  // 32 keys a step (a page where pages are larger), and enough ring slots to keep about
  // 48 KiB of pages in flight a program, within 72 KiB of shared memory.
  c.pages_per_step = std::max<int64_t>(1, 32 / p.page_size);
  const int64_t stepBytes = stepBytesOf(p, c);
  c.stages = std::clamp<int64_t>(1 + cdiv(kBytesInFlight, stepBytes), 2, 4);
  while (c.stages > 2 && c.stages * stepBytes > kRingBytes)
    --c.stages;
  const int64_t programs = std::max<int64_t>(1, p.B * p.K * row_packing(p, c.block_rows).blocks);
  const int64_t steps = cdiv(p.max_pages, c.pages_per_step);
  c.num_splits = std::clamp<int64_t>(cdiv(kBusyPrograms, programs), 1, steps);
  c.num_warps = 4;
  return c;
}

std::vector<TileConfig> TileDecode::search_space(const Problem &p) {
  const TileConfig h = heuristic(p);
  std::vector<TileConfig> space{h};
  // Candidates whose ring takes at most 112 KiB, so that with the products' staging
  // every one also fits sm_80's 163 KiB a block.
  auto add = [&](TileConfig c) {
    if (std::find(space.begin(), space.end(), c) == space.end() && c.stages * stepBytesOf(p, c) <= (112 << 10) &&
        !check(p, c))
      space.push_back(c);
  };
  auto with = [&](auto field, int64_t value) {
    TileConfig c = h;
    c.*field = value;
    return c;
  };
  // 64 and 128 keys a step (as many ring slots as fit the heuristic's ring, at least 2);
  // 2 and 4 ring slots, or none; splits halved, doubled, or none; 8 warps.
  for (int64_t keys : {64, 128})
    if (keys >= p.page_size) {
      TileConfig c = with(&TileConfig::pages_per_step, keys / p.page_size);
      c.stages = std::clamp<int64_t>(kRingBytes / stepBytesOf(p, c), 2, h.stages);
      add(c);
    }
  for (int64_t stages : {2, 4, 1})
    add(with(&TileConfig::stages, stages));
  const int64_t steps = cdiv(p.max_pages, h.pages_per_step);
  add(with(&TileConfig::num_splits, std::max<int64_t>(1, h.num_splits / 2)));
  add(with(&TileConfig::num_splits, std::min(steps, h.num_splits * 2)));
  add(with(&TileConfig::num_splits, 1));
  add(with(&TileConfig::num_warps, 8));
  return space;
}

std::optional<std::string> TileDecode::check(const Problem &p, const TileConfig &c) {
  if (!isPowerOfTwo(c.block_rows) || c.block_rows < 16 || c.block_rows > 128)
    return fmt::format("block_rows must be a power of two in [16, 128] (tensor-core tiles), got {}", c.block_rows);
  if (c.pages_per_step < 1 || c.pages_per_step * p.page_size > 512)
    return fmt::format("pages_per_step must be at least 1 with at most 512 keys a step (page_size {}), got {}",
                       p.page_size, c.pages_per_step);
  if (c.num_splits < 1 || c.num_splits > 4096)
    return fmt::format("num_splits must be in [1, 4096], got {}", c.num_splits);
  if (c.num_warps != 1 && c.num_warps != 2 && c.num_warps != 4 && c.num_warps != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", c.num_warps);
  if (c.stages < 1 || c.stages > 8)
    return fmt::format("stages must be in [1, 8] (1: no ring), got {}", c.stages);
  if (const int64_t programs = p.K * row_packing(p, c.block_rows).blocks; programs > 65535)
    return fmt::format("K {} x {} row blocks of {} rows is {} programs along grid y, over 65535", p.K,
                       programs / p.K, c.block_rows, programs);
  const int64_t perThread = c.block_rows * p.Hv / (32 * c.num_warps);
  if (perThread > 64)
    return fmt::format("block_rows {} x Hv {} on {} warps is {} accumulator elements a thread, over 64 (registers)",
                       c.block_rows, p.Hv, c.num_warps, perThread);
  // The ring's slots and the products' staging, as the compiler plans them.
  const std::array<TensorView, 5> inputs{};
  const std::array<TensorView, 2> outputs{};
  return ops_detail::check_shared_memory([&](KernelExecutor &ex) { execute(p, c, inputs, outputs, ex); });
}

void TileDecode::execute(const Problem &p, const TileConfig &c, std::span<const TensorView> in,
                         std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)
    return;
  // q, k_pages, v_pages, page_table, seq_lengths | out, lse?, with q, out and lse in the
  // kernels' shapes (the query heads split into kv heads x group).
  const int64_t g = p.group();
  std::vector<KernelExecutor::Arg> operands{reshaped(in[0], {p.B, p.Tq, p.K, g, p.H}), in[1], in[2], in[3], in[4]};
  auto withOutputs = [&](std::vector<KernelExecutor::Arg> args) {
    args.push_back(reshaped(out[0], {p.B, p.Tq, p.K, g, p.Hv}));
    if (p.lse_out)
      args.push_back(reshaped(out[1], {p.B, p.K, g, p.Tq}));
    return args;
  };
  if (c.num_splits == 1) {
    ex.launch(splitKey("paged_attention_decode", p, c), [p, c] { return splitKernel(p, c, true); },
              withOutputs(operands));
    return;
  }
  const Partials shapes = partialShapes(p, c);
  ops_detail::Workspace ws;
  const size_t outAt = ws.add(4.0 * double(ArgSpec{shapes.out, DType::F32}.numel()));
  const size_t lseAt = ws.add(4.0 * double(ArgSpec{shapes.lse, DType::F32}.numel()));
  ws.allocate(ex);
  const TensorView partOut(ws.at(outAt), DType::F32, shapes.out, ex.device());
  const TensorView partLse(ws.at(lseAt), DType::F32, shapes.lse, ex.device());
  std::vector<KernelExecutor::Arg> splitArgs = operands;
  splitArgs.push_back(partOut);
  splitArgs.push_back(partLse);
  ex.launch(splitKey("paged_attention_split", p, c), [p, c] { return splitKernel(p, c, false); }, splitArgs);
  ex.launch(combineKey(p, c), [p, c] { return combineKernel(p, c); },
            withOutputs({partOut, partLse}));
}

//===----------------------------------------------------------------------===//
// The append
//===----------------------------------------------------------------------===//

namespace {

/// One program per new token (t, b): its rows of k and v into their page, when the
/// token's position pos = seq_len - Tq + t lies in [0, capacity).
Kernel appendKernel(const Problem &p, const TileAppendConfig &c) {
  Kernel k(fmt::format("paged_kv_append_{}_k{}_h{}x{}_p{}", dtype_name(p.dtype), p.K, p.H, p.Hv, p.page_size),
           {.num_warps = int(c.num_warps)});
  TensorArg kNew = k.input("k", p.dtype, {p.B, p.Tq, p.K, p.H});
  TensorArg vNew = k.input("v", p.dtype, {p.B, p.Tq, p.K, p.Hv});
  TensorArg table = k.input("page_table", DType::I32, {p.B, p.max_pages});
  TensorArg lengths = k.input("seq_lengths", DType::I32, {p.B});
  TensorArg kPages = k.output("k_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.H});
  TensorArg vPages = k.output("v_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.Hv});
  k.grid(p.Tq, p.B);
  Value t = k.program_id(0), b = k.program_id(1);
  Value position = lengths.load({b}, {1}).max(0) - p.Tq + t;
  // Kv heads a block: about 4096 elements of the wider head dim.
  const int64_t heads = std::clamp<int64_t>(4096 / std::max(p.H, p.Hv), 1, next_power_of_two(p.K));
  k.when((position >= 0) & (position < p.capacity()), [&] {
    Value page = page_at(table, b, position / p.page_size), slot = position % p.page_size;
    k.loop(0, p.K, heads, {}, [&](Value h0, std::vector<Value>) {
      kPages.store({page, slot, h0, 0}, kNew.load({b, t, h0, 0}, {1, 1, heads, p.H}));
      vPages.store({page, slot, h0, 0}, vNew.load({b, t, h0, 0}, {1, 1, heads, p.Hv}));
      return std::vector<Value>{};
    });
  });
  return k;
}

} // namespace

std::optional<std::string> TileAppend::why_not(const Problem &p) {
  if (p.dtype == DType::F64)
    return fmt::format("tile serves bf16, f16 and f32, not {}; use reference", dtype_name(p.dtype));
  return std::nullopt;
}

TileAppendConfig TileAppend::heuristic(const Problem &) { return {}; }

std::vector<TileAppendConfig> TileAppend::search_space(const Problem &p) {
  std::vector<TileAppendConfig> space{heuristic(p)};
  space.push_back({8});
  return space;
}

std::optional<std::string> TileAppend::check(const Problem &, const TileAppendConfig &c) {
  if (c.num_warps != 1 && c.num_warps != 2 && c.num_warps != 4 && c.num_warps != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", c.num_warps);
  return std::nullopt;
}

void TileAppend::execute(const Problem &p, const TileAppendConfig &c, std::span<const TensorView> in,
                         std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)
    return;
  const KernelKey key = ops_detail::specializationKey(
      "paged_kv_append_tile", {p.B, p.Tq, p.K, p.H, p.Hv, p.num_pages, p.page_size, p.max_pages, int64_t(p.dtype),
                               c.num_warps});
  ex.launch(key, [p, c] { return appendKernel(p, c); }, {in[0], in[1], in[2], in[3], out[0], out[1]});
}

} // namespace tokamax::paged_attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::paged_attention_detail::TileDecode>;
template class tokamax::ops_detail::TypedImplementation<tokamax::paged_attention_detail::TileAppend>;
