//===- Function.cpp - Traced functions of ops and their gradients -----------===//
#include <tokamax/ops/Function.h>

#include "ops/lib/framework/PlannedImplementation.h"
#include "ops/lib/function/FunctionAttention.h"
#include "ops/lib/function/FunctionPlan.h"

#include <tokamax/dsl/Kernel.h>

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace tokamax {

/// What device runs keep, per device: the plan, intermediates, scratch, graphs
/// (FunctionPlan.h). A run on another device keeps the first device's (work queued there
/// may still use them) and comes back to them.
struct Function::Buffers {
  struct OnDevice {
    std::mutex mutex;
    std::map<int, Tensor> tensors;  // value id -> device intermediate
    DeviceBuffer scratch;
    std::vector<DeviceBuffer> retired;  // earlier scratch that queued work may still use
    std::optional<ops_detail::FunctionPlan> plan;
    std::vector<bool> kernelValues;    // values a kernel reads or writes: 16-byte aligned
    std::vector<uint64_t> bases, bound;  // per run, kept to reuse their storage
    ops_detail::FunctionGraphs graphs;
  };
  std::mutex mutex;  // guards `devices`
  std::map<int, std::unique_ptr<OnDevice>> devices;

  OnDevice &on(int device) {
    std::lock_guard lock(mutex);
    std::unique_ptr<OnDevice> &d = devices[device];
    if (!d)
      d = std::make_unique<OnDevice>();
    return *d;
  }
};

// Every Function holds its Buffers from construction (a copy gets empty ones), so a run
// finds them without a lock; only a moved-from Function has none.
Function::Function() : buffers_(std::make_unique<Buffers>()) {}
Function::Function(const Function &other)
    : values_(other.values_), inputs_(other.inputs_), outputs_(other.outputs_), calls_(other.calls_),
      buffers_(std::make_unique<Buffers>()) {}
Function &Function::operator=(const Function &other) {
  values_ = other.values_;
  inputs_ = other.inputs_;
  outputs_ = other.outputs_;
  calls_ = other.calls_;
  buffers_ = std::make_unique<Buffers>();
  return *this;
}
Function::Function(Function &&) noexcept = default;
Function &Function::operator=(Function &&) noexcept = default;
Function::~Function() = default;

int Function::newValue(const ArgSpec &spec) {
  values_.push_back(spec);
  return static_cast<int>(values_.size() - 1);
}

std::vector<Sym> Function::record(const Op &op, BoundArgs args, std::vector<int> slots,
                                 std::optional<std::string> implementation) {
  op.validate(args);
  if (implementation)
    op.implementation(*implementation);  // an unknown name fails at trace time
  std::vector<Sym> outs;
  for (size_t i = op.num_inputs(); i < slots.size(); ++i)
    if (slots[i] == -2) { // an output to create
      slots[i] = newValue(args.arg(i));
      outs.push_back({slots[i]});
    } else {
      outs.push_back({slots[i]});
    }
  calls_.push_back({&op, std::move(args), std::move(slots), std::move(implementation)});
  return outs;
}

std::vector<ArgSpec> Function::input_specs() const {
  std::vector<ArgSpec> s;
  for (int v : inputs_)
    s.push_back(values_[v]);
  return s;
}

std::vector<ArgSpec> Function::output_specs() const {
  std::vector<ArgSpec> s;
  for (int v : outputs_)
    s.push_back(values_[v]);
  return s;
}

Function Function::trace(std::vector<ArgSpec> inputs,
                         const std::function<std::vector<Sym>(Tracer &, std::span<const Sym>)> &fn) {
  Function f;
  std::vector<Sym> syms;
  for (const ArgSpec &spec : inputs) {
    int v = f.newValue(spec);
    f.inputs_.push_back(v);
    syms.push_back({v});
  }
  Tracer tracer(f);
  for (Sym s : fn(tracer, syms)) {
    if (s.id < 0 || s.id >= static_cast<int>(f.values_.size()))
      throw Error("Function::trace: the callable returned a value that is not of this function");
    f.outputs_.push_back(s.id);
  }
  return f;
}

//===----------------------------------------------------------------------===//
// Tracer
//===----------------------------------------------------------------------===//

const ArgSpec &Tracer::spec(Sym s) const {
  if (s.id < 0 || s.id >= static_cast<int>(f_.values_.size()))
    throw Error(fmt::format("Tracer: Sym {} is not a value of this function (it has {})", s.id, f_.values_.size()));
  return f_.values_[s.id];
}

/// The residual (mean, rstd) spec of a norm over `axis` of x: one value per row, in the
/// compute dtype.
static ArgSpec statsOf(const ArgSpec &x, int axis) {
  int64_t cols = x.shape.empty() ? 1 : x.shape[(axis + x.shape.size()) % x.shape.size()];
  return {{std::max<int64_t>(1, x.numel() / std::max<int64_t>(1, cols))},
          x.dtype == DType::F64 ? DType::F64 : DType::F32};
}

Sym Tracer::layer_norm(Sym x, std::optional<Sym> scale, std::optional<Sym> offset, int axis, double epsilon,
                       std::optional<std::string> implementation) {
  const ArgSpec &xs = spec(x);
  // Residuals (mean, rstd) are always produced: a later grad() needs them.
  ArgSpec stat = statsOf(xs, axis);
  BoundArgs b = bind_layer_norm(xs, scale ? std::optional(spec(*scale)) : std::nullopt,
                                offset ? std::optional(spec(*offset)) : std::nullopt, xs, stat, stat, axis, epsilon);
  return f_.record(layer_norm_op(), b, {x.id, scale ? scale->id : -1, offset ? offset->id : -1, -2, -2, -2},
                   std::move(implementation))[0];
}

Sym Tracer::rms_norm(Sym x, std::optional<Sym> scale, int axis, double epsilon,
                     std::optional<std::string> implementation) {
  const ArgSpec &xs = spec(x);
  ArgSpec stat = statsOf(xs, axis);
  BoundArgs b = bind_rms_norm(xs, scale ? std::optional(spec(*scale)) : std::nullopt, xs, stat, axis, epsilon);
  return f_.record(rms_norm_op(), b, {x.id, scale ? scale->id : -1, -2, -2}, std::move(implementation))[0];
}

Sym Tracer::gated_linear_unit(Sym x, Sym weights, const std::string &activation,
                              std::optional<std::string> implementation) {
  const ArgSpec &xs = spec(x), &ws = spec(weights);
  // The residual pre-activations are always produced: a later grad() reads them instead
  // of recomputing x W (as attention's lse, at [..., 2, N]: twice out's size).
  BoundArgs b = bind_gated_linear_unit(xs, ws, gated_linear_unit_out_spec(xs, ws), parse_glu_activation(activation),
                                       gated_linear_unit_preactivations_spec(xs, ws));
  return f_.record(gated_linear_unit_op(), b, {x.id, weights.id, -2, -2}, std::move(implementation))[0];
}

Sym Tracer::ragged_dot(Sym lhs, Sym rhs, Sym group_sizes, std::optional<std::string> implementation) {
  const ArgSpec &ls = spec(lhs), &rs = spec(rhs);
  BoundArgs b = bind_ragged_dot(ls, rs, spec(group_sizes), ragged_dot_out_spec(ls, rs));
  return f_.record(ragged_dot_op(), b, {lhs.id, rhs.id, group_sizes.id, -2}, std::move(implementation))[0];
}

Sym Tracer::linear_softmax_cross_entropy_loss(Sym x, Sym w, Sym labels, const CrossEntropyOptions &options) {
  const ArgSpec &xs = spec(x), &ws = spec(w);
  // The residual lse is always produced: a later grad() needs it.
  BoundArgs b = bind_linear_softmax_cross_entropy_loss(xs, ws, spec(labels),
                                                       cross_entropy_loss_spec(xs, ws, options.reduction),
                                                       cross_entropy_lse_spec(xs, ws), options.reduction,
                                                       options.ignore_index);
  return f_.record(linear_softmax_cross_entropy_loss_op(), b, {x.id, w.id, labels.id, -2, -2},
                   options.implementation)[0];
}

Sym Tracer::softmax_cross_entropy(Sym logits, Sym labels, std::optional<std::string> implementation) {
  const ArgSpec &ls = spec(logits);
  // The residual lse is always produced: a later grad() needs it.
  const ArgSpec rows = softmax_cross_entropy_row_spec(ls);
  BoundArgs b = bind_softmax_cross_entropy(ls, spec(labels), rows, rows);
  return f_.record(softmax_cross_entropy_op(), b, {logits.id, labels.id, -2, -2}, std::move(implementation))[0];
}

Sym Tracer::sum(Sym x) {
  BoundArgs b{"sum", {spec(x), ArgSpec{{1}, DType::F32}}, {}};
  return f_.record(sum_op(), b, {x.id, -2})[0];
}

Sym Tracer::add(Sym a, Sym b) {
  BoundArgs args{"add", {spec(a), spec(b), spec(a)}, {}};
  return f_.record(add_op(), args, {a.id, b.id, -2})[0];
}

Sym Tracer::cast(Sym x, DType dtype) {
  if (spec(x).dtype == dtype)
    return x;
  BoundArgs b{"cast", {spec(x), ArgSpec{spec(x).shape, dtype}}, {}};
  return f_.record(cast_op(), b, {x.id, -2})[0];
}

Sym Tracer::fill(std::optional<Sym> g, const ArgSpec &target, double value) {
  BoundArgs b{"fill", {g ? std::optional(spec(*g)) : std::nullopt, target}, {{"value", fmt::format("{}", value)}}};
  return f_.record(fill_op(), b, {g ? g->id : -1, -2})[0];
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

template <class Runner>
void Function::execute(std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                       const std::function<TensorView(int)> &intermediate, Runner &&runner) const {
  if (inputs.size() != inputs_.size() || outputs.size() != outputs_.size())
    throw Error(fmt::format("Function: expected {} inputs and {} outputs, got {} and {}", inputs_.size(),
                            outputs_.size(), inputs.size(), outputs.size()));
  std::map<int, TensorView> bound;
  auto bind = [&](int v, const TensorView &t, const char *what, size_t i) {
    if (!(ArgSpec::of(t) == values_[v]))
      throw Error(fmt::format("Function: {} {} has shape/dtype {} but the function was traced for {}", what, i,
                              ArgSpec::of(t).to_json(), values_[v].to_json()));
    bound[v] = t;
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    bind(inputs_[i], inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    bind(outputs_[i], outputs[i], "output", i);
  auto view = [&](int v) -> TensorView {
    if (v < 0)
      return TensorView();
    auto it = bound.find(v);
    if (it != bound.end())
      return it->second;
    return bound[v] = intermediate(v);
  };
  for (const Call &call : calls_) {
    std::vector<TensorView> in, out;
    for (size_t i = 0; i < call.slots.size(); ++i)
      (i < call.op->num_inputs() ? in : out).push_back(view(call.slots[i]));
    runner(call, in, out);
  }
}

void Function::run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, Stream &stream,
                   const FunctionRunOptions &options) const {
  if (inputs.size() != inputs_.size() || outputs.size() != outputs_.size())
    throw Error(fmt::format("Function: expected {} inputs and {} outputs, got {} and {}", inputs_.size(),
                            outputs_.size(), inputs.size(), outputs.size()));
  if (!buffers_)
    throw Error("Function: run of a moved-from Function");
  // Arguments are numbered inputs first, then outputs.
  const detail::DeviceScope scope(ops_detail::call_device("Function", {}, inputs, outputs, stream));
  const int device = scope.device().ordinal();
  Buffers::OnDevice &b = buffers_->on(device);
  std::lock_guard lock(b.mutex);
  const uint32_t values = uint32_t(values_.size());
  if (!b.plan || !b.plan->current(device)) {
    b.plan = ops_detail::plan_function(*this, Device::get(device));
    b.kernelValues.assign(values + 1, false);
    for (const ops_detail::FunctionPlan::Part &p : b.plan->parts)
      p.launches.mark_kernel_buffers(b.kernelValues);
    if (b.scratch.size() < b.plan->scratch_bytes) {
      b.retired.push_back(std::move(b.scratch));
      b.scratch = DeviceBuffer(b.plan->scratch_bytes, Device::get(device));
    }
    b.bases.clear();
  }
  // Every intermediate before anything runs (a graph capture may not allocate); their
  // addresses stay in the table, the bound tensors' are written per run.
  if (b.bases.empty()) {
    b.bases.assign(values + 1, 0);
    for (uint32_t v = 0; v < values; ++v) {
      if (std::find(inputs_.begin(), inputs_.end(), int(v)) != inputs_.end() ||
          std::find(outputs_.begin(), outputs_.end(), int(v)) != outputs_.end())
        continue;
      auto it = b.tensors.find(int(v));
      if (it == b.tensors.end())
        it = b.tensors.emplace(int(v), Tensor::empty(values_[v].shape, values_[v].dtype, Device::get(device))).first;
      b.bases[v] = it->second.data();
    }
    b.bases[values] = b.scratch.ptr();
  }
  // The plan was recorded for the traced specs; the tensors bound to them are checked here.
  b.bound.clear();
  auto bind = [&](int v, const TensorView &t, const char *what, size_t i) {
    const ArgSpec &spec = values_[v];
    if (t.dtype() != spec.dtype || !std::equal(t.shape().begin(), t.shape().end(), spec.shape.begin(), spec.shape.end()))
      throw Error(fmt::format("Function: {} {} has shape/dtype {} but the function was traced for {}", what, i,
                              ArgSpec::of(t).to_json(), spec.to_json()));
    if (!t.is_contiguous())
      throw Error(fmt::format("Function: {} {} must be contiguous (row-major)", what, i));
    if (!t.data() && t.numel() > 0)
      throw Error(fmt::format("Function: {} {} has no data (a null pointer)", what, i));
    if (t.data() && t.device() != device)
      throw Error(fmt::format("Function: {} {} is on device {} but the run is on device {}", what, i, t.device(), device));
    if (b.kernelValues[v] && t.data() % 16 != 0)
      throw Error(fmt::format("Function: {} {} must be 16-byte aligned (address {:#x})", what, i, t.data()));
    b.bases[v] = t.data();
    b.bound.push_back(t.data());
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    bind(inputs_[i], inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    bind(outputs_[i], outputs[i], "output", i);
  if (options.graph)
    b.graphs.launch(*this, *b.plan, b.bases, b.bound, stream);
  else
    ops_detail::replay_function(*this, *b.plan, b.bases, stream);
}

FunctionGraphStats Function::graph_stats() const {
  FunctionGraphStats sum;
  if (!buffers_)
    return sum;
  std::lock_guard lock(buffers_->mutex);
  for (const auto &[device, on] : buffers_->devices) {
    std::lock_guard deviceLock(on->mutex);
    const FunctionGraphStats &s = on->graphs.stats();
    sum.captures += s.captures;
    sum.instantiations += s.instantiations;
    sum.updates += s.updates;
    sum.replays += s.replays;
    sum.nodes = std::max(sum.nodes, s.nodes);
  }
  return sum;
}

void Function::interpret(std::span<const TensorView> inputs, std::span<const TensorView> outputs) const {
  std::vector<std::vector<uint8_t>> storage;
  execute(inputs, outputs, [&](int v) -> TensorView {
    storage.emplace_back(size_t(values_[v].numel()) * dtype_size(values_[v].dtype));
    return host_view(storage.back().data(), values_[v].dtype, values_[v].shape);
  }, [&](const Call &call, std::vector<TensorView> &in, std::vector<TensorView> &out) {
    call.op->interpret(call.args, in, out, call.implementation);
  });
}

std::vector<dsl::Kernel> Function::kernels(const std::string &arch) const {
  Arch::parse(arch, "Function::kernels");
  std::vector<dsl::Kernel> all;
  std::set<std::string> seen;  // two calls with equal arguments build the same kernels
  for (const Call &call : calls_) {
    const Implementation &impl = call.op->select(call.args, call.implementation, arch);
    Config config = call.op->resolve_config(impl, call.args, std::nullopt);
    for (dsl::Kernel &k : impl.kernels(call.args, config))
      if (seen.insert(k.ir()).second)
        all.push_back(std::move(k));
  }
  return all;
}

//===----------------------------------------------------------------------===//
// grad
//===----------------------------------------------------------------------===//

Function grad(const Function &f, std::vector<int> wrt) {
  if (f.outputs_.size() != 1 || f.values_[f.outputs_[0]].numel() != 1)
    throw Error("grad: the function must have one output of one element (a loss)");
  Function g = f; // the forward calls, residuals included
  Tracer t(g);
  std::map<int, Sym> cotangent;
  auto accumulate = [&](int v, Sym d) {
    if (v < 0)
      return;
    auto it = cotangent.find(v);
    if (it == cotangent.end())
      cotangent[v] = d;
    else
      it->second = t.add(it->second, t.cast(d, t.spec(it->second).dtype));
  };
  // d loss / d loss = 1.
  cotangent[f.outputs_[0]] = t.fill(std::nullopt, ArgSpec{{1}, DType::F32}, 1.0);

  for (auto it = f.calls_.rbegin(); it != f.calls_.rend(); ++it) {
    const Function::Call &call = *it;
    const std::string &op = call.op->name();
    auto cot = [&](size_t slot) -> std::optional<Sym> {
      auto c = cotangent.find(call.slots[slot]);
      return c == cotangent.end() ? std::nullopt : std::optional<Sym>(c->second);
    };
    if (op == "sum") {
      if (auto d = cot(1))
        accumulate(call.slots[0], t.fill(*d, t.spec(Sym{call.slots[0]})));
    } else if (op == "add") {
      if (auto d = cot(2)) {
        accumulate(call.slots[0], *d);
        accumulate(call.slots[1], *d);
      }
    } else if (op == "cast") {
      if (auto d = cot(1))
        accumulate(call.slots[0], t.cast(*d, t.spec(Sym{call.slots[0]}).dtype));
    } else if (op == "fill") {
      if (auto d = cot(1); d && call.slots[0] >= 0)
        accumulate(call.slots[0], t.sum(t.cast(*d, DType::F32)));
    } else if (op == "layer_norm" || op == "rms_norm") {
      bool layer = op == "layer_norm";
      auto dy = cot(layer ? 3 : 2);
      if (!dy)
        continue;
      Sym x{call.slots[0]};
      int scale = call.slots[1], offset = layer ? call.slots[2] : -1;
      int mean = layer ? call.slots[4] : -1, rstd = layer ? call.slots[5] : call.slots[3];
      Sym dyCast = t.cast(*dy, t.spec(x).dtype);
      auto specOf = [&](int v) { return v < 0 ? std::nullopt : std::optional<ArgSpec>(t.spec(Sym{v})); };
      int axis = static_cast<int>(call.args.int_attribute("axis"));
      BoundArgs b = layer ? bind_layer_norm_vjp(t.spec(dyCast), t.spec(x), specOf(scale), t.spec(Sym{mean}),
                                                t.spec(Sym{rstd}), t.spec(x), specOf(scale), specOf(offset), axis)
                          : bind_rms_norm_vjp(t.spec(dyCast), t.spec(x), specOf(scale), t.spec(Sym{rstd}), t.spec(x),
                                              specOf(scale), axis);
      std::vector<int> slots = layer ? std::vector<int>{dyCast.id, x.id, scale, mean, rstd, -2, scale < 0 ? -1 : -2,
                                                        offset < 0 ? -1 : -2}
                                     : std::vector<int>{dyCast.id, x.id, scale, rstd, -2, scale < 0 ? -1 : -2};
      std::vector<Sym> outs = g.record(layer ? layer_norm_vjp_op() : rms_norm_vjp_op(), b, slots, call.implementation);
      accumulate(x.id, outs[0]);
      if (scale >= 0)
        accumulate(scale, outs[1]);
      if (offset >= 0)
        accumulate(offset, outs[2]);
    } else if (op == "attention") {
      auto dout = cot(8);  // slots: q, k, v, bias, mask, q / kv lengths, sinks | out, lse
      if (!dout)
        continue;
      const auto &sl = call.slots;
      auto specOf = [&](int v) { return v < 0 ? std::nullopt : std::optional<ArgSpec>(t.spec(Sym{v})); };
      Sym doutCast = t.cast(*dout, t.spec(Sym{sl[8]}).dtype);
      AttentionOptions options = attention_options_of(call);
      const int bias = sl[3], sinks = sl[7];
      BoundArgs b = bind_attention_vjp({t.spec(doutCast), t.spec(Sym{sl[0]}), t.spec(Sym{sl[1]}), t.spec(Sym{sl[2]}),
                                        t.spec(Sym{sl[8]}), t.spec(Sym{sl[9]}), specOf(bias), specOf(sl[4]),
                                        specOf(sl[5]), specOf(sl[6]), t.spec(Sym{sl[0]}), t.spec(Sym{sl[1]}),
                                        t.spec(Sym{sl[2]}), specOf(bias), specOf(sinks), specOf(sinks)},
                                       options);
      // A forward pinned to "hopper" whose call the hopper VJP refuses (head dims past
      // 128): its VJP goes to auto.
      std::optional<std::string> vjpImplementation = call.implementation;
      if (vjpImplementation && *vjpImplementation == "hopper" &&
          attention_vjp_op().implementation("hopper").why_not(b).has_value())
        vjpImplementation.reset();
      std::vector<Sym> outs = g.record(attention_vjp_op(), b,
                                       {doutCast.id, sl[0], sl[1], sl[2], sl[8], sl[9], bias, sl[4], sl[5], sl[6],
                                        sinks, -2, -2, -2, bias < 0 ? -1 : -2, sinks < 0 ? -1 : -2},
                                       vjpImplementation);
      accumulate(sl[0], outs[0]);
      accumulate(sl[1], outs[1]);
      accumulate(sl[2], outs[2]);
      if (bias >= 0)
        accumulate(bias, outs[3]);
      if (sinks >= 0)
        accumulate(sinks, outs[4]);
    } else if (op == "attention_varlen") {
      auto dout = cot(6);  // slots: q, k, v, cu_seqlens_q, cu_seqlens_kv, sinks | out, lse
      if (!dout)
        continue;
      const auto &sl = call.slots;
      const int sinks = sl[5];
      const std::optional<ArgSpec> sinkSpec = sinks < 0 ? std::nullopt : std::optional(t.spec(Sym{sinks}));
      Sym doutCast = t.cast(*dout, t.spec(Sym{sl[6]}).dtype);
      AttentionOptions options = attention_options_of(call);
      BoundArgs b = bind_attention_varlen_vjp({t.spec(doutCast), t.spec(Sym{sl[0]}), t.spec(Sym{sl[1]}),
                                               t.spec(Sym{sl[2]}), t.spec(Sym{sl[6]}), t.spec(Sym{sl[7]}),
                                               t.spec(Sym{sl[3]}), t.spec(Sym{sl[4]}), sinkSpec, t.spec(Sym{sl[0]}),
                                               t.spec(Sym{sl[1]}), t.spec(Sym{sl[2]}), sinkSpec},
                                              options);
      std::vector<Sym> outs = g.record(attention_varlen_vjp_op(), b,
                                       {doutCast.id, sl[0], sl[1], sl[2], sl[6], sl[7], sl[3], sl[4], sinks, -2, -2,
                                        -2, sinks < 0 ? -1 : -2},
                                       call.implementation);
      for (int i : {0, 1, 2})
        accumulate(sl[i], outs[size_t(i)]);
      if (sinks >= 0)
        accumulate(sinks, outs[3]);
    } else if (op == "gated_linear_unit") {
      auto dout = cot(2);
      if (!dout)
        continue;
      Sym x{call.slots[0]}, w{call.slots[1]}, h{call.slots[3]};
      Sym doutCast = t.cast(*dout, t.spec(Sym{call.slots[2]}).dtype);
      BoundArgs b = bind_gated_linear_unit_vjp(t.spec(doutCast), t.spec(x), t.spec(w), t.spec(x), t.spec(w),
                                               parse_glu_activation(call.args.attribute("activation")), t.spec(h));
      std::vector<Sym> outs =
          g.record(gated_linear_unit_vjp_op(), b, {doutCast.id, x.id, w.id, h.id, -2, -2}, call.implementation);
      accumulate(x.id, outs[0]);
      accumulate(w.id, outs[1]);
    } else if (op == "ragged_dot") {
      auto dout = cot(3);
      if (!dout)
        continue;
      Sym lhs{call.slots[0]}, rhs{call.slots[1]}, sizes{call.slots[2]};
      Sym doutCast = t.cast(*dout, t.spec(Sym{call.slots[3]}).dtype);
      BoundArgs b = bind_ragged_dot_vjp(t.spec(doutCast), t.spec(lhs), t.spec(rhs), t.spec(sizes), t.spec(lhs),
                                        t.spec(rhs));
      std::vector<Sym> outs =
          g.record(ragged_dot_vjp_op(), b, {doutCast.id, lhs.id, rhs.id, sizes.id, -2, -2}, call.implementation);
      accumulate(lhs.id, outs[0]);
      accumulate(rhs.id, outs[1]);
    } else if (op == "linear_softmax_cross_entropy_loss") {
      auto dloss = cot(3);
      if (!dloss)
        continue;
      const auto &sl = call.slots;  // x, w, labels | loss, lse
      Sym dlossCast = t.cast(*dloss, t.spec(Sym{sl[3]}).dtype);
      const ArgSpec &xs = t.spec(Sym{sl[0]}), &ws = t.spec(Sym{sl[1]});
      BoundArgs b = bind_linear_softmax_cross_entropy_loss_vjp(
          t.spec(dlossCast), xs, ws, t.spec(Sym{sl[2]}), t.spec(Sym{sl[4]}), xs, ws,
          parse_loss_reduction(call.args.attribute("reduction")), call.args.int_attribute("ignore_index"));
      std::vector<Sym> outs = g.record(linear_softmax_cross_entropy_loss_vjp_op(), b,
                                       {dlossCast.id, sl[0], sl[1], sl[2], sl[4], -2, -2}, call.implementation);
      accumulate(sl[0], outs[0]);
      accumulate(sl[1], outs[1]);
    } else if (op == "softmax_cross_entropy") {
      auto dloss = cot(2);
      if (!dloss)
        continue;
      const auto &sl = call.slots;  // logits, labels | loss, lse
      Sym dlossCast = t.cast(*dloss, t.spec(Sym{sl[2]}).dtype);
      const ArgSpec &logits = t.spec(Sym{sl[0]});
      BoundArgs b = bind_softmax_cross_entropy_vjp(t.spec(dlossCast), logits, t.spec(Sym{sl[1]}), t.spec(Sym{sl[3]}),
                                                   logits);
      accumulate(sl[0], g.record(softmax_cross_entropy_vjp_op(), b, {dlossCast.id, sl[0], sl[1], sl[3], -2},
                                 call.implementation)[0]);
    } else {
      throw Error("grad: op '" + op + "' has no VJP");
    }
  }
  g.outputs_.clear();
  for (int i : wrt) {
    if (i < 0 || i >= static_cast<int>(f.inputs_.size()))
      throw Error(fmt::format("grad: wrt index {} is not an input (the function has {})", i, f.inputs_.size()));
    int v = f.inputs_[i];
    auto it = cotangent.find(v);
    Sym d = it != cotangent.end() ? it->second : t.fill(std::nullopt, f.values_[v], 0.0);
    g.outputs_.push_back(t.cast(d, f.values_[v].dtype).id);
  }
  return g;
}

} // namespace tokamax
