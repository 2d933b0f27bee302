//===- Op.cpp - matmul on the op framework ----------------------------===//
//
// matmul as an Op: arguments a, b, bias (optional) then c; attributes trans_a, trans_b
// and alpha. Implementations in auto order: hopper (sm_90a: TMA + wgmma, bf16, f16,
// fp8), tile (mma.sync: bf16, f16, f32 as tf32) and reference (every float dtype), one
// file each. A Config holds MatmulConfig's fields (KeyedMatmulConfig, Common.h);
// "programs" = -1 (the hopper heuristic) runs a persistent grid of one program per SM of
// the device (3 on the interpreter, so the tile loop still runs), 0 one program per
// tile, N > 0 N programs.
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/Matmul.h>

#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/Views.h"
#include "ops/lib/matmul/Common.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace tokamax {

namespace {

const std::vector<std::string> kMatmulArgs{"a", "b", "bias", "c"};

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

class MatmulOp : public Op {
public:
  MatmulOp()
      : Op("matmul", kMatmulArgs, 3,
           ops_detail::typed_implementations<matmul_impl::Hopper, matmul_impl::Tile, matmul_impl::Reference>(
               "matmul", kMatmulArgs, 3, matmul_impl::problem_of)) {}

  void validate(const BoundArgs &b) const override {
    if (b.op != name())
      throw Error(fmt::format("matmul: the arguments are bound for op \"{}\"", b.op));
    if (b.args.size() != 4 || !b.args[0] || !b.args[1] || !b.args[3])
      throw Error("matmul: expected the arguments a, b, bias (optional), c");
    for (const auto &[key, value] : b.attributes)
      if (key != "trans_a" && key != "trans_b" && key != "alpha")
        throw Error(fmt::format("matmul: unknown attribute \"{}\"", key));
    BoundArgs again = bind_matmul(*b.args[0], *b.args[1], b.args[2], *b.args[3], b.int_attribute("trans_a") != 0,
                                  b.int_attribute("trans_b") != 0, b.float_attribute("alpha"));
    if (!(again == b))
      throw Error(fmt::format("matmul: the bound arguments are not canonical: {}", b.to_json()));
  }
};

[[maybe_unused]] const bool kRegistered = [] {
  register_op(matmul_op());
  return true;
}();

} // namespace

BoundArgs bind_matmul(const ArgSpec &a, const ArgSpec &b, const std::optional<ArgSpec> &bias, const ArgSpec &c,
                      bool trans_a, bool trans_b, double alpha) {
  ops_detail::check_spec("matmul", "a", a);
  ops_detail::check_spec("matmul", "b", b);
  ops_detail::check_spec("matmul", "bias", bias);
  ops_detail::check_spec("matmul", "c", c);
  if (a.shape.size() != 2 || b.shape.size() != 2 || c.shape.size() != 2)
    throw Error(fmt::format("matmul: a, b and c must be 2-D, got a {}, b {}, c {}", describe(a), describe(b),
                            describe(c)));
  if (a.dtype != b.dtype)
    throw Error(fmt::format("matmul: a is {} but b is {}", dtype_name(a.dtype), dtype_name(b.dtype)));
  int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
  int64_t kb = trans_b ? b.shape[1] : b.shape[0], n = trans_b ? b.shape[0] : b.shape[1];
  if (kb != k || c.shape[0] != m || c.shape[1] != n)
    throw Error(fmt::format("matmul: op(a) is [{}, {}], op(b) is [{}, {}] and c is [{}]", m, k, kb, n,
                            fmt::join(c.shape, ", ")));
  if (bias && (bias->shape != std::vector<int64_t>{n} || bias->dtype != c.dtype))
    throw Error(fmt::format("matmul: bias must be a [{}] {} tensor, got {}", n, dtype_name(c.dtype), describe(*bias)));
  if (!std::isfinite(alpha))
    throw Error(fmt::format("matmul: alpha must be finite, got {}", alpha));
  BoundArgs bound{"matmul",
                  {a, b, bias, c},
                  {{"trans_a", trans_a ? "1" : "0"}, {"trans_b", trans_b ? "1" : "0"}, {"alpha", fmt::format("{}", alpha)}}};
  check_matmul_dtypes(matmul_spec(bound), true);  // any implementation's dtypes
  return bound;
}

MatmulSpec matmul_spec(const BoundArgs &args) {
  const ArgSpec &a = args.arg(0), &b = args.arg(1), &c = args.arg(3);
  MatmulSpec spec;
  spec.trans_a = args.int_attribute("trans_a") != 0;
  spec.trans_b = args.int_attribute("trans_b") != 0;
  spec.m = spec.trans_a ? a.shape[1] : a.shape[0];
  spec.k = spec.trans_a ? a.shape[0] : a.shape[1];
  spec.n = spec.trans_b ? b.shape[0] : b.shape[1];
  spec.dtype = a.dtype;
  spec.out_dtype = c.dtype;
  spec.has_bias = args.has(2);
  return spec;
}

const Op &matmul_op() {
  static const MatmulOp op;
  return op;
}

namespace {
BoundArgs bindCall(const TensorView &a, const TensorView &b, const TensorView &c, const MatmulOptions &options) {
  return bind_matmul(ArgSpec::of(a), ArgSpec::of(b),
                     options.bias ? std::optional<ArgSpec>(ArgSpec::of(*options.bias)) : std::nullopt, ArgSpec::of(c),
                     options.trans_a, options.trans_b, options.alpha);
}
std::optional<Config> explicitConfig(const MatmulOptions &options) {
  if (!options.config)
    return std::nullopt;
  // The map an autotuning result or a --config string would hold ("programs" as given).
  return ops_detail::to_config(matmul_impl::KeyedMatmulConfig(*options.config, options.config->programs));
}
std::optional<std::string> explicitImplementation(const MatmulOptions &options) {
  if (options.implementation.empty())
    return std::nullopt;
  return options.implementation;
}
} // namespace

void matmul(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream,
            const MatmulOptions &options) {
  // Every option joins the key (bias among the tensors); a new field must join it too.
  static_assert(sizeof(MatmulOptions) == 288, "MatmulOptions changed: add the new option to the call key");
  TensorView inputs[3] = {a, b, options.bias ? *options.bias : TensorView()};
  ops_detail::CallKey key(matmul_op());
  key.add({&a, &b, options.bias ? &*options.bias : nullptr, &c}).add(options.trans_a).add(options.trans_b);
  key.add(options.alpha);
  const std::optional<std::string> implementation = explicitImplementation(options);  // short: no allocation
  const std::optional<Config> config = explicitConfig(options);
  ops_detail::run_eager(key, {matmul_op(), inputs, std::span<const TensorView>(&c, 1), stream, implementation, config},
                        [&] {
                          for (auto [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", &c}})
                            if (!t->is_contiguous())
                              throw Error(fmt::format(
                                  "matmul: {} must be contiguous (use trans_a / trans_b for transposes)", name));
                          if (options.bias && !options.bias->is_contiguous())
                            throw Error("matmul: bias must be contiguous");
                          return bindCall(a, b, c, options);
                        });
}

void matmul_host(const TensorView &a, const TensorView &b, const TensorView &c, const MatmulOptions &options) {
  BoundArgs args = bindCall(a, b, c, options);
  TensorView inputs[3] = {a, b, options.bias ? *options.bias : TensorView()};
  matmul_op().interpret(args, inputs, std::span<const TensorView>(&c, 1), explicitImplementation(options),
                        explicitConfig(options));
}

} // namespace tokamax
