//===- PtxEmitter.cpp - LLVM dialect -> LLVM IR -> PTX ----------------------===//
#include "compiler/Target/PtxEmitter.h"

#include <tokamax/compiler/Compiler.h>

#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

namespace tokamax::target {

namespace {

constexpr const char *kTriple = "nvptx64-nvidia-cuda";

void initializeNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const std::string &arch, int optLevel,
                                                         std::string &error) {
  initializeNvptx();
  llvm::Triple triple(kTriple);
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  std::string features = std::string("+ptx") + [] {
    std::string v = ptx_isa_version();
    v.erase(std::remove(v.begin(), v.end(), '.'), v.end());
    return v;
  }();
  llvm::TargetOptions options;
  // a * b + c may become one fma (as nvcc's default -fmad=true): exp2(x * scale - max)
  // in attention's softmax is one FFMA, not a rounded multiply and a subtract.
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  auto level = optLevel >= 3 ? llvm::CodeGenOptLevel::Aggressive
               : optLevel == 2 ? llvm::CodeGenOptLevel::Default
               : optLevel == 1 ? llvm::CodeGenOptLevel::Less
                               : llvm::CodeGenOptLevel::None;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, arch, features, options, llvm::Reloc::PIC_, std::nullopt, level));
}

/// PTX every lane of a warp must reach at the same instruction (`.aligned`: mma.sync,
/// ldmatrix, wgmma, bar) written as inline asm is convergent: otherwise LLVM may copy it
/// into both arms of a lane-dependent branch (tail duplication, jump threading), and a
/// warp split between the copies hangs or computes garbage. The LLVM dialect's inline
/// asm carries no such attribute, so the calls get it here.
void markWarpCollectiveAsmConvergent(llvm::Module &module) {
  for (llvm::Function &function : module)
    for (llvm::BasicBlock &block : function)
      for (llvm::Instruction &inst : block)
        if (auto *call = llvm::dyn_cast<llvm::CallInst>(&inst))
          if (auto *code = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand());
              code && code->getAsmString().contains(".aligned"))
            call->addFnAttr(llvm::Attribute::Convergent);
}

} // namespace

std::unique_ptr<llvm::Module> translateToLLVMIR(mlir::ModuleOp module, llvm::LLVMContext &ctx,
                                                const std::string &arch, std::string &error) {
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, ctx);
  if (!llvmModule) {
    error = "translation of the LLVM dialect to LLVM IR failed";
    return nullptr;
  }
  markWarpCollectiveAsmConvergent(*llvmModule);
  auto tm = createTargetMachine(arch, 3, error);
  if (!tm)
    return nullptr;
  llvmModule->setTargetTriple(llvm::Triple(kTriple));
  llvmModule->setDataLayout(tm->createDataLayout());
  return llvmModule;
}

bool emitPtx(llvm::Module &module, const std::string &arch, int optLevel, std::string &ptx,
             std::string &error) {
  auto tm = createTargetMachine(arch, optLevel, error);
  if (!tm)
    return false;
  if (optLevel > 0) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    auto level = optLevel >= 3 ? llvm::OptimizationLevel::O3
                 : optLevel == 2 ? llvm::OptimizationLevel::O2
                                 : llvm::OptimizationLevel::O1;
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(level);
    mpm.run(module, mam);
  }
  llvm::SmallString<0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager codegen;
  if (tm->addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    error = "the NVPTX backend cannot emit assembly";
    return false;
  }
  codegen.run(module);
  ptx.assign(buffer.begin(), buffer.end());
  return true;
}

} // namespace tokamax::target
