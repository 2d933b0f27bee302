//===- FlashKernels.cpp - FlashAttention-2 structured kernels ---------------===//
//
// The chunked and tile implementations share these kernels; the spec's Product says
// whether products run on tensor cores (tile.dot) or as exact multiply-adds, and
// split_edges whether KV blocks no mask touches skip the mask arithmetic.
//
//   forward: one program per (query block, head, batch row); Q held, K/V blocks walked
//            with an online softmax in log2 units (exp2, the scale folded in);
//   delta:   rowsum(dout * out);
//   dk/dv:   one program per (key block, kv head, batch row), walking the query blocks
//            of every query head of the group (GQA sums stay in the program);
//   dq:      one program per (query block, head, batch row), walking the key blocks.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <cmath>

namespace tokamax::attention_detail {

using dsl::cdiv;

Carried SoftmaxState::pack() const { return attention_detail::pack({&m, &l, &acc}); }

SoftmaxState SoftmaxState::unpack(const Carried &c, size_t accSize) {
  auto parts = attention_detail::unpack(c, {1, 1, accSize});
  return {parts[0], parts[1], parts[2]};
}

OnlineSoftmax online_softmax(Program &pr, const Value &m, const Value &qk, Value n, Value t0, Value j0,
                             const Masking &masking) {
  const KernelSpec &s = pr.s;
  Scores sc = scores(pr, qk, n, t0, j0, s.block_q, s.block_kv, masking, false, false);
  Value mNew = maximum(m, sc.max_log2(1));
  // A row with no visible key so far keeps max -inf: exponentiate against 0 instead.
  Value mUse = where(mNew == -INFINITY, 0.0, mNew);
  const Value mExp = pr.p.fp8 ? mUse - kFp8ProbLog2Offset : mUse;  // (P to fp8: kFp8ProbLog2Offset)
  return {mNew, sc.exp2_minus(mExp, 1), exp2(m - mUse)};
}

SoftmaxState softmax_step(Program &pr, const SoftmaxState &state, const Value &qk, Value n, Value t0, Value j0,
                          const Masking &masking, const Chunks &v) {
  OnlineSoftmax u = online_softmax(pr, state.m[0], qk, n, t0, j0, masking);
  Chunks acc = product_nn(pr.s, u.prob, v, scale_rows(state.acc, u.alpha));
  return {{u.m}, {u.l(state.l[0])}, acc};
}

namespace {

/// The epilogue with the head's sink s (natural units) as one more logit whose value row
/// is zero: l gains exp2(s log2e) against a row max that includes it (a sink far above
/// every logit neither overflows exp2 nor swamps the rows' terms), out = acc 2^(m - m') /
/// l', lse = m' ln2 + log l'. A row that sees no key gets lse = s exactly; padding rows
/// (past q_seq_length) out = 0 and lse = +inf as without sinks.
void sinkEpilogue(ForwardProgram &f, const SoftmaxState &state) {
  Program &pr = f.pr;
  const Problem &p = pr.p;
  Value m = state.m[0], l = state.l[0];
  Value sink = f.sinks->load({f.n}, {1}).to(p.compute);
  Value sink2 = sink * kLog2e;
  Value mAll = maximum(m, sink2);
  Value mUse = where(mAll == -INFINITY, 0.0, mAll);
  Value alpha = exp2(m - mUse);  // 0 where no key was seen
  Value lAll = l * alpha + exp2(sink2 - mUse);
  Value seen = lAll > 0.0;  // false only for a sink of -inf in a row that sees no key
  if (p.q_lengths)
    seen = seen & (f.t0 + pr.k.arange(0, pr.s.block_q) < pr.q_valid);
  const RowBlock at = query_rows(pr, f.t0);
  store_rows(pr.s, f.out, at, f.n, scale_rows(state.acc, where(seen, alpha / lAll, 0.0)));
  if (f.lse) {
    Value lse = where(m == -INFINITY, sink.broadcast_to({pr.s.block_q}), mUse * kLn2 + log(lAll));
    store_row_vector(pr.k, *f.lse, at, f.n, where(seen, lse, INFINITY));
  }
}

} // namespace

void forward_epilogue(ForwardProgram &f, const SoftmaxState &state) {
  if (f.sinks)
    return sinkEpilogue(f, state);
  Program &pr = f.pr;
  Value t0 = f.t0, n = f.n;
  Value mFinal = state.m[0], lFinal = state.l[0];
  Value seen = lFinal > 0.0;
  if (pr.p.q_lengths)
    seen = seen & (t0 + pr.k.arange(0, pr.s.block_q) < pr.q_valid);
  Value inv = where(seen, 1.0 / lFinal, 0.0);
  if (pr.out_descale.valid())
    inv = inv * pr.out_descale;
  const RowBlock at = query_rows(pr, t0);
  store_rows(pr.s, f.out, at, n, scale_rows(state.acc, inv));
  if (f.lse) {
    Value mUse = where(mFinal == -INFINITY, 0.0, mFinal);
    if (pr.p.fp8)  // l sums 2^kFp8ProbLog2Offset P
      mUse = mUse - kFp8ProbLog2Offset;
    store_row_vector(pr.k, *f.lse, at, n, where(seen, mUse * kLn2 + log(lFinal), INFINITY));
  }
}

ForwardProgram forward_program(Kernel &k, const KernelSpec &s, Operands in) {
  const Problem &p = s.p;
  std::optional<TensorArg> sinks;
  if (p.sinks)
    sinks = k.input("sinks", DType::F32, {p.N});
  TensorArg out = rows_operand(k, p, "out", RowSide::Queries, p.N, p.Hv, /*output=*/true);
  std::optional<TensorArg> lse;
  if (p.lse_out)
    lse = k.output("lse", p.compute, row_stats_shape(p));
  GridIds id = row_block_grid(k, cdiv(p.T, s.block_q), p.N, p.B, last_block_first(s));
  Program pr = program(k, s, std::move(in), id.batch);
  Value t0 = id.block * s.block_q, n = id.head;
  return {sinks, out, lse, std::move(pr), t0, n, n / p.group()};
}

Kernel flash_forward_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q, bkv = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  ForwardProgram f = forward_program(k, s, declare_operands(k, p));
  Program &pr = f.pr;
  const Operands &in = pr.in;
  Value t0 = f.t0, n = f.n, kvh = f.kvh;

