//===- PtxBuilderHopper.cpp - mbarrier, TMA and wgmma inline PTX ------------===//
//
// The sm_90a half of PtxBuilder: what tile.tma_dot's pipeline issues. Every instruction
// here has side effects (it touches shared memory, barriers or the async proxy), so none
// of it is ever hoisted or merged. Lane-dependent work next to warpgroup-wide
// instructions is predicated inside the asm rather than branched around.
//
//===----------------------------------------------------------------------===//
#include "compiler/Conversion/TileToLLVM/PtxBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace tokamax::tile {

void PtxBuilder::mbarrierInit(Value bar, unsigned count) {
  asmCall(Type(), ValueRange{bar}, llvm::formatv("mbarrier.init.shared::cta.b64 [$0], {0};", count).str(), "r",
          true);
}

void PtxBuilder::mbarrierInval(Value bar) {
  asmCall(Type(), ValueRange{bar}, "mbarrier.inval.shared::cta.b64 [$0];", "r", true);
}

void PtxBuilder::mbarrierArriveExpectTx(Value bar, unsigned bytes) {
  asmCall(Type(), ValueRange{bar},
          llvm::formatv("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {0};", bytes).str(), "r", true);
}

void PtxBuilder::mbarrierArrive(Value bar, Value pred) {
  asmCall(Type(), ValueRange{bar, b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred)},
          "{\n .reg .pred p;\n setp.ne.b32 p, $1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [$0];\n}", "r,r", true);
}

void PtxBuilder::mbarrierWait(Value bar, Value parity) {
  // Labels inside braces are local to this instance of the block.
  asmCall(Type(), ValueRange{bar, parity},
          "{\n .reg .pred done;\n wait:\n mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
          " @!done bra wait;\n}",
          "r,r", true);
}

void PtxBuilder::syncWarp() { asmCall(Type(), ValueRange{}, "bar.warp.sync -1;", "", true); }

void PtxBuilder::fenceProxyAsyncShared() { asmCall(Type(), ValueRange{}, "fence.proxy.async.shared::cta;", "", true); }

void PtxBuilder::tmaLoad2d(Value dst, Value tensorMap, Value inner, Value outer, Value bar) {
  asmCall(Type(), ValueRange{dst, tensorMap, inner, outer, bar},
          "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
          " [$0], [$1, {$2, $3}], [$4];",
          "r,l,r,r,r", true);
}

void PtxBuilder::tmaLoad3d(Value dst, Value tensorMap, Value inner, Value row, Value batch, Value bar) {
  asmCall(Type(), ValueRange{dst, tensorMap, inner, row, batch, bar},
          "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
          " [$0], [$1, {$2, $3, $4}], [$5];",
          "r,l,r,r,r,r", true);
}

void PtxBuilder::tmaLoad2dMulticast(Value dst, Value tensorMap, Value inner, Value outer, Value bar,
                                    unsigned ctaMask) {
  Value mask = b.create<LLVM::ConstantOp>(loc, b.getI16Type(), b.getI16IntegerAttr(int16_t(ctaMask)));
  asmCall(Type(), ValueRange{dst, tensorMap, inner, outer, bar, mask},
          "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
          " [$0], [$1, {$2, $3}], [$4], $5;",
          "r,l,r,r,r,h", true);
}

void PtxBuilder::tmaStore2d(Value tensorMap, Value inner, Value outer, Value src) {
  asmCall(Type(), ValueRange{tensorMap, inner, outer, src},
          "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];", "l,r,r,r", true);
}

// The element type comes from the tensor map: the instruction names none.
void PtxBuilder::tmaReduceAdd2d(Value tensorMap, Value inner, Value outer, Value src) {
  asmCall(Type(), ValueRange{tensorMap, inner, outer, src},
          "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [$0, {$1, $2}], [$3];", "l,r,r,r",
          true);
}

void PtxBuilder::bulkCommitGroup() { asmCall(Type(), ValueRange{}, "cp.async.bulk.commit_group;", "", true); }

void PtxBuilder::bulkWaitGroupRead(unsigned pending) {
  asmCall(Type(), ValueRange{}, llvm::formatv("cp.async.bulk.wait_group.read {0};", pending).str(), "", true);
}

void PtxBuilder::bulkWaitGroup(unsigned pending) {
  asmCall(Type(), ValueRange{}, llvm::formatv("cp.async.bulk.wait_group {0};", pending).str(), "", true);
}

Value PtxBuilder::clusterCtaRank() { return asmCall(b.getI32Type(), ValueRange{}, "mov.u32 $0, %cluster_ctarank;", "=r", false); }

void PtxBuilder::fenceMbarrierInitCluster() {
  asmCall(Type(), ValueRange{}, "fence.mbarrier_init.release.cluster;", "", true);
}

