//===- Common.cpp - Attention kernel specs: keys, names, builders -------===//
#include "ops/lib/attention/KernelParts.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace tokamax::attention_detail {


int64_t padded_head_dim(int64_t d) {
  int64_t p = 16;
  while (p < d)
    p *= 2;
  return p;
}

double Problem::logits_bytes() const {
  return static_cast<double>(B) * N * T * S * dtype_size(compute);
}

KernelKey KernelSpec::key() const {
  KernelKey h("attention");
  auto mix = [&](uint64_t v) { h.add(v); };
  auto mixDouble = [&](double d) { h.add(d); };
  mix(static_cast<uint64_t>(kind));
  mix(p.vjp);
  for (int64_t v : {p.B, p.T, p.S, p.N, p.K, p.H, p.Hv, p.left, p.right})
    mix(static_cast<uint64_t>(v));
  mix(static_cast<uint64_t>(p.dtype));
  mix(static_cast<uint64_t>(p.compute));
  mixDouble(p.scale);
  mixDouble(p.softcap);
  mix(p.causal);
  for (const auto *bc : {&p.bias, &p.mask}) {
    mix(bc->has_value());
    if (*bc) {
      for (int64_t d : (*bc)->shape)
        mix(static_cast<uint64_t>(d));
      mix(static_cast<uint64_t>((*bc)->dtype));
    }
  }
  mix(p.q_lengths);
  mix(p.kv_lengths);
  mix(p.lse_out);
  mix(p.dbias);
  mix(static_cast<uint64_t>(product));
  mix(static_cast<uint64_t>(block_q));
  mix(static_cast<uint64_t>(block_kv));
  mix(static_cast<uint64_t>(num_warps));
  mix(split_edges);
  mix(prefetch);
  mix(async_copy);
  mix(static_cast<uint64_t>(stages));
  mix(wgmma);
  mix(overlap);
  mix(tma);
  mix(ping_pong);
  return h;
}

std::string KernelSpec::name() const {
  static const char *names[] = {"flash_forward", "delta",   "flash_dkdv", "flash_dq", "dbias_reduce", "logits",
                                "row_stats",     "output",  "ref_ds",     "ref_dq",   "ref_dkdv"};
  return fmt::format("attention_{}{}_{}_h{}_{}x{}", names[static_cast<int>(kind)], tma ? "_hopper" : "",
                     dtype_name(p.dtype), p.H, block_q, block_kv);
}

dsl::Kernel build_kernel(const KernelSpec &s) {
  switch (s.kind) {
  case KernelKind::FlashForward:
    return s.tma ? hopper_forward_kernel(s) : flash_forward_kernel(s);
  case KernelKind::Delta:
    return delta_kernel(s);
  case KernelKind::FlashDkDv:
    return s.tma ? hopper_dkdv_kernel(s) : flash_dkdv_kernel(s);
  case KernelKind::FlashDq:
    return s.tma ? hopper_dq_kernel(s) : flash_dq_kernel(s);
  case KernelKind::DbiasReduce:
    return dbias_reduce_kernel(s);
  case KernelKind::Logits:
    return logits_kernel(s);
  case KernelKind::RowStats:
    return row_stats_kernel(s);
  case KernelKind::Output:
    return output_kernel(s);
  case KernelKind::RefDs:
    return ref_ds_kernel(s);
  case KernelKind::RefDq:
    return ref_dq_kernel(s);
  case KernelKind::RefDkDv:
    return ref_dkdv_kernel(s);
  }
  throw Error("attention: unknown kernel kind");
}

} // namespace tokamax::attention_detail
