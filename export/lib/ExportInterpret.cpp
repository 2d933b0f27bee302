//===- ExportInterpret.cpp - Replaying an export on the CPU interpreter -----===//
//
// The same steps as ExportedFunction::run, on host views, each kernel from the tile IR
// kept in the file: a check of the recorded plan (bindings, offsets, scratch, zero
// fills) that needs no GPU.
//
//===----------------------------------------------------------------------===//
#include "export/lib/ExportState.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/export/ExportFunction.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cstring>

namespace tokamax {

using namespace export_detail;

void interpret(const ExportedFunction &exported, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs) {
  const ExportedFunction::State *state = StateAccess::of(exported);
  if (!state)
    throw Error("export: interpret of an empty ExportedFunction");
  const Plan &plan = state->plan;
  for (size_t k = 0; k < plan.kernels.size(); ++k)
    if (plan.kernels[k].ir < 0)
      throw Error(fmt::format("export interpret: kernel {} ({}) has no tile IR (exported without include_ir)", k,
                              plan.kernels[k].launch.kernel_name));
  std::vector<uint64_t> bound;
  bind_views(plan, inputs, outputs, "export interpret", bound);
  // Intermediates and scratch as 16-byte aligned host buffers.
  std::vector<std::unique_ptr<double[]>> storage;
  auto allocate = [&](uint64_t bytes) {
    storage.push_back(std::make_unique<double[]>(bytes / 8 + 2));
    return reinterpret_cast<uint64_t>(storage.back().get());
  };
  const uint64_t scratch = allocate(plan.scratch_bytes);
  auto address = [&](const BufferRef &r) -> uint64_t {
    if (r.value < 0)
      return scratch + r.offset;
    if (!bound[r.value])
      bound[r.value] = allocate(plan.values[r.value].bytes());
    return bound[r.value] + r.offset;
  };
  std::vector<std::string> irs(plan.kernels.size());
  for (size_t k = 0; k < plan.kernels.size(); ++k)
    irs[k] = std::string(state->sections[plan.kernels[k].ir].text());
  for (const Step &step : plan.steps) {
    if (step.kernel < 0) {
      if (step.zero_bytes)
        std::memset(reinterpret_cast<void *>(address(step.buffer)), 0, step.zero_bytes);
      continue;
    }
    const LaunchInfo &info = plan.kernels[step.kernel].launch;
    std::vector<HostArg> args;
    for (size_t a = 0; a < step.args.size(); ++a) {
      if (step.args[a].is_scalar) {
        args.push_back(HostArg::value(step.args[a].scalar));
        continue;
      }
      uint64_t bytes = uint64_t(dtype_size(info.params[a].dtype));
      for (int64_t d : info.params[a].shape)
        bytes *= uint64_t(d);
      args.push_back(HostArg::tensor(reinterpret_cast<void *>(address(step.args[a].buffer)), bytes));
    }
    interpret_ir(irs[step.kernel], args);
  }
}

} // namespace tokamax
