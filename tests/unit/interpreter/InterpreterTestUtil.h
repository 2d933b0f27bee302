// Shared helpers of the interpreter tests: IR templates, host buffers, tolerances.
#pragma once

//===- InterpreterTestUtil.h - Helpers of the interpreter tests ---*- C++ -*-===//
//
// Kernels are written as tile IR text (the form the DSL prints) and run through
// interpret_ir on host buffers filled with seeded random non-zero values; each result is
// compared with a reference computed here in double and rounded to the output dtype.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace tokamax;

namespace {

constexpr DType kFloatTypes[] = {DType::BF16, DType::F16, DType::F32,
                                 DType::F64,  DType::F8E4M3, DType::F8E5M2};
constexpr int64_t kSizes[] = {1, 17, 1000, 4097};

std::string mlirType(DType d) {
  switch (d) {
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::I8: return "i8";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::Bool: return "i1";
  case DType::F8E4M3: return "f8E4M3FN";
  case DType::F8E5M2: return "f8E5M2";
  }
  return "?";
}

/// Replaces every @KEY@ in `text`.
std::string subst(std::string text, const std::vector<std::pair<std::string, std::string>> &kv) {
  for (const auto &[key, value] : kv) {
    std::string token = "@" + key + "@";
    for (size_t pos = text.find(token); pos != std::string::npos;
         pos = text.find(token, pos + value.size()))
      text.replace(pos, token.size(), value);
  }
  return text;
}

/// A host tensor of one dtype.
struct Buf {
  DType dtype;
  size_t n;
  std::vector<unsigned char> bytes;

  Buf(DType d, size_t count) : dtype(d), n(count), bytes(count * dtype_size(d)) {}
  unsigned char *at(size_t i) { return bytes.data() + i * dtype_size(dtype); }
  const unsigned char *at(size_t i) const { return bytes.data() + i * dtype_size(dtype); }
  double get(size_t i) const { return load_as_double(dtype, at(i)); }
  std::vector<double> values() const {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = get(i);
    return v;
  }
  void set(size_t i, double v) { store_from_double(dtype, at(i), v); }
  int64_t geti(size_t i) const {
    switch (dtype) {
    case DType::I8: return static_cast<int8_t>(*at(i));
    case DType::Bool: return *at(i) != 0;
    case DType::I32: { int32_t v; std::memcpy(&v, at(i), 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, at(i), 8); return v; }
    default: return static_cast<int64_t>(get(i));
    }
  }
  void seti(size_t i, int64_t v) {
    switch (dtype) {
    case DType::I8: { int8_t x = static_cast<int8_t>(v); std::memcpy(at(i), &x, 1); return; }
    case DType::Bool: *at(i) = v != 0; return;
    case DType::I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(at(i), &x, 4); return; }
    case DType::I64: std::memcpy(at(i), &v, 8); return;
    default: set(i, static_cast<double>(v));
    }
  }
  HostArg arg() { return HostArg::tensor(bytes.data(), bytes.size()); }
};

/// Fills with uniform values in [lo, hi] (rounded to the dtype), never zero.
void fill(Buf &b, std::mt19937 &rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (size_t i = 0; i < b.n; ++i) {
    do {
      b.set(i, dist(rng));
    } while (b.get(i) == 0);
  }
}

void fillInt(Buf &b, std::mt19937 &rng, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (size_t i = 0; i < b.n; ++i) {
    int64_t v;
    do {
      v = dist(rng);
    } while (v == 0);
    b.seti(i, v);
  }
}

/// `v` rounded to `d` in one step.
double roundTo(DType d, double v) {
  unsigned char buf[8];
  store_from_double(d, buf, v);
  return load_as_double(d, buf);
}

