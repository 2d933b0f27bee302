//===- Registry.cpp - Kernels known to tokamax-compile ----------------------===//
#include <tokamax/ops/Registry.h>

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/AttentionFp8.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/PagedAttention.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include <fmt/format.h>

#include <set>

namespace tokamax {

namespace {

/// The headline gradients as the examples run them, of x [32, 2048, 16, 64] bf16 and
/// scale [64] f32: examples/layer_norm.cpp's sum(layer_norm(layer_norm(x))), and
/// examples/attention.cpp's layer_norm tile -> attention chunked -> layer_norm ->
/// attention `second` (hopper on sm_90a, tile elsewhere) -> sum, wrt x and scale.
const ArgSpec kHeadlineX{{32, 2048, 16, 64}, DType::BF16}, kHeadlineScale{{64}, DType::F32};

Function layerNormGrad() {
  return grad(Function::trace({kHeadlineX, kHeadlineScale},
                              [](Tracer &t, std::span<const Sym> in) {
                                return std::vector<Sym>{t.sum(t.layer_norm(t.layer_norm(in[0], in[1]), in[1]))};
                              }),
              {0, 1});
}

Function attentionGrad(const char *second) {
  return grad(Function::trace({kHeadlineX, kHeadlineScale},
                              [&](Tracer &t, std::span<const Sym> in) {
                                AttentionOptions first, last;
                                first.implementation = "chunked";
                                last.implementation = second;
                                Sym l1 = t.layer_norm(in[0], in[1], std::nullopt, -1, 1e-5, "tile");
                                Sym l2 = t.layer_norm(t.dot_product_attention(l1, l1, l1, first), in[1]);
                                return std::vector<Sym>{
                                    t.sum(t.cast(t.dot_product_attention(l2, l2, l2, last), DType::F32))};
                              }),
              {0, 1});
}

/// How a registered op call is named: its first tensor's spec.
std::string firstSpec(const BoundArgs &args) {
  for (const std::optional<ArgSpec> &spec : args.args)
    if (spec)
      return spec->to_json();
  return "{}";
}

} // namespace

std::vector<RegisteredKernel> registered_kernels() {
  std::vector<RegisteredKernel> kernels;
  auto elementwise = [&](const char *name, auto build, int64_t n, DType dtype) {
    ElementwiseSpec spec{n, dtype};
    kernels.push_back({fmt::format("{}[{} {}]", name, n, dtype_name(dtype)),
                       [=] { return build(spec, default_config(spec)); }});
  };
  auto softmax = [&](int64_t rows, int64_t cols, DType dtype) {
    SoftmaxSpec spec{rows, cols, dtype};
    kernels.push_back({fmt::format("softmax[{}x{} {}]", rows, cols, dtype_name(dtype)),
                       [=] { return softmax_kernel(spec, default_config(spec)); }});
  };
  // The examples' shapes.
  elementwise("vector_add", vector_add_kernel, (int64_t(1) << 24) + 17, DType::F32);
  elementwise("gelu", gelu_kernel, int64_t(1) << 24, DType::BF16);
  softmax(4096, 1000, DType::F32);
  // The benchmark's shapes.
  // (16384 x 4096 and 1048576 x 64 bf16 copies are the same flat kernel.)
  elementwise("copy", copy_kernel, int64_t(16384) * 4096, DType::BF16);
  softmax(16384, 4096, DType::BF16);
  softmax(1048576, 64, DType::BF16);
  // The matmul benchmark's bf16 shapes (the tensor-core `tile` kernel).
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{4096, 4096, 4096}, {8192, 8192, 512}}) {
    MatmulSpec spec{m, n, k, DType::BF16, DType::BF16};
    kernels.push_back({fmt::format("matmul[{}x{}x{} bf16]", m, n, k),
                       [=] { return matmul_kernel(spec, default_config(spec)); }});
  }
  // The hopper kernel at every benchmark shape, and fp8 at 4096^3 (wgmma and TMA:
  // sm_90a only), as matmul() builds them on a 132-SM H100 / H200.
  for (auto [m, n, k, dtype] :
       {std::tuple<int64_t, int64_t, int64_t, DType>{4096, 4096, 4096, DType::BF16}, {8192, 8192, 8192, DType::BF16},
        {16384, 4096, 4096, DType::BF16}, {8192, 8192, 512, DType::BF16}, {4096, 4096, 4096, DType::F8E4M3}}) {
    MatmulSpec spec{m, n, k, dtype, DType::BF16, false, dtype == DType::F8E4M3};
    kernels.push_back({fmt::format("matmul_hopper[{}x{}x{} {}]", m, n, k, dtype_name(dtype)),
                       [=] { return matmul_hopper_kernel(spec, default_hopper_config(spec)); }, "sm_90a"});
  }
  // Ops of the framework: every kernel of the implementation named (or the one auto picks
  // on sm_90a), each call once.
  std::set<std::string> listed;
  auto op = [&](const Op &o, const BoundArgs &args, std::optional<std::string> name = std::nullopt) {
    const Implementation &impl = o.select(args, name, "sm_90a");
    if (!listed.insert(impl.name() + " " + args.to_json()).second)
      return;
    Config config = o.resolve_config(impl, args, std::nullopt);
    size_t count = impl.kernels(args, config).size();
    // An implementation that runs on sm_90a alone (hopper) compiles for it alone.
    std::string onlyArch = impl.supported_on("sm_80") ? "" : "sm_90a";
    for (size_t i = 0; i < count; ++i)
      kernels.push_back({fmt::format("{}[{}] {}#{}", args.op, impl.name(), firstSpec(args), i),
                         [&o, args, name, i] {
                           const Implementation &im = o.select(args, name, "sm_90a");
                           return std::move(im.kernels(args, o.resolve_config(im, args, std::nullopt))[i]);
                         },
                         onlyArch});
  };
  // The headline example: (32, 2048, 16, 64) bf16 normalised over the last axis, f32 scale.
  const ArgSpec &x = kHeadlineX, &scale = kHeadlineScale;
  ArgSpec stat{{32 * 2048 * 16}, DType::F32};
  op(layer_norm_op(), bind_layer_norm(x, scale, std::nullopt, x, stat, stat, -1, 1e-5));
  op(layer_norm_vjp_op(), bind_layer_norm_vjp(x, x, scale, stat, stat, x, scale, std::nullopt, -1));
  // Its attention calls (q = k = v = x): chunked, tile and hopper, forward and VJP.
  ArgSpec lse = attention_lse_spec(x);
  for (const char *impl : {"chunked", "tile", "hopper"}) {
    op(attention_op(), bind_attention({x, x, x, {}, {}, {}, {}, x, lse}), impl);
    op(attention_vjp_op(), bind_attention_vjp({x, x, x, x, x, lse, {}, {}, {}, {}, x, x, x, {}}), impl);
  }
  // The headline gradients, every call's kernels (the glue's too: fill, cast, add, sum),
  // so that a must-hit cache built from this list serves them.
  for (const Function &f : {layerNormGrad(), attentionGrad("hopper"), attentionGrad("tile")})
    for (const Function::Call &call : f.calls())
      op(*call.op, call.args, call.implementation);
  // Packed attention at S2's tokens (4 sequences of 4096, N 32, H 128 bf16, causal): tile
  // and hopper, forward and VJP.
  {
    const ArgSpec pq{{4 * 4096, 32, 128}, DType::BF16}, cu{{5}, DType::I32}, plse = attention_varlen_lse_spec(pq);
    AttentionOptions packed;
    packed.is_causal = true, packed.max_seqlen_q = packed.max_seqlen_kv = 4096;
    for (const char *impl : {"tile", "hopper"}) {
      op(attention_varlen_op(), bind_attention_varlen({pq, pq, pq, cu, cu, std::nullopt, pq, plse}, packed), impl);
      op(attention_varlen_vjp_op(),
         bind_attention_varlen_vjp({pq, pq, pq, pq, pq, plse, cu, cu, std::nullopt, pq, pq, pq, std::nullopt}, packed),
         impl);
    }
  }
  // attention_fp8 at S2 (4, 4096, 32, 128 f8e4m3 with descales): hopper's V transpose and
  // forward (its reference needs sm_89's fp8 conversions: not listed for sm_80).
  {
    const ArgSpec q8{{4, 4096, 32, 128}, DType::F8E4M3}, d{{4, 32}, DType::F32}, o{{4, 4096, 32, 128}, DType::BF16};
    op(attention_fp8_op(), bind_attention_fp8({q8, q8, q8, d, d, d, std::nullopt, std::nullopt, o, std::nullopt}),
       "hopper");
  }
  // gated_linear_unit at the benchmark shape (M 8192, K 4096, N 14336 bf16, swish): the
  // tile forward and VJP.
  ArgSpec gx{{8192, 4096}, DType::BF16}, gw{{4096, 2, 14336}, DType::BF16}, gout{{8192, 14336}, DType::BF16};
  op(gated_linear_unit_op(), bind_gated_linear_unit(gx, gw, gout, GluActivation::Swish));
  op(gated_linear_unit_vjp_op(), bind_gated_linear_unit_vjp(gout, gx, gw, gx, gw, GluActivation::Swish));
  // ragged_dot at the benchmark shape (8 groups, M 32768, K 4096, N 4096 bf16): the tile
  // forward and VJP (the kernels do not depend on the group sizes).
  ArgSpec rl{{32768, 4096}, DType::BF16}, rr{{8, 4096, 4096}, DType::BF16}, rs{{8}, DType::I32};
  op(ragged_dot_op(), bind_ragged_dot(rl, rr, rs, rl));
  op(ragged_dot_vjp_op(), bind_ragged_dot_vjp(rl, rl, rr, rs, rl, rr));
  // linear_softmax_cross_entropy_loss at the benchmark shape (B 8192, D 4096, V 131072
  // bf16, mean): the tile forward and VJP.
  ArgSpec cx{{8192, 4096}, DType::BF16}, cw{{4096, 131072}, DType::BF16}, labels{{8192}, DType::I32};
  ArgSpec closs = cross_entropy_loss_spec(cx, cw, LossReduction::Mean), clse = cross_entropy_lse_spec(cx, cw);
  op(linear_softmax_cross_entropy_loss_op(),
     bind_linear_softmax_cross_entropy_loss(cx, cw, labels, closs, clse, LossReduction::Mean, -100));
  op(linear_softmax_cross_entropy_loss_vjp_op(),
     bind_linear_softmax_cross_entropy_loss_vjp(closs, cx, cw, labels, clse, cx, cw, LossReduction::Mean, -100));
  // softmax_cross_entropy at the cross-entropy benchmark's logits (B 8192, V 131072 bf16):
  // the tile forward and VJP.
  ArgSpec logits{{8192, 131072}, DType::BF16}, rows = softmax_cross_entropy_row_spec(logits);
  op(softmax_cross_entropy_op(), bind_softmax_cross_entropy(logits, labels, rows, rows));
  op(softmax_cross_entropy_vjp_op(), bind_softmax_cross_entropy_vjp(rows, logits, labels, rows, logits));
  // paged_attention at the decode benchmark's shapes (N 32, K 8, H 128 bf16, 4096 keys a
  // sequence): batch 1 on pages of 16 (split and combine kernels) and batch 64 on pages
  // of 64 (one split); the append of one token a sequence.
  for (auto [batch, page] : {std::pair<int64_t, int64_t>{1, 16}, {64, 64}}) {
    const int64_t maxPages = 4096 / page;
    ArgSpec q{{batch, 1, 32, 128}, DType::BF16}, pages{{batch * maxPages, page, 8, 128}, DType::BF16};
    ArgSpec table{{batch, maxPages}, DType::I32}, lengths{{batch}, DType::I32};
    op(paged_attention_op(), bind_paged_attention({q, pages, pages, table, lengths, q, std::nullopt}));
    ArgSpec kv{{batch, 1, 8, 128}, DType::BF16};
    op(paged_kv_append_op(), bind_paged_kv_append(kv, kv, table, lengths, pages, pages));
  }
  return kernels;
}

} // namespace tokamax
