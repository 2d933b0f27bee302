//===- Context.cpp - MLIR contexts with everything the compiler uses --------===//
#include "compiler/lib/Context.h"

#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>

namespace tokamax::compiler_detail {

void registerAll(mlir::DialectRegistry &registry) {
  registry.insert<tile::TileDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::scf::SCFDialect, mlir::func::FuncDialect, mlir::cf::ControlFlowDialect,
                  mlir::index::IndexDialect, mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  mlir::arith::registerConvertArithToLLVMInterface(registry);
  mlir::cf::registerConvertControlFlowToLLVMInterface(registry);
  mlir::index::registerConvertIndexToLLVMInterface(registry);
  mlir::registerConvertMathToLLVMInterface(registry);
  mlir::registerConvertNVVMToLLVMInterface(registry);
}

void registerPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    tile::registerTilePasses();
    mlir::registerCanonicalizerPass();
    mlir::registerCSEPass();
  });
}

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  registerAll(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry, mlir::MLIRContext::Threading::DISABLED);
  // The DSL builds these; the rest (LLVM, NVVM, ...) load on demand, which keeps the
  // first call of a process short.
  ctx->loadDialect<tile::TileDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                   mlir::scf::SCFDialect, mlir::func::FuncDialect>();
  return ctx;
}

DiagnosticCollector::DiagnosticCollector(mlir::MLIRContext &ctx) : ctx(ctx) {
  id = ctx.getDiagEngine().registerHandler([this](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(text_);
    os << diag.getLocation() << ": " << diag << "\n";
    for (const mlir::Diagnostic &note : diag.getNotes())
      os << "  note: " << note << "\n";
    return mlir::success();
  });
}

DiagnosticCollector::~DiagnosticCollector() { ctx.getDiagEngine().eraseHandler(id); }

} // namespace tokamax::compiler_detail
