//===- Reference.cpp - softmax_cross_entropy: one row per program, two passes -===//
//
//   forward: one program per row: a pass over V for the max, a second for the sum of
//            exp(logit - max) and the label's logit;
//   VJP:     one program per row: a pass over V writing dlogits from the forward's lse.
// Math in f32 (f64 for f64 logits), every dtype, any V: the simplest kernels that are
// right, which the tile kernels and the GPU tests are compared with.
//
// Config {block_v}: the columns of one step over V.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/softmax_cross_entropy/Common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tokamax::softmax_cross_entropy_detail {

using namespace dsl;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kWarps = 4;

/// Row `row`'s columns n0 .. n0 + block_v as [1, block_v] in the compute dtype (-inf
/// past V, which adds nothing to a max or a sum of exponentials).
Value rowStep(const TensorArg &logits, const Problem &p, const ReferenceConfig &c, const Value &row,
              const Value &n0) {
  return logits.load({row, n0}, {1, c.block_v}, -INFINITY).to(p.compute);
}

Kernel forwardKernel(const Problem &p, const ReferenceConfig &c) {
  Kernel k("softmax_cross_entropy_reference", {.num_warps = kWarps});
  TensorArg logits = k.input("logits", p.dtype, {p.B, p.V});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg loss = k.output("loss", p.compute, {p.B});
  TensorArg lse = k.output("lse", p.compute, {p.B});
  k.grid(p.B);
  Value row = k.program_id(0);
  Value label = labels.load({row}, {1});
  Value max = k.loop(0, p.V, c.block_v, {k.full({1}, -INFINITY, p.compute)}, [&](Value n0, std::vector<Value> m) {
    return std::vector<Value>{maximum(m[0], rowStep(logits, p, c, row, n0).max(1))};
  })[0];
  Value zero = k.full({1}, 0.0, p.compute);
  std::vector<Value> r = k.loop(0, p.V, c.block_v, {zero, zero}, [&](Value n0, std::vector<Value> s) {
    Value x = rowStep(logits, p, c, row, n0);
    Value column = (n0 + k.arange(0, c.block_v)).expand(0);
    return std::vector<Value>{s[0] + exp(x - max.expand(1)).sum(1),
                              s[1] + where(column == label.expand(1), x, 0.0).sum(1)};
  });
  Value rowLse = max + log(r[0]);
  loss.store({row}, where(label_out_of_range(p, label), kNaN, rowLse - r[1]));
  lse.store({row}, rowLse);
  return k;
}

Kernel vjpKernel(const Problem &p, const ReferenceConfig &c) {
  Kernel k("softmax_cross_entropy_reference_vjp", {.num_warps = kWarps});
  TensorArg dloss = k.input("dloss", p.compute, {p.B});
  TensorArg logits = k.input("logits", p.dtype, {p.B, p.V});
  TensorArg labels = k.input("labels", DType::I32, {p.B});
  TensorArg lse = k.input("lse", p.compute, {p.B});
  TensorArg dlogits = k.output("dlogits", p.dtype, {p.B, p.V});
  k.grid(p.B);
  Value row = k.program_id(0);
  Value label = labels.load({row}, {1});
  Value g = where(label_out_of_range(p, label), kNaN, dloss.load({row}, {1})).expand(1);
  Value rowLse = lse.load({row}, {1}).expand(1);
  k.loop(0, p.V, c.block_v, {}, [&](Value n0, std::vector<Value>) {
    Value prob = exp(rowStep(logits, p, c, row, n0) - rowLse);
    Value column = (n0 + k.arange(0, c.block_v)).expand(0);
    dlogits.store({row, n0}, (g * where(column == label.expand(1), prob - 1.0, prob)).to(p.dtype));
    return std::vector<Value>{};
  });
  return k;
}

} // namespace

std::optional<std::string> Reference::why_not(const Problem &) { return std::nullopt; }

ReferenceConfig Reference::heuristic(const Problem &p) {
  return {std::min<int64_t>(next_power_of_two(p.V), 256)};
}

std::vector<ReferenceConfig> Reference::search_space(const Problem &p) {
  std::vector<ReferenceConfig> space{heuristic(p)};
  if (const ReferenceConfig wide{1024}; p.V > 256 && !(space.front() == wide))
    space.push_back(wide);
  return space;
}

std::optional<std::string> Reference::check(const Problem &, const ReferenceConfig &c) {
  if (c.block_v < 1 || c.block_v > 4096 || (c.block_v & (c.block_v - 1)) != 0)
    return fmt::format("block_v must be a power of two in [1, 4096], got {}", c.block_v);
  return std::nullopt;
}

void Reference::execute(const Problem &p, const ReferenceConfig &c, std::span<const TensorView> in,
                        std::span<const TensorView> out, KernelExecutor &ex) {
  if (p.B == 0)  // no rows: nothing to write
    return;
  const KernelKey key =
      ops_detail::specializationKey(p.vjp ? "softmax_cross_entropy_reference_vjp" : "softmax_cross_entropy_reference",
                                    {p.B, p.V, int64_t(p.dtype), c.block_v});
  if (p.vjp)  // dloss, logits, labels, lse | dlogits
    ex.launch(key, [p, c] { return vjpKernel(p, c); }, {in[0], in[1], in[2], in[3], out[0]});
  else  // logits, labels | loss, lse
    ex.launch(key, [p, c] { return forwardKernel(p, c); }, {in[0], in[1], out[0], out[1]});
}

} // namespace tokamax::softmax_cross_entropy_detail