// barrier.cluster is .aligned: every thread of each warp reaches the same instance.
void PtxBuilder::clusterBarrier() {
  b.create<NVVM::ClusterArriveOp>(loc, /*aligned=*/b.getUnitAttr());
  b.create<NVVM::ClusterWaitOp>(loc, /*aligned=*/b.getUnitAttr());
}

// The arrive keeps the default (release, CTA scope) semantics: what it publishes is that
// this CTA's wgmma reads of the stage have completed (wgmma.wait_group), which a
// cluster-scope release would only make costlier (one per consumer warp and K slice).
void PtxBuilder::mbarrierArriveRemote(Value bar, Value rank, Value pred) {
  asmCall(Type(), ValueRange{bar, rank, b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred)},
          "{\n .reg .pred p;\n .reg .b32 remote;\n setp.ne.b32 p, $2, 0;\n"
          " mapa.shared::cluster.u32 remote, $0, $1;\n"
          " @p mbarrier.arrive.shared::cluster.b64 _, [remote];\n}",
          "r,r,r", true);
}

// Named barriers (bar.sync / bar.arrive are .aligned: every thread of a warp must reach
// the same instruction) and the warpgroup-wide .aligned instructions go through NVVM
// intrinsics, which LLVM knows to be convergent: it never duplicates them into
// lane-dependent branches, where the warp would reach two copies at different addresses
// (and hang). As inline asm, a barrier after a lane-dependent shared-memory store was
// copied into both arms of the branch (the cross-entropy rows kernel's split epilogue).
void PtxBuilder::namedBarrier(unsigned id, unsigned threads) {
  namedBarrierSync(b.create<LLVM::ConstantOp>(loc, b.getI32Type(), static_cast<int32_t>(id)), threads);
}

void PtxBuilder::namedBarrierSync(Value id, unsigned threads) {
  Value count = b.create<LLVM::ConstantOp>(loc, b.getI32Type(), static_cast<int32_t>(threads));
  b.create<NVVM::BarrierOp>(loc, TypeRange{}, id, count, NVVM::BarrierReductionAttr{}, Value{});
}

void PtxBuilder::namedBarrierArrive(Value id, unsigned threads) {
  Value count = b.create<LLVM::ConstantOp>(loc, b.getI32Type(), static_cast<int32_t>(threads));
  b.create<LLVM::CallIntrinsicOp>(loc, b.getStringAttr("llvm.nvvm.barrier.cta.arrive.aligned.count"),
                                  ValueRange{id, count});
}

void PtxBuilder::wgmmaFence() { b.create<NVVM::WgmmaFenceAlignedOp>(loc); }

void PtxBuilder::wgmmaCommitGroup() { b.create<NVVM::WgmmaGroupSyncAlignedOp>(loc); }

// Bits 0-13: address >> 4; 16-29: leading byte offset >> 4; 32-45: stride byte offset
// >> 4; 62-63: the swizzle (1 = 128-byte, 2 = 64-byte, 3 = 32-byte rows).
Value PtxBuilder::wgmmaDescriptor(Value addr, int64_t leading, int64_t stride, int64_t swizzleBytes) {
  auto i64 = [&](int64_t v) { return b.create<LLVM::ConstantOp>(loc, b.getI64Type(), v); };
  Value a = b.create<LLVM::ZExtOp>(loc, b.getI64Type(), addr);
  a = b.create<LLVM::AndOp>(loc, b.create<LLVM::LShrOp>(loc, a, i64(4)), i64(0x3FFF));
  int64_t mode = swizzleBytes == 128 ? 1 : swizzleBytes == 64 ? 2 : 3;
  int64_t fixed = ((leading >> 4) & 0x3FFF) << 16 | ((stride >> 4) & 0x3FFF) << 32 | mode << 62;
  return b.create<LLVM::OrOp>(loc, a, i64(fixed));
}

void PtxBuilder::wgmmaWaitGroup(unsigned pending) { b.create<NVVM::WgmmaWaitGroupSyncOp>(loc, uint64_t(pending)); }

// One instruction whose outputs are its inputs (f32 in "f", i32 in "r" registers).
SmallVector<Value> PtxBuilder::throughAsm(StringRef text, ValueRange values) {
  std::string constraints;
  SmallVector<Type> fields;
  for (Value v : values) {
    constraints += v.getType().isF32() ? "=f," : "=r,";
    fields.push_back(v.getType());
  }
  for (size_t i = 0; i < values.size(); ++i)
    constraints += (i ? "," : "") + std::to_string(i);
  Value result =
      asmCall(LLVM::LLVMStructType::getLiteral(b.getContext(), fields), values, text, constraints, true);
  SmallVector<Value> out;
  for (size_t i = 0; i < values.size(); ++i)
    out.push_back(b.create<LLVM::ExtractValueOp>(loc, result, i));
  return out;
}

