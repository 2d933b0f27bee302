//===- HopperKernels.cpp - sm_90a attention kernels: TMA rings, wgmma -------===//
//
// Every hopper program holds one row block (16 x num_warps rows: each consumer warp owns
// 16 of them) copied once by TMA and streams the blocks it is multiplied with through
// TMA rings that a producer warpgroup refills (dsl::Kernel::specialized_loop, TmaRing);
// the consumers run the step's products on wgmma with both operands in shared memory,
// or the first from registers (P, dS), and release the step's slot:
//
//   forward: holds Q, streams K / V blocks; the online softmax in registers (exp2, the
//            scale folded in: softmax_step, shared with the flash forward);
//   dk/dv:   holds a K / V block, streams the Q / dO blocks of every query head of its
//            group (dkdv_step, shared with the flash VJP);
//   dq:      holds Q / dO, streams K / V blocks (dq_step).
//   fused dq (opt-in "fused_dq", not deterministic): dk/dv also adds each step's dS K
//            into an f32 dq sum with TMA reduce-adds, and a small kernel scales it into
//            dq: 5 products a block pair instead of 7 (FlashAttention-3's plan).
// Only the edge blocks of a walk are masked: each step branches on whether its block is
// one (block_masking); without causal, window, lengths or a mask tensor no step is. Under
// a causal mask the heaviest blocks start first (row_block_grid).
//
// q, k, v and dout are read as [B, T, N H], [B, S, K H], [B, S, K Hv] and [B, T, N Hv],
// copied a batch row at a time (3-D tensor maps): a block reaching past T or S reads
// zeros, never the next batch row's, so any T and S are served. Keys past S are masked;
// queries past T have lse +inf (their P and dS are 0) and are never stored.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <tokamax/dsl/Pipeline.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

namespace tokamax::attention_detail {

using dsl::cdiv;
using dsl::TmaRing;

namespace {

dsl::KernelOptions hopperOptions(const KernelSpec &s) {
  return {.num_warps = s.num_warps, .mma_rows_per_warp = true, .wgmma_dots = true, .blocks_per_sm = s.blocks_per_sm};
}

/// A block one TMA copy reads: rows x cols at (row, col) of batch row `batch` of a
/// [B, rows, cols] tensor (zeros past its last row).
struct TmaBlock {
  TensorArg t;
  Value batch, row, col;
  int64_t rows, cols;

