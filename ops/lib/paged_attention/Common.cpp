//===- Common.cpp - What the paged attention kernels share -----------------===//
#include "ops/lib/paged_attention/Common.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tokamax::paged_attention_detail {

using dsl::cdiv;
using dsl::next_power_of_two;

RowPacking row_packing(const Problem &p, int64_t rows) {
  RowPacking rp;
  rp.rows = rows;
  const int64_t paddedGroup = next_power_of_two(p.group());
  rp.heads = std::min(paddedGroup, rows);
  rp.tokens = rows / rp.heads;
  rp.head_blocks = paddedGroup / rp.heads;
  rp.blocks = cdiv(p.Tq, rp.tokens) * rp.head_blocks;
  return rp;
}

DecodeOperands declare_decode_operands(Kernel &k, const Problem &p) {
  return {k.input("q", p.dtype, {p.B, p.Tq, p.K, p.group(), p.H}),
          k.input("k_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.H}),
          k.input("v_pages", p.dtype, {p.num_pages, p.page_size, p.K, p.Hv}),
          k.input("page_table", DType::I32, {p.B, p.max_pages}), k.input("seq_lengths", DType::I32, {p.B})};
}

DecodeOutputs declare_decode_outputs(Kernel &k, const Problem &p) {
  DecodeOutputs o{k.output("out", p.dtype, {p.B, p.Tq, p.K, p.group(), p.Hv}), {}};
  if (p.lse_out)
    o.lse = k.output("lse", p.compute, {p.B, p.K, p.group(), p.Tq});
  return o;
}

namespace {

int32_t hostInt(const TensorView &t, int64_t i) {
  int32_t v;
  std::memcpy(&v, reinterpret_cast<const char *>(t.data()) + i * sizeof(int32_t), sizeof v);
  return v;
}

} // namespace

void check_host_values(const Problem &p, std::span<const TensorView> in) {
  const char *op = p.append ? "paged_kv_append" : "paged_attention";
  const TensorView &table = in[p.append ? 2 : 3], &lengths = in[p.append ? 3 : 4];
  for (int64_t s = 0; s < p.B; ++s) {
    const int64_t length = hostInt(lengths, s);
    if (length < p.Tq || length > p.capacity())
      throw Error(fmt::format("{}: seq_lengths[{}] = {} must be in [Tq = {}, max_pages x page_size = {}]", op, s,
                              length, p.Tq, p.capacity()));
    for (int64_t page = 0; page < (length + p.page_size - 1) / p.page_size; ++page) {
      const int64_t entry = hostInt(table, s * p.max_pages + page);
      if (entry < 0 || entry >= p.num_pages)
        throw Error(fmt::format("{}: page_table[{}, {}] = {} must be a page of k_pages, in [0, {})", op, s, page,
                                entry, p.num_pages));
    }
  }
}

Value sequence_length(Kernel &k, const Problem &p, const TensorArg &seq_lengths, const Value &b) {
  Value length = seq_lengths.load({b}, {1}).max(0);
  return dsl::minimum(dsl::maximum(length, k.constant(0, DType::I32)),
                      k.constant(static_cast<double>(p.capacity()), DType::I32));
}

Value page_at(const TensorArg &page_table, const Value &b, const Value &page) {
  return page_table.load({b, page}, {1, 1}).max(1).max(0);
}

void store_rows(const RowPacking &rp, const DecodeOutputs &o, const Value &b, const Value &h, const Value &t0,
                const Value &g0, const Value &rows, const std::optional<Value> &lse,
                const std::optional<Value> &hv0) {
  const int64_t hv = rows.shape()[1];
  o.out.store({b, t0, h, g0, hv0 ? *hv0 : Value(0)}, rows.to(o.out.dtype()).reshape({1, rp.tokens, 1, rp.heads, hv}));
  if (o.lse && lse)
    o.lse->store({b, h, g0, t0},
                 lse->to(o.lse->dtype()).reshape({rp.tokens, rp.heads}).trans().reshape({1, 1, rp.heads, rp.tokens}));
}

} // namespace tokamax::paged_attention_detail
