//===- PtxBuilder.cpp - The one place that writes inline PTX ----------------===//
#include "compiler/Conversion/TileToLLVM/PtxBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace tokamax::tile {

namespace {
char constraintFor(unsigned bits) {
  switch (bits) {
  case 8:
  case 16:
    return 'h';
  case 32:
    return 'r';
  default:
    return 'l';
  }
}

/// PTX has no 8-bit registers: 8-bit accesses use 16-bit ones.
unsigned registerBits(unsigned bits) { return bits == 8 ? 16 : bits; }
} // namespace

Value PtxBuilder::asmCall(Type resultType, ValueRange operands, StringRef text,
                          StringRef constraints, bool sideEffects) {
  auto op = b.create<LLVM::InlineAsmOp>(
      loc, resultType ? TypeRange(resultType) : TypeRange(), operands, text, constraints,
      sideEffects, /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
  return resultType ? op.getResult(0) : Value();
}

SmallVector<Value> PtxBuilder::predicatedLoad(Value ptr, Value pred, unsigned words,
                                              unsigned wordBits) {
  unsigned regBits = registerBits(wordBits);
  Type regType = b.getIntegerType(regBits);
  SmallVector<Type> fields(words, regType);
  Type resultType = words == 1 ? regType : LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
  // Operands: $0..$(words-1) results, then the address, then the predicate.
  std::string outs, text = "{\n .reg .pred p;\n";
  text += llvm::formatv(" setp.ne.b32 p, ${0}, 0;\n", words + 1).str();
  for (unsigned i = 0; i < words; ++i) {
    text += llvm::formatv(" mov.b{0} ${1}, 0;\n", regBits, i).str();
    outs += (i ? ", $" : "$") + std::to_string(i);
  }
  std::string type = wordBits == 8 ? "u8" : "b" + std::to_string(wordBits);
  std::string vec = words == 1 ? "" : ".v" + std::to_string(words);
  std::string dst = words == 1 ? outs : "{" + outs + "}";
  text += llvm::formatv(" @p ld.global{0}.{1} {2}, [${3}];\n}", vec, type, dst, words).str();
  std::string constraints;
  for (unsigned i = 0; i < words; ++i)
    constraints += std::string("=") + constraintFor(regBits) + ",";
  constraints += "l,r";
  Value predWord = b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred);
  Value result = asmCall(resultType, ValueRange{ptr, predWord}, text, constraints, true);
  SmallVector<Value> values;
  for (unsigned i = 0; i < words; ++i) {
    Value word = words == 1 ? result : b.create<LLVM::ExtractValueOp>(loc, result, i).getResult();
    if (wordBits == 8)
      word = b.create<LLVM::TruncOp>(loc, b.getI8Type(), word);
    values.push_back(word);
  }
  return values;
}

void PtxBuilder::predicatedStore(Value ptr, Value pred, ValueRange values) {
  unsigned wordBits = values.front().getType().getIntOrFloatBitWidth();
  unsigned regBits = registerBits(wordBits);
  unsigned words = values.size();
  std::string list;
  SmallVector<Value> operands{b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred), ptr};
  std::string constraints = "r,l";
  for (unsigned i = 0; i < words; ++i) {
    list += (i ? ", $" : "$") + std::to_string(i + 2);
    Value v = values[i];
    if (wordBits == 8)
      v = b.create<LLVM::ZExtOp>(loc, b.getI16Type(), v);
    operands.push_back(v);
    constraints += std::string(",") + constraintFor(regBits);
  }
  std::string type = wordBits == 8 ? "u8" : "b" + std::to_string(wordBits);
  std::string vec = words == 1 ? "" : ".v" + std::to_string(words);
  std::string src = words == 1 ? list : "{" + list + "}";
  std::string text = llvm::formatv("{{\n .reg .pred p;\n setp.ne.b32 p, $0, 0;\n @p "
                                   "st.global{0}.{1} [$1], {2};\n}",
                                   vec, type, src)
                         .str();
  asmCall(Type(), operands, text, constraints, true);
}

Value PtxBuilder::unaryF32(StringRef instruction, Value x) {
  return asmCall(b.getF32Type(), ValueRange{x}, (instruction + " $0, $1;").str(), "=f,f",
                 false);
}