  Value load(const dsl::SharedBuffer &buffer, const Value &slot, const dsl::Mbarriers &barriers,
             const Value &index) const {
    return t.load_tma({batch, row, col}, {1, rows, cols}, buffer, slot, barriers, index);
  }
};

/// Rows [row, row + rows) of head `head` of a [B, R, heads, dim] operand, as TMA reads it
/// (declared as its tma_rows_shape): batch row b at column head x dim, or where
/// heads_major batch b x heads + head at column 0; packed, from the sequence's first row
/// on `side` (a block reaching past the sequence reads the next one's rows, which the
/// scores mask, as past T or S it reads zeros).
TmaBlock headRows(const Program &pr, const TensorArg &t, RowSide side, const Value &row, const Value &head,
                  int64_t heads, int64_t dim, int64_t rows) {
  if (pr.p.heads_major)
    return {t, pr.b * heads + head, row, Value(0), rows, dim};
  if (pr.p.varlen) {
    const RowBlock at = side == RowSide::Queries ? query_rows(pr, row) : key_rows(pr, row);
    return {t, at.b, at.r0, head * dim, rows, dim};
  }
  return {t, pr.b, row, head * dim, rows, dim};
}

/// Copies `blocks` once, each into its own buffer, on one barrier, and waits for them.
Chunks loadOnce(Kernel &k, const std::vector<TmaBlock> &blocks) {
  dsl::Mbarriers ready = k.mbarriers(1, static_cast<int64_t>(blocks.size()));
  Chunks tiles;
  for (const TmaBlock &b : blocks)
    tiles.push_back(b.load(k.shared_buffer(1), 0, ready, 0));
  k.wait(ready, 0, 0);
  return tiles;
}

using StepBlocks = std::function<std::vector<TmaBlock>(Value step)>;
using StepBody = std::function<Carried(Value step, Carried carried, const Chunks &tiles)>;
/// What the consumers of a step do before they wait for its tiles.
using StepStart = std::function<void(Value step)>;

/// `steps` steps whose blocks (`blocks(i)`: `count` of them, the same shapes every step)
/// stream through TMA rings of the spec's stages that a producer warpgroup refills; the
/// consumers run `body` on the landed tiles, then release the step's slot.
Carried streamBlocks(Kernel &k, const KernelSpec &s, const Value &steps, Carried start, size_t count,
                     const StepBlocks &blocks, const StepBody &body, const StepStart &before_wait = {}) {
  const TmaRing ring = TmaRing::make(k, s.stages, static_cast<int64_t>(count), s.num_warps);
  std::vector<dsl::SharedBuffer> rings;
  for (size_t c = 0; c < count; ++c)
    rings.push_back(k.shared_buffer(s.stages));
  return k.specialized_loop(
      0, steps, 1, std::move(start),
      [&](Value i) {
        ring.wait_free(k, i);
        Value slot = ring.slot(i);
        std::vector<Value> tiles;
        std::vector<TmaBlock> step = blocks(i);
        for (size_t c = 0; c < step.size(); ++c)
          tiles.push_back(step[c].load(rings[c], slot, ring.full, slot));
        return tiles;
      },
      [&](Value i, Carried carried, std::vector<Value> tiles) {
        if (before_wait)
          before_wait(i);
        ring.wait_full(k, i);
        Carried next = body(i, std::move(carried), tiles);
        ring.release(k, i);  // the step's products completed in the body
        return next;
      });
}

/// Key blocks [lo, hi) of `range` in steps of block_kv (lo is a multiple of it; the last
/// may reach past S, where TMA reads zeros and the keys are masked): K's and V's blocks
/// of kv head kvh, `count` steps.
struct KeySteps {
  const Program *pr;
  Range range;
  Value kvh, count;

