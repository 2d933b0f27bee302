//===- Reference.cpp - Attention through materialised logits ----------------===//
//
// The correctness oracle among the implementations: the masked, capped logits of every
// (batch row, head) go to a [B, N, T, S] buffer in the compute dtype (-inf where masked);
// each row's lse comes from its exact max and then its sum; out = exp(logits - lse) @ v.
// The VJP materialises dS = P * (dP - delta) the same way. Products are exact
// multiply-adds in the compute dtype (spec.product is Fma), on [block_q, block_kv] tiles
// of the logits.
//
//   forward: logits -> row stats (lse) -> output;
//   VJP:     logits, delta -> dS -> dq, dk/dv (-> dbias reduce).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tokamax::attention_detail {

/// The reference's keys: its blocks only. The flash kernels' keys (a tile or chunked
/// config handed to it) are refused by name.
struct ReferenceConfig : BlockConfig {
  static constexpr auto keys = std::tuple{ConfigKey{"block_q", &ReferenceConfig::block_q},
                                          ConfigKey{"block_kv", &ReferenceConfig::block_kv},
                                          ConfigKey{"num_warps", &ReferenceConfig::num_warps}};
  static std::optional<std::string> refused_key(const std::string &key) {
    const std::vector<std::string> flash = ops_detail::config_keys<FlashConfig>();
    if (std::find(flash.begin(), flash.end(), key) != flash.end())
      return fmt::format("reference takes no \"{}\"", key);
    return fmt::format("unknown key \"{}\"", key);
  }
};

std::optional<std::string> Reference::why_not(const Problem &p) {
  if (auto no = varlen_why_not(p))
    return no;
  if (auto no = grid_why_not(p))
    return no;
  // The logits (and, for the VJP, dS) buffers: refuse what no GPU could hold.
  const double bytes = p.logits_bytes() * (p.vjp ? 2 : 1);
  if (bytes > 256.0 * (1ull << 30))
    return fmt::format("reference materialises {:.1f} GiB of logits; use chunked or tile", bytes / (1ull << 30));
  return std::nullopt;
}

ReferenceConfig Reference::heuristic(const Problem &p) { return {exact_blocks(p)}; }

std::vector<ReferenceConfig> Reference::search_space(const Problem &p) {
  std::vector<ReferenceConfig> space;
  for (const BlockConfig &b : exact_block_space(p, exact_blocks(p)))
    space.push_back({b});
  return space;
}

std::optional<std::string> Reference::check(const Problem &p, const ReferenceConfig &c) {
  if (auto bad = check_block_shape(c))
    return bad;
  return check_registers(p, c, /*prefetched=*/false);
}

void Reference::check_device(const Problem &p, const BoundArgs &args, Device &device) {
  if (p.fp8 && device.cc_major() * 10 + device.cc_minor() < 89)
    throw NotSupported(fmt::format("{}: reference reads fp8 through conversions of sm_89 and newer; the device is {}",
                                   args.op, device.arch()));
  const double bytes = p.logits_bytes() * (p.vjp ? 2 : 1);
  const size_t total = device.total_memory();
  if (bytes > 0.8 * static_cast<double>(total))
    throw NotSupported(fmt::format("{}: reference needs {:.1f} GiB of logits workspace; the device has {:.1f} GiB",
                                   args.op, bytes / (1ull << 30), double(total) / (1ull << 30)));
}

