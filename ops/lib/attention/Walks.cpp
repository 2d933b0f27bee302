//===- Walks.cpp - Loops over a range's blocks, which of them mask -----------===//
//
// block_masking (which blocks of a walk hide pairs), walk (a plain loop over a range's
// blocks, interior blocks unmasked where the spec splits edges), walk_blocks and
// walk_blocks_lookahead (the same through the cp.async ring); KernelParts.h declares them.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

namespace tokamax::attention_detail {

namespace {

/// Whether a walk along keys (in steps of `step`) or queries can meet a hidden pair.
bool hidesPairs(const Problem &p, int64_t step, bool alongKeys) {
  return p.causal || p.left >= 0 || p.right >= 0 || p.q_lengths || p.kv_lengths || p.mask ||
         (alongKeys && p.S % step != 0);
}

/// Whether a walk masks every block it meets: the spec does not split edges, or a mask
/// tensor may hide a pair anywhere.
bool masksEveryBlock(const Program &pr) { return !pr.s.split_edges || pr.p.mask; }

} // namespace

Masking block_masking(const Program &pr, const Range &r, const Value &first, int64_t step, bool alongKeys) {
  if (!hidesPairs(pr.p, step, alongKeys))
    return false;
  if (masksEveryBlock(pr))
    return true;
  return Masking((first < r.inner_lo) | (first >= r.inner_hi));
}

Carried walk(Program &pr, const Range &r, int64_t step, Carried carried, const Body &body) {
  auto run = [&](Value lo, Value hi, bool masked, Carried c) {
    return pr.k.loop(lo, hi, step, std::move(c),
                     [&](Value j, std::vector<Value> cur) { return body(j, std::move(cur), masked); });
  };
  if (masksEveryBlock(pr))
    return run(r.lo, r.hi, true, std::move(carried));
  carried = run(r.lo, r.inner_lo, true, std::move(carried));
  carried = run(r.inner_lo, r.inner_hi, false, std::move(carried));
  return run(r.inner_hi, r.hi, true, std::move(carried));
}

namespace {

/// The async_copy walk: every source gets a shared buffer of `stages` slots; step j
/// reads the slot copied stages - 1 steps before and copies step j + stages - 1 into
/// the slot step j - 1 read. The loop carries the blocks in flight and j's slot. With a
/// prologue (lookahead), step j + 1's copies have landed at step j too (the body gets
/// them as `next`), and the prologue's values, made from the first step's blocks before
/// the loop, are carried after the caller's.
Carried walkAsync(Program &pr, const Range &r, int64_t step, Carried carried, const std::vector<BlockSource> &sources,
                  const LookaheadBody &body, const Prologue *prologue = nullptr) {
  Kernel &k = pr.k;
  const int64_t stages = pr.s.stages, n = static_cast<int64_t>(sources.size());
  std::vector<dsl::SharedBuffer> buffers;
  for (int64_t i = 0; i < n; ++i)
    buffers.push_back(k.shared_buffer(stages));
  auto copyAll = [&](Value r0, Value slot) {
    Carried blocks;
    for (int64_t i = 0; i < n; ++i) {
      const BlockSource &src = sources[i];
      const RowBlock at = src.query_side ? query_rows(pr, r0) : key_rows(pr, r0);
      blocks.push_back(
          src.t.load_async({at.b, at.r0, src.head, 0}, {1, src.rows, 1, padded_head_dim(src.dim)}, buffers[i], slot));
    }
    return blocks;
  };
  // Groups of copies that may still be in flight when a step starts: those of the steps
  // after the one (or, with lookahead, the two) it reads.
  const int pending = static_cast<int>((stages - (prologue ? 3 : 2)) * n);
  Carried inFlight0;
  for (int64_t ahead = 0; ahead + 1 < stages; ++ahead) {  // past the range: zero-filled or unused
    Carried blocks = copyAll(r.lo + ahead * step, k.constant(static_cast<double>(ahead), DType::I32));
    inFlight0.insert(inFlight0.end(), blocks.begin(), blocks.end());
  }
  if (prologue) {
    k.wait_async(static_cast<int>((stages - 2) * n));  // the first step's copies
    Carried extra = (*prologue)([&](size_t i) { return Chunks{inFlight0[i]}; });
    carried.insert(carried.end(), extra.begin(), extra.end());
  }
  const size_t own = carried.size();
  carried.insert(carried.end(), inFlight0.begin(), inFlight0.end());
  carried.push_back(k.constant(0, DType::I32));
  Carried out = walk(pr, r, step, std::move(carried), [&](Value j, Carried c, bool masked) {
    Value slot = c.back();
    Carried inFlight(c.begin() + own, c.end() - 1);
    // Step j's copies (and with lookahead j + 1's) have landed, later steps' may not
    // have, and every thread is done with step j - 1's slot.
    k.wait_async(pending);
    Carried next = copyAll(j + (stages - 1) * step, (slot + (stages - 1)) % stages);
    c.resize(own);
    Carried result = body(j, std::move(c), masked, [&](size_t i) { return Chunks{inFlight[i]}; },
                          [&](size_t i) { return Chunks{inFlight[n + i]}; });
    result.insert(result.end(), inFlight.begin() + n, inFlight.end());
    result.insert(result.end(), next.begin(), next.end());
    result.push_back((slot + 1) % stages);
    return result;
  });
  // The last copies land, and every read ends, before anything reuses the slots.
  k.wait_async(0);
  out.resize(own);
  return out;
}

} // namespace

Carried walk_blocks(Program &pr, const Range &r, int64_t step, Carried carried, const std::vector<BlockSource> &sources,
                    const BlockBody &body) {
  auto load = [&](size_t i, Value r0) {
    const BlockSource &src = sources[i];
    return load_rows(pr.s, src.t, src.query_side ? query_rows(pr, r0) : key_rows(pr, r0), src.head, src.dim,
                     src.rows);
  };
  if (pr.s.async_copy)
    return walkAsync(pr, r, step, std::move(carried), sources,
                     [&](Value j, Carried c, bool masked, const Blocks &blocks, const Blocks &) {
                       return body(j, std::move(c), masked, blocks);
                     });
  if (!pr.s.prefetch)
    return walk(pr, r, step, std::move(carried), [&](Value j, Carried c, bool masked) {
      return body(j, std::move(c), masked, [&](size_t i) { return load(i, j); });
    });
  auto loadAll = [&](Value j, std::vector<size_t> &sizes) {
    Carried all;
    for (size_t i = 0; i < sources.size(); ++i) {
      Chunks part = load(i, j);
      sizes.push_back(part.size());
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  };
  const size_t own = carried.size();
  std::vector<size_t> sizes{own};
  Carried first = loadAll(r.lo, sizes);
  carried.insert(carried.end(), first.begin(), first.end());
  Carried out = walk(pr, r, step, std::move(carried), [&](Value j, Carried c, bool masked) {
    size_t at = own;
    std::vector<Chunks> parts;
    for (size_t i = 1; i < sizes.size(); at += sizes[i++])
      parts.emplace_back(c.begin() + at, c.begin() + at + sizes[i]);
    std::vector<size_t> unused;
    Carried next = loadAll(j + step, unused);  // past the range: masked loads, never used
    c.resize(own);
    Carried result = body(j, std::move(c), masked, [&](size_t i) { return parts[i]; });
    result.insert(result.end(), next.begin(), next.end());
    return result;
  });
  out.resize(own);
  return out;
}

Carried walk_blocks_lookahead(Program &pr, const Range &r, int64_t step, Carried carried,
                              const std::vector<BlockSource> &sources, const Prologue &prologue,
                              const LookaheadBody &body) {
  if (!pr.s.async_copy || pr.s.stages < 3)
    throw Error(fmt::format("{}: looking a step ahead needs the cp.async ring with 3 or more stages", pr.s.name()));
  return walkAsync(pr, r, step, std::move(carried), sources, body, &prologue);
}

} // namespace tokamax::attention_detail
