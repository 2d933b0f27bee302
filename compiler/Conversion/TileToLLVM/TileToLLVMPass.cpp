//===- TileToLLVMPass.cpp - Lower tile kernels to LLVM + NVVM ---------------===//
//
// Each func.func kernel becomes an llvm.func marked nvvm.kernel with the same
// parameters (tile pointers become global pointers), a static shared-memory scratch
// global when the kernel needs one, and a body lowered operation by operation
// (TileLowering). arith/scf/cf leftovers are converted by the upstream passes that
// follow in the pipeline.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/TileLowering.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tokamax::tile {
#define GEN_PASS_DEF_CONVERTTILETOLLVM
#include "compiler/Dialect/Tile/Transforms/Passes.h.inc"
} // namespace tokamax::tile

using namespace mlir;
using namespace tokamax::tile;

namespace {

struct ConvertTileToLLVMPass : tokamax::tile::impl::ConvertTileToLLVMBase<ConvertTileToLLVMPass> {
  using ConvertTileToLLVMBase::ConvertTileToLLVMBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> kernels(module.getOps<func::FuncOp>());
    for (func::FuncOp func : kernels)
      if (failed(lowerKernel(module, func)))
        return signalPassFailure();
  }

  LogicalResult lowerKernel(ModuleOp module, func::FuncOp func) {
    MLIRContext *ctx = &getContext();
    OpBuilder b(ctx);
    auto globalPtr = LLVM::LLVMPointerType::get(ctx, 1);
    SmallVector<Type> params;
    for (Type type : func.getArgumentTypes()) {
      if (isa<PointerType>(type))
        params.push_back(globalPtr);
      else if (type.isIntOrFloat())
        params.push_back(type);
      else
        return func.emitOpError("kernel parameter of type ") << type << " is not supported";
    }
    b.setInsertionPoint(func);
    unsigned warps = getNumWarps(func);
    int64_t shared = 0;
    if (auto attr = func->getAttrOfType<IntegerAttr>(kSharedBytesAttr))
      shared = attr.getInt();

    LLVM::GlobalOp scratch;
    if (shared > 0) {
      auto arrayType = LLVM::LLVMArrayType::get(b.getI8Type(), shared);
      scratch = b.create<LLVM::GlobalOp>(func.getLoc(), arrayType, /*isConstant=*/false,
                                         LLVM::Linkage::Internal,
                                         (func.getName() + "_scratch").str(), Attribute(),
                                         /*alignment=*/16, /*addrSpace=*/3);
    }
    auto llvmFunc = b.create<LLVM::LLVMFuncOp>(
        func.getLoc(), func.getName(), LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), params));
    llvmFunc->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
    llvmFunc->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                      b.getDenseI32ArrayAttr({int32_t(32 * warps), 1, 1}));
    for (auto attr : {kNumWarpsAttr, kSharedBytesAttr, kGridAttr})
      if (Attribute value = func->getAttr(attr))
        llvmFunc->setAttr(attr, value);

    Block *entry = llvmFunc.addEntryBlock(b);
    b.setInsertionPointToStart(entry);
    Value sharedBase;
    if (scratch)
      sharedBase = b.create<LLVM::AddressOfOp>(func.getLoc(), scratch);
    TileLowering lowering(b, arch, entry, sharedBase);
    for (auto [old, lowered] : llvm::zip(func.getArguments(), entry->getArguments()))
      lowering.mapScalar(old, lowered);
    if (failed(lowering.lowerBlock(func.getBody().front())))
      return failure();
    func.erase();
    return success();
  }
};

} // namespace
