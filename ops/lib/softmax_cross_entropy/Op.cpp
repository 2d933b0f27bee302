//===- Op.cpp - softmax_cross_entropy: binding, validation, ops, API -===//
//
// Binding checks every spec before anything runs (errors name the argument and what it
// expected); the tensors' own checks (contiguous, with data, on one device) are the
// framework's (Views.h), also before any launch. The ops register their
// implementations in auto's order: tile, then reference.
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/softmax_cross_entropy/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tokamax {

namespace sce = softmax_cross_entropy_detail;

namespace {

constexpr const char *kForwardOp = "softmax_cross_entropy";
constexpr const char *kVjpOp = "softmax_cross_entropy_vjp";
const std::vector<std::string> kForwardArgs{"logits", "labels", "loss", "lse"};
const std::vector<std::string> kVjpArgs{"dloss", "logits", "labels", "lse", "dlogits"};

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

DType computeOf(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

/// logits [B, V] of a float dtype, V >= 1.
void checkLogits(const char *op, const ArgSpec &logits) {
  ops_detail::check_spec(op, "logits", logits);
  if (logits.shape.size() != 2)
    throw Error(fmt::format("{}: logits must be [B, V], got {}", op, describe(logits)));
  const DType d = logits.dtype;
  if (d != DType::BF16 && d != DType::F16 && d != DType::F32 && d != DType::F64)
    throw Error(fmt::format("{}: logits must be bf16, f16, f32 or f64, got {}", op, dtype_name(d)));
  if (logits.shape[1] < 1)
    throw Error(fmt::format("{}: logits must have at least one class (V >= 1), got {}", op, describe(logits)));
}

/// `got` must be exactly `want`.
void checkExact(const char *op, const char *name, const ArgSpec &got, const ArgSpec &want) {
  ops_detail::check_spec(op, name, got);
  if (got != want)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, describe(want), describe(got)));
}

ArgSpec labelsSpec(const ArgSpec &logits) { return {{logits.shape[0]}, DType::I32}; }

} // namespace

ArgSpec softmax_cross_entropy_row_spec(const ArgSpec &logits) {
  checkLogits(kForwardOp, logits);
  return {{logits.shape[0]}, computeOf(logits.dtype)};
}

BoundArgs bind_softmax_cross_entropy(const ArgSpec &logits, const ArgSpec &labels, const ArgSpec &loss,
                                     const ArgSpec &lse) {
  const char *op = kForwardOp;
  checkLogits(op, logits);
  const ArgSpec rows = softmax_cross_entropy_row_spec(logits);
  checkExact(op, "labels", labels, labelsSpec(logits));
  checkExact(op, "loss", loss, rows);
  checkExact(op, "lse", lse, rows);
  return BoundArgs{op, {logits, labels, loss, lse}, {}};
}

BoundArgs bind_softmax_cross_entropy_vjp(const ArgSpec &dloss, const ArgSpec &logits, const ArgSpec &labels,
                                         const ArgSpec &lse, const ArgSpec &dlogits) {
  const char *op = kVjpOp;
  checkLogits(op, logits);
  const ArgSpec rows = softmax_cross_entropy_row_spec(logits);
  checkExact(op, "dloss", dloss, rows);
  checkExact(op, "labels", labels, labelsSpec(logits));
  checkExact(op, "lse", lse, rows);
  checkExact(op, "dlogits", dlogits, logits);
  return BoundArgs{op, {dloss, logits, labels, lse, dlogits}, {}};
}

namespace softmax_cross_entropy_detail {

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == kVjpOp;
  const ArgSpec &logits = b.arg(p.vjp ? 1 : 0);
  p.B = logits.shape[0];
  p.V = logits.shape[1];
  p.dtype = logits.dtype;
  p.compute = computeOf(logits.dtype);
  return p;
}

} // namespace softmax_cross_entropy_detail

namespace {

class SoftmaxCrossEntropyOp : public Op {
public:
  explicit SoftmaxCrossEntropyOp(bool vjp)
      : Op(vjp ? kVjpOp : kForwardOp, vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 2,
           ops_detail::typed_implementations<sce::Tile, sce::Reference>(
               vjp ? kVjpOp : kForwardOp, vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 2, sce::problem_of)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_shape(name(), b, arg_names(), {});
    const auto &a = b.args;
    ops_detail::require_canonical(name(), b,
                                  vjp_ ? bind_softmax_cross_entropy_vjp(*a[0], *a[1], *a[2], *a[3], *a[4])
                                       : bind_softmax_cross_entropy(*a[0], *a[1], *a[2], *a[3]));
  }

private:
  bool vjp_;
};

} // namespace

const Op &softmax_cross_entropy_op() {
  static const SoftmaxCrossEntropyOp op(false);
  return op;
}
const Op &softmax_cross_entropy_vjp_op() {
  static const SoftmaxCrossEntropyOp op(true);
  return op;
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  register_op(softmax_cross_entropy_op());
  register_op(softmax_cross_entropy_vjp_op());
  return true;
}();

void forward(const TensorView &logits, const TensorView &labels, const TensorView &loss, const TensorView &lse,
             Stream *stream, const SoftmaxCrossEntropyOptions &o) {
  BoundArgs b = bind_softmax_cross_entropy(ArgSpec::of(logits), ArgSpec::of(labels), ArgSpec::of(loss),
                                           ArgSpec::of(lse));
  TensorView in[] = {logits, labels}, out[] = {loss, lse};
  ops_detail::run_or_interpret(softmax_cross_entropy_op(), b, in, out, stream, o);
}

void backward(const TensorView &dloss, const TensorView &logits, const TensorView &labels, const TensorView &lse,
              const TensorView &dlogits, Stream *stream, const SoftmaxCrossEntropyOptions &o) {
  BoundArgs b = bind_softmax_cross_entropy_vjp(ArgSpec::of(dloss), ArgSpec::of(logits), ArgSpec::of(labels),
                                               ArgSpec::of(lse), ArgSpec::of(dlogits));
  TensorView in[] = {dloss, logits, labels, lse}, out[] = {dlogits};
  ops_detail::run_or_interpret(softmax_cross_entropy_vjp_op(), b, in, out, stream, o);
}

} // namespace

void softmax_cross_entropy(const TensorView &logits, const TensorView &labels, const TensorView &loss,
                           const TensorView &lse, Stream &stream, const SoftmaxCrossEntropyOptions &options) {
  forward(logits, labels, loss, lse, &stream, options);
}
void softmax_cross_entropy_vjp(const TensorView &dloss, const TensorView &logits, const TensorView &labels,
                               const TensorView &lse, const TensorView &dlogits, Stream &stream,
                               const SoftmaxCrossEntropyOptions &options) {
  backward(dloss, logits, labels, lse, dlogits, &stream, options);
}
void softmax_cross_entropy_host(const TensorView &logits, const TensorView &labels, const TensorView &loss,
                                const TensorView &lse, const SoftmaxCrossEntropyOptions &options) {
  forward(logits, labels, loss, lse, nullptr, options);
}
void softmax_cross_entropy_vjp_host(const TensorView &dloss, const TensorView &logits, const TensorView &labels,
                                    const TensorView &lse, const TensorView &dlogits,
                                    const SoftmaxCrossEntropyOptions &options) {
  backward(dloss, logits, labels, lse, dlogits, nullptr, options);
}

} // namespace tokamax
