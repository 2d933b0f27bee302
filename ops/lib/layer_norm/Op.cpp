//===- Op.cpp - layer_norm / rms_norm ops: binding, implementations, API --===//
#include <tokamax/ops/Norm.h>

#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/layer_norm/Common.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace tokamax {

using ops_detail::spec_of;
using ops_detail::view_of;

using norm_detail::NormKind;

namespace {

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

bool isNormDtype(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }
DType computeOf(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

std::string shapeText(const std::vector<int64_t> &shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

void checkX(const char *op, const char *name, const ArgSpec &x) {
  if (x.shape.empty())
    throw Error(fmt::format("{}: {} must have at least one dimension", op, name));
  if (!isNormDtype(x.dtype))
    throw Error(fmt::format("{}: {} must be bf16, f16, f32 or f64, got {}", op, name, dtype_name(x.dtype)));
}

int canonicalAxis(const char *op, int axis, const ArgSpec &x) {
  int rank = static_cast<int>(x.shape.size());
  if (axis < -rank || axis >= rank)
    throw Error(fmt::format("{}: axis {} is out of range for x of rank {}", op, axis, rank));
  int a = axis < 0 ? axis + rank : axis;
  if (x.shape[a] == 0)
    throw Error(fmt::format("{}: the normalised axis {} of x {} is empty", op, a, shapeText(x.shape)));
  return a;
}

void checkLike(const char *op, const char *name, const ArgSpec &a, const char *refName, const ArgSpec &ref) {
  if (a.dtype != ref.dtype)
    throw Error(fmt::format("{}: {} must have {}'s dtype {}, got {}", op, name, refName, dtype_name(ref.dtype),
                            dtype_name(a.dtype)));
  if (a.shape != ref.shape)
    throw Error(fmt::format("{}: {} must have {}'s shape {}, got {}", op, name, refName, shapeText(ref.shape),
                            shapeText(a.shape)));
}

/// scale / offset / dscale / doffset: [n] in f32 or in x's dtype.
void checkParameter(const char *op, const char *name, const std::optional<ArgSpec> &a, int64_t n, int axis, DType x) {
  if (!a)
    return;
  if (a->shape != std::vector<int64_t>{n})
    throw Error(fmt::format("{}: {} must have shape [{}] (x's axis {}), got {}", op, name, n, axis, shapeText(a->shape)));
  if (a->dtype != DType::F32 && a->dtype != x)
    throw Error(fmt::format("{}: {} must be f32 or x's dtype {}, got {}", op, name, dtype_name(x), dtype_name(a->dtype)));
}

/// mean / rstd: one value per row, in f32 or the compute dtype (f64 for f64 x).
void checkResidual(const char *op, const char *name, const std::optional<ArgSpec> &a, int64_t rows, DType compute) {
  if (!a)
    return;
  ops_detail::check_spec(op, name, *a);  // numel alone would let [-1, -3] pass for 3 rows
  if (a->numel() != rows)
    throw Error(fmt::format("{}: {} must hold one value per row ({} values, e.g. x's shape without the axis), got "
                            "shape {}",
                            op, name, rows, shapeText(a->shape)));
  if (a->dtype != DType::F32 && a->dtype != compute)
    throw Error(fmt::format("{}: {} must be f32{}, got {}", op, name, compute == DType::F32 ? "" : " or f64",
                            dtype_name(a->dtype)));
}

void checkSameDtype(const char *op, const std::optional<ArgSpec> &mean, const std::optional<ArgSpec> &rstd) {
  if (mean && rstd && mean->dtype != rstd->dtype)
    throw Error(fmt::format("{}: mean is {} but rstd is {}; they must share a dtype", op, dtype_name(mean->dtype),
                            dtype_name(rstd->dtype)));
}

std::string epsilonText(const char *op, double epsilon) {
  if (!(epsilon >= 0) || !std::isfinite(epsilon))
    throw Error(fmt::format("{}: epsilon must be finite and non-negative, got {}", op, epsilon));
  return fmt::format("{}", epsilon);
}

struct Geometry {
  int axis;
  int64_t n, rows;
};

Geometry geometry(const char *op, const ArgSpec &x, int axis) {
  ops_detail::check_spec(op, "x", x);
  checkX(op, "x", x);
  Geometry g;
  g.axis = canonicalAxis(op, axis, x);
  g.n = x.shape[g.axis];
  g.rows = x.numel() / g.n;
  return g;
}

//===----------------------------------------------------------------------===//
// Ops and implementations
//===----------------------------------------------------------------------===//

const char *opName(NormKind kind, bool vjp) {
  if (kind == NormKind::Layer)
    return vjp ? "layer_norm_vjp" : "layer_norm";
  return vjp ? "rms_norm_vjp" : "rms_norm";
}

std::vector<std::string> argNames(NormKind kind, bool vjp) {
  if (kind == NormKind::Layer)
    return vjp ? std::vector<std::string>{"dy", "x", "scale", "mean", "rstd", "dx", "dscale", "doffset"}
               : std::vector<std::string>{"x", "scale", "offset", "y", "mean", "rstd"};
  return vjp ? std::vector<std::string>{"dy", "x", "scale", "rstd", "dx", "dscale"}
             : std::vector<std::string>{"x", "scale", "y", "rstd"};
}

size_t numInputs(NormKind kind, bool vjp) {
  if (kind == NormKind::Layer)
    return vjp ? 5 : 3;
  return vjp ? 4 : 2;
}

class NormOp : public Op {
public:
  NormOp(NormKind kind, bool vjp)
      : Op(opName(kind, vjp), argNames(kind, vjp), numInputs(kind, vjp),
           ops_detail::typed_implementations<norm_detail::Tile, norm_detail::Reference>(
               opName(kind, vjp), argNames(kind, vjp), numInputs(kind, vjp),
               [kind, vjp](const BoundArgs &args) { return norm_detail::problem_of(args, kind, vjp); })),
        kind_(kind), vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    if (vjp_)
      ops_detail::require_call_of(name(), b, arg_names(), {"axis"});
    else
      ops_detail::require_call_of(name(), b, arg_names(), {"axis", "epsilon"});
    auto need = [&](size_t i) -> const ArgSpec & { return ops_detail::required_arg(name(), b, arg_names(), i); };
    auto at = [&](size_t i) { return ops_detail::optional_arg(b, i); };
    int axis = static_cast<int>(b.int_attribute("axis"));
    BoundArgs again;
    if (kind_ == NormKind::Layer && !vjp_)
      again = bind_layer_norm(need(0), at(1), at(2), need(3), at(4), at(5), axis, b.float_attribute("epsilon"));
    else if (kind_ == NormKind::Layer)
      again = bind_layer_norm_vjp(need(0), need(1), at(2), need(3), need(4), need(5), at(6), at(7), axis);
    else if (!vjp_)
      again = bind_rms_norm(need(0), at(1), need(2), at(3), axis, b.float_attribute("epsilon"));
    else
      again = bind_rms_norm_vjp(need(0), need(1), at(2), need(3), need(4), at(5), axis);
    ops_detail::require_canonical(name(), b, again);
  }

private:
  NormKind kind_;
  bool vjp_;
};

//===----------------------------------------------------------------------===//
// Calls
//===----------------------------------------------------------------------===//

/// A device call through the eager call cache: `key` holds the op and its tensors; the
/// options join it here.
template <class Bind>
void dispatch(ops_detail::CallKey &key, std::span<const TensorView> in, std::span<const TensorView> out,
              Stream &stream, const NormOptions &options, Bind &&bind) {
  // Every option joins the key; a new field must join it too.
  static_assert(sizeof(NormOptions) == 112, "NormOptions changed: add the new option to the call key");
  key.add(options.axis).add(options.epsilon);
  ops_detail::run_eager(key, {key.op(), in, out, stream, options.implementation, options.config},
                        std::forward<Bind>(bind));
}

void dispatchHost(const Op &op, const BoundArgs &b, std::span<const TensorView> in, std::span<const TensorView> out,
                  const NormOptions &options) {
  // Choose as an H200 would, so the interpreter runs the kernels the GPU would.
  const Implementation &impl = op.select(b, options.implementation, "sm_90a");
  impl.interpret(b, op.resolve_config(impl, b, options.config), in, out);
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

BoundArgs bind_layer_norm(const ArgSpec &x, const std::optional<ArgSpec> &scale, const std::optional<ArgSpec> &offset,
                          const ArgSpec &y, const std::optional<ArgSpec> &mean_out,
                          const std::optional<ArgSpec> &rstd_out, int axis, double epsilon) {
  const char *op = "layer_norm";
  Geometry g = geometry(op, x, axis);
  checkParameter(op, "scale", scale, g.n, g.axis, x.dtype);
  checkParameter(op, "offset", offset, g.n, g.axis, x.dtype);
  checkLike(op, "y", y, "x", x);
  checkResidual(op, "mean", mean_out, g.rows, computeOf(x.dtype));
  checkResidual(op, "rstd", rstd_out, g.rows, computeOf(x.dtype));
  checkSameDtype(op, mean_out, rstd_out);
  return BoundArgs{op,
                   {x, scale, offset, y, mean_out, rstd_out},
                   {{"axis", std::to_string(g.axis)}, {"epsilon", epsilonText(op, epsilon)}}};
}

BoundArgs bind_layer_norm_vjp(const ArgSpec &dy, const ArgSpec &x, const std::optional<ArgSpec> &scale,
                              const ArgSpec &mean, const ArgSpec &rstd, const ArgSpec &dx,
                              const std::optional<ArgSpec> &dscale, const std::optional<ArgSpec> &doffset, int axis) {
  const char *op = "layer_norm_vjp";
  Geometry g = geometry(op, x, axis);
  checkLike(op, "dy", dy, "x", x);
  checkParameter(op, "scale", scale, g.n, g.axis, x.dtype);
  checkResidual(op, "mean", mean, g.rows, computeOf(x.dtype));
  checkResidual(op, "rstd", rstd, g.rows, computeOf(x.dtype));
  checkSameDtype(op, mean, rstd);
  checkLike(op, "dx", dx, "x", x);
  checkParameter(op, "dscale", dscale, g.n, g.axis, x.dtype);
  checkParameter(op, "doffset", doffset, g.n, g.axis, x.dtype);
  return BoundArgs{op, {dy, x, scale, mean, rstd, dx, dscale, doffset}, {{"axis", std::to_string(g.axis)}}};
}

BoundArgs bind_rms_norm(const ArgSpec &x, const std::optional<ArgSpec> &scale, const ArgSpec &y,
                        const std::optional<ArgSpec> &rstd_out, int axis, double epsilon) {
  const char *op = "rms_norm";
  Geometry g = geometry(op, x, axis);
  checkParameter(op, "scale", scale, g.n, g.axis, x.dtype);
  checkLike(op, "y", y, "x", x);
  checkResidual(op, "rstd", rstd_out, g.rows, computeOf(x.dtype));
  return BoundArgs{op, {x, scale, y, rstd_out}, {{"axis", std::to_string(g.axis)}, {"epsilon", epsilonText(op, epsilon)}}};
}

BoundArgs bind_rms_norm_vjp(const ArgSpec &dy, const ArgSpec &x, const std::optional<ArgSpec> &scale,
                            const ArgSpec &rstd, const ArgSpec &dx, const std::optional<ArgSpec> &dscale, int axis) {
  const char *op = "rms_norm_vjp";
  Geometry g = geometry(op, x, axis);
  checkLike(op, "dy", dy, "x", x);
  checkParameter(op, "scale", scale, g.n, g.axis, x.dtype);
  checkResidual(op, "rstd", rstd, g.rows, computeOf(x.dtype));
  checkLike(op, "dx", dx, "x", x);
  checkParameter(op, "dscale", dscale, g.n, g.axis, x.dtype);
  return BoundArgs{op, {dy, x, scale, rstd, dx, dscale}, {{"axis", std::to_string(g.axis)}}};
}

const Op &layer_norm_op() {
  static const NormOp op(NormKind::Layer, false);
  return op;
}
const Op &layer_norm_vjp_op() {
  static const NormOp op(NormKind::Layer, true);
  return op;
}
const Op &rms_norm_op() {
  static const NormOp op(NormKind::Rms, false);
  return op;
}
const Op &rms_norm_vjp_op() {
  static const NormOp op(NormKind::Rms, true);
  return op;
}

namespace {
[[maybe_unused]] const bool kRegistered = [] {
  for (const Op *op : {&layer_norm_op(), &layer_norm_vjp_op(), &rms_norm_op(), &rms_norm_vjp_op()})
    register_op(*op);
  return true;
}();
} // namespace

void layer_norm(const TensorView &x, const TensorView *scale, const TensorView *offset, const TensorView &y,
                Stream &stream, const NormOptions &options, const TensorView *mean_out, const TensorView *rstd_out) {
  TensorView in[] = {x, view_of(scale), view_of(offset)}, out[] = {y, view_of(mean_out), view_of(rstd_out)};
  ops_detail::CallKey key(layer_norm_op());
  key.add({&x, scale, offset, &y, mean_out, rstd_out});
  dispatch(key, in, out, stream, options, [&] {
    return bind_layer_norm(ArgSpec::of(x), spec_of(scale), spec_of(offset), ArgSpec::of(y), spec_of(mean_out),
                           spec_of(rstd_out), options.axis, options.epsilon);
  });
}

void layer_norm_vjp(const TensorView &dy, const TensorView &x, const TensorView *scale, const TensorView &mean,
                    const TensorView &rstd, const TensorView &dx, const TensorView *dscale, const TensorView *doffset,
                    Stream &stream, const NormOptions &options) {
  TensorView in[] = {dy, x, view_of(scale), mean, rstd}, out[] = {dx, view_of(dscale), view_of(doffset)};
  ops_detail::CallKey key(layer_norm_vjp_op());
  key.add({&dy, &x, scale, &mean, &rstd, &dx, dscale, doffset});
  dispatch(key, in, out, stream, options, [&] {
    return bind_layer_norm_vjp(ArgSpec::of(dy), ArgSpec::of(x), spec_of(scale), ArgSpec::of(mean), ArgSpec::of(rstd),
                               ArgSpec::of(dx), spec_of(dscale), spec_of(doffset), options.axis);
  });
}

void rms_norm(const TensorView &x, const TensorView *scale, const TensorView &y, Stream &stream,
              const NormOptions &options, const TensorView *rstd_out) {
  TensorView in[] = {x, view_of(scale)}, out[] = {y, view_of(rstd_out)};
  ops_detail::CallKey key(rms_norm_op());
  key.add({&x, scale, &y, rstd_out});
  dispatch(key, in, out, stream, options, [&] {
    return bind_rms_norm(ArgSpec::of(x), spec_of(scale), ArgSpec::of(y), spec_of(rstd_out), options.axis,
                         options.epsilon);
  });
}

void rms_norm_vjp(const TensorView &dy, const TensorView &x, const TensorView *scale, const TensorView &rstd,
                  const TensorView &dx, const TensorView *dscale, Stream &stream, const NormOptions &options) {
  TensorView in[] = {dy, x, view_of(scale), rstd}, out[] = {dx, view_of(dscale)};
  ops_detail::CallKey key(rms_norm_vjp_op());
  key.add({&dy, &x, scale, &rstd, &dx, dscale});
  dispatch(key, in, out, stream, options, [&] {
    return bind_rms_norm_vjp(ArgSpec::of(dy), ArgSpec::of(x), spec_of(scale), ArgSpec::of(rstd), ArgSpec::of(dx),
                             spec_of(dscale), options.axis);
  });
}

void layer_norm_host(const TensorView &x, const TensorView *scale, const TensorView *offset, const TensorView &y,
                     const NormOptions &options, const TensorView *mean_out, const TensorView *rstd_out) {
  BoundArgs b = bind_layer_norm(ArgSpec::of(x), spec_of(scale), spec_of(offset), ArgSpec::of(y), spec_of(mean_out),
                                spec_of(rstd_out), options.axis, options.epsilon);
  TensorView in[] = {x, view_of(scale), view_of(offset)}, out[] = {y, view_of(mean_out), view_of(rstd_out)};
  dispatchHost(layer_norm_op(), b, in, out, options);
}

void layer_norm_vjp_host(const TensorView &dy, const TensorView &x, const TensorView *scale, const TensorView &mean,
                         const TensorView &rstd, const TensorView &dx, const TensorView *dscale,
                         const TensorView *doffset, const NormOptions &options) {
  BoundArgs b = bind_layer_norm_vjp(ArgSpec::of(dy), ArgSpec::of(x), spec_of(scale), ArgSpec::of(mean),
                                    ArgSpec::of(rstd), ArgSpec::of(dx), spec_of(dscale), spec_of(doffset), options.axis);
  TensorView in[] = {dy, x, view_of(scale), mean, rstd}, out[] = {dx, view_of(dscale), view_of(doffset)};
  dispatchHost(layer_norm_vjp_op(), b, in, out, options);
}

void rms_norm_host(const TensorView &x, const TensorView *scale, const TensorView &y, const NormOptions &options,
                   const TensorView *rstd_out) {
  BoundArgs b = bind_rms_norm(ArgSpec::of(x), spec_of(scale), ArgSpec::of(y), spec_of(rstd_out), options.axis,
                              options.epsilon);
  TensorView in[] = {x, view_of(scale)}, out[] = {y, view_of(rstd_out)};
  dispatchHost(rms_norm_op(), b, in, out, options);
}

void rms_norm_vjp_host(const TensorView &dy, const TensorView &x, const TensorView *scale, const TensorView &rstd,
                       const TensorView &dx, const TensorView *dscale, const NormOptions &options) {
  BoundArgs b = bind_rms_norm_vjp(ArgSpec::of(dy), ArgSpec::of(x), spec_of(scale), ArgSpec::of(rstd), ArgSpec::of(dx),
                                  spec_of(dscale), options.axis);
  TensorView in[] = {dy, x, view_of(scale), rstd}, out[] = {dx, view_of(dscale)};
  dispatchHost(rms_norm_vjp_op(), b, in, out, options);
}

} // namespace tokamax