  Chunks q = load_rows(s, in.q, query_rows(pr, t0), n, p.H, bq);
  SoftmaxState start{{k.full({bq}, -INFINITY, p.compute)}, {k.full({bq}, 0.0, p.compute)}, zero_rows(s, k, bq, p.Hv)};
  const size_t accSize = start.acc.size();

  // K and V blocks of each step. With overlap the loop also carries this step's raw
  // q k^T, issued (asynchronously) by the step before, before its softmax.
  std::vector<BlockSource> kv{{in.k, kvh, p.H, bkv}, {in.v, kvh, p.Hv, bkv}};
  LookaheadBody body = [&](Value j0, Carried carried, bool masked, const Blocks &blocks, const Blocks &next) {
    const size_t stateSize = carried.size() - (s.overlap ? 1 : 0);
    SoftmaxState state = SoftmaxState::unpack(Carried(carried.begin(), carried.begin() + stateSize), accSize);
    Value qk, qkNext;
    if (s.overlap) {
      qk = carried.back();
      qkNext = product_nt(s, k, q, next(0), /*async=*/true);
    } else {
      qk = product_nt(s, k, q, blocks(0));
    }
    Carried result = softmax_step(pr, state, qk, n, t0, j0, masked, blocks(1)).pack();
    if (s.overlap)
      result.push_back(dsl::dot_wait(qkNext));
    return result;
  };
  const Range range = key_range(pr, t0, bq, bkv);
  Carried walked =
      s.overlap ? walk_blocks_lookahead(
                      pr, range, bkv, start.pack(), kv,
                      [&](const Blocks &first) { return Carried{product_nt(s, k, q, first(0))}; }, body)
                : walk_blocks(pr, range, bkv, start.pack(), kv,
                              [&](Value j0, Carried c, bool masked, const Blocks &blocks) {
                                return body(j0, std::move(c), masked, blocks, blocks);
                              });
  walked.resize(2 + accSize);
  forward_epilogue(f, SoftmaxState::unpack(walked, accSize));
  return k;
}

