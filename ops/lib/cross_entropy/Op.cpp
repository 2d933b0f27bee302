//===- Op.cpp - linear_softmax_cross_entropy_loss: binding, ops, API -===//
#include <tokamax/ops/CrossEntropy.h>

#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/cross_entropy/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

namespace tokamax {

namespace {

constexpr const char *kForwardOp = "linear_softmax_cross_entropy_loss";
constexpr const char *kVjpOp = "linear_softmax_cross_entropy_loss_vjp";

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

bool isFloat(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }
DType computeOf(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

/// x [B, D], w [D, V] of one float dtype and labels int32 [B].
void checkOperands(const char *op, const ArgSpec &x, const ArgSpec &w, const ArgSpec &labels) {
  ops_detail::check_spec(op, "x", x);
  ops_detail::check_spec(op, "w", w);
  ops_detail::check_spec(op, "labels", labels);
  if (x.shape.size() != 2)
    throw Error(fmt::format("{}: x must be [B, D], got {}", op, describe(x)));
  if (!isFloat(x.dtype))
    throw Error(fmt::format("{}: x must be bf16, f16, f32 or f64, got {}", op, dtype_name(x.dtype)));
  if (w.shape.size() != 2)
    throw Error(fmt::format("{}: w must be [D, V], got {}", op, describe(w)));
  if (w.dtype != x.dtype)
    throw Error(fmt::format("{}: w must have x's dtype {}, got {}", op, dtype_name(x.dtype), dtype_name(w.dtype)));
  if (w.shape[0] != x.shape[1])
    throw Error(fmt::format("{}: w's D ({}) must equal x's D ({}): x {}, w {}", op, w.shape[0], x.shape[1],
                            describe(x), describe(w)));
  if (w.shape[1] < 1)
    throw Error(fmt::format("{}: w must have at least one class (V >= 1), got {}", op, describe(w)));
  const ArgSpec want{{x.shape[0]}, DType::I32};
  if (labels != want)
    throw Error(fmt::format("{}: labels must be {}, got {}", op, describe(want), describe(labels)));
}

void checkExact(const char *op, const char *name, const ArgSpec &got, const ArgSpec &want) {
  if (got != want)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, describe(want), describe(got)));
}

std::map<std::string, std::string> attributesOf(LossReduction reduction, int64_t ignoreIndex) {
  return {{"reduction", loss_reduction_name(reduction)}, {"ignore_index", std::to_string(ignoreIndex)}};
}

int64_t parseIgnoreIndex(const char *op, const std::string &text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(fmt::format("{}: attribute ignore_index must be a decimal integer, got \"{}\"", op, text));
  return v;
}

} // namespace

const char *loss_reduction_name(LossReduction reduction) {
  switch (reduction) {
  case LossReduction::None: return "none";
  case LossReduction::Sum: return "sum";
  case LossReduction::Mean: return "mean";
  }
  throw Error(fmt::format("{}: reduction {} is not a LossReduction", kForwardOp, int(reduction)));
}

LossReduction parse_loss_reduction(const std::string &name) {
  for (LossReduction r : {LossReduction::None, LossReduction::Sum, LossReduction::Mean})
    if (name == loss_reduction_name(r))
      return r;
  throw Error(fmt::format("{}: unknown reduction \"{}\" (known: none, sum, mean)", kForwardOp, name));
}

ArgSpec cross_entropy_loss_spec(const ArgSpec &x, const ArgSpec &w, LossReduction reduction) {
  checkOperands(kForwardOp, x, w, ArgSpec{{x.shape.empty() ? 0 : x.shape[0]}, DType::I32});
  return ArgSpec{{reduction == LossReduction::None ? x.shape[0] : 1}, computeOf(x.dtype)};
}

ArgSpec cross_entropy_lse_spec(const ArgSpec &x, const ArgSpec &w) {
  checkOperands(kForwardOp, x, w, ArgSpec{{x.shape.empty() ? 0 : x.shape[0]}, DType::I32});
  return ArgSpec{{x.shape[0]}, computeOf(x.dtype)};
}

BoundArgs bind_linear_softmax_cross_entropy_loss(const ArgSpec &x, const ArgSpec &w, const ArgSpec &labels,
                                                 const ArgSpec &loss, const ArgSpec &lse, LossReduction reduction,
                                                 int64_t ignore_index) {
  const char *op = kForwardOp;
  checkOperands(op, x, w, labels);
  ops_detail::check_spec(op, "loss", loss);
  ops_detail::check_spec(op, "lse", lse);
  checkExact(op, "loss", loss, cross_entropy_loss_spec(x, w, reduction));
  checkExact(op, "lse", lse, cross_entropy_lse_spec(x, w));
  return BoundArgs{op, {x, w, labels, loss, lse}, attributesOf(reduction, ignore_index)};
}

BoundArgs bind_linear_softmax_cross_entropy_loss_vjp(const ArgSpec &dloss, const ArgSpec &x, const ArgSpec &w,
                                                     const ArgSpec &labels, const ArgSpec &lse, const ArgSpec &dx,
                                                     const ArgSpec &dw, LossReduction reduction,
                                                     int64_t ignore_index) {
  const char *op = kVjpOp;
  checkOperands(op, x, w, labels);
  for (auto [name, spec] : {std::pair{"dloss", &dloss}, std::pair{"lse", &lse}, std::pair{"dx", &dx},
                            std::pair{"dw", &dw}})
    ops_detail::check_spec(op, name, *spec);
  checkExact(op, "dloss", dloss, cross_entropy_loss_spec(x, w, reduction));
  checkExact(op, "lse", lse, cross_entropy_lse_spec(x, w));
  checkExact(op, "dx", dx, x);
  checkExact(op, "dw", dw, w);
  return BoundArgs{op, {dloss, x, w, labels, lse, dx, dw}, attributesOf(reduction, ignore_index)};
}

