//===- Kernels.cpp - The gate kernel: both products of a tile, then the gate -===//
//
// One program computes the [block_m, block_n] tile of a = x W0 and b = x W1 at the same
// (m0, n0) over one K loop: each step reads one x block and the two weight blocks and
// updates two accumulators, so x is read once for both products and a, b never leave
// the registers. The epilogue applies the gate (forward: act(a) * b) or its VJP (dh =
// [dout * b * act'(a), dout * act(a)]). Blocks come through a cp.async ring, TMA rings
// refilled by a producer warpgroup (sm_90a), masked register loads read one step ahead,
// or (exact products) plain loads.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/gated_linear_unit/Common.h"

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Pipeline.h>

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <numbers>

namespace tokamax::glu_detail {

using namespace dsl;

KernelKey GateKernelSpec::key() const {
  return ops_detail::specializationKey(p.vjp ? "glu_gate_vjp" : "glu_gate",
                                       {p.M, p.K, p.N, int64_t(p.dtype), int64_t(p.compute), int64_t(p.activation),
                                        exact, block_m, block_n, block_k, group_m, num_warps, async_copy, stages, wgmma,
                                        tma, programs, tma_store});
}

namespace {

Value sigmoid(const Value &x) { return 1.0 / (1.0 + exp(-x)); }

constexpr double kGeluTanhC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

Value geluTanhInner(const Value &x) { return tanh(kGeluTanhC * (x + kGeluCubic * x * x * x)); }
/// The standard normal CDF.
Value normalCdf(const Value &x) { return 0.5 * (1.0 + erf(x * (1.0 / std::numbers::sqrt2))); }

} // namespace

Value activate(GluActivation activation, const Value &x) {
  switch (activation) {
  case GluActivation::Swish: return x * sigmoid(x);
  case GluActivation::GeluTanh: return 0.5 * x * (1.0 + geluTanhInner(x));
  case GluActivation::Gelu: return x * normalCdf(x);
  case GluActivation::Sigmoid: return sigmoid(x);
  case GluActivation::Relu: return maximum(x, 0.0);
  case GluActivation::None: break;
  }
  return x;
}

Value activate_vjp(GluActivation activation, const Value &x, const Value &g) {
  switch (activation) {
  case GluActivation::Swish: {
    Value s = sigmoid(x);
    return g * (s * (1.0 + x * (1.0 - s)));
  }
  case GluActivation::GeluTanh: {
    Value t = geluTanhInner(x);
    Value inner = kGeluTanhC * (1.0 + 3 * kGeluCubic * x * x);
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner);
  }
  case GluActivation::Gelu: {
    constexpr double invSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
    return g * (normalCdf(x) + x * invSqrt2Pi * exp(-0.5 * x * x));
  }
  case GluActivation::Sigmoid: {
    Value s = sigmoid(x);
    return g * (s * (1.0 - s));
  }
  case GluActivation::Relu: return where(x > 0.0, g, 0.0);
  case GluActivation::None: break;
  }
  return g;
}

