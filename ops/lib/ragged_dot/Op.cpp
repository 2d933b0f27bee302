//===- Op.cpp - ragged_dot: binding, ops, API ------------------------===//
#include <tokamax/ops/RaggedDot.h>

#include "ops/lib/framework/OpEntry.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/ragged_dot/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tokamax {


namespace {

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

bool isFloat(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }

/// lhs [M, K], rhs [G, K, N] of one float dtype and group_sizes int32 [G].
void checkOperands(const char *op, const ArgSpec &lhs, const ArgSpec &rhs, const ArgSpec &sizes) {
  ops_detail::check_spec(op, "lhs", lhs);
  ops_detail::check_spec(op, "rhs", rhs);
  ops_detail::check_spec(op, "group_sizes", sizes);
  if (lhs.shape.size() != 2)
    throw Error(fmt::format("{}: lhs must be [M, K], got {}", op, describe(lhs)));
  if (!isFloat(lhs.dtype))
    throw Error(fmt::format("{}: lhs must be bf16, f16, f32 or f64, got {}", op, dtype_name(lhs.dtype)));
  if (rhs.shape.size() != 3)
    throw Error(fmt::format("{}: rhs must be [G, K, N] (one [K, N] matrix per group), got {}", op, describe(rhs)));
  if (rhs.dtype != lhs.dtype)
    throw Error(fmt::format("{}: rhs must have lhs's dtype {}, got {}", op, dtype_name(lhs.dtype),
                            dtype_name(rhs.dtype)));
  if (rhs.shape[1] != lhs.shape[1])
    throw Error(fmt::format("{}: rhs's K ({}) must equal lhs's K ({}): lhs {}, rhs {}", op, rhs.shape[1],
                            lhs.shape[1], describe(lhs), describe(rhs)));
  const ArgSpec want{{rhs.shape[0]}, DType::I32};
  if (sizes != want)
    throw Error(fmt::format("{}: group_sizes must be {} (one size per group of rhs), got {}", op, describe(want),
                            describe(sizes)));
}

void checkExact(const char *op, const char *name, const ArgSpec &got, const ArgSpec &want) {
  ops_detail::check_spec(op, name, got);
  if (got != want)
    throw Error(fmt::format("{}: {} must be {}, got {}", op, name, describe(want), describe(got)));
}

} // namespace

ArgSpec ragged_dot_out_spec(const ArgSpec &lhs, const ArgSpec &rhs) {
  checkOperands("ragged_dot", lhs, rhs, rhs.shape.size() == 3 ? ArgSpec{{rhs.shape[0]}, DType::I32} : ArgSpec{});
  return ArgSpec{{lhs.shape[0], rhs.shape[2]}, lhs.dtype};
}

BoundArgs bind_ragged_dot(const ArgSpec &lhs, const ArgSpec &rhs, const ArgSpec &group_sizes, const ArgSpec &out) {
  const char *op = "ragged_dot";
  checkOperands(op, lhs, rhs, group_sizes);
  checkExact(op, "out", out, ArgSpec{{lhs.shape[0], rhs.shape[2]}, lhs.dtype});
  return BoundArgs{op, {lhs, rhs, group_sizes, out}, {}};
}

BoundArgs bind_ragged_dot_vjp(const ArgSpec &dout, const ArgSpec &lhs, const ArgSpec &rhs, const ArgSpec &group_sizes,
                              const ArgSpec &dlhs, const ArgSpec &drhs) {
  const char *op = "ragged_dot_vjp";
  checkOperands(op, lhs, rhs, group_sizes);
  checkExact(op, "dout", dout, ArgSpec{{lhs.shape[0], rhs.shape[2]}, lhs.dtype});
  checkExact(op, "dlhs", dlhs, lhs);
  checkExact(op, "drhs", drhs, rhs);
  return BoundArgs{op, {dout, lhs, rhs, group_sizes, dlhs, drhs}, {}};
}

namespace ragged_detail {

Problem problem_of(const BoundArgs &b) {
  Problem p;
  p.vjp = b.op == "ragged_dot_vjp";
  const ArgSpec &lhs = b.arg(p.vjp ? 1 : 0), &rhs = b.arg(p.vjp ? 2 : 1);
  p.M = lhs.shape[0];
  p.K = lhs.shape[1];
  p.G = rhs.shape[0];
  p.N = rhs.shape[2];
  p.dtype = lhs.dtype;
  p.compute = lhs.dtype == DType::F64 ? DType::F64 : DType::F32;
  return p;
}

} // namespace ragged_detail

