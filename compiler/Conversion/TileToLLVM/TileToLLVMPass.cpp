//===- TileToLLVMPass.cpp - Lower tile kernels to LLVM + NVVM ---------------===//
//
// Each func.func kernel becomes an llvm.func marked nvvm.kernel with the same
// parameters (tile pointers become global pointers), a static shared-memory scratch
// global when the kernel needs one, and a body lowered operation by operation
// (TileLowering). arith/scf/cf leftovers are converted by the upstream passes that
// follow in the pipeline.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/MmaSync.h"
#include "compiler/Conversion/TileToLLVM/TileLowering.h"
#include "compiler/Dialect/Tile/Transforms/Passes.h"

#include <tokamax/runtime/Error.h>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

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
    std::optional<tokamax::Arch> target;
    try {
      target = tokamax::Arch::parse(arch, "convert-tile-to-llvm");
    } catch (const tokamax::Error &e) {
      module.emitError(e.what());
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> kernels(module.getOps<func::FuncOp>());
    for (func::FuncOp func : kernels)
      if (failed(lowerKernel(module, func, *target)))
        return signalPassFailure();
  }

  LogicalResult lowerKernel(ModuleOp module, func::FuncOp func, const tokamax::Arch &target) {
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
    // One TMA tensor map per tensor parameter a tile.tma_dot reads, appended to the
    // parameters (128 bytes by value, read in place: grid constants).
    // param -> (box inner, box outer, swizzle bytes)
    std::map<unsigned, TmaBox> boxes;
    unsigned producerWarps = 0;
    int64_t cluster = 1;
    WalkResult walked = func.walk([&](TmaDotOp dot) {
      if (int64_t want = static_cast<int64_t>(dot.getClusterM()); want > 1) {
        if (cluster > 1 && cluster != want) {
          dot.emitOpError("asks for another cluster size than an earlier tma_dot");
          return WalkResult::interrupt();
        }
        cluster = want;
      }
      if (dot.getWarpSpecialize()) {
        if (producerWarps) {
          dot.emitOpError("is a second warp-specialized tma_dot in the kernel; a kernel has one producer");
          return WalkResult::interrupt();
        }
        producerWarps = kProducerWarps;
      }
      // K-major: [rows][block_k] boxes, swizzled by their row (32, 64 or 128 bytes);
      // MN-major: [block_k][128 bytes] boxes with the 128-byte swizzle.
      const int64_t bytes = elementBytes(cast<PointerType>(dot.getA().getType()).getPointeeType());
      auto want = [&](Value operand, bool kMajor, int64_t rows) -> LogicalResult {
        unsigned index = cast<BlockArgument>(operand).getArgNumber();
        const int64_t bk = static_cast<int64_t>(dot.getBlockK());
        TmaBox box = kMajor ? TmaBox{bk, rows, bk * bytes} : TmaBox{128 / bytes, bk, 128};
        auto [it, inserted] = boxes.emplace(index, box);
        if (!inserted && it->second != box)
          return dot.emitOpError("reads parameter ") << index << " with another TMA box than an earlier tma_dot";
        return success();
      };
      // In a cluster, each CTA loads (and multicasts) its share of b's rows.
      if (failed(want(dot.getA(), !dot.getTransA(), dot.getBlockM())) ||
          failed(want(dot.getB(), dot.getTransB(), dot.getBlockN() / dot.getClusterM())))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return failure();
    // A loop split between warp roles brings the producer warpgroup.
    walked = func.walk([&](scf::ForOp loop) {
      if (!loop->hasAttr(kWarpSpecializeAttr))
        return WalkResult::advance();
      if (producerWarps) {
        loop.emitOpError("is a second warp-specialized loop or op in the kernel; a kernel has one producer");
        return WalkResult::interrupt();
      }
      producerWarps = kProducerWarps;
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return failure();
    // tile.tma_store: a box of one 128-byte strip of columns by the block's rows.
    walked = func.walk([&](TmaStoreOp store) {
      unsigned index = cast<BlockArgument>(store.getBase()).getArgNumber();
      TmaBox box{store.getStripColumns(), store.getValue().getType().getDimSize(0), 128};
      auto [it, inserted] = boxes.emplace(index, box);
      if (!inserted && it->second != box) {
        store.emitOpError("writes parameter ") << index << " with another TMA box than an earlier TMA access";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return failure();
    // TMA copies into shared tiles: a box of one panel of the block's rows.
    walked = func.walk([&](AsyncBlockLoadOp copy) {
      if (!copy.isTma())
        return WalkResult::advance();
      unsigned index = cast<BlockArgument>(copy.getBase()).getArgNumber();
      auto [it, inserted] = boxes.emplace(index, tmaCopyBox(copy));
      if (!inserted && it->second != tmaCopyBox(copy)) {
        copy.emitOpError("copies parameter ") << index << " with another TMA box than an earlier TMA access";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return failure();
    unsigned userParams = params.size();
    for (size_t i = 0; i < boxes.size(); ++i)
      params.push_back(LLVM::LLVMPointerType::get(ctx));

    b.setInsertionPoint(func);
    unsigned warps = getNumWarps(func);
    int64_t shared = 0;
    if (auto attr = func->getAttrOfType<IntegerAttr>(kSharedBytesAttr))
      shared = attr.getInt();

    // Shared tiles of asynchronous copies may be read by wgmma, whose swizzle atoms
    // need 1024-byte aligned bases (AllocateShared aligns their offsets).
    bool hasAsyncCopies = false;
    if (func->hasAttr(kWgmmaDotsAttr))
      func.walk([&](AsyncBlockLoadOp) { hasAsyncCopies = true; });
    // Static shared memory stops at 48 KiB; beyond it the scratch is dynamic (sized at
    // launch, after the launcher raises the kernel's limit).
    LLVM::GlobalOp scratch;
    bool dynamicShared = shared > 48 * 1024;
    if (shared > 0) {
      auto arrayType = LLVM::LLVMArrayType::get(b.getI8Type(), dynamicShared ? 0 : shared);
      scratch = b.create<LLVM::GlobalOp>(func.getLoc(), arrayType, /*isConstant=*/false,
                                         dynamicShared ? LLVM::Linkage::External : LLVM::Linkage::Internal,
                                         (func.getName() + "_scratch").str(), Attribute(),
                                         /*alignment=*/boxes.empty() && !hasAsyncCopies ? 16 : 1024, /*addrSpace=*/3);
    }
    auto llvmFunc = b.create<LLVM::LLVMFuncOp>(
        func.getLoc(), func.getName(), LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), params));
    llvmFunc->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
    if (dynamicShared)
      llvmFunc->setAttr(kDynamicSharedAttr, UnitAttr::get(ctx));
    SmallVector<int64_t> mapInfo;
    for (auto [i, entry] : llvm::enumerate(boxes)) {
      unsigned index = userParams + i;
      llvmFunc.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                          TypeAttr::get(LLVM::LLVMArrayType::get(b.getI8Type(), 128)));
      llvmFunc.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(), b.getI64IntegerAttr(64));
      llvmFunc.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(), UnitAttr::get(ctx));
      const TmaBox &box = entry.second;
      mapInfo.append({int64_t(entry.first), box.inner, box.rows, box.swizzle, box.batchRows});
    }
    if (!mapInfo.empty())
      llvmFunc->setAttr(kTensorMapsAttr, b.getDenseI64ArrayAttr(mapInfo));
    llvmFunc->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                      b.getDenseI32ArrayAttr({int32_t(32 * (warps + producerWarps)), 1, 1}));
    if (cluster > 1) {
      auto grid = func->getAttrOfType<DenseI64ArrayAttr>(kGridAttr);
      if (grid && grid[0] % cluster != 0)
        return func.emitOpError("has a grid of ") << grid[0] << " programs along x, not a multiple of its cluster size "
                                                  << cluster;
      llvmFunc->setAttr(NVVM::NVVMDialect::getClusterDimAttrName(),
                        b.getDenseI32ArrayAttr({int32_t(cluster), 1, 1}));
      llvmFunc->setAttr(kClusterAttr, b.getI32IntegerAttr(int32_t(cluster)));
    }
    if (producerWarps) {
      llvmFunc->setAttr(kProducerWarpsAttr, b.getI32IntegerAttr(int32_t(producerWarps)));
      // One program per SM (the ring fills shared memory anyway) unless the kernel asks
      // for more (tile.blocks_per_sm: its launch register limit is then a share).
      llvmFunc->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(), b.getI32IntegerAttr(int32_t(getBlocksPerSm(func))));
    }
    for (auto attr : {kNumWarpsAttr, kSharedBytesAttr, kGridAttr})
      if (Attribute value = func->getAttr(attr))
        llvmFunc->setAttr(attr, value);

    Block *entry = llvmFunc.addEntryBlock(b);
    b.setInsertionPointToStart(entry);
    Value sharedBase;
    if (scratch)
      sharedBase = b.create<LLVM::AddressOfOp>(func.getLoc(), scratch);
    TileLowering lowering(b, target, entry, sharedBase);
    for (auto [old, lowered] : llvm::zip(func.getArguments(), entry->getArguments()))
      lowering.mapScalar(old, lowered);
    for (auto [i, entry_] : llvm::enumerate(boxes))
      lowering.setTensorMap(func.getArgument(entry_.first), entry->getArgument(userParams + i));
    if (failed(initMbarriers(lowering, func)) || failed(lowering.lowerBlock(func.getBody().front())))
      return failure();
    // setmaxnreg needs the launch's per-thread register limit stated.
    if (unsigned registers = lowering.launchRegisters())
      llvmFunc->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(), b.getI32IntegerAttr(int32_t(registers)));
    func.erase();
    return success();
  }
};

} // namespace