namespace {

struct Operands {
  TensorArg x, w;
  Value m0, n0;
};

/// The [bk, bn] block of weights[:, half, :] at (k0, n0) (columns past N read as 0).
Value weightBlock(const GateKernelSpec &s, const Operands &o, const Value &k0, int half) {
  return o.w.load({k0, half, o.n0}, {s.block_k, 1, s.block_n}).reshape({s.block_k, s.block_n});
}

/// a, b over K with each step's blocks read where they are used: exact products.
std::vector<Value> exactLoop(Kernel &k, const GateKernelSpec &s, const Operands &o, Value zero) {
  const DType c = s.p.compute;
  return k.loop(0, s.p.K, s.block_k, {zero, zero}, [&](Value k0, std::vector<Value> acc) {
    Value a = o.x.load({o.m0, k0}, {s.block_m, s.block_k}).to(c);
    return std::vector<Value>{exact_product(a, weightBlock(s, o, k0, 0).to(c), acc[0]),
                              exact_product(a, weightBlock(s, o, k0, 1).to(c), acc[1])};
  });
}

/// a, b over K on tensor cores, the next step's blocks loaded (masked) before this
/// step's products.
std::vector<Value> registerLoop(Kernel &k, const GateKernelSpec &s, const Operands &o, Value zero) {
  auto blocks = [&](Value k0) {
    return std::vector<Value>{o.x.load({o.m0, k0}, {s.block_m, s.block_k}), weightBlock(s, o, k0, 0),
                              weightBlock(s, o, k0, 1)};
  };
  std::vector<Value> carried{zero, zero};
  for (Value &b : blocks(0))
    carried.push_back(b);
  std::vector<Value> out = k.loop(0, s.p.K, s.block_k, carried, [&](Value k0, std::vector<Value> c) {
    std::vector<Value> next = blocks(k0 + Value(s.block_k));
    return std::vector<Value>{dot(c[2], c[3], c[0]), dot(c[2], c[4], c[1]), next[0], next[1], next[2]};
  });
  out.resize(2);
  return out;
}

/// a, b over K on tensor cores with the x, W0 and W1 blocks copied by cp.async into
/// rings of `stages` slots (ring_loop).
std::vector<Value> ringLoop(Kernel &k, const GateKernelSpec &s, const Operands &o, Value zero) {
  const int64_t stages = s.stages, bk = s.block_k;
  const SharedBuffer rings[3] = {k.shared_buffer(stages), k.shared_buffer(stages), k.shared_buffer(stages)};
  RingCopies copies = [&](const Value &k0, const Value &slot) {
    return std::vector<Value>{o.x.load_async({o.m0, k0}, {s.block_m, bk}, rings[0], slot),
                              o.w.load_async({k0, 0, o.n0}, {bk, 1, s.block_n}, rings[1], slot),
                              o.w.load_async({k0, 1, o.n0}, {bk, 1, s.block_n}, rings[2], slot)};
  };
  return ring_loop(k, 0, s.p.K, bk, stages, {zero, zero}, copies,
                   [](const Value &, std::vector<Value> acc, std::vector<Value> b) {
                     return std::vector<Value>{dot(b[0], b[1], acc[0]), dot(b[0], b[2], acc[1])};
                   });
}

/// The gate of a completed tile at (m0, n0): forward act(a) * b into out, VJP dh = [dout
/// b act'(a), dout act(a)].
void gateEpilogue(const GateKernelSpec &s, const std::optional<TensorArg> &dout, const TensorArg &result,
                  const Value &m0, const Value &n0, const Value &a, const Value &b) {
  const Problem &p = s.p;
  if (!p.vjp) {
    const Value out = (activate(p.activation, a) * b).to(p.dtype);
    if (s.tma_store)
      result.tma_store({m0, n0}, out);
    else
      result.store({m0, n0}, out);
    return;
  }
  const int64_t bm = s.block_m, bn = s.block_n;
  Value g = dout->load({m0, n0}, {bm, bn}).to(p.compute);
  Value da = activate_vjp(p.activation, a, g * b), db = g * activate(p.activation, a);
  result.store({m0, 0, n0}, da.to(p.dtype).reshape({bm, 1, bn}));
  result.store({m0, 1, n0}, db.to(p.dtype).reshape({bm, 1, bn}));
}

/// The tma kernel's tiles through TMA rings (tma_tile_loop): each of `programs` programs
/// walks tiles pid, pid + programs, ... in grouped order, each tile's K steps copying x's
/// block and the two weight halves' blocks (the weights read as [K, 2N]: W1's block
/// starts N columns after W0's; W0's columns past N read W1's, which only feed output
/// columns past N, never stored). Both products of a step stay in flight until the next
/// step's are issued; a tile's first step starts them from zero (fresh: the zero
/// accumulators are never read, so ptxas injects no wait); the producer loads the next
/// tile's blocks while the consumers apply the gate.
void tmaTiles(Kernel &k, const GateKernelSpec &s, const Operands &o, const std::optional<TensorArg> &dout,
              const TensorArg &result) {
  const Problem &p = s.p;
  const int64_t bm = s.block_m, bn = s.block_n, bk = s.block_k;
  const int64_t gridM = cdiv(p.M, bm), gridN = cdiv(p.N, bn), tiles = gridM * gridN;
  const int64_t programs = s.programs > 0 ? std::min(s.programs, tiles) : tiles;
  k.grid(programs);
  Value pid = k.program_id(0);
  auto origin = [&](const Value &tile) {
    return grouped_block(pid + tile * Value(programs), gridM, gridN, s.group_m, bm, bn);
  };
  const TmaRing ring = TmaRing::make(k, s.stages, 3, s.num_warps);
  const SharedBuffer rings[3] = {k.shared_buffer(s.stages), k.shared_buffer(s.stages), k.shared_buffer(s.stages)};
  TmaTileLoop body;
  body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
    auto [m0, n0] = origin(tile);
    return std::vector<Value>{o.x.load_tma({m0, k0}, {bm, bk}, rings[0], slot, ring.full, slot),
                              o.w.load_tma({k0, n0}, {bk, bn}, rings[1], slot, ring.full, slot),
                              o.w.load_tma({k0, n0 + Value(p.N)}, {bk, bn}, rings[2], slot, ring.full, slot)};
  };
  body.products = [](const std::vector<Value> &b, const std::vector<Value> &accs, const Value &fresh) {
    return std::vector<Value>{dot_async(b[0], b[1], accs[0], fresh), dot_async(b[0], b[2], accs[1], fresh)};
  };
  body.done = [&](const Value &tile, const std::vector<Value> &ab, std::vector<Value>) {
    auto [m0, n0] = origin(tile);
    gateEpilogue(s, dout, result, m0, n0, ab[0], ab[1]);
    return std::vector<Value>{};
  };
  Value zero = k.full({bm, bn}, 0.0, p.compute);
  Value count = (Value(tiles) - pid + Value(programs - 1)) / Value(programs);
  tma_tile_loop(k, count, cdiv(p.K, bk), bk, ring, {zero, zero}, {}, body);
}

} // namespace

