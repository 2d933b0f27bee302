//===- Glue.cpp - sum, add, cast, fill: the small ops Functions need --------===//
//
// Each glue op has one `reference` implementation made of one or two DSL kernels whose
// parameters are bound to the op's argument slots (inputs, then outputs) or to a
// workspace; the same kernels run on the device (through the JIT) and on the host.
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Function.h>

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/PlannedImplementation.h"
#include "ops/lib/framework/Views.h"

#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <memory>

namespace tokamax {

using namespace dsl;

namespace {

constexpr int kWorkspace = -1;

/// One kernel launch of a glue op: how to build it, its cache key, and what each of its
/// parameters is bound to (an argument slot, or kWorkspace).
struct Launch {
  KernelKey key;
  std::function<Kernel()> build;
  std::vector<int> params;
};

struct Plan {
  std::vector<Launch> launches;
  size_t workspace_bytes = 0;
};

using Planner = std::function<Plan(const BoundArgs &)>;

bool isFloat(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F64; }

class GlueImplementation : public ops_detail::PlannedImplementation {
public:
  GlueImplementation(std::vector<std::string> argNames, size_t numInputs, Planner planner)
      : PlannedImplementation(std::move(argNames), numInputs), planner_(std::move(planner)) {}
  std::string name() const override { return "reference"; }
  std::optional<std::string> why_not(const BoundArgs &) const override { return std::nullopt; }
  Config heuristic(const BoundArgs &) const override { return {}; }

  std::vector<Kernel> kernels(const BoundArgs &args, const Config &) const override {
    std::vector<Kernel> out;
    for (const Launch &l : planner_(args).launches)
      out.push_back(l.build());
    return out;
  }