namespace {

void forward(const KernelSpec &base, std::span<const TensorView> in, std::span<const TensorView> out,
             ops_detail::KernelExecutor &ex) {
  const Problem &p = base.p;
  Views w{p, ex.device()};
  Launcher launcher(base, ex);
  ops_detail::Workspace ws;
  size_t logits = ws.add(p.logits_bytes());
  size_t lse = p.lse_out ? 0 : ws.add(double(p.B) * p.N * p.T * dtype_size(p.compute));
  ws.allocate(ex);
  TensorView logitsView = w.square(ws.at(logits));
  TensorView lseView = p.lse_out ? w.rows(out[1]) : w.rows(ws.at(lse));
  std::vector<Arg> args = operand_args(w, in[0], in[1], in[2], in.subspan(3));
  args.push_back(logitsView);
  launcher.launch(KernelKind::Logits, args);
  std::vector<Arg> stats{logitsView};
  if (p.sinks) {
    stats.push_back(w.as(in[7], {p.N}));
    if (p.q_lengths)  // padding rows keep lse +inf
      stats.push_back(w.lengths(in[5]));
  }
  stats.push_back(lseView);
  launcher.launch(KernelKind::RowStats, stats);
  std::vector<Arg> output{logitsView, lseView, w.v(in[2])};
  if (p.v_descale)
    output.push_back(w.as(in[10], {p.B, p.K}));
  output.push_back(w.o(out[0]));
  launcher.launch(KernelKind::Output, output);
}

void backward(const KernelSpec &base, std::span<const TensorView> in, std::span<const TensorView> out,
              ops_detail::KernelExecutor &ex) {
  const Problem &p = base.p;
  Views w{p, ex.device()};
  Launcher launcher(base, ex);
  const TensorView &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &o = in[4], &lse = in[5];
  ops_detail::Workspace ws;
  const DeltaWorkspace delta(p, ws);
  size_t ds = ws.add(p.logits_bytes());
  size_t logits = ws.add(p.logits_bytes());
  ws.allocate(ex);
  TensorView dsView = w.square(ws.at(ds)), logitsView = w.square(ws.at(logits));
  TensorView deltaView = launch_delta(w, launcher, ws, delta, dout, o, lse, in[10], out[4]).delta;
  std::vector<Arg> args = operand_args(w, q, k, v, in.subspan(6, 4));
  args.emplace_back(logitsView);
  launcher.launch(KernelKind::Logits, args);
  launcher.launch(KernelKind::RefDs, {logitsView, w.rows(lse), deltaView, w.o(dout), w.v(v), dsView});
  launcher.launch(KernelKind::RefDq, {dsView, w.k(k), w.q(out[0])});
  launcher.launch(KernelKind::RefDkDv, {logitsView, w.rows(lse), dsView, w.q(q), w.o(dout), w.k(out[1]), w.v(out[2])});
  if (p.dbias)
    launcher.launch(KernelKind::DbiasReduce, {dsView, w.broadcast(out[3], *p.bias)}, 32, 64);
}

} // namespace

void Reference::execute(const Problem &p, const ReferenceConfig &c, std::span<const TensorView> inputs,
                        std::span<const TensorView> outputs, ops_detail::KernelExecutor &ex) {
  if (zero_without_queries(p, outputs, ex))
    return;
  const KernelSpec base = block_spec(p, Product::Fma, c);
  if (p.fp8) {  // the descales after attention's inputs (fp8_attention_order)
    const AttentionOrder order = fp8_attention_order(inputs, outputs);
    forward(base, order.in, order.out, ex);
    return;
  }
  if (p.vjp)
    backward(base, inputs, outputs, ex);
  else
    forward(base, inputs, outputs, ex);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

using dsl::cdiv;

namespace {

/// A [B, N, T, S] buffer in the compute dtype.
std::vector<int64_t> squareShape(const Problem &p) { return {p.B, p.N, p.T, p.S}; }

Value loadSquare(const TensorArg &t, Value b, Value n, Value t0, Value j0, int64_t bt, int64_t bs, double padding) {
  return t.load({b, n, t0, j0}, {1, 1, bt, bs}, padding).reshape({bt, bs});
}

/// Programs over (query block, key block) pairs: (t0, j0) of program_id(0).
std::pair<Value, Value> blockPair(Kernel &k, const Problem &p, int64_t bt, int64_t bs) {
  const int64_t sBlocks = cdiv(p.S, bs);
  return {k.program_id(0) / sBlocks * bt, k.program_id(0) % sBlocks * bs};
}

} // namespace

Kernel logits_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  Operands in = declare_operands(k, p);
  TensorArg logits = k.output("logits", p.compute, squareShape(p));
  k.grid(cdiv(p.T, bt) * cdiv(p.S, bs), p.N, p.B);
  Program pr = program(k, s, in, k.program_id(2));
  auto [t0, j0] = blockPair(k, p, bt, bs);
  Value n = k.program_id(1), kvh = n / p.group();
  load_descales(pr, kvh);
  Chunks q = load_rows(s, in.q, pr.b, t0, n, p.H, bt), kb = load_rows(s, in.k, pr.b, j0, kvh, p.H, bs);
  Scores sc = scores(pr, product_nt(s, k, q, kb), n, t0, j0, bt, bs, true, false, true);
  logits.store({pr.b, n, t0, j0}, where(sc.valid, sc.natural, -INFINITY).reshape({1, 1, bt, bs}));
  return k;
}

