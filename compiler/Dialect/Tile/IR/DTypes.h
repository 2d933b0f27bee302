//===- DTypes.h - tokamax::DType <-> MLIR element types -----------*- C++ -*-===//
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include <tokamax/runtime/DType.h>

#include <optional>

namespace tokamax::tile {

inline mlir::Type toMlirType(mlir::MLIRContext *ctx, DType dtype) {
  mlir::Builder b(ctx);
  switch (dtype) {
  case DType::BF16: return b.getBF16Type();
  case DType::F16: return b.getF16Type();
  case DType::F32: return b.getF32Type();
  case DType::F64: return b.getF64Type();
  case DType::I8: return b.getI8Type();
  case DType::I32: return b.getI32Type();
  case DType::I64: return b.getI64Type();
  case DType::Bool: return b.getI1Type();
  case DType::F8E4M3: return b.getType<mlir::Float8E4M3FNType>();
  case DType::F8E5M2: return b.getType<mlir::Float8E5M2Type>();
  }
  return {};
}

/// Whether `type` is one of the fp8 element types (e4m3, e5m2).
inline bool isFp8(mlir::Type type) { return llvm::isa<mlir::Float8E4M3FNType, mlir::Float8E5M2Type>(type); }

inline std::optional<DType> fromMlirType(mlir::Type type) {
  if (type.isBF16()) return DType::BF16;
  if (type.isF16()) return DType::F16;
  if (type.isF32()) return DType::F32;
  if (type.isF64()) return DType::F64;
  if (type.isInteger(8)) return DType::I8;
  if (type.isInteger(32)) return DType::I32;
  if (type.isInteger(64)) return DType::I64;
  if (type.isInteger(1)) return DType::Bool;
  if (llvm::isa<mlir::Float8E4M3FNType>(type)) return DType::F8E4M3;
  if (llvm::isa<mlir::Float8E5M2Type>(type)) return DType::F8E5M2;
  return std::nullopt;
}

} // namespace tokamax::tile
