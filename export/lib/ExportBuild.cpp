//===- ExportBuild.cpp - export_function: record a Function's launches, compile ===//
//
// 1. Every call's implementation and config are chosen for the target (pinned, else
//    auto on the target's arch; configs from the autotuning result, else heuristics).
// 2. The call runs through Implementation::interpret with an ExecutorCapture open:
//    its tensors are symbolic addresses (value v at (v + 1) << 40, the call's scratch at
//    1 << 62), so every launch, scratch request and zero fill the op plans is recorded
//    as kernel + (value or scratch, offset) per parameter, with nothing run.
// 3. Each distinct kernel (by its tile IR) is compiled for the target arch, its launch
//    parameters checked against what the capture passed, and the sections written.
// The file is then read back through the loader, so an export always validates.
//
//===----------------------------------------------------------------------===//
#include "export/lib/ExportFile.h"
#include "export/lib/ExportPlan.h"

#include "ops/lib/framework/ExecutorCapture.h"
#include "ops/lib/framework/LaunchPlan.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/export/ExportFunction.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <map>
#include <set>

namespace tokamax {

using namespace export_detail;

namespace {

/// Ops whose implementations plan every launch through a KernelExecutor (the ones a
/// Function traces); another op's interpret() would touch the symbolic addresses.
const std::set<std::string> kExportableOps = {"layer_norm", "layer_norm_vjp", "rms_norm", "rms_norm_vjp", "attention",
                                              "attention_vjp", "sum", "add", "cast", "fill"};

struct CapturedKernel {
  std::string name, ir;
};

/// Records the launches of the call in progress into the plan.
class CaptureExecutor : public ops_detail::KernelExecutor {
public:
  CaptureExecutor(Plan &plan, std::vector<CapturedKernel> &kernels,
                  std::vector<std::vector<std::pair<DType, std::vector<int64_t>>>> &tensorArgs)
      : plan_(plan), kernels_(kernels), tensorArgs_(tensorArgs) {}

  void begin(int call, std::string what) {
    call_ = call;
    what_ = std::move(what);
    callScratch_ = 0;
  }

  uint64_t allocate_scratch(size_t bytes) override {
    callScratch_ = bytes;
    plan_.scratch_bytes = std::max<uint64_t>(plan_.scratch_bytes, bytes);
    return ops_detail::kStandInScratch;
  }

  void launch(const KernelKey &, const Build &build, const std::vector<Arg> &args) override {
    dsl::Kernel kernel = build();
    std::string ir = kernel.ir();
    auto [it, added] = byIr_.emplace(ir, static_cast<int>(kernels_.size()));
    if (added)
      kernels_.push_back({kernel.name(), std::move(ir)});
    Step step;
    step.call = call_;
    step.kernel = it->second;
    std::vector<std::pair<DType, std::vector<int64_t>>> tensors;
    for (const Arg &a : args) {
      StepArg arg;
      if (a.is_scalar) {
        arg.is_scalar = true;
        arg.scalar = a.scalar;
      } else {
        arg.buffer = resolve(a.view.data(), a.view.nbytes());
        tensors.emplace_back(a.view.dtype(), std::vector<int64_t>(a.view.shape().begin(), a.view.shape().end()));
      }
      step.args.push_back(arg);
    }
    plan_.steps.push_back(std::move(step));
    tensorArgs_.push_back(std::move(tensors));
  }

  void zero(const TensorView &t) override {
    Step step;
    step.call = call_;
    step.buffer = resolve(t.data(), t.nbytes());
    step.zero_bytes = t.nbytes();
    plan_.steps.push_back(std::move(step));
    tensorArgs_.emplace_back();
  }

  void copy(const TensorView &, const TensorView &) override {
    throw Error(fmt::format("export: {} copies between buffers, which an export cannot replay", what_));
  }

  int device() const override { return 0; }
  // Recorded through interpret(): a persistent grid as on the interpreter.
  int sm_count() const override { return ops_detail::kInterpreterPrograms; }

private:
  BufferRef resolve(uint64_t address, uint64_t bytes) {
    if (sizes_.size() != plan_.values.size())
      for (const ValueSpec &v : plan_.values)
        sizes_.push_back(v.bytes());
    const ops_detail::BufferRef r =
        ops_detail::resolve_stand_in(address, bytes, sizes_, callScratch_, fmt::format("export: {}", what_));
    return {r.buffer == sizes_.size() ? -1 : int(r.buffer), r.offset};
  }

