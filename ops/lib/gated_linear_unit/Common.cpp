//===- Common.cpp - gated_linear_unit: what the implementations share ----===//
//
// The launches (run) every implementation makes, and what tile and hopper share: hopper
// runs tile's gate kernel with TMA rings always on (HopperConfig::as_tile).
//
//===----------------------------------------------------------------------===//
#include "ops/lib/gated_linear_unit/Common.h"

#include "ops/lib/framework/SharedMemory.h"
#include "ops/lib/products/Products.h"

#include <tokamax/ops/Matmul.h>

#include <fmt/format.h>

namespace tokamax::glu_detail {

namespace {

/// Estimated 32-bit registers per thread of the two accumulators (and, without the
/// ring, the three blocks held one step ahead).
int64_t registerEstimate(const Problem &p, const TileConfig &c) {
  int64_t words = 2 * c.block_m * c.block_n * (p.compute == DType::F64 ? 2 : 1);
  if (!c.async_copy)
    words += (c.block_m + 2 * c.block_n) * c.block_k / 2;
  return words / (32 * c.num_warps);
}

/// Why the gate kernel at `c` does not fit a block's shared memory, as the compiler plans
/// it (the VJP's dx and dweights take the matmul's own configs).
std::optional<std::string> checkSharedMemory(const Problem &p, const TileConfig &c) {
  return ops_detail::check_shared_memory([&](ops_detail::KernelExecutor &ex) {
    const GateKernelSpec s = tensor_core_spec(p, c, ex.sm_count());
    ex.launch(s.key(), [s] { return gate_kernel(s); }, {});
  });
}

/// The weights as the gate kernel reads them: [K, 2N] for TMA (2-D tensor maps).
std::vector<int64_t> weightsShape(const GateKernelSpec &s) {
  return s.tma ? std::vector<int64_t>{s.p.K, 2 * s.p.N} : std::vector<int64_t>{s.p.K, 2, s.p.N};
}

/// h [M, 2N] = x [M, K] @ (weights as [K, 2N]) on the `products` matmul kernel.
void products_into(ops_detail::KernelExecutor &ex, const Problem &p, MatmulKernelKind products, const TensorView &x,
                   const TensorView &w, const TensorView &h) {
  const int device = ex.device();
  launch_matmul_step(ex, "glu", products, MatmulSpec{p.M, 2 * p.N, p.K, p.dtype, p.dtype, false, false},
                     TensorView(x.data(), x.dtype(), std::vector<int64_t>{p.M, p.K}, device),
                     TensorView(w.data(), w.dtype(), std::vector<int64_t>{p.K, 2 * p.N}, device), h);
}

} // namespace

bool async_copy_serves(const Problem &p) {
  return (p.dtype == DType::BF16 || p.dtype == DType::F16) && p.K % 8 == 0 && p.N % 8 == 0;
}

TileConfig HopperConfig::as_tile() const {
  TileConfig t;
  static_cast<ProductBlocks &>(t) = *this;
  static_cast<ProductRing &>(t) = ring();
  t.group_m = group_m;
  t.programs = programs;
  t.unfused = unfused;
  t.tma_store = tma_store;
  return t;
}

GateKernelSpec tensor_core_spec(const Problem &p, const TileConfig &c, int sm_count) {
  GateKernelSpec s;
  s.p = p;
  s.block_m = c.block_m;
  s.block_n = c.block_n;
  s.block_k = c.block_k;
  s.num_warps = static_cast<int>(c.num_warps);
  s.group_m = c.group_m;
  s.async_copy = c.async_copy && async_copy_serves(p);
  s.stages = c.stages.value_or(3);
  s.wgmma = s.async_copy && c.wgmma;
  s.tma = s.async_copy && c.tma;
  const int64_t programs = c.programs.value_or(0);
  s.programs = s.tma ? (programs < 0 ? sm_count : programs) : 0;
  s.unfused = c.unfused;
  s.tma_store = s.tma && !p.vjp && c.tma_store.value_or(0) == 1;
  return s;
}

std::optional<std::string> check_tensor_core_config(const Problem &p, const TileConfig &c) {
  if (auto problem = check_block_sizes(c, /*tile=*/true))
    return problem;
  if (c.group_m < 1)
    return fmt::format("group_m must be at least 1, got {}", c.group_m);
  if (c.programs && (*c.programs < -1 || !c.tma))
    return fmt::format("programs (a persistent grid of the tma kernels: -1 one per SM, 0 one per tile, or a count) "
                       "needs \"tma\": 1 and a value >= -1, got {}",
                       *c.programs);
  if (auto problem = check_ring_keys(c, async_copy_serves(p), p.K, p.N))
    return problem;
  if (c.tma_store && (*c.tma_store < 0 || *c.tma_store > 1 || (*c.tma_store == 1 && (!c.tma || p.vjp))))
    return fmt::format("tma_store (the forward's gated tiles stored by TMA) must be 0 or 1 and needs \"tma\": 1 and "
                       "the forward, got {}{}",
                       *c.tma_store, p.vjp ? " in the VJP" : "");
  if (c.wgmma && (!c.async_copy || c.block_m != 16 * c.num_warps))
    return fmt::format("wgmma (products reading the cp.async ring on sm_90a) needs \"async_copy\": 1 and "
                       "block_m = 16 * num_warps (every warp along M), got block_m {} with {} warps",
                       c.block_m, c.num_warps);
  if (auto problem = check_tma_ring_keys(c, c, int64_t(dtype_size(p.dtype))))
    return problem;
  if (c.unfused)
    return std::nullopt;  // no gate kernel runs (the matmul kernels take their own configs)
  if (const int64_t registers = registerEstimate(p, c); registers > 128)
    return fmt::format("block_m {} x block_n {} with {} warps needs ~{} registers per thread for the accumulators "
                       "and blocks",
                       c.block_m, c.block_n, c.num_warps, registers);
  return checkSharedMemory(p, c);
}

void run(const Problem &p, const GateKernelSpec &s, MatmulKernelKind products, std::span<const TensorView> in,
         std::span<const TensorView> out, ops_detail::KernelExecutor &ex) {
  const int device = ex.device();
  auto as = [&](const TensorView &t, std::vector<int64_t> shape) { return TensorView(t.data(), t.dtype(), shape, device); };
  if (!p.vjp) {
    if (p.M == 0 || p.N == 0)
      return;
    if (p.K == 0) {  // a = b = 0 and act(0) is finite: out = 0
      ex.zero(out[0]);
      if (p.preactivations)
        ex.zero(out[1]);
      return;
    }
    if (s.unfused || p.preactivations) {  // into the caller's pre-activations, or the scratch
      const uint64_t h = p.preactivations ? out[1].data()
                                          : ex.scratch(size_t(p.M) * 2 * p.N * dtype_size(p.dtype));
      products_into(ex, p, products, in[0], in[1], TensorView(h, p.dtype, std::vector<int64_t>{p.M, 2 * p.N}, device));
      ex.launch(gate_apply_key(p), [p] { return gate_apply_kernel(p); },
                {TensorView(h, p.dtype, std::vector<int64_t>{p.M, 2, p.N}, device), as(out[0], {p.M, p.N})});
      return;
    }
    ex.launch(s.key(), [s] { return gate_kernel(s); },
              {as(in[0], {p.M, p.K}), as(in[1], weightsShape(s)), as(out[0], {p.M, p.N})});
    return;
  }
  const TensorView &dout = in[0], &x = in[1], &w = in[2], &dx = out[0], &dw = out[1];
  if (p.M == 0 || p.N == 0 || p.K == 0) {  // empty sums: whatever is not empty is zero
    ex.zero(dx);
    ex.zero(dw);
    return;
  }
  const uint64_t dh = ex.scratch(size_t(p.M) * 2 * p.N * dtype_size(p.dtype));
  const TensorView dhRows(dh, p.dtype, std::vector<int64_t>{p.M, 2 * p.N}, device);
  const TensorView dhSplit(dh, p.dtype, std::vector<int64_t>{p.M, 2, p.N}, device);
  if (p.preactivations || s.unfused) {
    // The forward's pre-activations are read, not overwritten (a second backward reads
    // them again); without them the products land in the scratch, gated in place.
    if (!p.preactivations)
      products_into(ex, p, products, x, w, dhRows);
    const TensorView h = p.preactivations ? as(in[3], {p.M, 2, p.N}) : dhSplit;
    ex.launch(gate_apply_key(p), [p] { return gate_apply_kernel(p); }, {as(dout, {p.M, p.N}), h, dhSplit});
  } else {
    ex.launch(s.key(), [s] { return gate_kernel(s); },
              {as(dout, {p.M, p.N}), as(x, {p.M, p.K}), as(w, weightsShape(s)), dhSplit});
  }
  // dx [M, K] = dh [M, 2N] @ (weights as [K, 2N])^T.
  launch_matmul_step(ex, "glu", products, MatmulSpec{p.M, p.K, 2 * p.N, p.dtype, p.dtype, false, true}, dhRows,
                     as(w, {p.K, 2 * p.N}), as(dx, {p.M, p.K}));
  // dweights [K, 2N] = x^T @ dh.
  launch_matmul_step(ex, "glu", products, MatmulSpec{p.K, 2 * p.N, p.M, p.dtype, p.dtype, true, false},
                     as(x, {p.M, p.K}), dhRows, as(dw, {p.K, 2 * p.N}));
}

} // namespace tokamax::glu_detail
