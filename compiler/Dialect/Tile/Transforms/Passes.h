//===- Passes.h - Tile dialect passes -----------------------------*- C++ -*-===//
#pragma once

#include "compiler/Dialect/Tile/IR/TileDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"

namespace tokamax::tile {

#define GEN_PASS_DECL
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"

} // namespace tokamax::tile