Kernel delta_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q;
  const bool sinks = s.usesSinks();
  Kernel k(s.name(), kernel_options(s));
  TensorArg dout = rows_operand(k, p, "dout", RowSide::Queries, p.N, p.Hv);
  TensorArg out = rows_operand(k, p, "out", RowSide::Queries, p.N, p.Hv);
  std::optional<TensorArg> lse, sinkLogits, partials, cuSeqlens, lseRows;
  if (sinks || p.varlen)
    lse = k.input("lse", p.compute, row_stats_shape(p));
  if (sinks)
    sinkLogits = k.input("sinks", DType::F32, {p.N});
  if (p.varlen)
    cuSeqlens = k.input("cu_seqlens_q", DType::I32, {p.B + 1});
  TensorArg delta = k.output("delta", p.compute, vjp_row_stats_shape(p));
  if (p.varlen)
    lseRows = k.output("lse_rows", p.compute, vjp_row_stats_shape(p));
  if (sinks)
    partials = k.output("dsinks_partials", p.compute, {p.N, dsinks_partials(p, bq)});
  k.grid(cdiv(p.T, bq), p.N, p.B);
  Value t0 = k.program_id(0) * bq, n = k.program_id(1), b = k.program_id(2);
  std::optional<PackedRows> packed;
  if (p.varlen)
    packed = packed_rows(k, *cuSeqlens, b, p.T);
  const RowBlock at = query_rows(p, b, t0, packed);
  Chunks d = load_rows(s, dout, at, n, p.Hv, bq), o = load_rows(s, out, at, n, p.Hv, bq);
  Value sum;
  for (size_t c = 0; c < d.size(); ++c) {
    Value part = (d[c].to(p.compute) * o[c].to(p.compute)).sum(1);
    sum = sum.valid() ? sum + part : part;
  }
  // Packed, the rows past the sequence read the next one's: in the padded copies their
  // delta is 0 and their lse +inf (their P and dS are 0, as past T).
  std::optional<Value> rowLse;
  if (packed) {
    sum = where(t0 + k.arange(0, bq) < packed->valid, sum, 0.0);
    rowLse = load_row_vector(k, *lse, at, n, bq, INFINITY);
    store_row_vector(*lseRows, b, n, t0, *rowLse);
  }
  store_row_vector(delta, b, n, t0, sum);
  if (sinks) {
    // d loss / d sink = -sum over rows of P(sink) delta, P(sink) = exp(sink - lse): this
    // program's share (rows past T and padding rows have lse +inf and add nothing).
    if (!rowLse)
      rowLse = load_row_vector(k, *lse, at, n, bq, INFINITY);
    Value psink = exp(sinkLogits->load({n}, {1}).to(p.compute) - *rowLse);
    Value part = (psink * sum).expand(0).sum(1);
    partials->store({n, b * cdiv(p.T, bq) + k.program_id(0)}, part.reshape({1, 1}));
  }
  return k;
}

int64_t dsinks_partials(const Problem &p, int64_t block_q) { return p.B * cdiv(p.T, block_q); }

Kernel dsinks_reduce_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t step = s.block_q, count = dsinks_partials(p, kDeltaRows);
  Kernel k(s.name(), kernel_options(s));
  TensorArg partials = k.input("dsinks_partials", p.compute, {p.N, count});
  TensorArg dsinks = k.output("dsinks", DType::F32, {p.N});
  k.grid(p.N);
  Value n = k.program_id(0);
  // A fixed order: `step` lanes over the partial sums, then a tree over the lanes.
  Value acc = k.loop(0, count, step, {k.full({1, step}, 0.0, p.compute)}, [&](Value i, Carried c) {
    return Carried{c[0] + partials.load({n, i}, {1, step})};
  })[0];
  dsinks.store({n}, (-acc.sum(1)).to(DType::F32));
  return k;
}