/// One unit in the last place relative to the value, plus the smallest subnormal.
double relTol(DType d) {
  switch (d) {
  case DType::BF16: return 0x1p-7;
  case DType::F16: return 0x1p-10;
  case DType::F32: return 0x1p-22;
  case DType::F64: return 0x1p-50;
  case DType::F8E4M3: return 0x1p-3;
  case DType::F8E5M2: return 0x1p-2;
  default: return 0;
  }
}
double absTol(DType d) {
  switch (d) {
  case DType::BF16: return 1e-38;
  case DType::F16: return 0x1p-24;
  case DType::F8E4M3: return 0x1p-9;
  case DType::F8E5M2: return 0x1p-16;
  default: return 1e-300;
  }
}

bool close(DType d, double got, double ref) {
  if (std::isnan(ref))
    return std::isnan(got);
  if (std::isinf(ref))
    return got == ref;
  return std::fabs(got - ref) <= relTol(d) * std::fabs(ref) + absTol(d);
}

int64_t blockFor(int64_t n) {
  int64_t b = 1;
  while (b < n && b < 256)
    b *= 2;
  return b;
}

/// A 1-D kernel over `n` elements in blocks of B: loads inputs x0.. (masked gathers) as
/// %a0.., runs `compute` (which defines %r : tensor<BxOUT>) and stores %r to `out`.
std::string elementwiseKernel(const std::vector<DType> &inputs, DType out, int64_t n,
                              const std::string &compute) {
  int64_t b = blockFor(n);
  std::string params, loads;
  for (size_t i = 0; i < inputs.size(); ++i) {
    params += subst("%x@I@: !tile.ptr<@T@> {tile.name = \"x@I@\", tile.shape = array<i64: @N@>}, ",
                    {{"I", std::to_string(i)}, {"T", mlirType(inputs[i])}});
    loads += subst(R"(
    %px@I@ = tile.splat %x@I@ : !tile.ptr<@T@> -> tensor<@B@x!tile.ptr<@T@>>
    %qx@I@ = tile.addptr %px@I@, %offs : tensor<@B@x!tile.ptr<@T@>>, tensor<@B@xi32>
    %a@I@ = tile.load %qx@I@, %mask : tensor<@B@x!tile.ptr<@T@>>, tensor<@B@xi1> -> tensor<@B@x@T@>)",
                   {{"I", std::to_string(i)}, {"T", mlirType(inputs[i])}});
  }
  std::string ir = R"(
module {
  func.func @k(@PARAMS@%out: !tile.ptr<@O@> {tile.name = "out", tile.output, tile.shape = array<i64: @N@>}) attributes {tile.kernel, tile.grid = array<i64: @G@, 1, 1>, tile.num_warps = 4 : i32} {
    %pid = tile.program_id 0 : i32
    %cb = arith.constant @B@ : i32
    %base = arith.muli %pid, %cb : i32
    %range = tile.arange 0 to @B@ : tensor<@B@xi32>
    %bases = tile.splat %base : i32 -> tensor<@B@xi32>
    %offs = arith.addi %bases, %range : tensor<@B@xi32>
    %cn = arith.constant @N@ : i32
    %ns = tile.splat %cn : i32 -> tensor<@B@xi32>
    %mask = arith.cmpi slt, %offs, %ns : tensor<@B@xi32>@LOADS@
    @COMPUTE@
    %po = tile.splat %out : !tile.ptr<@O@> -> tensor<@B@x!tile.ptr<@O@>>
    %qo = tile.addptr %po, %offs : tensor<@B@x!tile.ptr<@O@>>, tensor<@B@xi32>
    tile.store %qo, %r, %mask : tensor<@B@x!tile.ptr<@O@>>, tensor<@B@x@O@>, tensor<@B@xi1>
    return
  }
}
)";
  ir = subst(ir, {{"PARAMS", params}, {"LOADS", loads}, {"COMPUTE", compute}});
  return subst(ir, {{"O", mlirType(out)},
                    {"B", std::to_string(b)},
                    {"N", std::to_string(n)},
                    {"G", std::to_string((n + b - 1) / b)}});
}

void run(const std::string &ir, std::vector<HostArg> args) { interpret_ir(ir, args); }

struct FloatBinary {
  const char *op;
  std::function<double(double, double)> fn;
};

} // namespace
