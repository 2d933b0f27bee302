//===- HopperKernels.cpp - The hopper forward: TMA rings, warp roles, wgmma --===//
//
// One program per (query block, head, batch row), as the flash forward. Q's block comes
// once by TMA; K and V blocks stream through TMA rings that a producer warpgroup refills
// (dsl::Kernel::specialized_loop, TmaRing); the consumers compute S = Q K^T on wgmma with
// both operands in shared memory, the online softmax in registers (exp2, the scale
// folded in: softmax_step, shared with the flash forward) and P V on wgmma with P from
// registers, then release the step's slot. One loop over the key blocks the query block
// sees, every block masked.
//
// q, k and v are read as [B T, N H], [B S, K H] and [B S, K Hv] (TMA tensor maps are
// 2-D): a K or V block never reaches into the next batch row because S is a multiple of
// block_kv (check_config); Q rows past T, which may, are never stored.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/attention/KernelParts.h"
#include "ops/lib/matmul/MatmulDetail.h"

#include <cmath>

namespace tokamax::attention_detail {

using dsl::cdiv;

Kernel hopper_forward_kernel(const KernelSpec &s) {
  const Problem &p = s.p;
  const int64_t bq = s.block_q, bkv = s.block_kv;
  Kernel k(s.name(), {.num_warps = s.num_warps, .mma_rows_per_warp = true, .wgmma_dots = true});
  ForwardProgram f = forward_program(k, s, declare_operands(k, p, /*rows=*/true));
  Program &pr = f.pr;
  const Operands &in = pr.in;
  Value t0 = f.t0, n = f.n, kvh = f.kvh;

  dsl::Mbarriers qReady = k.mbarriers(1);
  Value q = in.q.load_tma({pr.b * p.T + t0, n * p.H}, {bq, p.H}, k.shared_buffer(1), 0, qReady, 0);
  k.wait(qReady, 0, 0);

  const TmaRing ring = TmaRing::make(k, s.stages, 2, s.num_warps);  // K's and V's copies
  const dsl::SharedBuffer kRing = k.shared_buffer(s.stages), vRing = k.shared_buffer(s.stages);
  const Range range = key_range(pr, t0, bq, bkv);
  // Blocks from lo (a multiple of block_kv) through the one holding hi - 1; all inside S.
  Value steps = (maximum(range.hi - range.lo, 0) + (bkv - 1)) / bkv;
  SoftmaxState start{{k.full({bq}, -INFINITY, p.compute)}, {k.full({bq}, 0.0, p.compute)}, zero_rows(s, k, bq, p.Hv)};
  const size_t accSize = start.acc.size();
  Carried walked = k.specialized_loop(
      0, steps, 1, start.pack(),
      [&](Value i) {
        ring.wait_free(k, i);
        Value row = pr.b * p.S + range.lo + i * bkv, slot = ring.slot(i);
        return std::vector<Value>{in.k.load_tma({row, kvh * p.H}, {bkv, p.H}, kRing, slot, ring.full, slot),
                                  in.v.load_tma({row, kvh * p.Hv}, {bkv, p.Hv}, vRing, slot, ring.full, slot)};
      },
      [&](Value i, Carried carried, std::vector<Value> kv) {
        ring.wait_full(k, i);
        Value qk = product_nt(s, k, {q}, {kv[0]});
        SoftmaxState next = softmax_step(pr, SoftmaxState::unpack(carried, accSize), qk, n, t0,
                                         range.lo + i * bkv, /*masked=*/true, {kv[1]});
        ring.release(k, i);  // both products completed in the step
        return next.pack();
      });
  forward_epilogue(pr, f.out, f.lse, t0, n, SoftmaxState::unpack(walked, accSize));
  return k;
}

} // namespace tokamax::attention_detail
