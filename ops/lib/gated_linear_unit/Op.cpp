//===- Op.cpp - gated_linear_unit: binding, ops, API -----------===//
#include <tokamax/ops/GatedLinearUnit.h>

#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/gated_linear_unit/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

namespace tokamax {


namespace {

constexpr std::array<std::pair<const char *, GluActivation>, 8> kActivationNames{{
    {"swish", GluActivation::Swish},
    {"silu", GluActivation::Swish},
    {"gelu_tanh", GluActivation::GeluTanh},
    {"gelu", GluActivation::Gelu},
    {"gelu_exact", GluActivation::Gelu},
    {"sigmoid", GluActivation::Sigmoid},
    {"relu", GluActivation::Relu},
    {"none", GluActivation::None},
}};

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

bool isFloat(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }

/// x [..., K] and weights [K, 2, N] of one float dtype; returns {K, N}.
std::pair<int64_t, int64_t> checkOperands(const char *op, const ArgSpec &x, const ArgSpec &w) {
  ops_detail::check_spec(op, "x", x);
  ops_detail::check_spec(op, "weights", w);
  if (x.shape.empty())
    throw Error(fmt::format("{}: x must be [..., K] (rank >= 1), got {}", op, describe(x)));
  if (!isFloat(x.dtype))
    throw Error(fmt::format("{}: x must be bf16, f16, f32 or f64, got {}", op, dtype_name(x.dtype)));
  if (w.shape.size() != 3 || w.shape[1] != 2)
    throw Error(fmt::format("{}: weights must be [K, 2, N] (the gate's and the value's columns), got {}", op,
                            describe(w)));
  if (w.dtype != x.dtype)
    throw Error(fmt::format("{}: weights must have x's dtype {}, got {}", op, dtype_name(x.dtype), dtype_name(w.dtype)));
  if (w.shape[0] != x.shape.back())
    throw Error(fmt::format("{}: weights's K ({}) must equal x's last dim ({}): x {}, weights {}", op, w.shape[0],
                            x.shape.back(), describe(x), describe(w)));
  return {w.shape[0], w.shape[2]};
}

void checkExact(const char *op, const char *name, const ArgSpec &got, const ArgSpec &want) {
  if (got != want)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, describe(want), describe(got)));
}

} // namespace

const char *glu_activation_name(GluActivation activation) {
  switch (activation) {
  case GluActivation::Swish: return "swish";
  case GluActivation::GeluTanh: return "gelu_tanh";
  case GluActivation::Gelu: return "gelu";
  case GluActivation::Sigmoid: return "sigmoid";
  case GluActivation::Relu: return "relu";
  case GluActivation::None: return "none";
  }
  throw Error(fmt::format("gated_linear_unit: activation {} is not a GluActivation", int(activation)));
}

GluActivation parse_glu_activation(const std::string &name) {
  for (auto [known, activation] : kActivationNames)
    if (name == known)
      return activation;
  std::vector<const char *> names;
  for (auto [known, activation] : kActivationNames)
    names.push_back(known);
  throw Error(fmt::format("gated_linear_unit: unknown activation \"{}\" (known: {})", name, fmt::join(names, ", ")));
}

ArgSpec gated_linear_unit_out_spec(const ArgSpec &x, const ArgSpec &weights) {
  auto [k, n] = checkOperands("gated_linear_unit", x, weights);
  ArgSpec out = x;
  out.shape.back() = n;
  return out;
}

ArgSpec gated_linear_unit_preactivations_spec(const ArgSpec &x, const ArgSpec &weights) {
  auto [k, n] = checkOperands("gated_linear_unit", x, weights);
  ArgSpec h = x;
  h.shape.back() = 2;
  h.shape.push_back(n);
  return h;
}

BoundArgs bind_gated_linear_unit(const ArgSpec &x, const ArgSpec &weights, const ArgSpec &out,
                                 GluActivation activation, const std::optional<ArgSpec> &preactivations) {
  const char *op = "gated_linear_unit";
  ops_detail::check_spec(op, "out", out);
  ops_detail::check_spec(op, "preactivations", preactivations);
  checkExact(op, "out", out, gated_linear_unit_out_spec(x, weights));
  if (preactivations)
    checkExact(op, "preactivations", *preactivations, gated_linear_unit_preactivations_spec(x, weights));
  return BoundArgs{op, {x, weights, out, preactivations}, {{"activation", glu_activation_name(activation)}}};
}

BoundArgs bind_gated_linear_unit_vjp(const ArgSpec &dout, const ArgSpec &x, const ArgSpec &weights, const ArgSpec &dx,
                                     const ArgSpec &dweights, GluActivation activation,
                                     const std::optional<ArgSpec> &preactivations) {
  const char *op = "gated_linear_unit_vjp";
  checkOperands(op, x, weights);
  for (auto [name, spec] : {std::pair{"dout", &dout}, std::pair{"dx", &dx}, std::pair{"dweights", &dweights}})
    ops_detail::check_spec(op, name, *spec);
  ops_detail::check_spec(op, "preactivations", preactivations);
  checkExact(op, "dout", dout, gated_linear_unit_out_spec(x, weights));
  if (preactivations)
    checkExact(op, "preactivations", *preactivations, gated_linear_unit_preactivations_spec(x, weights));
  checkExact(op, "dx", dx, x);
  checkExact(op, "dweights", dweights, weights);
  return BoundArgs{op, {dout, x, weights, preactivations, dx, dweights},
                   {{"activation", glu_activation_name(activation)}}};
}