Cotangents declare_cotangents(Kernel &k, const Problem &p, bool rows) {
  std::vector<int64_t> statShape = vjp_row_stats_shape(p);
  if (rows)
    statShape = {flat_row_stats(p)};
  return {rows ? k.input("dout", p.dtype, tma_rows_shape(p, RowSide::Queries, p.N, p.Hv))
               : rows_operand(k, p, "dout", RowSide::Queries, p.N, p.Hv),
          k.input("lse", p.compute, statShape), k.input("delta", p.compute, statShape)};
}

RowStatLoads load_row_stat_values(Program &pr, const Cotangents &ct, Value n, Value t0, int64_t rows) {
  auto load = [&](const TensorArg &t, double padding) {
    if (t.shape().size() != 1)
      return load_row_vector(t, pr.b, n, t0, rows, padding);
    const Problem &p = pr.p;  // flat [B N T]
    return t.load({(pr.b * p.N + n) * p.T + t0}, {rows}, padding);
  };
  return {load(ct.lse, INFINITY), load(ct.delta, 0.0)};
}

RowStats finish_row_stats(Program &pr, const Cotangents &ct, const RowStatLoads &loads, Value t0, int64_t rows) {
  // Flat rows past T belong to the next head: hidden here, not by the load's bounds.
  auto finish = [&](const TensorArg &t, const Value &v, double padding) {
    if (t.shape().size() != 1)
      return v;
    return where(t0 + pr.k.arange(0, rows) < Value(pr.p.T), v, padding);
  };
  return {finish(ct.lse, loads.lse, INFINITY) * kLog2e, finish(ct.delta, loads.delta, 0.0)};
}

RowStats load_row_stats(Program &pr, const Cotangents &ct, Value n, Value t0, int64_t rows) {
  return finish_row_stats(pr, ct, load_row_stat_values(pr, ct, n, t0, rows), t0, rows);
}

DkDvOutputs declare_dkdv_outputs(Kernel &k, const Problem &p) {
  DkDvOutputs o{rows_operand(k, p, "dk", RowSide::Keys, p.K, p.H, /*output=*/true),
                rows_operand(k, p, "dv", RowSide::Keys, p.K, p.Hv, /*output=*/true), {}};
  if (p.dbias)
    o.ds = k.output("ds", p.compute, {p.B, p.N, p.T, p.S});
  return o;
}

namespace {

/// dS from P, dP and delta (broadcast along `axis`), through the soft cap's derivative.
Value scoreGradient(const Problem &p, const Value &prob, const Value &dp, const Value &delta, int axis,
                    const Scores &sc) {
  Value ds = prob * (dp - delta.expand(axis));
  if (p.softcap != 0) {
    Value t = sc.natural * (1.0 / p.softcap);
    ds = ds * (1.0 - t * t);
  }
  return ds;
}

} // namespace

Carried dkdv_step(Program &pr, const Cotangents &ct, const std::optional<TensorArg> &ds, const Chunks &kb,
                  const Chunks &vb, const Chunks &q, const Chunks &d, Value n, Value t0, Value j0,
                  const Masking &masking, const Carried &carried, const DsConsumer &use_ds,
                  const RowStatLoads *given_loads) {
  const KernelSpec &s = pr.s;
  const Problem &p = pr.p;
  Kernel &k = pr.k;
  const int64_t bq = q[0].shape()[0], bkv = kb[0].shape()[0];
  auto parts = unpack(carried, {kb.size(), vb.size()});
  std::optional<RowStats> stats;
  if (!given_loads)
    stats = load_row_stats(pr, ct, n, t0, bq);
  // On wgmma (the hopper kernels) dP^T stays in flight through P^T where the registers
  // allow: both accumulators (H + Hv words a thread over 2), S^T, dP^T and P^T (bq / 2
  // each) at most 176 (ptxas: no spills at H 64 with 64-query steps, H 128 with 32).
  const bool inFlight = s.tma && (p.H + p.Hv) / 2 + 3 * bq / 2 <= 176;
  Value sT = product_nt(s, k, kb, q, inFlight);
  Value dpT = inFlight ? product_nt(s, k, vb, d, true) : Value();
  if (given_loads)  // masked and scaled while the products run
    stats = finish_row_stats(pr, ct, *given_loads, t0, bq);
  if (inFlight)
    sT = dsl::dot_wait(sT, 1);
  Scores sc = scores(pr, sT, n, t0, j0, bq, bkv, masking, true, p.softcap != 0);
  Value probT = sc.exp2_minus(stats->lse2, 0);  // [bkv, bq]
  // With more room dV stays in flight through dS^T too.
  const bool dvInFlight = inFlight && (p.H + p.Hv) / 2 + 2 * bq <= 192;
  Chunks dvNew = dvInFlight ? Chunks{dsl::dot_async(probT.to(p.dtype), d[0], parts[1][0])}
                            : product_nn(s, probT, d, parts[1]);
  dpT = inFlight ? dsl::dot_wait(dpT, dvInFlight ? 1 : 0) : product_nt(s, k, vb, d);
  Value dsT = scoreGradient(p, probT, dpT, stats->delta, 0, sc);
  if (ds)
    ds->store({pr.b, n, t0, j0}, dsT.trans().reshape({1, 1, bq, bkv}));
  Chunks dkNew = product_nn(s, dsT, q, parts[0]);
  if (use_ds)
    use_ds(dsT);
  if (dvInFlight)
    dvNew[0] = dsl::dot_wait(dvNew[0], 0);
  return pack({&dkNew, &dvNew});
}