SmallVector<Value> PtxBuilder::wgmmaWaitGroupFor(unsigned pending, ValueRange values) {
  if (values.empty()) {
    wgmmaWaitGroup(pending);
    return {};
  }
  return throughAsm(llvm::formatv("wgmma.wait_group.sync.aligned {0};", pending).str(), values);
}

SmallVector<Value> PtxBuilder::wgmmaWaitGroupCopy(unsigned pending, ValueRange values) {
  // The wait, then a copy of each value into an untied output.
  std::string text = llvm::formatv("wgmma.wait_group.sync.aligned {0};", pending).str();
  std::string constraints;
  SmallVector<Type> fields;
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) {
    const bool f32 = values[i].getType().isF32();
    text += llvm::formatv("\n mov.b32 ${0}, ${1};", i, n + i).str();
    constraints += f32 ? "=f," : "=r,";
    fields.push_back(values[i].getType());
  }
  for (size_t i = 0; i < n; ++i)
    constraints += std::string(i ? "," : "") + (values[i].getType().isF32() ? "f" : "r");
  Value result = asmCall(LLVM::LLVMStructType::getLiteral(b.getContext(), fields), values, text, constraints, true);
  SmallVector<Value> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(b.create<LLVM::ExtractValueOp>(loc, result, i));
  return out;
}

SmallVector<Value> PtxBuilder::wgmmaFenceFor(ValueRange values) {
  if (values.empty()) {
    wgmmaFence();
    return {};
  }
  return throughAsm("wgmma.fence.sync.aligned;", values);
}

SmallVector<Value> PtxBuilder::wgmma(unsigned n, StringRef ab, Value descA, Value descB, ValueRange acc,
                                     bool transA, bool transB, Value scaleD) {
  return wgmmaAsm(n, ab, ValueRange{descA}, /*aInRegisters=*/false, descB, acc, transA, transB, scaleD);
}

SmallVector<Value> PtxBuilder::wgmmaRegisterA(unsigned n, StringRef ab, ValueRange aRegs, Value descB,
                                              ValueRange acc, bool transB, Value scaleD) {
  return wgmmaAsm(n, ab, aRegs, /*aInRegisters=*/true, descB, acc, /*transA=*/false, transB, scaleD);
}

// Operands: d (n / 2 f32 outputs, tied to the acc inputs at the end), A (a descriptor,
// or four 32-bit registers), descB, then the scale-d word (1: accumulate) turned into a
// predicate. 8-bit operands: k32 and no transpose immediates (they are K-major only);
// A from registers has no transpose immediate of its own.
SmallVector<Value> PtxBuilder::wgmmaAsm(unsigned n, StringRef ab, ValueRange a, bool aInRegisters, Value descB,
                                        ValueRange acc, bool transA, bool transB, Value scaleD) {
  unsigned regs = n / 2, aCount = static_cast<unsigned>(a.size());
  bool fp8 = ab == "e4m3" || ab == "e5m2";
  auto list = [](unsigned first, unsigned count) {
    std::string s;
    for (unsigned i = 0; i < count; ++i)
      s += (i ? ", $" : "$") + std::to_string(first + i);
    return s;
  };
  std::string aText = aInRegisters ? "{" + list(regs, aCount) + "}" : "$" + std::to_string(regs);
  std::string trans;
  if (!fp8)
    trans = aInRegisters ? llvm::formatv(", {0}", transB ? 1 : 0).str()
                         : llvm::formatv(", {0}, {1}", transA ? 1 : 0, transB ? 1 : 0).str();
  std::string text =
      llvm::formatv("{{\n .reg .pred acc;\n setp.ne.b32 acc, ${0}, 0;\n"
                    " wgmma.mma_async.sync.aligned.m64n{1}k{2}.f32.{3}.{3} {{{4}}, {5}, ${6}, acc, 1, 1{7};\n}",
                    regs + aCount + 1, n, fp8 ? 32 : 16, ab, list(0, regs), aText, regs + aCount, trans)
          .str();
  std::string constraints;
  for (unsigned i = 0; i < regs; ++i)
    constraints += "=f,";
  for (unsigned i = 0; i < aCount; ++i)
    constraints += aInRegisters ? "r," : "l,";
  constraints += "l,r";
  for (unsigned i = 0; i < regs; ++i)
    constraints += "," + std::to_string(i);
  SmallVector<Value> operands(a.begin(), a.end());
  operands.append({descB, scaleD ? scaleD : b.create<LLVM::ConstantOp>(loc, b.getI32Type(), 1)});
  operands.append(acc.begin(), acc.end());
  SmallVector<Type> fields(regs, b.getF32Type());
  Value result = asmCall(LLVM::LLVMStructType::getLiteral(b.getContext(), fields), operands, text, constraints, true);
  SmallVector<Value> out;
  for (unsigned i = 0; i < regs; ++i)
    out.push_back(b.create<LLVM::ExtractValueOp>(loc, result, i));
  return out;
}

} // namespace tokamax::tile