namespace {

const std::vector<std::string> kForwardArgs{"lhs", "rhs", "group_sizes", "out"};
const std::vector<std::string> kVjpArgs{"dout", "lhs", "rhs", "group_sizes", "dlhs", "drhs"};

const char *opName(bool vjp) { return vjp ? "ragged_dot_vjp" : "ragged_dot"; }

class RaggedDotOp : public Op {
public:
  explicit RaggedDotOp(bool vjp)
      : Op(opName(vjp), vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 3,
           ops_detail::typed_implementations<ragged_detail::Hopper, ragged_detail::Tile, ragged_detail::Reference>(
               opName(vjp), vjp ? kVjpArgs : kForwardArgs, vjp ? 4 : 3, ragged_detail::problem_of)),
        vjp_(vjp) {}

  void validate(const BoundArgs &b) const override {
    ops_detail::require_call_shape(name(), b, arg_names(), {});
    BoundArgs again = vjp_ ? bind_ragged_dot_vjp(*b.args[0], *b.args[1], *b.args[2], *b.args[3], *b.args[4],
                                                 *b.args[5])
                           : bind_ragged_dot(*b.args[0], *b.args[1], *b.args[2], *b.args[3]);
    ops_detail::require_canonical(name(), b, again);
  }

private:
  bool vjp_;
};

} // namespace

const Op &ragged_dot_op() {
  static const RaggedDotOp op(false);
  return op;
}
const Op &ragged_dot_vjp_op() {
  static const RaggedDotOp op(true);
  return op;
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  register_op(ragged_dot_op());
  register_op(ragged_dot_vjp_op());
  return true;
}();

void forward(const TensorView &lhs, const TensorView &rhs, const TensorView &sizes, const TensorView &out,
             Stream *stream, const RaggedDotOptions &o) {
  BoundArgs b = bind_ragged_dot(ArgSpec::of(lhs), ArgSpec::of(rhs), ArgSpec::of(sizes), ArgSpec::of(out));
  TensorView in[] = {lhs, rhs, sizes};
  ops_detail::run_or_interpret(ragged_dot_op(), b, in, std::span<const TensorView>(&out, 1), stream, o);
}

void backward(const TensorView &dout, const TensorView &lhs, const TensorView &rhs, const TensorView &sizes,
              const TensorView &dlhs, const TensorView &drhs, Stream *stream, const RaggedDotOptions &o) {
  BoundArgs b = bind_ragged_dot_vjp(ArgSpec::of(dout), ArgSpec::of(lhs), ArgSpec::of(rhs), ArgSpec::of(sizes),
                                    ArgSpec::of(dlhs), ArgSpec::of(drhs));
  TensorView in[] = {dout, lhs, rhs, sizes}, outs[] = {dlhs, drhs};
  ops_detail::run_or_interpret(ragged_dot_vjp_op(), b, in, outs, stream, o);
}

} // namespace

void ragged_dot(const TensorView &lhs, const TensorView &rhs, const TensorView &group_sizes, const TensorView &out,
                Stream &stream, const RaggedDotOptions &options) {
  forward(lhs, rhs, group_sizes, out, &stream, options);
}
void ragged_dot_vjp(const TensorView &dout, const TensorView &lhs, const TensorView &rhs,
                    const TensorView &group_sizes, const TensorView &dlhs, const TensorView &drhs, Stream &stream,
                    const RaggedDotOptions &options) {
  backward(dout, lhs, rhs, group_sizes, dlhs, drhs, &stream, options);
}
void ragged_dot_host(const TensorView &lhs, const TensorView &rhs, const TensorView &group_sizes,
                     const TensorView &out, const RaggedDotOptions &options) {
  forward(lhs, rhs, group_sizes, out, nullptr, options);
}
void ragged_dot_vjp_host(const TensorView &dout, const TensorView &lhs, const TensorView &rhs,
                         const TensorView &group_sizes, const TensorView &dlhs, const TensorView &drhs,
                         const RaggedDotOptions &options) {
  backward(dout, lhs, rhs, group_sizes, dlhs, drhs, nullptr, options);
}

} // namespace tokamax