  Value first(const Value &i) const { return range.lo + i * pr->s.block_kv; }
  /// Step i's block is masked where it is an edge of the range.
  Masking masking(const Value &i) const {
    return block_masking(*pr, range, first(i), pr->s.block_kv, /*along_keys=*/true);
  }
  TmaBlock block(const TensorArg &t, int64_t dim, const Value &i) const {
    return headRows(*pr, t, RowSide::Keys, first(i), kvh, pr->p.K, dim, pr->s.block_kv);
  }
  TmaBlock k(const Value &i) const { return block(pr->in.k, pr->p.H, i); }
  /// V's block; an fp8 call's transposed copy ([Hv, block_kv] of row b K + kvh).
  TmaBlock v(const Value &i) const {
    const Problem &p = pr->p;
    if (p.fp8)
      return {pr->in.v, pr->b * p.K + kvh, Value(0), first(i), p.Hv, pr->s.block_kv};
    return block(pr->in.v, p.Hv, i);
  }
  StepBlocks both() const {
    return [keys = *this](Value i) { return std::vector<TmaBlock>{keys.k(i), keys.v(i)}; };
  }
};

KeySteps keySteps(Program &pr, const Range &range, Value kvh) {
  const int64_t bkv = pr.s.block_kv;
  return {&pr, range, kvh, (maximum(range.hi - range.lo, 0) + (bkv - 1)) / bkv};
}

/// With the spec's ping_pong, the consumer warpgroups issue their products in turns:
/// `begin` waits for this warpgroup's turn, else it passes the turn on.
void takeTurn(Kernel &k, const KernelSpec &s, bool begin) {
  if (!s.ping_pong)
    return;
  if (begin)
    k.turn_wait();
  else
    k.turn_pass();
}

/// q k^T issued in this warpgroup's turn, then waited for (the next warpgroup's products
/// are issued meanwhile).
Value issueInTurn(Kernel &k, const KernelSpec &s, const Value &q, const Value &kb) {
  takeTurn(k, s, true);
  Value qk = product_nt(s, k, {q}, {kb}, /*async=*/true);
  takeTurn(k, s, false);
  return dsl::dot_wait(qk, 0);
}

/// The forward's key loop with each step's S = Q K^T issued before the previous step's
/// P V, so the softmax of one runs while the tensor cores do the other. Step i's slot
/// holds K_i and V_(i-1) (one step more than there are blocks: the first step's P V is
/// 0 V_0, the last step's scores are all masked, keys from S on), and the loop carries P
/// and the accumulator already rescaled for the step's own P V.
Carried overlappedKeyLoop(Program &pr, const KeySteps &keys, const Value &q, Value n, Value t0,
                          const SoftmaxState &start) {
  Kernel &k = pr.k;
  const KernelSpec &s = pr.s;
  const Problem &p = pr.p;
  Value blocks = keys.count;
  Value steps = where(blocks > 0, blocks + 1, 0);
  Carried carried = start.pack();
  carried.push_back(k.full({s.block_q, s.block_kv}, 0.0, p.dtype));  // P of the step before
  Carried walked = streamBlocks(
      k, s, steps, std::move(carried), 2,
      [keys, blocks](Value i) {
        return std::vector<TmaBlock>{keys.k(minimum(i, blocks - 1)), keys.v(maximum(i - 1, 0))};
      },
      [&](Value i, Carried c, const Chunks &kv) {
        Value m = c[0], l = c[1], acc = c[2], prob = c[3];
        takeTurn(k, s, true);
        Value qk = product_nt(s, k, {q}, {kv[0]}, /*async=*/true);
        Value pv = pv_product(s, prob, kv[1], acc, /*async=*/true);
        takeTurn(k, s, false);
        qk = dsl::dot_wait(qk, 1);  // P V stays in flight through the softmax
        Value j0 = where(i < blocks, keys.first(i), Value(p.S));
        // Edge steps masked; the extra last step's keys (from S on) are all hidden, so it
        // is always one, with the key bound.
        Masking masking = block_masking(pr, keys.range, j0, s.block_kv, /*along_keys=*/true);
        if (!masking.masked)
          masking = Masking(i >= blocks);
        else if (masking.edge.valid())
          masking.edge = masking.edge | (i >= blocks);
        masking.bound_keys = true;
        OnlineSoftmax u = online_softmax(pr, m, qk, n, t0, j0, masking);
        pv = dsl::dot_wait(pv, 0);
        return Carried{u.m, u.l(l), pv * u.alpha.expand(1), u.prob.to(p.dtype)};
      });
  walked.pop_back();
  return walked;
}

} // namespace

Kernel hopper_forward_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q;
  Kernel k(s.name(), hopperOptions(s));
  ForwardProgram f = forward_program(k, s, declare_operands(k, p, /*rows=*/true));
  Program &pr = f.pr;
  Value t0 = f.t0, n = f.n;
  load_descales(pr, f.kvh);

  Value q = loadOnce(k, {headRows(pr, pr.in.q, RowSide::Queries, t0, n, p.N, p.H, bq)})[0];
  KeySteps keys = keySteps(pr, key_range(pr, t0, bq, s.block_kv), f.kvh);
  SoftmaxState start{{k.full({bq}, -INFINITY, p.compute)}, {k.full({bq}, 0.0, p.compute)}, zero_rows(s, k, bq, p.Hv)};
  const size_t accSize = start.acc.size();
  Carried walked =
      s.overlap ? overlappedKeyLoop(pr, keys, q, n, t0, start)
                : streamBlocks(k, s, keys.count, start.pack(), 2, keys.both(), [&](Value i, Carried c, const Chunks &kv) {
                    Value qk = s.ping_pong ? issueInTurn(k, s, q, kv[0]) : product_nt(s, k, {q}, {kv[0]});
                    return softmax_step(pr, SoftmaxState::unpack(c, accSize), qk, n, t0, keys.first(i),
                                        keys.masking(i), {kv[1]})
                        .pack();
                  });
  forward_epilogue(f, SoftmaxState::unpack(walked, accSize));
  return k;
}

