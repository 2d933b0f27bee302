//===- AttentionVarlenKernelTests.cpp - Packed attention: kernels and Functions -===//
//
// The packed hopper kernels through ptxas beside the padded ones, and packed attention
// traced in a Function: grad gives the host VJP's bits, through JSON too.
//
//===----------------------------------------------------------------------===//
#include "common/AttentionReference.h"
#include "common/HopperPtxChecks.h"

#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>

#include <catch2/catch.hpp>

#include <vector>

using namespace tokamax;
using attention_test::HostBuffer;

namespace {

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

HostBuffer random(DType d, std::vector<int64_t> shape, uint64_t seed) {
  const int64_t n = attention_test::product(shape);
  return HostBuffer(d, std::move(shape), attention_test::randomNormal(size_t(n), d, seed));
}

} // namespace

TEST_CASE("attention varlen: hopper's packed kernels assemble like the padded ones", "[attention][varlen][ptxas]") {
  // Head dims 64 and 128 under a causal mask, the heuristic configs: the packed kernels
  // (offsets from cu_seqlens, stores that stop at a sequence's end) assemble for sm_90a
  // with the Hopper structure, no serialized wgmma or injected wait, and spill at most 8
  // bytes more than the padded call's kernels: the dk/dv kernel at head dim 128 holds the
  // sequence's first query row and its diagonal's shift through the walk, two registers
  // past the 168 it has (8 bytes of spill stores, 4 of loads; none elsewhere).
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty())
    WARN("ptxas not found: the PTX is checked, not assembled");
  for (int64_t h : {64, 128}) {
    const int64_t batch = 4, m = 2048, n = 16;
    const ArgSpec q = spec({batch * m, n, h}, DType::BF16), cu = spec({batch + 1}, DType::I32),
                  lse = attention_varlen_lse_spec(q);
    AttentionOptions o;
    o.is_causal = true, o.max_seqlen_q = m, o.max_seqlen_kv = m;
    const BoundArgs fwd = bind_attention_varlen({q, q, q, cu, cu, std::nullopt, q, lse}, o);
    const BoundArgs vjp = bind_attention_varlen_vjp({q, q, q, q, q, lse, cu, cu, std::nullopt, q, q, q, std::nullopt}, o);
    const ArgSpec pq = spec({batch, m, n, h}, DType::BF16), lengths = spec({batch}, DType::I32),
                  plse = attention_lse_spec(pq);
    const BoundArgs padded = bind_attention({pq, pq, pq, std::nullopt, std::nullopt, lengths, lengths, pq, plse}, o);
    const BoundArgs paddedVjp = bind_attention_vjp(
        {pq, pq, pq, pq, pq, plse, std::nullopt, std::nullopt, lengths, lengths, pq, pq, pq, std::nullopt}, o);
    for (auto [packedArgs, paddedArgs] : {std::pair{&fwd, &padded}, std::pair{&vjp, &paddedVjp}}) {
      const Implementation &impl = find_op(packedArgs->op)->implementation("hopper");
      const Implementation &dense = find_op(paddedArgs->op)->implementation("hopper");
      std::vector<dsl::Kernel> kernels = impl.kernels(*packedArgs, impl.heuristic(*packedArgs));
      std::vector<dsl::Kernel> denseKernels = dense.kernels(*paddedArgs, dense.heuristic(*paddedArgs));
      REQUIRE(kernels.size() == denseKernels.size());
      for (size_t i = 0; i < kernels.size(); ++i) {
        INFO(kernels[i].name() << " against " << denseKernels[i].name());
        const CompiledKernel packed = test::sm90a_ptx(kernels[i]), dense = test::sm90a_ptx(denseKernels[i]);
        if (test::count(packed.ptx, "wgmma.mma_async") > 0) {  // (not the delta kernel)
          CHECK(test::count(packed.ptx, "setmaxnreg.dec.sync.aligned.u32") == 1);
          CHECK(test::count(packed.ptx, "cp.async.bulk.tensor.3d.shared::cluster.global") >= 2);
        }
        if (ptxas.empty())
          continue;
        auto [status, log] = test::run_ptxas(ptxas, packed.ptx, "sm_90a");
        auto [denseStatus, denseLog] = test::run_ptxas(ptxas, dense.ptx, "sm_90a");
        INFO(log << "\npadded:\n" << denseLog);
        CHECK(status == 0);
        CHECK(test::count(log, "serialized") == 0);
        CHECK(test::count(log, "warpgroup.wait is injected") == test::count(denseLog, "warpgroup.wait is injected"));
        CHECK(test::spill_store_bytes(log) <= test::spill_store_bytes(denseLog) + 8);
      }
    }
  }
}

