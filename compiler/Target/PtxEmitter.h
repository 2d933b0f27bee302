//===- PtxEmitter.h - LLVM dialect -> LLVM IR -> PTX ---------------*- C++ -*-===//
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <memory>
#include <string>

namespace tokamax::target {

/// Translates an LLVM-dialect module to LLVM IR for the NVPTX target of `arch`.
/// Returns null (with diagnostics emitted on the module) on failure.
std::unique_ptr<llvm::Module> translateToLLVMIR(mlir::ModuleOp module, llvm::LLVMContext &ctx,
                                                const std::string &arch, std::string &error);

/// Optimises at `optLevel` and emits PTX (PTX ISA pinned). Returns false and fills `error`.
bool emitPtx(llvm::Module &module, const std::string &arch, int optLevel, std::string &ptx,
             std::string &error);

} // namespace tokamax::target
