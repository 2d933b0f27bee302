//===- Plans.cpp - From an attention call to kernel launches ----------------===//
//
//   forward, chunked / tile: one flash kernel (out, lse);
//   forward, reference:      logits -> row stats (lse) -> output;
//   VJP, chunked / tile / hopper: delta -> dk/dv (+ dS for dbias) -> dq (-> dbias reduce);
//   VJP, reference:          logits, delta -> dS -> dq, dk/dv (-> dbias reduce).
// Workspaces (lse when the caller wants none, delta, logits, dS) are carved out of the
// call's one scratch buffer.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/Common.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

namespace tokamax::attention_detail {

namespace {

using Arg = ops_detail::KernelExecutor::Arg;

/// Reshaped views of the call's tensors and workspaces on one device.
struct Views {
  const Problem &p;
  int device;

  TensorView as(const TensorView &t, std::vector<int64_t> shape) const {
    return TensorView(t.data(), t.dtype(), shape, device);
  }
  TensorView as(uint64_t data, DType dtype, std::vector<int64_t> shape) const {
    return TensorView(data, dtype, shape, device);
  }
  TensorView q(const TensorView &t) const { return as(t, {p.B, p.T, p.N, p.H}); }
  TensorView k(const TensorView &t) const { return as(t, {p.B, p.S, p.K, p.H}); }
  TensorView v(const TensorView &t) const { return as(t, {p.B, p.S, p.K, p.Hv}); }
  TensorView o(const TensorView &t) const { return as(t, {p.B, p.T, p.N, p.Hv}); }
  TensorView rows(const TensorView &t) const { return as(t, {p.B, p.N, p.T}); }
  TensorView rows(uint64_t data) const { return as(data, p.compute, {p.B, p.N, p.T}); }
  TensorView square(uint64_t data) const { return as(data, p.compute, {p.B, p.N, p.T, p.S}); }
  TensorView broadcast(const TensorView &t, const Broadcast &bc) const {
    return as(t, std::vector<int64_t>(bc.shape.begin(), bc.shape.end()));
  }
  TensorView lengths(const TensorView &t) const { return as(t, {p.B}); }
};

using ops_detail::Workspace;

class Launcher {
public:
  Launcher(const Problem &p, Impl impl, const Config &c, ops_detail::KernelExecutor &ex)
      : ex_(ex) {
    base_.p = p;
    base_.product = impl != Impl::Reference && (p.dtype == DType::BF16 || p.dtype == DType::F16) ? Product::Mma
                                                                                               : Product::Fma;
    base_.block_q = c.get("block_q");
    base_.block_kv = c.get("block_kv");
    base_.num_warps = static_cast<int>(c.get("num_warps"));
    base_.split_edges = impl == Impl::Tile || impl == Impl::Hopper;
    base_.prefetch = c.get_or("prefetch", 0) != 0;
    base_.async_copy = c.get_or("async_copy", 0) != 0 && async_copy_serves(p, impl);
    base_.stages = static_cast<int>(c.get_or("stages", 2));
    base_.wgmma = base_.async_copy && c.get_or("wgmma", 0) != 0;
    base_.overlap = base_.wgmma && c.get_or("wgmma", 0) == 2;
    base_.tma = impl == Impl::Hopper;
    if (base_.tma) {
      base_.overlap = c.get_or("overlap", 0) != 0;
      base_.ping_pong = c.get_or("pingpong", 0) != 0;
    }
  }