TEST_CASE("attention varlen: grad of a traced packed call gives the host VJP's bits", "[attention][varlen][function]") {
  // loss = sum(attention_varlen(q, k, v, sinks)): dq, dk, dv and dsinks equal the host
  // VJP's with a cotangent of ones, bit for bit, before and after a JSON round trip.
  const std::vector<double> cu{0, 5, 5, 17}, cuKv{0, 9, 12, 20};
  const HostBuffer q = random(DType::F32, {17, 4, 16}, 1), k = random(DType::F32, {20, 2, 16}, 2),
                   v = random(DType::F32, {20, 2, 16}, 3), sinks = random(DType::F32, {4}, 4),
                   cuQ(DType::I32, {4}, cu), cuK(DType::I32, {4}, cuKv);
  AttentionOptions o;
  o.is_causal = true, o.max_seqlen_q = 12, o.max_seqlen_kv = 9, o.implementation = "chunked";
  std::vector<ArgSpec> in{spec(q.shape, DType::F32), spec(k.shape, DType::F32), spec(v.shape, DType::F32),
                          spec({4}, DType::I32),     spec({4}, DType::I32),     spec({4}, DType::F32)};
  Function f = Function::trace(in, [&](Tracer &t, std::span<const Sym> x) {
    return std::vector<Sym>{t.sum(t.dot_product_attention_varlen(x[0], x[1], x[2], x[3], x[4], o, x[5]))};
  });
  Function g = grad(f, {0, 1, 2, 5});
  bool packedVjp = false;
  for (const auto &call : g.calls())
    packedVjp |= call.op->name() == "attention_varlen_vjp";
  CHECK(packedVjp);

  TensorView cuQv = cuQ.view(), cuKv_ = cuK.view(), sinksView = sinks.view();
  AttentionOptions host = o;
  host.cu_seqlens_q = &cuQv, host.cu_seqlens_kv = &cuKv_, host.sinks = &sinksView;
  HostBuffer out(DType::F32, q.shape), lse(DType::F32, {4, 17});
  TensorView lseView = lse.view();
  dot_product_attention_host(q.view(), k.view(), v.view(), out.view(), host, &lseView);
  const HostBuffer ones(DType::F32, q.shape, std::vector<double>(size_t(attention_test::product(q.shape)), 1.0));
  HostBuffer dq(DType::F32, q.shape), dk(DType::F32, k.shape), dv(DType::F32, v.shape), dsinks(DType::F32, {4});
  TensorView dsinksView = dsinks.view();
  dot_product_attention_vjp_host(ones.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                                 dv.view(), host, nullptr, &dsinksView);

  for (const Function &h : {g, Function::from_json(g.to_json())}) {
    HostBuffer gq(DType::F32, q.shape), gk(DType::F32, k.shape), gv(DType::F32, v.shape), gs(DType::F32, {4});
    TensorView args[] = {q.view(), k.view(), v.view(), cuQ.view(), cuK.view(), sinks.view()};
    TensorView outs[] = {gq.view(), gk.view(), gv.view(), gs.view()};
    h.interpret(args, outs);
    CHECK(gq.storage == dq.storage);
    CHECK(gk.storage == dk.storage);
    CHECK(gv.storage == dv.storage);
    CHECK(gs.storage == dsinks.storage);
  }
}

TEST_CASE("attention varlen: lse past 32-bit offsets is refused at binding", "[attention][varlen]") {
  // N x total_q = 32 x 2^26 = 2^31 elements of lse: the kernels' 32-bit row offsets
  // cannot reach them all.
  AttentionOptions o;
  o.max_seqlen_q = o.max_seqlen_kv = 4096;
  const int64_t total = int64_t(1) << 26;
  const ArgSpec q = spec({total, 32, 64}, DType::BF16), k = spec({4096, 8, 64}, DType::BF16),
                cu = spec({2}, DType::I32);
  CHECK_THROWS_WITH(bind_attention_varlen({q, k, k, cu, cu, std::nullopt, q, attention_varlen_lse_spec(q)}, o),
                    Catch::Contains("lse [N, total_q] = [32, 67108864]") && Catch::Contains("split the batch"));
  const ArgSpec smaller = spec({total / 2, 32, 64}, DType::BF16);
  CHECK_NOTHROW(bind_attention_varlen({smaller, k, k, cu, cu, std::nullopt, smaller, attention_varlen_lse_spec(smaller)},
                                      o));
}