Value PtxBuilder::exp2Polynomial(Value x) {
  // add.rm of 1.5 x 2^23 leaves floor(x) in the low mantissa bits of r, exactly, and f =
  // x - (r - 1.5 x 2^23) in [0, 1). Those bits times 2^23 plus 127 << 23 are 2^floor(x)
  // (mod 2^32: the magic's own bits shift out), 0.0 at -127. The cubic (p(0) = 1) is a
  // minimax fit of 2^f in relative error (8.6e-5 with f32 coefficients).
  static constexpr const char *kText = "{\n"
                                       ".reg .f32 c, r, t, p;\n"
                                       ".reg .b32 e;\n"
                                       "max.NaN.f32 c, $1, 0fC2FE0000;\n"
                                       "min.NaN.f32 c, c, 0f42FE0000;\n"
                                       "add.rm.f32 r, c, 0f4B400000;\n"
                                       "sub.f32 t, r, 0f4B400000;\n"
                                       "sub.f32 t, c, t;\n"
                                       "fma.rn.f32 p, t, 0f3D9DD566, 0f3E691BBB;\n"
                                       "fma.rn.f32 p, p, t, 0f3F31F32D;\n"
                                       "fma.rn.f32 p, p, t, 0f3F800000;\n"
                                       "mov.b32 e, r;\n"
                                       "mad.lo.u32 e, e, 8388608, 1065353216;\n"
                                       "mov.b32 t, e;\n"
                                       "mul.f32 $0, p, t;\n"
                                       "}";
  return asmCall(b.getF32Type(), ValueRange{x}, kText, "=f,f", false);
}

Value PtxBuilder::f32ToF8(Value x, bool e4m3) {
  // The instruction packs two values; the unused half converts 0.
  Value zero = b.create<LLVM::ConstantOp>(loc, b.getF32Type(), b.getF32FloatAttr(0.0f));
  std::string text = llvm::formatv("cvt.rn.satfinite.{0}x2.f32 $0, $2, $1;",
                                   e4m3 ? "e4m3" : "e5m2")
                         .str();
  Value pair = asmCall(b.getI16Type(), ValueRange{x, zero}, text, "=h,f,f", false);
  return b.create<LLVM::TruncOp>(loc, b.getI8Type(), pair);
}

Value PtxBuilder::f8ToF32(Value bits, bool e4m3) {
  Value wide = b.create<LLVM::ZExtOp>(loc, b.getI16Type(), bits);
  std::string text = llvm::formatv("{{\n .reg .b32 h2;\n .reg .b16 lo, hi;\n cvt.rn.f16x2.{0}x2 "
                                   "h2, $1;\n mov.b32 {{lo, hi}, h2;\n cvt.f32.f16 $0, lo;\n}",
                                   e4m3 ? "e4m3" : "e5m2")
                         .str();
  return asmCall(b.getF32Type(), ValueRange{wide}, text, "=f,h", false);
}

Value PtxBuilder::atomic(StringRef op, StringRef type, Value ptr, Value pred, ValueRange args,
                         Type resultType) {
  unsigned bits = resultType.getIntOrFloatBitWidth();
  char c = resultType.isF32() ? 'f' : resultType.isF64() ? 'd' : constraintFor(bits);
  std::string argList;
  std::string constraints = std::string("=") + c + ",l,r";
  for (unsigned i = 0; i < args.size(); ++i) {
    argList += llvm::formatv(", ${0}", i + 3).str();
    constraints += std::string(",") + c;
  }
  std::string zero = resultType.isF32() ? "0f00000000" : resultType.isF64() ? "0d0000000000000000" : "0";
  std::string text = llvm::formatv("{{\n .reg .pred p;\n setp.ne.b32 p, $2, 0;\n mov.b{0} $0, {1};\n"
                                   " @p atom.global.{2}.{3} $0, [$1]{4};\n}",
                                   bits, zero, op, type, argList)
                         .str();
  SmallVector<Value> operands{ptr, b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred)};
  operands.append(args.begin(), args.end());
  return asmCall(resultType, operands, text, constraints, true);
}

void PtxBuilder::reduction(StringRef op, StringRef type, Value ptr, Value pred, Value value) {
  unsigned bits = value.getType().getIntOrFloatBitWidth();
  char c = value.getType().isF32() ? 'f' : value.getType().isF64() ? 'd' : constraintFor(bits);
  std::string text = llvm::formatv("{{\n .reg .pred p;\n setp.ne.b32 p, $1, 0;\n @p red.global.{0}.{1} [$0], $2;\n}",
                                   op, type)
                         .str();
  asmCall(Type(), ValueRange{ptr, b.create<LLVM::ZExtOp>(loc, b.getI32Type(), pred), value}, text,
          std::string("l,r,") + c, true);
}

