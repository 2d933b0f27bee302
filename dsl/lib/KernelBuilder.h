//===- KernelBuilder.h - The MLIR side of the DSL -----------------*- C++ -*-===//
#pragma once

#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/Error.h>

#include "compiler/Dialect/Tile/IR/DTypes.h"
#include "compiler/Dialect/Tile/IR/TileDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <fmt/format.h>

namespace tokamax::dsl {

/// Owns the context and module a Kernel is being built into.
class KernelBuilder {
public:
  KernelBuilder(std::string name, KernelOptions options);

  mlir::MLIRContext &context() { return *ctx; }
  mlir::OpBuilder &b() { return builder; }
  mlir::Location loc() { return builder.getUnknownLoc(); }
  mlir::func::FuncOp func() { return kernel; }
  mlir::ModuleOp module() { return *moduleOp; }

  const std::string &name() const { return name_; }
  int numWarps() const { return options.num_warps; }
  std::vector<int64_t> grid{1, 1, 1};
  int64_t sharedBuffers = 0;  ///< ids handed out by Kernel::shared_buffer
  std::vector<int64_t> mbarrierArrivals;  ///< per mbarrier (Kernel::mbarriers)
  /// The body of the specialized_loop whose consumer is being built, else null.
  mlir::Block *specializedConsumer = nullptr;
  bool wgmmaDots() const { return options.wgmma_dots; }
  /// The i32 index of barrier `index` (0 <= index < count) of `barriers`.
  mlir::Value mbarrierIndex(const Mbarriers &barriers, const Value &index, const char *op);

  /// Appends a kernel parameter and returns its block argument.
  mlir::Value addParameter(const std::string &name, mlir::Type type, bool isOutput,
                           const std::vector<int64_t> &shape);

  Value wrap(mlir::Value v) { return Value(this, v.getAsOpaquePointer()); }
  static mlir::Value raw(const Value &v) { return mlir::Value::getFromOpaquePointer(v.handle()); }

  /// The MLIR value of `v`; literals become constants of `elementType` (splat to `shape`).
  mlir::Value materialize(const Value &v, mlir::Type elementType, llvm::ArrayRef<int64_t> shape = {});
  /// A scalar i32 (program ids, offsets, loop bounds); literals become constants.
  mlir::Value index(const Value &v, const char *op);
  /// Splat or broadcast `v` to `shape` (scalars splat; unit dimensions broadcast).
  mlir::Value broadcastTo(mlir::Value v, llvm::ArrayRef<int64_t> shape, const char *op);
  /// Makes two operands agree in dtype and shape (numpy broadcasting).
  std::pair<mlir::Value, mlir::Value> unify(const Value &a, const Value &b, const char *op);

  [[noreturn]] void fail(const std::string &message) const { throw Error(message); }
  /// Parses the builder's state into verified IR text.
  std::string ir();

private:
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OpBuilder builder;
  mlir::OwningOpRef<mlir::ModuleOp> moduleOp;
  mlir::func::FuncOp kernel;
  std::string name_;
  KernelOptions options;
  std::vector<std::string> paramNames;
};

/// "[4, 128]" / "scalar".
std::string shapeString(mlir::Type type);
/// "bf16", "f32", "ptr<bf16>" ...
std::string typeString(mlir::Type type);
/// The builder of whichever operand is not a literal (throws when both are literals).
KernelBuilder &builderOf(const char *op, std::initializer_list<const Value *> values);
/// Element type of a tile, or the type of a scalar.
inline bool isPowerOfTwo(int64_t v) { return v > 0 && !(v & (v - 1)); }

inline mlir::Type elementType(mlir::Value v) { return mlir::getElementTypeOrSelf(v.getType()); }
inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  if (auto t = llvm::dyn_cast<mlir::RankedTensorType>(v.getType()))
    return t.getShape();
  return {};
}

} // namespace tokamax::dsl