Chunks dq_step(Program &pr, const Chunks &q, const Chunks &d, const RowStats &stats, const Chunks &kb,
               const Chunks &vb, Value n, Value t0, Value j0, const Masking &masking, const Chunks &acc) {
  const KernelSpec &s = pr.s;
  Kernel &k = pr.k;
  const int64_t bq = q[0].shape()[0], bkv = kb[0].shape()[0];
  // On wgmma (the hopper kernels) dP stays in flight through P.
  const bool inFlight = s.tma;
  Value qk = product_nt(s, k, q, kb, inFlight);
  Value dp = inFlight ? product_nt(s, k, d, vb, true) : Value();
  if (inFlight)
    qk = dsl::dot_wait(qk, 1);
  Scores sc = scores(pr, qk, n, t0, j0, bq, bkv, masking, false, pr.p.softcap != 0);
  Value prob = sc.exp2_minus(stats.lse2, 1);
  dp = inFlight ? dsl::dot_wait(dp, 0) : product_nt(s, k, d, vb);
  Value dsBlock = scoreGradient(pr.p, prob, dp, stats.delta, 1, sc);
  return product_nn(s, dsBlock, kb, acc);
}

Kernel flash_dkdv_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q, bkv = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  Operands in = declare_operands(k, p);
  Cotangents ct = declare_cotangents(k, p);
  DkDvOutputs o = declare_dkdv_outputs(k, p);
  k.grid(cdiv(p.S, bkv), p.K, p.B);
  Program pr = program(k, s, in, k.program_id(2));
  Value j0 = k.program_id(0) * bkv, h = k.program_id(1);

  const RowBlock keys = key_rows(pr, j0);
  Chunks kb = load_rows(s, in.k, keys, h, p.H, bkv), vb = load_rows(s, in.v, keys, h, p.Hv, bkv);
  Chunks dkAcc = zero_rows(s, k, bkv, p.H), dvAcc = zero_rows(s, k, bkv, p.Hv);
  Range range = query_range(pr, j0, bq, bkv);

  Carried sums = k.loop(0, p.group(), 1, pack({&dkAcc, &dvAcc}), [&](Value g, Carried outer) {
    Value n = h * p.group() + g;
    std::vector<BlockSource> qd{{in.q, n, p.H, bq, true}, {ct.dout, n, p.Hv, bq, true}};
    BlockBody body = [&](Value t0, Carried carried, bool masked, const Blocks &blocks) {
      return dkdv_step(pr, ct, o.ds, kb, vb, blocks(0), blocks(1), n, t0, j0, masked, carried);
    };
    return walk_blocks(pr, range, bq, std::move(outer), qd, body);
  });
  store_dkdv(pr, o, j0, h, sums, kb.size());
  return k;
}