  void launch(KernelKind kind, const std::vector<Arg> &args, int64_t block_q = 0, int64_t block_kv = 0) {
    KernelSpec s = base_;
    s.kind = kind;
    if (block_q)
      s.block_q = block_q;
    if (block_kv)
      s.block_kv = block_kv;
    ex_.launch(s.key(), [s] { return build_kernel(s); }, args);
  }

private:
  ops_detail::KernelExecutor &ex_;
  KernelSpec base_;
};

/// q, k, v, bias?, mask?, q_seq_lengths?, kv_seq_lengths? as the kernels declare them
/// (with `rows`, q, k and v as [B, rows, heads x dim]: the hopper kernels' TMA views).
std::vector<Arg> operandArgs(const Problem &p, const Views &w, const TensorView &q, const TensorView &k,
                             const TensorView &v, std::span<const TensorView> optional, bool rows = false) {
  std::vector<Arg> args{w.q(q), w.k(k), w.v(v)};
  if (rows)
    args = {w.as(q, {p.B, p.T, p.N * p.H}), w.as(k, {p.B, p.S, p.K * p.H}), w.as(v, {p.B, p.S, p.K * p.Hv})};
  if (p.bias)
    args.push_back(w.broadcast(optional[0], *p.bias));
  if (p.mask)
    args.push_back(w.broadcast(optional[1], *p.mask));
  if (p.q_lengths)
    args.push_back(w.lengths(optional[2]));
  if (p.kv_lengths)
    args.push_back(w.lengths(optional[3]));
  return args;
}

void forward(const Problem &p, Impl impl, const Config &c, std::span<const TensorView> in,
             std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  Views w{p, ex.device()};
  Launcher launcher(p, impl, c, ex);
  std::vector<Arg> operands = operandArgs(p, w, in[0], in[1], in[2], in.subspan(3, 4), impl == Impl::Hopper);
  if (impl != Impl::Reference) {
    std::vector<Arg> args = operands;
    args.push_back(w.o(out[0]));
    if (p.lse_out)
      args.push_back(w.rows(out[1]));
    launcher.launch(KernelKind::FlashForward, args);
    return;
  }
  Workspace ws;
  size_t logits = ws.add(p.logits_bytes());
  size_t lse = p.lse_out ? 0 : ws.add(double(p.B) * p.N * p.T * dtype_size(p.compute));
  ws.allocate(ex);
  TensorView logitsView = w.square(ws.at(logits));
  TensorView lseView = p.lse_out ? w.rows(out[1]) : w.rows(ws.at(lse));
  std::vector<Arg> args = operands;
  args.push_back(logitsView);
  launcher.launch(KernelKind::Logits, args);
  launcher.launch(KernelKind::RowStats, {logitsView, lseView});
  launcher.launch(KernelKind::Output, {logitsView, lseView, w.v(in[2]), w.o(out[0])});
}

void backward(const Problem &p, Impl impl, const Config &c, std::span<const TensorView> in,
              std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  Views w{p, ex.device()};
  Launcher launcher(p, impl, c, ex);
  const TensorView &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &o = in[4], &lse = in[5];
  const bool hopper = impl == Impl::Hopper, reference = impl == Impl::Reference;
  std::vector<Arg> operands = operandArgs(p, w, q, k, v, in.subspan(6, 4), hopper);
  Workspace ws;
  size_t delta = ws.add(double(p.B) * p.N * p.T * dtype_size(p.compute));
  size_t ds = p.dbias || reference ? ws.add(p.logits_bytes()) : 0;
  size_t logits = reference ? ws.add(p.logits_bytes()) : 0;
  ws.allocate(ex);
  TensorView deltaView = w.rows(ws.at(delta)), dsView = w.square(ws.at(ds));
  launcher.launch(KernelKind::Delta, {w.o(dout), w.o(o), deltaView}, 64);
  if (!reference) {
    if (p.dbias)
      ex.zero(dsView);  // blocks no query sees stay zero
    std::vector<Arg> args = operands;
    args.emplace_back(hopper ? w.as(dout, {p.B, p.T, p.N * p.Hv}) : w.o(dout));
    for (const TensorView &t : {w.rows(lse), deltaView})
      args.emplace_back(hopper ? w.as(t, {p.B * p.N * p.T}) : t);
    // A hopper dk/dv program holds 16 x num_warps keys and walks block_q queries; a dq
    // program holds 16 x num_warps queries and walks block_kv keys.
    const int64_t held = hopper ? 16 * c.get("num_warps") : 0;
    std::vector<Arg> dkdv = args, dq = args;
    dkdv.emplace_back(w.k(out[1]));
    dkdv.emplace_back(w.v(out[2]));
    if (p.dbias)
      dkdv.emplace_back(dsView);
    launcher.launch(KernelKind::FlashDkDv, dkdv, 0, held);
    dq.emplace_back(w.q(out[0]));
    launcher.launch(KernelKind::FlashDq, dq, held, 0);
  } else {
    TensorView logitsView = w.square(ws.at(logits));
    std::vector<Arg> args = operands;
    args.emplace_back(logitsView);
    launcher.launch(KernelKind::Logits, args);
    launcher.launch(KernelKind::RefDs, {logitsView, w.rows(lse), deltaView, w.o(dout), w.v(v), dsView});
    launcher.launch(KernelKind::RefDq, {dsView, w.k(k), w.q(out[0])});
    launcher.launch(KernelKind::RefDkDv, {logitsView, w.rows(lse), dsView, w.q(q), w.o(dout), w.k(out[1]), w.v(out[2])});
  }
  if (p.dbias)
    launcher.launch(KernelKind::DbiasReduce, {dsView, w.broadcast(out[3], *p.bias)}, 32, 64);
}

} // namespace

void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) {
  if (p.B == 0 || p.T == 0) {  // no queries: empty results, and no key gets a gradient
    for (const TensorView &t : outputs)
      if (t.data())
        executor.zero(t);
    return;
  }
  if (p.vjp)
    backward(p, impl, config, inputs, outputs, executor);
  else
    forward(p, impl, config, inputs, outputs, executor);
}

} // namespace tokamax::attention_detail