  /// The plan's launches through `executor` (device, interpreter, or a capture), the
  /// workspace from its one scratch request; glue kernels see every tensor flat.
  void execute(const BoundArgs &args, const Config &, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) const override {
    Plan plan = planner_(args);
    TensorView workspace;
    int64_t n = static_cast<int64_t>(plan.workspace_bytes / 4);
    if (plan.workspace_bytes)
      workspace = TensorView(executor.scratch(plan.workspace_bytes), DType::F32, std::span<const int64_t>(&n, 1),
                             executor.device());
    for (const Launch &l : plan.launches) {
      std::vector<int64_t> sizes;
      for (int p : l.params)
        sizes.push_back(slot(p, inputs, outputs, workspace).numel());
      std::vector<ops_detail::KernelExecutor::Arg> kargs;
      for (size_t i = 0; i < l.params.size(); ++i) {
        const TensorView &t = slot(l.params[i], inputs, outputs, workspace);
        kargs.emplace_back(TensorView(t.data(), t.dtype(), std::span<const int64_t>(&sizes[i], 1), t.device()));
      }
      executor.launch(l.key, l.build, kargs);
    }
  }

private:
  static const TensorView &slot(int p, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                                const TensorView &workspace) {
    if (p == kWorkspace)
      return workspace;
    return static_cast<size_t>(p) < inputs.size() ? inputs[p] : outputs[p - inputs.size()];
  }
  Planner planner_;
};

class GlueOp : public Op {
public:
  GlueOp(std::string name, const std::vector<std::string> &argNames, size_t numInputs,
         std::function<void(const BoundArgs &)> validate, Planner planner)
      : Op(std::move(name), argNames, numInputs,
           {std::make_shared<GlueImplementation>(argNames, numInputs, std::move(planner))}),
        validate_(std::move(validate)) {}
  void validate(const BoundArgs &args) const override { validate_(args); }

private:
  std::function<void(const BoundArgs &)> validate_;
};

void expectArgs(const BoundArgs &args, const std::vector<const char *> &names, bool firstOptional = false) {
  if (args.args.size() != names.size())
    throw Error(fmt::format("{}: expected {} arguments, got {}", args.op, names.size(), args.args.size()));
  for (size_t i = 0; i < names.size(); ++i) {
    if (args.has(i))
      ops_detail::check_spec(args.op.c_str(), names[i], *args.args[i]);
    else if (i > 0 || !firstOptional)
      throw Error(fmt::format("{}: {} is required", args.op, names[i]));
  }
}

/// Elementwise over flat tensors: out = body(inputs...).
Kernel flatKernel(const char *name, const std::vector<DType> &in, DType out, int64_t n,
                  const std::function<Value(Kernel &, std::vector<Value> &)> &body) {
  const int64_t block = 2048;
  Kernel k(name, {8});
  std::vector<TensorArg> args;
  for (size_t i = 0; i < in.size(); ++i)
    args.push_back(k.input("in" + std::to_string(i), in[i], {n}));
  TensorArg o = k.output("out", out, {n});
  k.grid(cdiv(n, block));
  Value off = k.program_id(0) * block;
  std::vector<Value> tiles;
  for (const TensorArg &a : args)
    tiles.push_back(a.load({off}, {block}));
  o.store({off}, body(k, tiles));
  return k;
}

} // namespace

const Op &sum_op() {
  static const GlueOp op(
      "sum", {"x", "out"}, 1,
      [](const BoundArgs &args) {
        expectArgs(args, {"x", "out"});
        if (!isFloat(args.arg(0).dtype))
          throw Error("sum: x must be a floating-point tensor, got " + std::string(dtype_name(args.arg(0).dtype)));
        if (args.arg(1).dtype != DType::F32 || args.arg(1).numel() != 1)
          throw Error("sum: out must be an f32 tensor of one element");
      },
      [](const BoundArgs &args) {
        // Deterministic two stages: each program sums a strided set of blocks into one
        // partial; one program then sums the partials in order.
        int64_t n = args.arg(0).numel();
        Plan plan;
        if (n == 0) {  // an empty sum: out = 0, and nothing of x is read
          plan.launches.push_back({ops_detail::specializationKey("sum.empty", {}), [] {
            Kernel k("sum_empty", {1});
            TensorArg out = k.output("out", DType::F32, {1});
            out.store({0}, k.full({1}, 0.0, DType::F32));
            return k;
          }, {1}});
          return plan;
        }
        DType dtype = args.arg(0).dtype;
        const int64_t block = 2048;
        int64_t programs = std::min<int64_t>(1024, cdiv(n, block));
        int64_t padded = 1;
        while (padded < programs)
          padded *= 2;
        plan.workspace_bytes = size_t(programs) * 4;
        KernelKey key = ops_detail::specializationKey("sum.partials", {n, int64_t(dtype)});
        plan.launches.push_back({key, [=] {
          Kernel k("sum_partials", {8});
          TensorArg x = k.input("x", dtype, {n});
          TensorArg partials = k.output("partials", DType::F32, {programs});
          k.grid(programs);
          Value pid = k.program_id(0);
          auto acc = k.loop(pid * block, Value(n), Value(programs * block), {k.full({block}, 0.0, DType::F32)},
                            [&](Value i, std::vector<Value> c) {
                              return std::vector<Value>{c[0] + x.load({i}, {block}).to(DType::F32)};
                            });
          partials.store({pid}, k.full({1}, 0.0, DType::F32) + acc[0].sum(0));
          return k;
        }, {0, kWorkspace}});
        plan.launches.push_back({ops_detail::specializationKey("sum.total", {programs}), [=] {
          Kernel k("sum_total", {4});
          TensorArg partials = k.input("partials", DType::F32, {programs});
          TensorArg out = k.output("out", DType::F32, {1});
          out.store({0}, k.full({1}, 0.0, DType::F32) + partials.load({0}, {padded}).sum(0));
          return k;
        }, {kWorkspace, 1}});
        return plan;
      });
  return op;
}

const Op &add_op() {
  static const GlueOp op(
      "add", {"a", "b", "out"}, 2,
      [](const BoundArgs &args) {
        expectArgs(args, {"a", "b", "out"});
        if (!(args.arg(0) == args.arg(1)) || !(args.arg(0) == args.arg(2)))
          throw Error("add: a, b and out must have one shape and dtype");
        if (!isFloat(args.arg(0).dtype))
          throw Error("add: needs floating-point tensors");
      },
      [](const BoundArgs &args) {
        ElementwiseSpec spec{args.arg(0).numel(), args.arg(0).dtype};
        ElementwiseConfig config = default_config(spec);
        Plan plan;
        if (spec.n == 0)
          return plan;  // empty tensors: nothing to add
        plan.launches.push_back({ops_detail::specializationKey("vector_add", {spec.n, int64_t(spec.dtype),
                                                                             config.block, config.num_warps}),
                                 [=] { return vector_add_kernel(spec, config); }, {0, 1, 2}});
        return plan;
      });
  return op;
}

const Op &cast_op() {
  static const GlueOp op(
      "cast", {"x", "out"}, 1,
      [](const BoundArgs &args) {
        expectArgs(args, {"x", "out"});
        if (args.arg(0).shape != args.arg(1).shape)
          throw Error("cast: x and out must have one shape");
      },
      [](const BoundArgs &args) {
        int64_t n = args.arg(0).numel();
        DType from = args.arg(0).dtype, to = args.arg(1).dtype;
        Plan plan;
        if (n == 0)
          return plan;
        plan.launches.push_back({ops_detail::specializationKey("cast", {n, int64_t(from), int64_t(to)}), [=] {
          return flatKernel("cast", {from}, to, n, [&](Kernel &, std::vector<Value> &t) { return t[0].to(to); });
        }, {0, 1}});
        return plan;
      });
  return op;
}

const Op &fill_op() {
  static const GlueOp op(
      "fill", {"g", "out"}, 1,
      [](const BoundArgs &args) {
        expectArgs(args, {"g", "out"}, true);
        if (args.has(0) && (args.arg(0).dtype != DType::F32 || args.arg(0).numel() != 1))
          throw Error("fill: g must be an f32 tensor of one element");
      },
      [](const BoundArgs &args) {
        int64_t n = args.arg(1).numel();
        DType to = args.arg(1).dtype;
        bool fromInput = args.has(0);
        double value = args.attributes.count("value") ? args.float_attribute("value") : 0.0;
        Plan plan;
        if (n == 0)
          return plan;
        KernelKey key = ops_detail::specializationKey("fill", {n, int64_t(to), fromInput});
        key.add(value);
        plan.launches.push_back({key, [=] {
          const int64_t block = 2048;
          Kernel k("fill", {8});
          std::optional<TensorArg> g;
          if (fromInput)
            g = k.input("g", DType::F32, {1});
          TensorArg out = k.output("out", to, {n});
          k.grid(cdiv(n, block));
          Value v = fromInput ? g->load({0}, {1}).sum(0) : k.constant(value, DType::F32);
          out.store({k.program_id(0) * block}, (k.full({block}, 0.0, DType::F32) + v).to(to));
          return k;
        }, fromInput ? std::vector<int>{0, 1} : std::vector<int>{1}});
        return plan;
      });
  return op;
}

namespace {
// Registered at load so that find_op (autotuning a Function's calls, reading recorded
// calls) knows them.
[[maybe_unused]] const bool kRegistered = [] {
  for (const Op *op : {&sum_op(), &add_op(), &cast_op(), &fill_op()})
    register_op(*op);
  return true;
}();
} // namespace

} // namespace tokamax