Value PtxBuilder::loadAcquireGpu(Value ptr) {
  return asmCall(b.getI32Type(), ValueRange{ptr}, "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", true);
}

void PtxBuilder::reductionAddRelease(Value ptr, Value value) {
  asmCall(Type(), ValueRange{ptr, value}, "red.release.gpu.global.add.s32 [$0], $1;", "l,r", true);
}

SmallVector<Value> PtxBuilder::ldmatrix(Value addr, unsigned count, bool trans) {
  std::string outs, constraints;
  for (unsigned i = 0; i < count; ++i) {
    outs += (i ? ", $" : "$") + std::to_string(i);
    constraints += "=r,";
  }
  constraints += "r";
  std::string text = llvm::formatv("ldmatrix.sync.aligned.m8n8.x{0}{1}.shared.b16 {{{2}}, [${3}];",
                                   count, trans ? ".trans" : "", outs, count)
                         .str();
  SmallVector<Type> fields(count, b.getI32Type());
  Type resultType = count == 1 ? Type(b.getI32Type()) : Type(LLVM::LLVMStructType::getLiteral(b.getContext(), fields));
  // Reads shared memory written before the preceding barrier: not speculatable.
  Value result = asmCall(resultType, ValueRange{addr}, text, constraints, true);
  SmallVector<Value> values;
  for (unsigned i = 0; i < count; ++i)
    values.push_back(count == 1 ? result : b.create<LLVM::ExtractValueOp>(loc, result, i).getResult());
  return values;
}

SmallVector<Value> PtxBuilder::mma(StringRef shape, StringRef ab, ValueRange a, ValueRange bs,
                                   ValueRange c) {
  auto list = [](unsigned first, unsigned n) {
    std::string text;
    for (unsigned i = 0; i < n; ++i)
      text += (i ? ", $" : "$") + std::to_string(first + i);
    return "{" + text + "}";
  };
  unsigned na = a.size(), nb = bs.size();
  std::string text = llvm::formatv("mma.sync.aligned.{0}.row.col.f32.{1}.{1}.f32 {2}, {3}, {4}, {5};",
                                   shape, ab, list(0, 4), list(4, na), list(4 + na, nb),
                                   list(4 + na + nb, 4))
                         .str();
  // d is tied to c so the accumulator stays in its registers.
  std::string constraints = "=f,=f,=f,=f";
  for (unsigned i = 0; i < na + nb; ++i)
    constraints += ",r";
  constraints += ",0,1,2,3";
  SmallVector<Value> operands(a.begin(), a.end());
  operands.append(bs.begin(), bs.end());
  operands.append(c.begin(), c.end());
  SmallVector<Type> fields(4, b.getF32Type());
  Value result = asmCall(LLVM::LLVMStructType::getLiteral(b.getContext(), fields), operands, text,
                         constraints, false);
  SmallVector<Value> d;
  for (unsigned i = 0; i < 4; ++i)
    d.push_back(b.create<LLVM::ExtractValueOp>(loc, result, i));
  return d;
}

Value PtxBuilder::f32ToTf32(Value x) {
  return asmCall(b.getI32Type(), ValueRange{x}, "cvt.rna.tf32.f32 $0, $1;", "=r,f", false);
}

void PtxBuilder::cpAsync16(Value dst, Value src, Value pred) {
  Value size = b.create<arith::SelectOp>(loc, pred, b.create<LLVM::ConstantOp>(loc, b.getI32Type(), 16),
                                         b.create<LLVM::ConstantOp>(loc, b.getI32Type(), 0));
  asmCall(Type(), ValueRange{dst, src, size}, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r", true);
}

void PtxBuilder::cpAsyncCommitGroup() { asmCall(Type(), ValueRange{}, "cp.async.commit_group;", "", true); }

void PtxBuilder::cpAsyncWaitGroup(unsigned pending) {
  asmCall(Type(), ValueRange{}, llvm::formatv("cp.async.wait_group {0};", pending).str(), "", true);
}

} // namespace tokamax::tile
