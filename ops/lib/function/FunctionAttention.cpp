//===- FunctionAttention.cpp - Tracing attention: dense and packed calls -----===//
#include <tokamax/ops/Function.h>

#include "ops/lib/function/FunctionAttention.h"

#include "ops/lib/attention/Binding.h"

namespace tokamax {

Sym Tracer::dot_product_attention(Sym q, Sym k, Sym v, const AttentionOptions &options, std::optional<Sym> bias,
                                  std::optional<Sym> mask, std::optional<Sym> q_seq_lengths,
                                  std::optional<Sym> kv_seq_lengths, std::optional<Sym> sinks) {
  auto specOf = [&](const std::optional<Sym> &s) { return s ? std::optional(spec(*s)) : std::nullopt; };
  auto id = [](const std::optional<Sym> &s) { return s ? s->id : -1; };
  const ArgSpec &qs = spec(q), &vs = spec(v);
  ArgSpec out = qs;
  if (!out.shape.empty() && !vs.shape.empty())  // else bind_attention names the bad rank
    out.shape.back() = vs.shape.back();
  // The residual lse is always produced: a later grad() needs it.
  BoundArgs b = bind_attention({qs, spec(k), vs, specOf(bias), specOf(mask), specOf(q_seq_lengths),
                                specOf(kv_seq_lengths), out, attention_lse_spec(qs, options.layout), specOf(sinks)},
                               options);
  Sym out0 = f_.record(attention_op(), b,
                       {q.id, k.id, v.id, id(bias), id(mask), id(q_seq_lengths), id(kv_seq_lengths), id(sinks), -2,
                        -2},
                       options.implementation)[0];
  if (!options.deterministic)  // the VJP's attribute, printed as attention_vjp prints it
    f_.calls_.back().vjp_attributes.emplace("deterministic", "0");
  return out0;
}

Sym Tracer::dot_product_attention_varlen(Sym q, Sym k, Sym v, Sym cu_seqlens_q, Sym cu_seqlens_kv,
                                         const AttentionOptions &options, std::optional<Sym> sinks) {
  const ArgSpec &qs = spec(q), &vs = spec(v);
  ArgSpec out = qs;
  if (!out.shape.empty() && !vs.shape.empty())  // else binding names the bad rank
    out.shape.back() = vs.shape.back();
  AttentionOptions bound = options;  // (its tensors are the values here)
  bound.cu_seqlens_q = bound.cu_seqlens_kv = nullptr;
  BoundArgs b = bind_attention_varlen({qs, spec(k), vs, spec(cu_seqlens_q), spec(cu_seqlens_kv),
                                       sinks ? std::optional(spec(*sinks)) : std::nullopt, out,
                                       attention_varlen_lse_spec(qs)},
                                      bound);
  Sym out0 = f_.record(attention_varlen_op(), b,
                       {q.id, k.id, v.id, cu_seqlens_q.id, cu_seqlens_kv.id, sinks ? sinks->id : -1, -2, -2},
                       options.implementation)[0];
  if (!options.deterministic)
    f_.calls_.back().vjp_attributes.emplace("deterministic", "0");
  return out0;
}

AttentionOptions attention_options_of(const Function::Call &call) {
  AttentionOptions options = attention_detail::attention_options_of(call.args);
  // The VJP's order is recorded beside the forward's attributes.
  auto deterministic = call.vjp_attributes.find("deterministic");
  options.deterministic = deterministic == call.vjp_attributes.end() || deterministic->second != "0";
  return options;
}

} // namespace tokamax