  Plan &plan_;
  std::vector<CapturedKernel> &kernels_;
  std::vector<std::vector<std::pair<DType, std::vector<int64_t>>>> &tensorArgs_;
  std::map<std::string, int> byIr_;
  std::vector<uint64_t> sizes_;  // of the values, for resolve_stand_in
  int call_ = 0;
  std::string what_;
  uint64_t callScratch_ = 0;
};

std::vector<uint8_t> bytesOf(std::string_view s) { return {s.begin(), s.end()}; }

} // namespace

ExportedFunction export_function(const Function &function, const ExportOptions &options) {
  const ExportTarget target = ExportTarget::parse(options.target.arch, options.target.device_name.empty()
                                                                            ? ""
                                                                            : options.target.device_kind());
  if (function.values().size() >= (size_t(1) << 20))
    throw Error(fmt::format("export: {} values (at most 2^20)", function.values().size()));
  std::unique_ptr<AutotuningScope> scope;
  if (options.autotuning)
    scope = std::make_unique<AutotuningScope>(options.autotuning);

  Plan plan;
  for (const ArgSpec &v : function.values())
    plan.values.push_back({v.shape, v.dtype});
  for (const ValueSpec &v : plan.values)
    if (v.bytes() > ops_detail::kStandInMaxBytes)
      throw Error(fmt::format("export: a value of {} bytes is over the 2^40 bytes an export can hold", v.bytes()));
  plan.inputs = function.inputs();
  plan.outputs = function.outputs();

  std::vector<CapturedKernel> kernels;
  std::vector<std::vector<std::pair<DType, std::vector<int64_t>>>> tensorArgs;
  CaptureExecutor capture(plan, kernels, tensorArgs);
  for (size_t i = 0; i < function.calls().size(); ++i) {
    const Function::Call &call = function.calls()[i];
    const std::string what = fmt::format("calls[{}] ({})", i, call.op->name());
    if (!kExportableOps.count(call.op->name()))
      throw Error(fmt::format("export: {}: op \"{}\" cannot be exported (exportable: {})", what, call.op->name(),
                              fmt::join(kExportableOps, ", ")));
    const Implementation &impl = call.op->select(call.args, call.implementation, target.arch);
    const Config config = call.op->resolve_config(impl, call.args, std::nullopt);
    std::vector<TensorView> in, out;
    for (size_t s = 0; s < call.slots.size(); ++s) {
      const int v = call.slots[s];
      TensorView view = v < 0 ? TensorView()
                              : TensorView(ops_detail::stand_in_address(size_t(v)), plan.values[v].dtype,
                                           plan.values[v].shape, 0);
      (s < call.op->num_inputs() ? in : out).push_back(view);
    }
    capture.begin(static_cast<int>(i), what);
    {
      ops_detail::ExecutorCapture open(capture);
      impl.interpret(call.args, config, in, out);
    }
    plan.calls.push_back({call.op->name(), call.args.to_json(), impl.name(), config.to_json(), call.slots});
  }

  // Compile each kernel once; the blobs follow the three JSON sections.
  std::vector<Section> blobs;
  CompileOptions compile = options.compile;
  compile.arch = target.arch;
  compile.assemble = true;
  std::string assembler;
  for (size_t k = 0; k < kernels.size(); ++k) {
    if (options.progress)
      options.progress({k, kernels.size(), kernels[k].name});
    CompiledKernel compiled;
    try {
      compiled = compile_ir(kernels[k].ir, compile);
    } catch (const Error &e) {
      throw Error(fmt::format("export: compiling kernel {} for {}: {}", kernels[k].name, target.arch, e.what()));
    }
    if (compiled.cubin.empty())
      throw Error(fmt::format("export: kernel {}: no cubin for {} (no assembler: nvJitLink or ptxas)",
                              kernels[k].name, target.arch));
    assembler = compiled.launch.assembler;
    KernelEntry entry;
    entry.launch = compiled.launch;
    auto add = [&](SectionKind kind, std::vector<uint8_t> payload) {
      blobs.push_back({kind, std::move(payload)});
      return static_cast<int>(3 + blobs.size() - 1);
    };
    entry.cubin = add(SectionKind::Cubin, std::move(compiled.cubin));
    if (options.include_ptx)
      entry.ptx = add(SectionKind::Ptx, bytesOf(compiled.ptx));
    if (options.include_ir)
      entry.ir = add(SectionKind::TileIr, bytesOf(kernels[k].ir));
    plan.kernels.push_back(std::move(entry));
  }
  if (options.progress)
    options.progress({kernels.size(), kernels.size(), ""});

  // What each launch passed must be what its kernel declares.
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step &step = plan.steps[s];
    if (step.kernel < 0)
      continue;
    const LaunchInfo &info = plan.kernels[step.kernel].launch;
    if (step.args.size() != info.params.size())
      throw Error(fmt::format("export: calls[{}] launches {} with {} arguments; it takes {}", step.call,
                              info.kernel_name, step.args.size(), info.params.size()));
    for (size_t a = 0, t = 0; a < step.args.size(); ++a) {
      const KernelParam &p = info.params[a];
      const bool ok = p.is_tensor == !step.args[a].is_scalar &&
                      (!p.is_tensor || (tensorArgs[s][t].first == p.dtype && tensorArgs[s][t].second == p.shape));
      if (!ok)
        throw Error(fmt::format("export: calls[{}] launches {} with an argument that does not match parameter {} ({})",
                                step.call, info.kernel_name, a, p.name));
      t += p.is_tensor;
    }
  }

  Manifest manifest;
  manifest.producer = "tokamax " TOKAMAX_VERSION_STRING;
  manifest.target = target;
  manifest.opt_level = compile.opt_level;
  manifest.ptx_isa = ptx_isa_version();
  manifest.llvm = llvm_version();
  manifest.assembler = assembler.empty() ? assembler_identity() : assembler;
  std::vector<Section> sections;
  sections.push_back({SectionKind::Manifest, bytesOf(manifest_to_json(manifest))});
  sections.push_back({SectionKind::Function, bytesOf(function.to_json())});
  sections.push_back({SectionKind::Plan, bytesOf(plan_to_json(plan))});
  for (Section &b : blobs)
    sections.push_back(std::move(b));
  return ExportedFunction::load(write_container(ExportedFunction::kFormatVersion, sections));
}

std::shared_ptr<AutotuningResult> recorded_configs(const ExportedFunction &exported) {
  auto result = std::make_shared<AutotuningResult>();
  for (const ExportedCall &c : exported.calls())
    result->add(TuningEntry{BoundArgs::from_json(c.args_json), c.implementation, Config::from_json(c.config_json), {}});
  return result;
}

} // namespace tokamax
