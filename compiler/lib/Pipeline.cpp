//===- Pipeline.cpp - The compilation pipeline, as one list ------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Error.h>

#include "compiler/Dialect/Tile/IR/DTypes.h"
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"
#include "compiler/Target/PtxEmitter.h"
#include "compiler/lib/Context.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

namespace tokamax {

using namespace mlir;

const char *ptx_isa_version() { return "8.0"; }

std::string llvm_version() { return "LLVM " LLVM_VERSION_STRING; }

std::string CompileOptions::key() const { return fmt::format("opt={};assemble={};fma=contract", opt_level, assemble); }

namespace {

using Passes = std::function<void(OpPassManager &)>;

/// One stage: a name (also its dump file) and the passes it runs.
struct Stage {
  const char *name;
  Passes passes;
};

void canonicalPasses(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void layoutPasses(OpPassManager &pm) {
  pm.addPass(tile::createTileAssignLayouts());
  pm.addPass(tile::createTileRemoveLayoutConversions());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

std::vector<Stage> tileStages(const std::string &arch) {
  return {
      {"canonical", canonicalPasses},
      {"layouts", layoutPasses},
      {"shared", [](OpPassManager &pm) {
         pm.addPass(tile::createTileAllocateShared());
         pm.addPass(tile::createTileInsertBarriers());
       }},
      {"tile-to-llvm", [arch](OpPassManager &pm) {
         pm.addPass(tile::createConvertTileToLLVM(tile::ConvertTileToLLVMOptions{arch}));
       }},
      {"llvm-dialect", [](OpPassManager &pm) {
         pm.addPass(createSCFToControlFlowPass());
         pm.addPass(createArithToLLVMConversionPass());
         pm.addPass(createConvertMathToLLVMPass());
         pm.addPass(createConvertControlFlowToLLVMPass());
         pm.addPass(createConvertIndexToLLVMPass());
         pm.addPass(createConvertNVVMToLLVMPass());
         pm.addPass(createReconcileUnrealizedCastsPass());
         pm.addPass(createCanonicalizerPass());
         pm.addPass(createCSEPass());
       }},
  };
}

class Timer {
public:
  double lap() {
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    return ms;
  }

private:
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
};

class Dumper {
public:
  Dumper(const std::string &root, const std::string &kernel) {
    if (root.empty())
      return;
    dir = std::filesystem::path(root) / kernel;
    std::filesystem::create_directories(dir);
  }
  void write(int index, const std::string &name, const std::string &text) {
    if (dir.empty())
      return;
    std::ofstream(dir / fmt::format("{:02}-{}", index, name), std::ios::binary) << text;
  }

private:
  std::filesystem::path dir;
};

std::string print(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

LaunchInfo launchInfo(ModuleOp module) {
  LaunchInfo info;
  auto funcs = module.getOps<LLVM::LLVMFuncOp>();
  for (LLVM::LLVMFuncOp func : funcs) {
    if (!func->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
      continue;
    info.kernel_name = func.getName().str();
    if (auto grid = func->getAttrOfType<DenseI64ArrayAttr>(tile::kGridAttr))
      for (int64_t i = 0; i < grid.size() && i < 3; ++i)
        info.grid[i] = static_cast<uint32_t>(grid[i]);
    info.block_threads = 32 * tile::getNumWarps(func);
    if (auto warps = func->getAttrOfType<IntegerAttr>(tile::kNumWarpsAttr))
      info.block_threads = 32 * static_cast<uint32_t>(warps.getInt());
    if (auto shared = func->getAttrOfType<IntegerAttr>(tile::kSharedBytesAttr))
      info.shared_bytes = static_cast<uint32_t>(shared.getInt());
    if (auto producers = func->getAttrOfType<IntegerAttr>(tile::kProducerWarpsAttr))
      info.block_threads += 32 * static_cast<uint32_t>(producers.getInt());
    info.dynamic_shared = func->hasAttr(tile::kDynamicSharedAttr);
    if (auto cluster = func->getAttrOfType<IntegerAttr>(tile::kClusterAttr))
      info.cluster = static_cast<uint32_t>(cluster.getInt());
    if (auto maps = func->getAttrOfType<DenseI64ArrayAttr>(tile::kTensorMapsAttr))
      for (int64_t i = 0; i + 4 < maps.size(); i += 5)  // parameter, box inner / rows, swizzle, batch rows
        info.tensor_maps.push_back({static_cast<uint32_t>(maps[i]), static_cast<uint32_t>(maps[i + 1]),
                                    static_cast<uint32_t>(maps[i + 2]), static_cast<uint32_t>(maps[i + 3]),
                                    static_cast<uint32_t>(maps[i + 4])});
  }
  return info;
}

/// Parameter metadata comes from the tile-level kernel (argument attributes).
std::vector<KernelParam> kernelParams(ModuleOp module) {
  std::vector<KernelParam> params;
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      KernelParam p;
      Type type = func.getArgument(i).getType();
      p.is_tensor = isa<tile::PointerType>(type);
      Type elem = p.is_tensor ? cast<tile::PointerType>(type).getPointeeType() : type;
      if (auto dtype = tile::fromMlirType(elem))
        p.dtype = *dtype;
      if (auto name = func.getArgAttrOfType<StringAttr>(i, "tile.name"))
        p.name = name.str();
      p.is_output = func.getArgAttr(i, "tile.output") != nullptr;
      if (auto shape = func.getArgAttrOfType<DenseI64ArrayAttr>(i, "tile.shape"))
        p.shape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
      params.push_back(std::move(p));
    }
  }
  return params;
}

/// The tile IR, parsed and verified (else an Error with the diagnostics).
OwningOpRef<ModuleOp> parseKernel(const std::string &ir, MLIRContext &ctx,
                                  const compiler_detail::DiagnosticCollector &diagnostics) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, &ctx);
  if (!module || failed(verify(*module)))
    throw Error("tile IR does not parse or verify:\n" + diagnostics.text());
  return module;
}

/// The kernel's name (its func.func); throws where there is none.
std::string kernelName(ModuleOp module) {
  std::string name;
  for (func::FuncOp func : module.getOps<func::FuncOp>())
    name = func.getName().str();
  if (name.empty())
    throw Error("tile IR has no kernel (func.func) to compile");
  return name;
}

} // namespace

std::vector<std::string> pipeline_stages() {
  std::vector<std::string> names{"parse + verify the tile IR"};
  for (const Stage &stage : tileStages("sm_90a"))
    names.emplace_back(stage.name);
  names.emplace_back("llvm-ir (translate to LLVM IR)");
  names.emplace_back("ptx (LLVM -O3 + NVPTX)");
  names.emplace_back("cubin (nvJitLink or ptxas)");
  return names;
}

int64_t planned_shared_bytes(const std::string &ir) { return planned_shared(ir).bytes; }

SharedPlan planned_shared(const std::string &ir) {
  auto ctx = compiler_detail::makeContext();
  compiler_detail::DiagnosticCollector diagnostics(*ctx);
  OwningOpRef<ModuleOp> module = parseKernel(ir, *ctx, diagnostics);
  const std::string name = kernelName(*module);
  // compile_ir's stages up to its shared-memory plan: the barriers it inserts next, and
  // everything after, take no shared memory.
  PassManager pm(ctx.get());
  canonicalPasses(pm);
  layoutPasses(pm);
  pm.addPass(tile::createTileAllocateShared());
  if (failed(pm.run(*module)))
    throw Error(fmt::format("kernel {}: planning its shared memory failed:\n{}", name, diagnostics.text()));
  SharedPlan plan;
  for (func::FuncOp func : module->getOps<func::FuncOp>()) {
    if (auto shared = func->getAttrOfType<IntegerAttr>(tile::kSharedBytesAttr))
      plan.bytes = shared.getInt();
    if (auto blocks = func->getAttrOfType<IntegerAttr>(tile::kBlocksPerSmAttr))
      plan.blocks_per_sm = static_cast<int>(blocks.getInt());
  }
  return plan;
}

CompiledKernel compile_ir(const std::string &ir, const CompileOptions &options) {
  Timer timer;
  const Arch target = Arch::parse(options.arch, "CompileOptions::arch");
  CompiledKernel result;
  result.canonical_ir = ir;
  result.arch = options.arch;
  auto ctx = compiler_detail::makeContext();
  compiler_detail::DiagnosticCollector diagnostics(*ctx);

  OwningOpRef<ModuleOp> module = parseKernel(ir, *ctx, diagnostics);
  std::vector<KernelParam> params = kernelParams(*module);
  const std::string name = kernelName(*module);
  const char *envDump = std::getenv("TOKAMAX_DUMP_DIR");
  Dumper dump(!options.dump_dir.empty() ? options.dump_dir : envDump ? envDump : "", name);
  int index = 0;
  dump.write(index++, "tile.mlir", ir);
  result.stages.push_back({"parse", timer.lap()});

  for (const Stage &stage : tileStages(options.arch)) {
    PassManager pm(ctx.get());
    stage.passes(pm);
    if (failed(pm.run(*module)))
      throw Error(fmt::format("kernel {}: stage '{}' failed for {}:\n{}", name, stage.name,
                              options.arch, diagnostics.text()));
    dump.write(index++, std::string(stage.name) + ".mlir", print(module->getOperation()));
    result.stages.push_back({stage.name, timer.lap()});
  }
  result.launch = launchInfo(*module);
  result.launch.params = std::move(params);
  // More shared memory than a block may have fails only at launch, on the device:
  // refused here, where a CPU build sees it.
  if (const int64_t limit = target.shared_memory_per_block(); limit && result.launch.shared_bytes > limit)
    throw Error(fmt::format("kernel {}: needs {} bytes of shared memory a block; {} allows at most {}", name,
                            result.launch.shared_bytes, options.arch, limit));

  llvm::LLVMContext llvmContext;
  std::string error;
  auto llvmModule = target::translateToLLVMIR(*module, llvmContext, options.arch, error);
  if (!llvmModule)
    throw Error(fmt::format("kernel {}: {}\n{}", name, error, diagnostics.text()));
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvmModule->print(os, nullptr);
    dump.write(index++, "kernel.ll", text);
  }
  result.stages.push_back({"llvm-ir", timer.lap()});

  if (!target::emitPtx(*llvmModule, options.arch, options.opt_level, result.ptx, error))
    throw Error(fmt::format("kernel {}: {}", name, error));
  dump.write(index++, "kernel.ptx", result.ptx);
  result.stages.push_back({"ptx", timer.lap()});

  if (options.assemble) {
    result.cubin = assemble_ptx(result.ptx, options.arch);
    dump.write(index++, "kernel.cubin", std::string(result.cubin.begin(), result.cubin.end()));
    result.stages.push_back({"cubin", timer.lap()});
  }
  return result;
}

} // namespace tokamax
