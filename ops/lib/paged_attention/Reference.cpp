//===- Reference.cpp - Paged attention as gather + dense exact attention ----===//
//
// paged_attention's reference: a gather kernel copies every sequence's pages into dense
// k / v [B, max_pages * page_size, K, H | Hv] (a workspace; rows past the sequence are
// zeros), then one program per (query row, query head, sequence) walks the dense keys in
// block_kv steps with an online softmax whose products are exact multiply-adds over
// 16-column chunks in f32 (f64 for f64): the numbers the tile kernels are checked
// against, on any GPU, for every dtype.
//
// The append's reference: one program per (new token, kv head) copies its row.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/paged_attention/Common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tokamax::paged_attention_detail {

using dsl::maximum;
using dsl::next_power_of_two;
using dsl::where;

namespace {

constexpr int64_t kChunk = 16;  ///< columns of one exact product step

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::vector<int64_t> denseShape(const Problem &p, int64_t dim) { return {p.B, p.capacity(), p.K, dim}; }

/// dense[b, page * page_size + r] = pages[page_table[b, page], r] for the sequence's
/// keys, zeros past them: one program per (page, sequence), kv heads in a loop.
Kernel gatherKernel(const Problem &p) {
  Kernel k(fmt::format("paged_attention_gather_{}_k{}_h{}x{}_p{}", dtype_name(p.dtype), p.K, p.H, p.Hv, p.page_size));
  TensorArg kPages = k.input("k_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.H});
  TensorArg vPages = k.input("v_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.Hv});
  TensorArg table = k.input("page_table", DType::I32, {p.B, p.max_pages});
  TensorArg lengths = k.input("seq_lengths", DType::I32, {p.B});
  TensorArg denseK = k.output("dense_k", p.dtype, denseShape(p, p.H));
  TensorArg denseV = k.output("dense_v", p.dtype, denseShape(p, p.Hv));
  k.grid(p.max_pages, p.B);
  Value page = k.program_id(0), b = k.program_id(1);
  Value seq = sequence_length(k, p, lengths, b);
  Value id = page_at(table, b, page), r0 = page * p.page_size;
  Value inSequence = ((r0 + k.arange(0, p.page_size)) < seq).expand(1);
  k.loop(0, p.K, 1, {}, [&](Value h, std::vector<Value>) {
    for (auto [from, to, dim] : {std::tuple{&kPages, &denseK, p.H}, std::tuple{&vPages, &denseV, p.Hv}}) {
      Value rows = from->load({id, 0, h, 0}, {1, p.page_size, 1, dim}).reshape({p.page_size, dim});
      to->store({b, r0, h, 0}, where(inSequence, rows, 0.0).reshape({1, p.page_size, 1, dim}));
    }
    return std::vector<Value>{};
  });
  return k;
}

/// One program per (query row t, query head n, sequence b): the row against the dense keys.
Kernel denseKernel(const Problem &p, const ReferenceConfig &c) {
  const int64_t bkv = c.block_kv;
  const DType f = p.compute;
  Kernel k(fmt::format("paged_attention_dense_{}_h{}x{}_kv{}", dtype_name(p.dtype), p.H, p.Hv, bkv));
  TensorArg q = k.input("q", p.dtype, {p.B, p.Tq, p.N, p.H});
  TensorArg denseK = k.input("dense_k", p.dtype, denseShape(p, p.H));
  TensorArg denseV = k.input("dense_v", p.dtype, denseShape(p, p.Hv));
  TensorArg lengths = k.input("seq_lengths", DType::I32, {p.B});
  TensorArg out = k.output("out", p.dtype, {p.B, p.Tq, p.N, p.Hv});
  std::optional<TensorArg> lse;
  if (p.lse_out)
    lse = k.output("lse", f, {p.B, p.N, p.Tq});
  k.grid(p.Tq * p.N, p.B);
  Value t = k.program_id(0) / p.N, n = k.program_id(0) % p.N, b = k.program_id(1), h = n / p.group();
  Value seq = sequence_length(k, p, lengths, b);
  Value position = seq - p.Tq + t;
  auto chunk = [&](const TensorArg &x, Value row0, int64_t rows, Value head, int64_t c) {
    return x.load({b, row0, head, c}, {1, rows, 1, kChunk}).reshape({rows, kChunk}).to(f);
  };
  std::vector<Value> qc;
  for (int64_t c = 0; c < p.H; c += kChunk)
    qc.push_back(chunk(q, t, 1, n, c));
  // Carried: the row's max and sum of exponentials ([1]), then out's chunks ([16] each).
  std::vector<Value> state{k.full({1}, -INFINITY, f), k.full({1}, 0.0, f)};
  for (int64_t c = 0; c < p.Hv; c += kChunk)
    state.push_back(k.full({kChunk}, 0.0, f));
  state = k.loop(0, seq, bkv, state, [&](Value j0, std::vector<Value> cur) {
    Value logits;
    for (size_t c = 0; c < qc.size(); ++c) {
      Value part = (chunk(denseK, j0, bkv, h, int64_t(c) * kChunk) * qc[c]).sum(1);
      logits = logits.valid() ? logits + part : part;
    }
    Value x = logits * p.scale;
    if (p.softcap > 0)
      x = dsl::tanh(x * (1.0 / p.softcap)) * p.softcap;
    Value key = j0 + k.arange(0, bkv);
    x = where((key <= position) & (key < seq), x, -INFINITY);
    Value m = maximum(cur[0], x.max(0));
    Value mUse = where(m == -INFINITY, 0.0, m);
    Value alpha = dsl::exp(cur[0] - mUse), prob = dsl::exp(x - mUse);
    std::vector<Value> next{m, cur[1] * alpha + prob.sum(0)};
    for (size_t c = 2; c < cur.size(); ++c) {
      Value v = chunk(denseV, j0, bkv, h, int64_t(c - 2) * kChunk);
      next.push_back(cur[c] * alpha + (prob.expand(1) * v).sum(0));
    }
    return next;
  });
  Value seen = state[1] > 0.0;
  Value inv = where(seen, 1.0 / state[1], 0.0);
  for (size_t c = 2; c < state.size(); ++c)
    out.store({b, t, n, int64_t(c - 2) * kChunk}, (state[c] * inv).to(p.dtype).reshape({1, 1, 1, kChunk}));
  if (lse) {
    Value mUse = where(state[0] == -INFINITY, 0.0, state[0]);
    lse->store({b, n, t}, where(seen, mUse + dsl::log(state[1]), INFINITY).reshape({1, 1, 1}));
  }
  return k;
}

} // namespace

std::optional<std::string> ReferenceDecode::why_not(const Problem &) { return std::nullopt; }

ReferenceConfig ReferenceDecode::heuristic(const Problem &) { return {}; }

std::vector<ReferenceConfig> ReferenceDecode::search_space(const Problem &p) {
  std::vector<ReferenceConfig> space{heuristic(p)};
  space.push_back({32});
  return space;
}

std::optional<std::string> ReferenceDecode::check(const Problem &, const ReferenceConfig &c) {
  if (!isPowerOfTwo(c.block_kv) || c.block_kv > 256)
    return fmt::format("block_kv must be a power of two in [1, 256], got {}", c.block_kv);
  return std::nullopt;
}

void ReferenceDecode::execute(const Problem &p, const ReferenceConfig &c, std::span<const TensorView> in,
                              std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)
    return;
  const double bytes = double(p.B * p.capacity() * p.K) * double(dtype_size(p.dtype));
  ops_detail::Workspace ws;
  const size_t kAt = ws.add(bytes * double(p.H)), vAt = ws.add(bytes * double(p.Hv));
  ws.allocate(ex);
  const TensorView denseK(ws.at(kAt), p.dtype, denseShape(p, p.H), ex.device());
  const TensorView denseV(ws.at(vAt), p.dtype, denseShape(p, p.Hv), ex.device());
  const std::initializer_list<int64_t> shape{p.B, p.Tq, p.N, p.K, p.H, p.Hv, p.num_pages, p.page_size, p.max_pages,
                                             int64_t(p.dtype)};
  // k_pages, v_pages, page_table, seq_lengths | dense k, dense v
  ex.launch(ops_detail::specializationKey("paged_attention_gather", shape), [p] { return gatherKernel(p); },
            {in[1], in[2], in[3], in[4], denseK, denseV});
  KernelKey key = ops_detail::specializationKey("paged_attention_dense", shape);
  key.add(p.scale).add(p.softcap).add(p.lse_out).add(c.block_kv);
  std::vector<KernelExecutor::Arg> args{in[0], denseK, denseV, in[4], out[0]};
  if (p.lse_out)
    args.push_back(out[1]);
  ex.launch(key, [p, c] { return denseKernel(p, c); }, args);
}

//===----------------------------------------------------------------------===//
// The append
//===----------------------------------------------------------------------===//

namespace {

Kernel appendRowsKernel(const Problem &p) {
  Kernel k(fmt::format("paged_kv_append_rows_{}_h{}x{}_p{}", dtype_name(p.dtype), p.H, p.Hv, p.page_size));
  TensorArg kNew = k.input("k", p.dtype, {p.B, p.Tq, p.K, p.H});
  TensorArg vNew = k.input("v", p.dtype, {p.B, p.Tq, p.K, p.Hv});
  TensorArg table = k.input("page_table", DType::I32, {p.B, p.max_pages});
  TensorArg lengths = k.input("seq_lengths", DType::I32, {p.B});
  TensorArg kPages = k.output("k_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.H});
  TensorArg vPages = k.output("v_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.Hv});
  k.grid(p.Tq * p.K, p.B);
  Value t = k.program_id(0) / p.K, h = k.program_id(0) % p.K, b = k.program_id(1);
  Value position = lengths.load({b}, {1}).max(0) - p.Tq + t;
  k.when((position >= 0) & (position < p.capacity()), [&] {
    Value page = page_at(table, b, position / p.page_size), slot = position % p.page_size;
    kPages.store({page, slot, h, 0}, kNew.load({b, t, h, 0}, {1, 1, 1, p.H}));
    vPages.store({page, slot, h, 0}, vNew.load({b, t, h, 0}, {1, 1, 1, p.Hv}));
  });
  return k;
}

} // namespace

std::optional<std::string> ReferenceAppend::why_not(const Problem &) { return std::nullopt; }
ReferenceAppendConfig ReferenceAppend::heuristic(const Problem &) { return {}; }
std::vector<ReferenceAppendConfig> ReferenceAppend::search_space(const Problem &p) { return {heuristic(p)}; }
std::optional<std::string> ReferenceAppend::check(const Problem &, const ReferenceAppendConfig &) {
  return std::nullopt;
}

void ReferenceAppend::execute(const Problem &p, const ReferenceAppendConfig &, std::span<const TensorView> in,
                              std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)
    return;
  const KernelKey key = ops_detail::specializationKey(
      "paged_kv_append_reference",
      {p.B, p.Tq, p.K, p.H, p.Hv, p.num_pages, p.page_size, p.max_pages, int64_t(p.dtype)});
  ex.launch(key, [p] { return appendRowsKernel(p); }, {in[0], in[1], in[2], in[3], out[0], out[1]});
}

} // namespace tokamax::paged_attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::paged_attention_detail::ReferenceDecode>;
template class tokamax::ops_detail::TypedImplementation<tokamax::paged_attention_detail::ReferenceAppend>;