Kernel v_transpose_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t keys = 64;  // a program's keys: [64, Hv] in, [Hv, 64] out
  const std::vector<int64_t> vt = p.vt_shape();
  Kernel k(s.name(), {.num_warps = 4});
  TensorArg v = rows_operand(k, p, "v", RowSide::Keys, p.K, p.Hv);
  TensorArg out = k.output("vt", p.dtype, vt);
  k.grid(cdiv(vt[2], keys), p.K, p.B);
  Value j0 = k.program_id(0) * keys, kvh = k.program_id(1), b = k.program_id(2);
  // Keys from S on read zeros, and are written up to the padded row's end.
  Value block = v.load({b, j0, kvh, Value(0)}, {1, keys, 1, p.Hv}).reshape({keys, p.Hv});
  Value transposed = block.trans();
  // interleave_v: column 16 g + 4 a + 2 b + c holds key 16 g + 8 b + 2 a + c, the order
  // in which a product's accumulator holds P's columns, which P V then reads as they are
  // (pv_product). Each thread's 16 bytes of a row move among themselves.
  if (s.interleave_v)
    transposed = transposed.reshape({p.Hv, keys / 16, 2, 4, 2}).trans({0, 1, 3, 2, 4}).reshape({p.Hv, keys});
  out.store({b * p.K + kvh, Value(0), j0}, transposed.reshape({1, p.Hv, keys}));
  return k;
}