Kernel row_stats_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  const bool sinks = s.usesSinks();
  Kernel k(s.name(), kernel_options(s));
  TensorArg logits = k.input("logits", p.compute, squareShape(p));
  std::optional<TensorArg> sinkLogits, qLengths;
  if (sinks)
    sinkLogits = k.input("sinks", DType::F32, {p.N});
  if (sinks && p.q_lengths)
    qLengths = k.input("q_seq_lengths", DType::I32, {p.B});
  TensorArg lse = k.output("lse", p.compute, {p.B, p.N, p.T});
  k.grid(cdiv(p.T, bt), p.N, p.B);
  Value t0 = k.program_id(0) * bt, n = k.program_id(1), b = k.program_id(2);
  Value m = k.loop(0, p.S, bs, {k.full({bt}, -INFINITY, p.compute)}, [&](Value j0, Carried c) {
    return Carried{maximum(c[0], loadSquare(logits, b, n, t0, j0, bt, bs, -INFINITY).max(1))};
  })[0];
  // The sink (natural units) is one more logit of the row: in its max and its sum.
  Value sink = sinks ? sinkLogits->load({n}, {1}).to(p.compute) : Value();
  Value mAll = sinks ? maximum(m, sink) : m;
  Value mUse = where(mAll == -INFINITY, 0.0, mAll);
  Value l = k.loop(0, p.S, bs, {k.full({bt}, 0.0, p.compute)}, [&](Value j0, Carried c) {
    return Carried{c[0] + exp(loadSquare(logits, b, n, t0, j0, bt, bs, -INFINITY) - mUse.expand(1)).sum(1)};
  })[0];
  if (!sinks) {
    store_row_vector(lse, b, n, t0, where(l > 0.0, mUse + log(l), INFINITY));
    return k;
  }
  l = l + exp(sink - mUse);
  Value seen = l > 0.0;
  if (qLengths)
    seen = seen & (t0 + k.arange(0, bt) < qLengths->load({b}, {1}));
  Value rowLse = where(m == -INFINITY, sink.broadcast_to({bt}), mUse + log(l));
  store_row_vector(lse, b, n, t0, where(seen, rowLse, INFINITY));
  return k;
}

Kernel output_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  TensorArg logits = k.input("logits", p.compute, squareShape(p));
  TensorArg lse = k.input("lse", p.compute, {p.B, p.N, p.T});
  TensorArg v = rows_operand(k, p, "v", RowSide::Keys, p.K, p.Hv);
  std::optional<TensorArg> vDescale;
  if (p.v_descale)
    vDescale = k.input("v_descale", DType::F32, {p.B, p.K});
  TensorArg out = rows_operand(k, p, "out", RowSide::Queries, p.N, p.Hv, /*output=*/true);
  k.grid(cdiv(p.T, bt), p.N, p.B);
  Value t0 = k.program_id(0) * bt, n = k.program_id(1), b = k.program_id(2), kvh = n / p.group();
  Value rowLse = load_row_vector(lse, b, n, t0, bt, INFINITY).expand(1);
  Chunks acc = k.loop(0, p.S, bs, zero_rows(s, k, bt, p.Hv), [&](Value j0, Carried c) {
    Value prob = exp(loadSquare(logits, b, n, t0, j0, bt, bs, -INFINITY) - rowLse);
    return product_nn(s, prob, load_rows(s, v, b, j0, kvh, p.Hv, bs), c);
  });
  if (vDescale)
    acc = scale_all(acc, load_descale(*vDescale, b, kvh));
  store_rows(s, out, b, t0, n, acc);
  return k;
}