void store_dkdv(Program &pr, const DkDvOutputs &o, Value j0, Value h, const Carried &sums, size_t dkChunks) {
  auto parts = unpack(sums, {dkChunks, sums.size() - dkChunks});
  const RowBlock at = key_rows(pr, j0);
  store_rows(pr.s, o.dk, at, h, scale_all(parts[0], pr.p.scale));
  store_rows(pr.s, o.dv, at, h, parts[1]);
}

Kernel flash_dq_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q, bkv = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  Operands in = declare_operands(k, p);
  Cotangents ct = declare_cotangents(k, p);
  TensorArg dq = rows_operand(k, p, "dq", RowSide::Queries, p.N, p.H, /*output=*/true);
  k.grid(cdiv(p.T, bq), p.N, p.B);
  Program pr = program(k, s, in, k.program_id(2));
  Value t0 = k.program_id(0) * bq, n = k.program_id(1), kvh = n / p.group();

  const RowBlock at = query_rows(pr, t0);
  Chunks q = load_rows(s, in.q, at, n, p.H, bq), d = load_rows(s, ct.dout, at, n, p.Hv, bq);
  RowStats stats = load_row_stats(pr, ct, n, t0, bq);
  std::vector<BlockSource> kv{{in.k, kvh, p.H, bkv}, {in.v, kvh, p.Hv, bkv}};
  BlockBody body = [&](Value j0, Carried carried, bool masked, const Blocks &blocks) {
    return dq_step(pr, q, d, stats, blocks(0), blocks(1), n, t0, j0, masked, carried);
  };
  Chunks sum = walk_blocks(pr, key_range(pr, t0, bq, bkv), bkv, zero_rows(s, k, bq, p.H), kv, body);
  store_rows(s, dq, at, n, scale_all(sum, p.scale));
  return k;
}

Kernel dbias_reduce_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const auto &sh = p.bias->shape;
  const int64_t bt = sh[2] == 1 ? 1 : s.block_q, bs = sh[3] == 1 ? 1 : s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  TensorArg ds = k.input("ds", p.compute, {p.B, p.N, p.T, p.S});
  TensorArg dbias = k.output("dbias", p.bias->dtype, {sh[0], sh[1], sh[2], sh[3]});
  const int64_t sBlocks = cdiv(sh[3], bs);
  k.grid(cdiv(sh[2], bt) * sBlocks, sh[1], sh[0]);
  Value t0 = k.program_id(0) / sBlocks * bt, j0 = k.program_id(0) % sBlocks * bs;
  Value n0 = k.program_id(1), b0 = k.program_id(2);
  // Sums in a fixed order over every broadcast dim: batch rows, heads, then query and
  // key blocks when bias has a single row / column.
  Value acc = k.full({bt, bs}, 0.0, p.compute);
  auto over = [&](bool broadcast, int64_t extent, int64_t step, Value fixed, Value carried,
                  const std::function<Value(Value, Value)> &inner) -> Value {
    if (!broadcast)
      return inner(fixed, carried);
    return k.loop(0, extent, step, {carried}, [&](Value i, Carried c) { return Carried{inner(i, c[0])}; })[0];
  };
  const int64_t lt = sh[2] == 1 ? s.block_q : bt, ls = sh[3] == 1 ? s.block_kv : bs;
  acc = over(sh[0] == 1 && p.B > 1, p.B, 1, b0, acc, [&](Value b, Value a0) {
    return over(sh[1] == 1 && p.N > 1, p.N, 1, n0, a0, [&](Value n, Value a1) {
      return over(sh[2] == 1, p.T, lt, t0, a1, [&](Value t, Value a2) {
        return over(sh[3] == 1, p.S, ls, j0, a2, [&](Value j, Value a3) {
          Value block = ds.load({b, n, t, j}, {1, 1, lt, ls}).reshape({lt, ls});
          if (sh[2] == 1)
            block = block.sum(0).expand(0);
          if (sh[3] == 1)
            block = block.sum(1).expand(1);
          return a3 + block;
        });
      });
    });
  });
  dbias.store({b0, n0, t0, j0}, acc.to(p.bias->dtype).reshape({1, 1, bt, bs}));
  return k;
}

} // namespace tokamax::attention_detail