Kernel gate_kernel(const GateKernelSpec &s) {
  const Problem &p = s.p;
  if (p.M < 1 || p.N < 1 || p.K < 1)
    throw Error(fmt::format("gated_linear_unit: a gate kernel needs M, N, K >= 1, got {} x {} x {}", p.M, p.N, p.K));
  const int64_t bm = s.block_m, bn = s.block_n;
  const bool wgmma = s.wgmma || s.tma;
  Kernel k(p.vjp ? "glu_gate_vjp" : "glu_gate",
           {.num_warps = s.num_warps, .mma_rows_per_warp = wgmma, .wgmma_dots = wgmma});
  std::optional<TensorArg> dout;
  if (p.vjp)
    dout = k.input("dout", p.dtype, {p.M, p.N});
  Operands o{k.input("x", p.dtype, {p.M, p.K}),
             k.input("weights", p.dtype, s.tma ? std::vector<int64_t>{p.K, 2 * p.N} : std::vector<int64_t>{p.K, 2, p.N}),
             Value(), Value()};
  TensorArg result = p.vjp ? k.output("dh", p.dtype, {p.M, 2, p.N}) : k.output("out", p.dtype, {p.M, p.N});
  if (s.tma) {
    tmaTiles(k, s, o, dout, result);
    return k;
  }
  const int64_t gridM = cdiv(p.M, bm), gridN = cdiv(p.N, bn);
  k.grid(gridM * gridN);
  std::tie(o.m0, o.n0) = grouped_block(k.program_id(0), gridM, gridN, s.group_m, bm, bn);
  Value zero = k.full({bm, bn}, 0.0, p.compute);
  std::vector<Value> ab = s.exact        ? exactLoop(k, s, o, zero)
                          : s.async_copy ? ringLoop(k, s, o, zero)
                                         : registerLoop(k, s, o, zero);
  gateEpilogue(s, dout, result, o.m0, o.n0, ab[0], ab[1]);
  return k;
}

KernelKey gate_apply_key(const Problem &p) {
  return ops_detail::specializationKey(p.vjp ? "glu_gate_apply_vjp" : "glu_gate_apply",
                                       {p.M, p.N, int64_t(p.dtype), int64_t(p.compute), int64_t(p.activation)});
}

Kernel gate_apply_kernel(const Problem &p) {
  if (p.M < 1 || p.N < 1)
    throw Error(fmt::format("gated_linear_unit: the gate kernel needs M, N >= 1, got {} x {}", p.M, p.N));
  // Memory-bound: [32, 128] blocks (16-byte vectors along N). The VJP reads h and writes
  // dh, one pass either way: dh may be h itself (the products' scratch, overwritten in
  // place: each element is read before the program stores it) or a scratch beside the
  // caller's pre-activations (kept for a second backward, never copied). The gate is the
  // gate kernel's epilogue.
  GateKernelSpec s;
  s.p = p;
  s.block_m = 32;
  s.block_n = 128;
  Kernel k(p.vjp ? "glu_gate_apply_vjp" : "glu_gate_apply", {.num_warps = 4});
  std::optional<TensorArg> dout;
  if (p.vjp)
    dout = k.input("dout", p.dtype, {p.M, p.N});
  TensorArg h = k.input("h", p.dtype, {p.M, 2, p.N});
  TensorArg result = p.vjp ? k.output("dh", p.dtype, {p.M, 2, p.N}) : k.output("out", p.dtype, {p.M, p.N});
  k.grid(cdiv(p.M, s.block_m), cdiv(p.N, s.block_n));
  Value m0 = k.program_id(0) * s.block_m, n0 = k.program_id(1) * s.block_n;
  auto half = [&](int64_t i) {
    return h.load({m0, Value(i), n0}, {s.block_m, 1, s.block_n}).reshape({s.block_m, s.block_n}).to(p.compute);
  };
  Value a = half(0), b = half(1);
  gateEpilogue(s, dout, result, m0, n0, a, b);
  return k;
}

} // namespace tokamax::glu_detail