Kernel ref_ds_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  TensorArg logits = k.input("logits", p.compute, squareShape(p));
  TensorArg lse = k.input("lse", p.compute, {p.B, p.N, p.T});
  TensorArg delta = k.input("delta", p.compute, {p.B, p.N, p.T});
  TensorArg dout = rows_operand(k, p, "dout", RowSide::Queries, p.N, p.Hv);
  TensorArg v = rows_operand(k, p, "v", RowSide::Keys, p.K, p.Hv);
  TensorArg ds = k.output("ds", p.compute, squareShape(p));
  k.grid(cdiv(p.T, bt) * cdiv(p.S, bs), p.N, p.B);
  auto [t0, j0] = blockPair(k, p, bt, bs);
  Value n = k.program_id(1), b = k.program_id(2), kvh = n / p.group();
  Value l = loadSquare(logits, b, n, t0, j0, bt, bs, -INFINITY);
  Value prob = exp(l - load_row_vector(lse, b, n, t0, bt, INFINITY).expand(1));
  Value dp = product_nt(s, k, load_rows(s, dout, b, t0, n, p.Hv, bt), load_rows(s, v, b, j0, kvh, p.Hv, bs));
  Value g = prob * (dp - load_row_vector(delta, b, n, t0, bt, 0.0).expand(1));
  if (p.softcap != 0) {
    Value t = l * (1.0 / p.softcap);
    g = g * where(l > -INFINITY, 1.0 - t * t, 0.0);
  }
  ds.store({b, n, t0, j0}, g.reshape({1, 1, bt, bs}));
  return k;
}

Kernel ref_dq_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  TensorArg ds = k.input("ds", p.compute, squareShape(p));
  TensorArg kt = rows_operand(k, p, "k", RowSide::Keys, p.K, p.H);
  TensorArg dq = rows_operand(k, p, "dq", RowSide::Queries, p.N, p.H, /*output=*/true);
  k.grid(cdiv(p.T, bt), p.N, p.B);
  Value t0 = k.program_id(0) * bt, n = k.program_id(1), b = k.program_id(2), kvh = n / p.group();
  Chunks acc = k.loop(0, p.S, bs, zero_rows(s, k, bt, p.H), [&](Value j0, Carried c) {
    return product_nn(s, loadSquare(ds, b, n, t0, j0, bt, bs, 0.0), load_rows(s, kt, b, j0, kvh, p.H, bs), c);
  });
  store_rows(s, dq, b, t0, n, scale_all(acc, p.scale));
  return k;
}

Kernel ref_dkdv_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bt = s.block_q, bs = s.block_kv;
  Kernel k(s.name(), kernel_options(s));
  TensorArg logits = k.input("logits", p.compute, squareShape(p));
  TensorArg lse = k.input("lse", p.compute, {p.B, p.N, p.T});
  TensorArg ds = k.input("ds", p.compute, squareShape(p));
  TensorArg qt = rows_operand(k, p, "q", RowSide::Queries, p.N, p.H);
  TensorArg dout = rows_operand(k, p, "dout", RowSide::Queries, p.N, p.Hv);
  TensorArg dk = rows_operand(k, p, "dk", RowSide::Keys, p.K, p.H, /*output=*/true);
  TensorArg dv = rows_operand(k, p, "dv", RowSide::Keys, p.K, p.Hv, /*output=*/true);
  k.grid(cdiv(p.S, bs), p.K, p.B);
  Value j0 = k.program_id(0) * bs, h = k.program_id(1), b = k.program_id(2);
  Chunks dk0 = zero_rows(s, k, bs, p.H), dv0 = zero_rows(s, k, bs, p.Hv);
  const size_t nk = dk0.size(), nv = dv0.size();
  Carried sums = k.loop(0, p.group(), 1, pack({&dk0, &dv0}), [&](Value g, Carried outer) {
    Value n = h * p.group() + g;
    return k.loop(0, p.T, bt, outer, [&](Value t0, Carried c) {
      auto parts = unpack(c, {nk, nv});
      Value probT =
          exp(loadSquare(logits, b, n, t0, j0, bt, bs, -INFINITY) - load_row_vector(lse, b, n, t0, bt, INFINITY).expand(1))
              .trans();
      Value dsT = loadSquare(ds, b, n, t0, j0, bt, bs, 0.0).trans();
      Chunks dkNew = product_nn(s, dsT, load_rows(s, qt, b, t0, n, p.H, bt), parts[0]);
      Chunks dvNew = product_nn(s, probT, load_rows(s, dout, b, t0, n, p.Hv, bt), parts[1]);
      return pack({&dkNew, &dvNew});
    });
  });
  auto parts = unpack(sums, {nk, nv});
  store_rows(s, dk, b, j0, h, scale_all(parts[0], p.scale));
  store_rows(s, dv, b, j0, h, parts[1]);
  return k;
}

} // namespace tokamax::attention_detail

template class tokamax::ops_detail::TypedImplementation<tokamax::attention_detail::Reference>;
