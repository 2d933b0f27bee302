//===- Context.h - MLIR contexts with everything the compiler uses -*- C++ -*-===//
#pragma once

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <memory>
#include <string>

namespace tokamax::compiler_detail {

/// Registers the dialects, interfaces and LLVM IR translations of the pipeline.
void registerAll(mlir::DialectRegistry &registry);
/// Registers our passes with the global pass registry (for tokamax-opt), once.
void registerPasses();

/// A single-threaded context (no thread pool per compile) with every dialect loaded.
std::unique_ptr<mlir::MLIRContext> makeContext();

/// Collects diagnostics of a context into a string while alive.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &ctx);
  ~DiagnosticCollector();
  const std::string &text() const { return text_; }

private:
  mlir::MLIRContext &ctx;
  uint64_t id;
  std::string text_;
};

} // namespace tokamax::compiler_detail
