//===- KernelParts.cpp - Operands, products, scores and ranges --------------===//
//
// (The walks over a range's blocks and their masking are in Walks.cpp.)
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cmath>

namespace tokamax::attention_detail {

using dsl::cdiv;

namespace {

/// Column chunk width of an operand of padded width `dim`.
int64_t chunkWidth(const KernelSpec &s, int64_t dim) {
  return s.product == Product::Mma ? dim : std::min<int64_t>(dim, 16);
}

Value zeroI32(Kernel &k) { return k.constant(0, DType::I32); }

/// The diagonal key of query row t (causal and windows count from it): t, or (packed) t +
/// kv_len - q_len. Only where a mask uses it, so that other kernels stay as they were.
bool diagonalShifted(const Program &pr) {
  const Problem &p = pr.p;
  return pr.shift.valid() && (p.causal || p.left >= 0 || p.right >= 0);
}
Value diagonalKey(const Program &pr, const Value &t) { return diagonalShifted(pr) ? t + pr.shift : t; }

/// The [rows, cols] block of a broadcast operand (bias or mask) at (b, n, t0, j0); unit
/// dims of the operand stay unit dims of the block.
Value broadcastBlock(Program &pr, const TensorArg &t, const Broadcast &bc, Value n, Value t0, Value j0, int64_t bq,
                     int64_t bkv, bool kvMajor, double padding) {
  const auto &sh = bc.shape;
  int64_t rows = sh[2] == 1 ? 1 : bq, cols = sh[3] == 1 ? 1 : bkv;
  Value block = t.load({sh[0] == 1 ? Value(0) : pr.b, sh[1] == 1 ? Value(0) : n, sh[2] == 1 ? Value(0) : t0,
                        sh[3] == 1 ? Value(0) : j0},
                       {1, 1, rows, cols}, padding)
                    .reshape({rows, cols});
  return kvMajor ? block.trans() : block;
}

} // namespace

dsl::KernelOptions kernel_options(const KernelSpec &s) {
  return {.num_warps = s.num_warps, .mma_rows_per_warp = s.product == Product::Mma, .wgmma_dots = s.wgmma};
}

TensorArg rows_operand(Kernel &k, const Problem &p, std::string name, RowSide side, int64_t heads, int64_t dim,
                       bool output) {
  const bool queries = side == RowSide::Queries;
  std::vector<int64_t> shape{p.B, queries ? p.T : p.S, heads, dim};
  if (p.varlen)
    shape = {1, queries ? p.total_q : p.total_kv, heads, dim};
  const int64_t rows = shape[1];
  if (!p.heads_major)
    return output ? k.output(std::move(name), p.out_dtype(), shape) : k.input(std::move(name), p.dtype, shape);
  std::vector<int64_t> strides = rows_operand_strides(p, rows, heads, dim);
  return output ? k.output(std::move(name), p.out_dtype(), shape, strides)
                : k.input(std::move(name), p.dtype, shape, strides);
}

Operands declare_operands(Kernel &k, const Problem &p, bool rows) {
  auto operand = [&](const char *name, RowSide side, int64_t heads, int64_t dim) {
    return rows ? k.input(name, p.dtype, tma_rows_shape(p, side, heads, dim))
                : rows_operand(k, p, name, side, heads, dim);
  };
  TensorArg q = operand("q", RowSide::Queries, p.N, p.H), kt = operand("k", RowSide::Keys, p.K, p.H);
  // The fp8 hopper forward reads V transposed (Problem::vt_shape).
  TensorArg v = rows && p.fp8 ? k.input("v", p.dtype, p.vt_shape()) : operand("v", RowSide::Keys, p.K, p.Hv);
  Operands in{q, kt, v};
  auto shape4 = [](const Broadcast &bc) { return std::vector<int64_t>(bc.shape.begin(), bc.shape.end()); };
  if (p.bias)
    in.bias = k.input("bias", p.bias->dtype, shape4(*p.bias));
  if (p.mask)
    in.mask = k.input("mask", DType::Bool, shape4(*p.mask));
  if (p.varlen) {
    in.q_lengths = k.input("cu_seqlens_q", DType::I32, {p.B + 1});
    in.kv_lengths = k.input("cu_seqlens_kv", DType::I32, {p.B + 1});
    return in;
  }
  if (p.q_lengths)
    in.q_lengths = k.input("q_seq_lengths", DType::I32, {p.B});
  if (p.kv_lengths)
    in.kv_lengths = k.input("kv_seq_lengths", DType::I32, {p.B});
  for (auto [present, name, into] : {std::tuple{p.q_descale, "q_descale", &in.q_descale},
                                     std::tuple{p.k_descale, "k_descale", &in.k_descale},
                                     std::tuple{p.v_descale, "v_descale", &in.v_descale}})
    if (present)
      *into = k.input(name, DType::F32, {p.B, p.K});
  return in;
}

Value load_descale(const TensorArg &descale, const Value &b, const Value &kvh) {
  return descale.load({b, kvh}, {1, 1}).reshape({1}).max(0);
}

void load_descales(Program &pr, const Value &kvh) {
  const Operands &in = pr.in;
  for (const std::optional<TensorArg> *d : {&in.q_descale, &in.k_descale})
    if (*d) {
      Value x = load_descale(**d, pr.b, kvh);
      pr.logit_descale = pr.logit_descale.valid() ? pr.logit_descale * x : x;
    }
  if (in.v_descale)
    pr.out_descale = load_descale(*in.v_descale, pr.b, kvh);
}

PackedRows packed_rows(Kernel &k, const TensorArg &cu_seqlens, const Value &b, int64_t max) {
  Value first = cu_seqlens.load({b}, {1}).max(0), end = cu_seqlens.load({b + 1}, {1}).max(0);
  return {first, minimum(maximum(end - first, zeroI32(k)), k.constant(static_cast<double>(max), DType::I32))};
}

Program program(Kernel &k, const KernelSpec &s, Operands in, Value b) {
  const Problem &p = s.p;
  if (p.varlen) {
    PackedRows q = packed_rows(k, *in.q_lengths, b, p.T), kv = packed_rows(k, *in.kv_lengths, b, p.S);
    return Program{k, s, p, std::move(in), b, q.valid, kv.valid, q.first, kv.first, kv.valid - q.valid};
  }
  auto valid = [&](const std::optional<TensorArg> &lengths, int64_t full) {
    Value limit = k.constant(static_cast<double>(full), DType::I32);
    if (!lengths)
      return limit;
    Value len = lengths->load({b}, {1}).max(0);
    return minimum(maximum(len, zeroI32(k)), limit);
  };
  Value qv = valid(in.q_lengths, p.T), kv = valid(in.kv_lengths, p.S);
  return Program{k, s, p, std::move(in), b, qv, kv};
}

namespace {

/// Rows from r0 of batch row b, or (packed) of the sequence from `first` with `valid` rows.
RowBlock rowsAt(const Problem &p, const Value &b, const Value &r0, const Value &first, const Value &valid) {
  if (!p.varlen)
    return {b, r0, {}};
  return {Value(0), first + r0, first + valid};
}

} // namespace

RowBlock query_rows(const Program &pr, const Value &t0) { return rowsAt(pr.p, pr.b, t0, pr.q_first, pr.q_valid); }

RowBlock key_rows(const Program &pr, const Value &j0) { return rowsAt(pr.p, pr.b, j0, pr.kv_first, pr.kv_valid); }

RowBlock query_rows(const Problem &p, const Value &b, const Value &t0, const std::optional<PackedRows> &packed) {
  return packed ? rowsAt(p, b, t0, packed->first, packed->valid) : rowsAt(p, b, t0, Value(), Value());
}

namespace {

/// Rows [r0, r0 + rows) of a packed RowBlock that lie in the sequence (and in the
/// tensor's `total` rows, whatever the cu_seqlens arrays say): [rows] bool.
Value rowsInSequence(Kernel &k, const RowBlock &at, int64_t rows, int64_t total) {
  Value r = at.r0 + k.arange(0, rows);
  return (r >= 0) & (r < minimum(at.end, k.constant(static_cast<double>(total), DType::I32)));
}

} // namespace

Chunks load_rows(const KernelSpec &s, const TensorArg &t, const RowBlock &at, Value head, int64_t dim, int64_t rows) {
  return load_rows(s, t, at.b, at.r0, head, dim, rows);
}

void store_rows(const KernelSpec &, const TensorArg &t, const RowBlock &at, Value head, const Chunks &c) {
  int64_t col = 0;
  for (const Value &chunk : c) {
    auto shape = chunk.shape();
    Value block = chunk.to(t.dtype()).reshape({1, shape[0], 1, shape[1]});
    if (at.end.valid())  // packed [1, total, heads, dim]: rows from the sequence's end on are dropped
      t.store_below({at.b, at.r0, head, col}, block, 1, at.end);
    else
      t.store({at.b, at.r0, head, col}, block);
    col += shape[1];
  }
}

Chunks load_rows(const KernelSpec &s, const TensorArg &t, Value b, Value r0, Value head, int64_t dim, int64_t rows) {
  int64_t padded = padded_head_dim(dim), width = chunkWidth(s, padded);
  Chunks chunks;
  for (int64_t c = 0; c < padded; c += width) {
    Value tile = t.load({b, r0, head, c}, {1, rows, 1, width}).reshape({rows, width});
    chunks.push_back(s.product == Product::Fma ? tile.to(s.p.compute) : tile);
  }
  return chunks;
}

void store_rows(const KernelSpec &s, const TensorArg &t, Value b, Value r0, Value head, const Chunks &c) {
  store_rows(s, t, RowBlock{b, r0, {}}, head, c);
}

Chunks zero_rows(const KernelSpec &s, Kernel &k, int64_t rows, int64_t dim) {
  int64_t padded = padded_head_dim(dim), width = chunkWidth(s, padded);
  Chunks chunks;
  for (int64_t c = 0; c < padded; c += width)
    chunks.push_back(k.full({rows, width}, 0.0, s.p.compute));
  return chunks;
}

Chunks scale_rows(const Chunks &c, const Value &factor) {
  Chunks out;
  for (const Value &chunk : c)
    out.push_back(chunk * factor.expand(1));
  return out;
}

Chunks scale_all(const Chunks &c, const Value &factor) {
  Chunks out;
  for (const Value &chunk : c)
    out.push_back(chunk * factor);
  return out;
}

Value product_nt(const KernelSpec &s, Kernel &k, const Chunks &a, const Chunks &b, bool async) {
  int64_t m = a[0].shape()[0], n = b[0].shape()[0];
  if (s.product == Product::Mma) {
    Value zeros = k.full({m, n}, 0.0, DType::F32);
    return async ? dsl::dot_async(a[0], b[0].trans(), zeros) : dsl::dot(a[0], b[0].trans(), zeros);
  }
  Value sum;
  for (size_t c = 0; c < a.size(); ++c) {
    Value part = (a[c].expand(1) * b[c].expand(0)).sum(2);
    sum = sum.valid() ? sum + part : part;
  }
  return sum;
}

Value pv_product(const KernelSpec &s, const Value &prob, const Value &v, const Value &acc, bool async) {
  if (!s.p.fp8)
    return dsl::dot(prob, v, acc, {.async = async});
  return dsl::dot(prob, v.trans(), acc, {.async = async, .a_k_interleaved = s.interleave_v});
}

Chunks product_nn(const KernelSpec &s, const Value &p, const Chunks &b, const Chunks &acc) {
  if (s.product == Product::Mma)
    return {pv_product(s, p.to(s.p.dtype), b[0], acc[0])};
  Chunks out;
  Value pe = p.expand(2);
  for (size_t c = 0; c < b.size(); ++c)
    out.push_back(acc[c] + (pe * b[c].expand(0)).sum(1));
  return out;
}

Value load_row_vector(const TensorArg &t, Value b, Value n, Value t0, int64_t rows, double padding) {
  return t.load({b, n, t0}, {1, 1, rows}, padding).reshape({rows});
}

void store_row_vector(const TensorArg &t, Value b, Value n, Value t0, const Value &v) {
  t.store({b, n, t0}, v.to(t.dtype()).reshape({1, 1, v.shape()[0]}));
}

namespace {

/// The pointers of a packed row vector's rows: [1, N, total], row-major.
Value rowVectorPointers(Kernel &k, const TensorArg &t, const RowBlock &at, const Value &n, int64_t rows) {
  const int64_t total = t.shape()[2];
  return t.ptr() + (n.to(DType::I64) * Value(total) + at.r0.to(DType::I64)) + k.arange(0, rows);
}

} // namespace

Value load_row_vector(Kernel &k, const TensorArg &t, const RowBlock &at, Value n, int64_t rows, double padding) {
  if (!at.end.valid())
    return load_row_vector(t, at.b, n, at.r0, rows, padding);
  return dsl::load(rowVectorPointers(k, t, at, n, rows), rowsInSequence(k, at, rows, t.shape()[2]),
                   k.full({rows}, padding, t.dtype()));
}

void store_row_vector(Kernel &k, const TensorArg &t, const RowBlock &at, Value n, const Value &v) {
  if (!at.end.valid())
    return store_row_vector(t, at.b, n, at.r0, v);
  const int64_t rows = v.shape()[0];
  dsl::store(rowVectorPointers(k, t, at, n, rows), v.to(t.dtype()), rowsInSequence(k, at, rows, t.shape()[2]));
}

Scores scores(Program &pr, const Value &product, Value n, Value t0, Value j0, int64_t bq, int64_t bkv,
              const Masking &masking, bool kvMajor, bool natural) {
  const Problem &p = pr.p;
  const Value &descale = pr.logit_descale;  // (fp8 calls': folded into the factor where there is one)
  Scores r;
  r.fma_eighths = pr.s.exp2_fma;
  if (!p.bias && p.softcap == 0 && !natural) {
    // The scale folded into exp2's argument.
    r.log2 = descale.valid() ? product * (descale * (p.scale * kLog2e)) : product * (p.scale * kLog2e);
    if (p.scale > 0) {
      r.raw = product;
      r.factor = p.scale * kLog2e;
      if (descale.valid())
        r.factor_value = descale * r.factor;
    }
  } else {
    Value x = (descale.valid() ? product * descale : product) * p.scale;
    if (p.bias)
      x = x + broadcastBlock(pr, *pr.in.bias, *p.bias, n, t0, j0, bq, bkv, kvMajor, 0.0).to(p.compute);
    if (p.softcap != 0)
      x = tanh(x * (1.0 / p.softcap)) * p.softcap;
    r.natural = x;
    r.log2 = x * kLog2e;
  }
  if (!masking.masked)
    return r;
  Kernel &k = pr.k;
  const bool keyBound = masking.bound_keys || p.kv_lengths || p.S % bkv != 0;
  auto visible = [&] {
    // Packed, each query row counts from its diagonal key (i + kv_len - q_len), below
    // kv_len exactly where i is below q_len. Along keys (dk/dv, kv_major) one index tile
    // then serves both checks (ptxas: the hopper dk/dv at head dim 128 has no register
    // to spare); the other kernels keep i and shift their diagonal.
    const bool shifted = diagonalShifted(pr), fromDiagonal = shifted && kvMajor;
    Value qi = (fromDiagonal ? diagonalKey(pr, t0) : t0) + k.arange(0, bq), kj = j0 + k.arange(0, bkv);
    Value i = kvMajor ? qi.expand(0) : qi.expand(1), j = kvMajor ? kj.expand(1) : kj.expand(0);
    Value valid;
    auto require = [&](const Value &c) { valid = valid.valid() ? valid & c : c; };
    if (keyBound)
      require(j < pr.kv_valid);
    if (p.q_lengths)
      require(i < (fromDiagonal ? pr.kv_valid : pr.q_valid));
    if (!fromDiagonal)
      i = diagonalKey(pr, i);
    if (p.causal)
      require(j <= i);
    if (p.left >= 0)
      require(i - j <= p.left);
    if (p.right >= 0)
      require(j - i <= p.right);
    if (p.mask)
      require(broadcastBlock(pr, *pr.in.mask, *p.mask, n, t0, j0, bq, bkv, kvMajor, 0.0));
    if (!valid.valid())
      valid = j < pr.kv_valid;
    if (valid.shape() != product.shape())
      valid = valid.broadcast_to(product.shape());
    return valid;
  };
  // The values the softmax reads: raw when the factor is folded, else log2.
  Value &read = r.factor > 0 ? r.raw : r.log2;
  if (masking.edge.valid()) {
    const Value plain = read;
    read = k.if_else(
        masking.edge, [&] { return std::vector<Value>{where(visible(), plain, -INFINITY)}; },
        [&] { return std::vector<Value>{plain}; })[0];
    return r;
  }
  r.valid = visible();
  r.log2 = where(r.valid, r.log2, -INFINITY);
  if (r.factor > 0)
    r.raw = where(r.valid, r.raw, -INFINITY);
  return r;
}

Range key_range(Program &pr, Value t0, int64_t bq, int64_t bkv) {
  const Problem &p = pr.p;
  Kernel &k = pr.k;
  Value zero = zeroI32(k);
  Value td = diagonalKey(pr, t0);
  Value hi = pr.kv_valid;
  if (p.causal)
    hi = minimum(hi, td + bq);
  if (p.right >= 0)
    hi = minimum(hi, td + (bq + p.right));
  if (p.q_lengths)
    hi = where(t0 < pr.q_valid, hi, zero);
  Value lo = first_key(pr, t0, bkv, zero);
  // Blocks every pair of which is visible: keys below every query's causal / right
  // limit and the valid length, at or above every query's left limit. (Packed, the
  // diagonal may start below key 0: the bounds clamp at lo >= 0.)
  Value bound = pr.kv_valid;
  if (p.causal)
    bound = minimum(bound, td + 1);
  if (p.right >= 0)
    bound = minimum(bound, td + (p.right + 1));
  if (pr.shift.valid())
    bound = maximum(bound, zero), hi = maximum(hi, zero);
  Value innerHi = minimum(bound / bkv * bkv, hi / bkv * bkv);
  Value innerLo = lo;
  if (p.left >= 0)
    innerLo = (maximum(td + (bq - 1 - p.left), zero) + (bkv - 1)) / bkv * bkv;
  Value hiCeil = maximum((hi + (bkv - 1)) / bkv * bkv, lo);
  Value e = minimum(maximum(innerLo, lo), hiCeil);
  Value f = minimum(maximum(innerHi, e), hiCeil);
  return {lo, hi, e, f};
}

Value first_key(Program &pr, Value t0, int64_t bkv, Value zero) {
  if (pr.p.left < 0)
    return zero;
  return maximum(diagonalKey(pr, t0) - pr.p.left, zero) / bkv * bkv;
}

Range query_range(Program &pr, Value j0, int64_t bq, int64_t bkv) {
  const Problem &p = pr.p;
  Kernel &k = pr.k;
  Value zero = zeroI32(k);
  // The query whose diagonal key is j0: j0, or (packed) j0 - (kv_len - q_len).
  Value jd = diagonalShifted(pr) ? j0 - pr.shift : j0;
  Value lo = zero;
  if (p.causal)
    lo = jd;
  if (p.right >= 0)
    lo = maximum(lo, jd - p.right);
  lo = maximum(lo, zero) / bq * bq;
  Value hi = pr.q_valid;
  if (p.left >= 0)
    hi = minimum(hi, jd + (bkv + p.left));
  if (p.kv_lengths)
    hi = where(j0 < pr.kv_valid, hi, zero);
  Value hiCeil = maximum((hi + (bq - 1)) / bq * bq, lo);
  // Query blocks every pair of which is visible: at or past the block's last key (causal,
  // right side), not past its first key's left limit; keys past a kv length are masked.
  Value innerLo = lo;
  if (p.causal)
    innerLo = maximum(innerLo, jd + (bkv - 1));
  if (p.right >= 0)
    innerLo = maximum(innerLo, jd + (bkv - 1 - p.right));
  innerLo = (maximum(innerLo, zero) + (bq - 1)) / bq * bq;
  Value innerHi = hiCeil;
  if (p.left >= 0)
    innerHi = minimum(innerHi, (pr.shift.valid() ? maximum(jd + (p.left + 1), zero) : jd + (p.left + 1)) / bq * bq);
  if (p.kv_lengths)
    innerHi = where(j0 + bkv <= pr.kv_valid, innerHi, lo);
  Value e = minimum(maximum(innerLo, lo), hiCeil);
  Value f = minimum(maximum(innerHi, e), hiCeil);
  return {lo, hi, e, f};
}

GridIds row_block_grid(Kernel &k, int64_t blocks, int64_t heads, int64_t batch, bool last_first) {
  k.grid(blocks, heads, batch);
  Value block = last_first ? Value(blocks - 1) - k.program_id(0) : k.program_id(0);
  return {block, k.program_id(1), k.program_id(2)};
}

bool last_block_first(const KernelSpec &s) { return s.tma && s.p.causal; }

Carried pack(std::initializer_list<const Chunks *> parts) {
  Carried c;
  for (const Chunks *part : parts)
    c.insert(c.end(), part->begin(), part->end());
  return c;
}

std::vector<Chunks> unpack(const Carried &c, std::initializer_list<size_t> sizes) {
  std::vector<Chunks> out;
  size_t at = 0;
  for (size_t n : sizes) {
    out.emplace_back(c.begin() + at, c.begin() + at + n);
    at += n;
  }
  return out;
}

} // namespace tokamax::attention_detail
