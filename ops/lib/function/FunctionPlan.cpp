//===- FunctionPlan.cpp - A Function's run as one plan, eager or as a CUDA graph ===//
#include "ops/lib/function/FunctionPlan.h"

#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DriverApi.h>

#include <algorithm>
#include <atomic>

namespace tokamax::ops_detail {

namespace {

uint64_t currentContext() {
  CUcontext context = nullptr;
  if (detail::driver().cuCtxGetCurrent(&context) != CUDA_SUCCESS)
    return 0;
  return uint64_t(reinterpret_cast<uintptr_t>(context));
}

} // namespace

bool FunctionPlan::current(int ordinal) const {
  return device == ordinal && signature == thread_config_signature() && epoch == config_epoch() &&
         jit_generation == Jit::instance().generation() && context == currentContext();
}

size_t FunctionPlan::steps() const {
  size_t n = 0;
  for (const Part &p : parts)
    n += p.fallback ? 1 : p.launches.steps.size();
  return n;
}

FunctionPlan plan_function(const Function &f, Device &device) {
  static std::atomic<uint64_t> nextId{1};
  FunctionPlan plan;
  plan.id = nextId.fetch_add(1);
  // Read before resolving: a change while the calls resolve leaves the plan stale.
  plan.device = device.ordinal();
  plan.signature = thread_config_signature();
  plan.epoch = config_epoch();
  plan.jit_generation = Jit::instance().generation();
  plan.context = currentContext();
  const std::string arch = device.arch();
  const auto values = uint32_t(f.values().size());
  for (size_t c = 0; c < f.calls().size(); ++c) {
    const Function::Call &call = f.calls()[c];
    const Implementation &impl = call.op->select(call.args, call.implementation, arch);
    Config config = call.op->resolve_config(impl, call.args, std::nullopt);
    FunctionPlan::Part part;
    part.call = c;
    if (const auto *planned = dynamic_cast<const PlannedImplementation *>(&impl)) {
      planned->check_device(call.args, device);
      part.launches = record_call_plan(*planned, call.args, config, device);
      // The call's argument i is the value in its slot i; its scratch is the Function's.
      std::vector<uint32_t> map(call.slots.size() + 1, values);
      for (size_t i = 0; i < call.slots.size(); ++i)
        if (call.slots[i] >= 0)
          map[i] = uint32_t(call.slots[i]);
      part.launches.remap(map, values + 1);
      plan.scratch_bytes = std::max(plan.scratch_bytes, part.launches.scratch_bytes);
    } else {
      part.fallback = &impl;
      part.config = std::move(config);
    }
    plan.parts.push_back(std::move(part));
  }
  return plan;
}

void replay_function(const Function &f, const FunctionPlan &plan, std::span<const uint64_t> bases, Stream &stream) {
  for (const FunctionPlan::Part &p : plan.parts) {
    if (!p.fallback) {
      p.launches.replay(bases, stream.handle());
      continue;
    }
    const Function::Call &call = f.calls()[p.call];
    std::vector<TensorView> in, out;
    for (size_t i = 0; i < call.slots.size(); ++i) {
      const int v = call.slots[i];
      TensorView t = v < 0 ? TensorView() : TensorView(bases[v], f.values()[v].dtype, f.values()[v].shape, plan.device);
      (i < call.op->num_inputs() ? in : out).push_back(t);
    }
    p.fallback->run(call.args, p.config, in, out, stream);
  }
}

void FunctionGraphs::launch(const Function &f, const FunctionPlan &plan, std::span<const uint64_t> bases,
                            std::span<const uint64_t> bound, Stream &stream) {
  if (plan.id != plan_) {  // captured from another plan: other kernels, maybe other configs
    graphs_.clear();
    plan_ = plan.id;
  }
  ++clock_;
  for (Entry &e : graphs_)
    if (std::equal(e.bound.begin(), e.bound.end(), bound.begin(), bound.end())) {
      e.used = clock_;
      e.exec.launch(stream.handle());
      ++stats_.replays;
      return;
    }
  Graph graph = Graph::capture(stream, [&] { replay_function(f, plan, bases, stream); }, "Function::run (graph)");
  ++stats_.captures;
  stats_.nodes = plan.steps();
  Entry *slot = nullptr;
  if (graphs_.size() < kMaxGraphs) {
    graphs_.push_back(Entry{{}, GraphExec(graph), 0});
    ++stats_.instantiations;
    slot = &graphs_.back();
  } else {
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const Entry &a, const Entry &b) { return a.used < b.used; });
    try {
      if (lru->exec.update(graph)) {
        ++stats_.updates;
      } else {
        lru->exec = GraphExec(graph);
        ++stats_.instantiations;
      }
    } catch (...) {
      graphs_.erase(lru);  // its parameters are unknown now
      throw;
    }
    slot = &*lru;
  }
  slot->bound.assign(bound.begin(), bound.end());
  slot->used = clock_;
  slot->exec.launch(stream.handle());
  ++stats_.replays;
}

} // namespace tokamax::ops_detail