namespace xent_detail {

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == kVjpOp;
  const ArgSpec &x = b.arg(p.vjp ? 1 : 0), &w = b.arg(p.vjp ? 2 : 1);
  p.B = x.shape[0];
  p.D = x.shape[1];
  p.V = w.shape[1];
  p.dtype = x.dtype;
  p.compute = computeOf(x.dtype);
  p.reduction = parse_loss_reduction(b.attribute("reduction"));
  p.ignore_index = parseIgnoreIndex(b.op.c_str(), b.attribute("ignore_index"));
  return p;
}

} // namespace xent_detail

namespace {

const std::vector<std::string> kForwardArgs{"x", "w", "labels", "loss", "lse"};
const std::vector<std::string> kVjpArgs{"dloss", "x", "w", "labels", "lse", "dx", "dw"};

class XentOp : public Op {
public:
  explicit XentOp(bool vjp)
      : Op(vjp ? kVjpOp : kForwardOp, vjp ? kVjpArgs : kForwardArgs, vjp ? 5 : 3,
           ops_detail::typed_implementations<xent_detail::Hopper, xent_detail::Tile, xent_detail::Reference>(
               vjp ? kVjpOp : kForwardOp, vjp ? kVjpArgs : kForwardArgs, vjp ? 5 : 3, xent_detail::problem_of)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_shape(name(), b, arg_names(), {"reduction", "ignore_index"});
    const LossReduction reduction = parse_loss_reduction(b.attribute("reduction"));
    const int64_t ignore = parseIgnoreIndex(name().c_str(), b.attribute("ignore_index"));
    const auto &a = b.args;
    BoundArgs again = vjp_ ? bind_linear_softmax_cross_entropy_loss_vjp(*a[0], *a[1], *a[2], *a[3], *a[4], *a[5],
                                                                        *a[6], reduction, ignore)
                           : bind_linear_softmax_cross_entropy_loss(*a[0], *a[1], *a[2], *a[3], *a[4], reduction,
                                                                    ignore);
    ops_detail::require_canonical(name(), b, again);
  }

private:
  bool vjp_;
};

} // namespace

const Op &linear_softmax_cross_entropy_loss_op() {
  static const XentOp op(false);
  return op;
}
const Op &linear_softmax_cross_entropy_loss_vjp_op() {
  static const XentOp op(true);
  return op;
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  register_op(linear_softmax_cross_entropy_loss_op());
  register_op(linear_softmax_cross_entropy_loss_vjp_op());
  return true;
}();

void forward(const TensorView &x, const TensorView &w, const TensorView &labels, const TensorView &loss,
             const TensorView &lse, Stream *stream, const CrossEntropyOptions &o) {
  BoundArgs b = bind_linear_softmax_cross_entropy_loss(ArgSpec::of(x), ArgSpec::of(w), ArgSpec::of(labels),
                                                       ArgSpec::of(loss), ArgSpec::of(lse), o.reduction,
                                                       o.ignore_index);
  TensorView in[] = {x, w, labels}, outs[] = {loss, lse};
  ops_detail::run_or_interpret(linear_softmax_cross_entropy_loss_op(), b, in, outs, stream, o);
}

void backward(const TensorView &dloss, const TensorView &x, const TensorView &w, const TensorView &labels,
              const TensorView &lse, const TensorView &dx, const TensorView &dw, Stream *stream,
              const CrossEntropyOptions &o) {
  BoundArgs b = bind_linear_softmax_cross_entropy_loss_vjp(ArgSpec::of(dloss), ArgSpec::of(x), ArgSpec::of(w),
                                                           ArgSpec::of(labels), ArgSpec::of(lse), ArgSpec::of(dx),
                                                           ArgSpec::of(dw), o.reduction, o.ignore_index);
  TensorView in[] = {dloss, x, w, labels, lse}, outs[] = {dx, dw};
  ops_detail::run_or_interpret(linear_softmax_cross_entropy_loss_vjp_op(), b, in, outs, stream, o);
}

} // namespace

void linear_softmax_cross_entropy_loss(const TensorView &x, const TensorView &w, const TensorView &labels,
                                       const TensorView &loss, const TensorView &lse, Stream &stream,
                                       const CrossEntropyOptions &options) {
  forward(x, w, labels, loss, lse, &stream, options);
}
void linear_softmax_cross_entropy_loss_vjp(const TensorView &dloss, const TensorView &x, const TensorView &w,
                                           const TensorView &labels, const TensorView &lse, const TensorView &dx,
                                           const TensorView &dw, Stream &stream, const CrossEntropyOptions &options) {
  backward(dloss, x, w, labels, lse, dx, dw, &stream, options);
}
void linear_softmax_cross_entropy_loss_host(const TensorView &x, const TensorView &w, const TensorView &labels,
                                            const TensorView &loss, const TensorView &lse,
                                            const CrossEntropyOptions &options) {
  forward(x, w, labels, loss, lse, nullptr, options);
}
void linear_softmax_cross_entropy_loss_vjp_host(const TensorView &dloss, const TensorView &x, const TensorView &w,
                                                const TensorView &labels, const TensorView &lse,
                                                const TensorView &dx, const TensorView &dw,
                                                const CrossEntropyOptions &options) {
  backward(dloss, x, w, labels, lse, dx, dw, nullptr, options);
}

} // namespace tokamax