namespace glu_detail {

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == "gated_linear_unit_vjp";
  const ArgSpec &x = b.arg(p.vjp ? 1 : 0), &w = b.arg(p.vjp ? 2 : 1);
  p.K = w.shape[0];
  p.N = w.shape[2];
  p.M = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d)
    p.M *= x.shape[d];
  p.dtype = x.dtype;
  p.compute = x.dtype == DType::F64 ? DType::F64 : DType::F32;
  p.activation = parse_glu_activation(b.attribute("activation"));
  p.preactivations = b.has(3);
  return p;
}

} // namespace glu_detail

namespace {

const std::vector<std::string> kForwardArgs{"x", "weights", "out", "preactivations"};
const char *opName(bool vjp) { return vjp ? "gated_linear_unit_vjp" : "gated_linear_unit"; }

const std::vector<std::string> kVjpArgs{"dout", "x", "weights", "preactivations", "dx", "dweights"};

class GluOp : public Op {
public:
  explicit GluOp(bool vjp)
      : Op(opName(vjp), vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 2,
           ops_detail::typed_implementations<glu_detail::Hopper, glu_detail::Tile, glu_detail::Reference>(
               opName(vjp), vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 2, glu_detail::problem_of)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_of(name(), b, arg_names(), {"activation"});
    auto arg = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    GluActivation activation = parse_glu_activation(b.attribute("activation"));
    // preactivations (slot 3 of both) is optional.
    BoundArgs again = vjp_ ? bind_gated_linear_unit_vjp(arg(0), arg(1), arg(2), arg(4), arg(5), activation, b.args[3])
                           : bind_gated_linear_unit(arg(0), arg(1), arg(2), activation, b.args[3]);
    ops_detail::require_canonical(name(), b, again);
  }

private:
  bool vjp_;
};

} // namespace

const Op &gated_linear_unit_op() {
  static const GluOp op(false);
  return op;
}
const Op &gated_linear_unit_vjp_op() {
  static const GluOp op(true);
  return op;
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  register_op(gated_linear_unit_op());
  register_op(gated_linear_unit_vjp_op());
  return true;
}();

/// The view of an optional argument: absent where it has no data.
std::optional<ArgSpec> specOf(const TensorView *t) { return t ? std::optional(ArgSpec::of(*t)) : std::nullopt; }

void forward(const TensorView &x, const TensorView &weights, const TensorView &out, const TensorView *preactivations,
             Stream *stream, const GluOptions &o) {
  BoundArgs b = bind_gated_linear_unit(ArgSpec::of(x), ArgSpec::of(weights), ArgSpec::of(out),
                                       parse_glu_activation(o.activation), specOf(preactivations));
  TensorView in[] = {x, weights}, outs[] = {out, preactivations ? *preactivations : TensorView()};
  ops_detail::run_or_interpret(gated_linear_unit_op(), b, in, outs, stream, o);
}

void backward(const TensorView &dout, const TensorView &x, const TensorView &weights,
              const TensorView *preactivations, const TensorView &dx, const TensorView &dweights, Stream *stream,
              const GluOptions &o) {
  BoundArgs b = bind_gated_linear_unit_vjp(ArgSpec::of(dout), ArgSpec::of(x), ArgSpec::of(weights), ArgSpec::of(dx),
                                           ArgSpec::of(dweights), parse_glu_activation(o.activation),
                                           specOf(preactivations));
  TensorView in[] = {dout, x, weights, preactivations ? *preactivations : TensorView()}, outs[] = {dx, dweights};
  ops_detail::run_or_interpret(gated_linear_unit_vjp_op(), b, in, outs, stream, o);
}

} // namespace

void gated_linear_unit(const TensorView &x, const TensorView &weights, const TensorView &out, Stream &stream,
                       const GluOptions &options) {
  forward(x, weights, out, nullptr, &stream, options);
}
void gated_linear_unit(const TensorView &x, const TensorView &weights, const TensorView &out,
                       const TensorView &preactivations, Stream &stream, const GluOptions &options) {
  forward(x, weights, out, &preactivations, &stream, options);
}
void gated_linear_unit_vjp(const TensorView &dout, const TensorView &x, const TensorView &weights,
                           const TensorView &dx, const TensorView &dweights, Stream &stream,
                           const GluOptions &options) {
  backward(dout, x, weights, nullptr, dx, dweights, &stream, options);
}
void gated_linear_unit_vjp(const TensorView &dout, const TensorView &x, const TensorView &weights,
                           const TensorView &preactivations, const TensorView &dx, const TensorView &dweights,
                           Stream &stream, const GluOptions &options) {
  backward(dout, x, weights, &preactivations, dx, dweights, &stream, options);
}
void gated_linear_unit_host(const TensorView &x, const TensorView &weights, const TensorView &out,
                            const GluOptions &options) {
  forward(x, weights, out, nullptr, nullptr, options);
}
void gated_linear_unit_host(const TensorView &x, const TensorView &weights, const TensorView &out,
                            const TensorView &preactivations, const GluOptions &options) {
  forward(x, weights, out, &preactivations, nullptr, options);
}
void gated_linear_unit_vjp_host(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                const TensorView &dx, const TensorView &dweights, const GluOptions &options) {
  backward(dout, x, weights, nullptr, dx, dweights, nullptr, options);
}
void gated_linear_unit_vjp_host(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                const TensorView &preactivations, const TensorView &dx, const TensorView &dweights,
                                const GluOptions &options) {
  backward(dout, x, weights, &preactivations, dx, dweights, nullptr, options);
}

} // namespace tokamax