Kernel hopper_dkdv_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q, bkv = s.block_kv;
  Kernel k(s.name(), hopperOptions(s));
  Operands in = declare_operands(k, p, /*rows=*/true);
  Cotangents ct = declare_cotangents(k, p, /*rows=*/true);
  DkDvOutputs o = declare_dkdv_outputs(k, p);
  // FusedDkDvDq: each step also adds its dS K into the f32 dq sum, [B rows, N H] with
  // T rounded up to the step (dq_sum_rows), so a step never reaches the next batch row.
  // Ordered (ordersDq): the adds into each query block land key block after key block,
  // through an i32 counter per (batch row, query head, query block) that the plan zeroes
  // (see the ordered adds below).
  const int64_t sumRows = dq_sum_rows(p, bq);
  std::optional<TensorArg> dqSum, dqOrder;
  if (s.kind == KernelKind::FusedDkDvDq)
    dqSum = k.output("dq_sum", DType::F32, {p.B * sumRows, p.N * p.H});
  if (s.ordersDq())
    dqOrder = k.output("dq_order", DType::I32, {p.B, p.N, sumRows / bq});
  GridIds id = row_block_grid(k, cdiv(p.S, bkv), p.K, p.B, /*last_first=*/false);
  Program pr = program(k, s, in, id.batch);
  Value j0 = id.block * bkv, h = id.head;

  Chunks kv = loadOnce(k, {headRows(pr, in.k, RowSide::Keys, j0, h, p.K, p.H, bkv),
                           headRows(pr, in.v, RowSide::Keys, j0, h, p.K, p.Hv, bkv)});
  // Steps walk the query blocks [lo, hi) of each query head of the group in turn.
  const Range range = query_range(pr, j0, bq, bkv);
  Value blocks = (maximum(range.hi - range.lo, 0) + (bq - 1)) / bq;
  auto head = [&](const Value &i) { return h * p.group() + i / maximum(blocks, 1); };
  auto first = [&](const Value &i) { return range.lo + i % maximum(blocks, 1) * bq; };
  // The ordered fused dq: the program of key block j adds into query block t0 (of head n)
  // once every key block before j that adds there has added, i.e. when t0's counter
  // holds j's rank among them, then counts itself in. The rank is j - c(t0), with c(t0)
  // = first_key(t0) / bkv (key_range's lo), because the key blocks whose walks visit t0
  // are exactly [c(t0), e) for some e:
  //   Key block j (j0 = j bkv) visits the query blocks t0 (multiples of bq) with lo(j) <=
  //   t0 < hi(j), [lo, hi) = query_range(j0): the walk's steps start at lo (a multiple
  //   of bq) and go on while below hi; every query head of the group alike.
  //   lo(j) = max(causal ? j0 : 0, right ? j0 - right : 0) / bq * bq never decreases
  //   with j: {j : lo(j) <= t0} = [0, a).
  //   hi(j) = min(q_valid, j0 + bkv + left (with a left window)) for j0 < kv_valid, and
  //   0 <= t0 from there on (kv lengths): for t0 < q_valid (else no block visits t0),
  //   {j : hi(j) > t0} = {j < d : (j + 1) bkv > t0 - left} = [c, d), d the key blocks
  //   below kv_valid and c the least j >= 0 with (j + 1) bkv > t0 - left, that is
  //   max(t0 - left, 0) / bkv = first_key(t0) / bkv; without a left window c = 0, which
  //   first_key gives too.
  //   So the visitors are [0, a) n [c, d) = [c, min(a, d)), and a visitor j finds
  //   exactly j - c of them before it. Masks, bias, soft cap, GQA and odd T or S change
  //   no range (blocks past T or S are masked, not skipped), and a program that visits
  //   no query block (kv lengths, windows) is in no query block's set.
  // Deadlock freedom on a GPU: the counter of (b, n, t0) is touched only by the programs
  // of batch row b and kv head n / group, which differ in grid x alone (row_block_grid,
  // key blocks from the first: last_first false), so a program waits only for programs
  // of lower linear id. The GPU dispatches a grid's blocks in increasing linear id (what
  // the hardware does, not a CUDA promise; FlashAttention-3's deterministic VJP relies on
  // it too), so no program is resident before every lower one was: the lowest unfinished
  // program is resident, or the next to be, and everything it waits for is lower, so
  // finished, having signalled every step; it finishes, and by induction every program
  // does. A program's producer warpgroup never waits for a
  // counter (the wait and the signal are the consumers', thread 0 and a barrier of the
  // consumer threads). The interpreter runs kernels that wait in grid order (x fastest),
  // where each wait finds its value.
  // The order is left to right, the grid's: under a causal mask key block j's first add
  // (at about query block j) waits for key block 0's step there, so a head's light key
  // blocks idle while its heavy first ones walk up to them, and all of them end with the
  // first (the longest): each holds its SM about as long as key block 0 does. Without a
  // mask every program walks the same query blocks in the same order, each a step's add
  // behind the one before it. FlashAttention-3's PR 1893 orders causal key blocks right to
  // left instead (the diagonal's block adds first and waits for nobody, each block one
  // step behind the one after it) and schedules them in that order ("shortest processing
  // time first"): 2.90 ms against 3.80 for its naive deterministic order (hd 128, causal,
  // seqlen 8192). Ours is the more expensive order under a causal mask; right to left
  // here needs the grid reversed too (row_block_grid's last_first) to stay deadlock
  // free: left for when the fused dq is measured on the device.
  auto orderedTurn = [&](const Value &t0) {
    return id.block - first_key(pr, t0, bkv, k.constant(0, DType::I32)) / bkv;
  };
  Chunks dk0 = zero_rows(s, k, bkv, p.H), dv0 = zero_rows(s, k, bkv, p.Hv);
  // Each step's lse and delta loads are issued before its wait for Q and dO (masked and
  // scaled once its products are issued). With the spec's stats_ahead (opt-in; the check
  // keeps it where the registers allow: the carried vectors add block_q / 2 words a
  // thread, two [bq] in the scores' column layout), they are issued a whole step ahead
  // instead and carried after dk and dv (the first step's before the loop, which the
  // consumers' branch loads; past the last step they read the next head's rows or
  // padding, never used): a global load's latency outlasts a step's wait and its first
  // products. The carried vectors get the layout of the scores they scale
  // (tile-remove-layout-conversions, rule 5), so they never cross shared memory.
  const bool ahead = s.stats_ahead;
  Carried start = pack({&dk0, &dv0});
  if (ahead) {
    RowStatLoads firstLoads = load_row_stat_values(pr, ct, head(0), first(0), bq);
    start.push_back(firstLoads.lse);
    start.push_back(firstLoads.delta);
  }
  std::optional<RowStatLoads> issued;
  Carried walked = streamBlocks(
      k, s, blocks * p.group(), std::move(start), 2,
      [&](Value i) {
        Value row = first(i), n = head(i);
        return std::vector<TmaBlock>{headRows(pr, in.q, RowSide::Queries, row, n, p.N, p.H, bq),
                                     headRows(pr, ct.dout, RowSide::Queries, row, n, p.N, p.Hv, bq)};
      },
      [&](Value i, Carried carried, const Chunks &qd) {
        std::optional<RowStatLoads> loads = issued;
        if (ahead) {
          loads = RowStatLoads{carried[carried.size() - 2], carried.back()};
          carried.resize(carried.size() - 2);
        }
        DsConsumer addDq;
        if (dqSum)
          addDq = [&](const Value &dsT) {  // dS K = (dS^T)^T K, cast before the transpose (half the bytes)
            Value dq = dsl::dot(dsT.to(p.dtype).trans(), kv[0], k.full({bq, p.H}, 0.0, DType::F32));
            std::vector<Value> counter;
            if (dqOrder) {  // this key block's turn at the query block (see orderedTurn)
              counter = {pr.b, head(i), first(i) / bq};
              dqOrder->semaphore_wait(counter, orderedTurn(first(i)));
            }
            dqSum->tma_reduce_add({pr.b * sumRows + first(i), head(i) * p.H}, dq);
            if (dqOrder)  // once the add is complete (the signal waits for the TMA bulk groups)
              dqOrder->semaphore_signal(counter, 1);
          };
        Carried next = dkdv_step(pr, ct, o.ds, {kv[0]}, {kv[1]}, {qd[0]}, {qd[1]}, head(i), first(i), j0,
                                 block_masking(pr, range, first(i), bq, /*along_keys=*/false), carried, addDq, &*loads);
        if (ahead) {
          next.push_back(issued->lse);
          next.push_back(issued->delta);
        }
        return next;
      },
      [&](Value i) {
        const Value step = ahead ? i + 1 : i;
        issued = load_row_stat_values(pr, ct, head(step), first(step), bq);
      });
  const Carried sums(walked.begin(), walked.begin() + static_cast<std::ptrdiff_t>(dk0.size() + dv0.size()));
  store_dkdv(pr, o, j0, h, sums, dk0.size());
  return k;
}

Kernel hopper_dq_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q;
  Kernel k(s.name(), hopperOptions(s));
  Operands in = declare_operands(k, p, /*rows=*/true);
  Cotangents ct = declare_cotangents(k, p, /*rows=*/true);
  TensorArg dq = rows_operand(k, p, "dq", RowSide::Queries, p.N, p.H, /*output=*/true);
  GridIds id = row_block_grid(k, cdiv(p.T, bq), p.N, p.B, last_block_first(s));
  Program pr = program(k, s, in, id.batch);
  Value t0 = id.block * bq, n = id.head;

  Chunks qd = loadOnce(k, {headRows(pr, in.q, RowSide::Queries, t0, n, p.N, p.H, bq),
                           headRows(pr, ct.dout, RowSide::Queries, t0, n, p.N, p.Hv, bq)});
  RowStats stats = load_row_stats(pr, ct, n, t0, bq);
  KeySteps keys = keySteps(pr, key_range(pr, t0, bq, s.block_kv), n / p.group());
  Carried sum = streamBlocks(k, s, keys.count, zero_rows(s, k, bq, p.H), 2, keys.both(),
                             [&](Value i, Carried carried, const Chunks &kv) {
                               return dq_step(pr, {qd[0]}, {qd[1]}, stats, {kv[0]}, {kv[1]}, n, t0,
                                              keys.first(i), keys.masking(i), carried);
                             });
  store_rows(s, dq, query_rows(pr, t0), n, scale_all(sum, p.scale));
  return k;
}

Kernel dq_from_sum_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t rows = s.block_q, sumRows = dq_sum_rows(p, rows);
  Kernel k(s.name(), kernel_options(s));
  TensorArg sum = k.input("dq_sum", DType::F32, {p.B, sumRows, p.N, p.H});
  TensorArg dq = rows_operand(k, p, "dq", RowSide::Queries, p.N, p.H, /*output=*/true);
  k.grid(sumRows / rows, p.N, p.B);
  Value t0 = k.program_id(0) * rows, n = k.program_id(1), b = k.program_id(2);
  store_rows(s, dq, b, t0, n, scale_all(load_rows(s, sum, b, t0, n, p.H, rows), p.scale));
  return k;
}

} // namespace tokamax::attention_detail
