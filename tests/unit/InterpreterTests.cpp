//===- InterpreterTests.cpp - The CPU interpreter against float64 host references -===//
//
// Kernels are written as tile IR text (the form the DSL prints) and run through
// interpret_ir on host buffers filled with seeded random non-zero values; each result is
// compared with a reference computed here in double and rounded to the output dtype.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/dsl/Kernel.h>
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

TEST_CASE("interpreter: float binary arith ops on every float dtype", "[interpreter]") {
  const FloatBinary ops[] = {
      {"arith.addf", [](double a, double b) { return a + b; }},
      {"arith.subf", [](double a, double b) { return a - b; }},
      {"arith.mulf", [](double a, double b) { return a * b; }},
      {"arith.divf", [](double a, double b) { return a / b; }},
      {"arith.remf", [](double a, double b) { return std::fmod(a, b); }},
      {"arith.maximumf", [](double a, double b) { return std::max(a, b); }},
      {"arith.minimumf", [](double a, double b) { return std::min(a, b); }},
  };
  std::mt19937 rng(1);
  for (DType d : kFloatTypes)
    for (const FloatBinary &op : ops)
      for (int64_t n : kSizes) {
        INFO(mlirType(d) << " " << op.op << " n=" << n);
        Buf x(d, n), y(d, n), out(d, n);
        fill(x, rng, -8, 8);
        fill(y, rng, 0.5, 4);
        std::string compute =
            subst("%r = @OP@ %a0, %a1 : tensor<@B@x@T@>", {{"OP", op.op}, {"T", mlirType(d)}});
        run(elementwiseKernel({d, d}, d, n, compute), {x.arg(), y.arg(), out.arg()});
        for (int64_t i = 0; i < n; ++i) {
          double ref = roundTo(d, op.fn(x.get(i), y.get(i)));
          INFO("i=" << i << " x=" << x.get(i) << " y=" << y.get(i));
          REQUIRE(close(d, out.get(i), ref));
          if (d == DType::F32 || d == DType::F64)
            REQUIRE(out.get(i) == ref); // one rounding of the exact double result
        }
      }
}

TEST_CASE("interpreter: math ops and negf", "[interpreter]") {
  struct Math {
    const char *op;
    double lo, hi;
    double (*fn)(double);
  };
  const Math ops[] = {
      {"math.exp", -4, 4, [](double x) { return std::exp(x); }},
      {"math.exp2", -4, 4, [](double x) { return std::exp2(x); }},
      {"math.log", 0.1, 50, [](double x) { return std::log(x); }},
      {"math.log2", 0.1, 50, [](double x) { return std::log2(x); }},
      {"math.sqrt", 0.1, 50, [](double x) { return std::sqrt(x); }},
      {"math.rsqrt", 0.1, 50, [](double x) { return 1 / std::sqrt(x); }},
      {"math.tanh", -3, 3, [](double x) { return std::tanh(x); }},
      {"math.erf", -2, 2, [](double x) { return std::erf(x); }},
      {"math.absf", -9, 9, [](double x) { return std::fabs(x); }},
      {"arith.negf", -9, 9, [](double x) { return -x; }},
  };
  std::mt19937 rng(2);
  for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F64})
    for (const Math &op : ops)
      for (int64_t n : {int64_t(1), int64_t(17), int64_t(1000)}) {
        INFO(mlirType(d) << " " << op.op << " n=" << n);
        Buf x(d, n), out(d, n);
        fill(x, rng, op.lo, op.hi);
        run(elementwiseKernel({d}, d, n,
                              subst("%r = @OP@ %a0 : tensor<@B@x@T@>",
                                    {{"OP", op.op}, {"T", mlirType(d)}})),
            {x.arg(), out.arg()});
        for (int64_t i = 0; i < n; ++i) {
          INFO("x=" << x.get(i));
          REQUIRE(close(d, out.get(i), roundTo(d, op.fn(x.get(i)))));
        }
      }
}

TEST_CASE("interpreter: integer arith ops wrap to the bit width", "[interpreter]") {
  struct IntOp {
    const char *op;
    int64_t (*fn)(int64_t, int64_t);
  };
  const IntOp ops[] = {
      {"arith.addi", [](int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }},
      {"arith.subi", [](int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }},
      {"arith.muli", [](int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }},
      {"arith.divsi", [](int64_t a, int64_t b) { return a / b; }},
      {"arith.remsi", [](int64_t a, int64_t b) { return a % b; }},
      {"arith.andi", [](int64_t a, int64_t b) { return a & b; }},
      {"arith.ori", [](int64_t a, int64_t b) { return a | b; }},
      {"arith.xori", [](int64_t a, int64_t b) { return a ^ b; }},
      {"arith.maxsi", [](int64_t a, int64_t b) { return std::max(a, b); }},
      {"arith.minsi", [](int64_t a, int64_t b) { return std::min(a, b); }},
  };
  auto wrap = [](DType d, int64_t v) -> int64_t {
    if (d == DType::I8) return static_cast<int8_t>(v);
    if (d == DType::I32) return static_cast<int32_t>(v);
    return v;
  };
  std::mt19937 rng(3);
  for (DType d : {DType::I8, DType::I32, DType::I64})
    for (const IntOp &op : ops)
      for (int64_t n : kSizes) {
        INFO(mlirType(d) << " " << op.op << " n=" << n);
        int64_t hi = d == DType::I8 ? 127 : d == DType::I32 ? 2147483647 : (int64_t(1) << 40);
        Buf x(d, n), y(d, n), out(d, n);
        fillInt(x, rng, -hi, hi);
        fillInt(y, rng, -hi, hi);
        run(elementwiseKernel({d, d}, d, n,
                              subst("%r = @OP@ %a0, %a1 : tensor<@B@x@T@>",
                                    {{"OP", op.op}, {"T", mlirType(d)}})),
            {x.arg(), y.arg(), out.arg()});
        for (int64_t i = 0; i < n; ++i)
          REQUIRE(out.geti(i) == wrap(d, op.fn(x.geti(i), y.geti(i))));
      }
}

TEST_CASE("interpreter: absi, bool logic, cmpi and cmpf predicates", "[interpreter]") {
  std::mt19937 rng(4);
  const int64_t n = 1000;
  SECTION("absi") {
    Buf x(DType::I32, n), out(DType::I32, n);
    fillInt(x, rng, -100000, 100000);
    run(elementwiseKernel({DType::I32}, DType::I32, n, "%r = math.absi %a0 : tensor<@B@xi32>"),
        {x.arg(), out.arg()});
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(out.geti(i) == std::abs(x.geti(i)));
  }
  SECTION("bool and/or/xor") {
    for (const char *op : {"arith.andi", "arith.ori", "arith.xori"}) {
      Buf x(DType::Bool, n), y(DType::Bool, n), out(DType::Bool, n);
      for (int64_t i = 0; i < n; ++i) {
        x.seti(i, rng() & 1);
        y.seti(i, rng() & 1);
      }
      run(elementwiseKernel({DType::Bool, DType::Bool}, DType::Bool, n,
                            subst("%r = @OP@ %a0, %a1 : tensor<@B@xi1>", {{"OP", op}})),
          {x.arg(), y.arg(), out.arg()});
      for (int64_t i = 0; i < n; ++i) {
        bool a = x.geti(i), b = y.geti(i);
        bool ref = std::string(op) == "arith.andi" ? (a && b) : std::string(op) == "arith.ori" ? (a || b) : (a != b);
        REQUIRE(out.geti(i) == ref);
      }
    }
  }
  SECTION("cmpi") {
    const std::pair<const char *, std::function<bool(int64_t, int64_t)>> preds[] = {
        {"eq", [](int64_t a, int64_t b) { return a == b; }},
        {"ne", [](int64_t a, int64_t b) { return a != b; }},
        {"slt", [](int64_t a, int64_t b) { return a < b; }},
        {"sle", [](int64_t a, int64_t b) { return a <= b; }},
        {"sgt", [](int64_t a, int64_t b) { return a > b; }},
        {"sge", [](int64_t a, int64_t b) { return a >= b; }},
        {"ult", [](int64_t a, int64_t b) { return uint8_t(a) < uint8_t(b); }},
        {"ule", [](int64_t a, int64_t b) { return uint8_t(a) <= uint8_t(b); }},
        {"ugt", [](int64_t a, int64_t b) { return uint8_t(a) > uint8_t(b); }},
        {"uge", [](int64_t a, int64_t b) { return uint8_t(a) >= uint8_t(b); }},
    };
    for (const auto &[pred, fn] : preds) {
      Buf x(DType::I8, n), y(DType::I8, n), out(DType::Bool, n);
      fillInt(x, rng, -4, 4); // small range: plenty of ties
      fillInt(y, rng, -4, 4);
      run(elementwiseKernel({DType::I8, DType::I8}, DType::Bool, n,
                            subst("%r = arith.cmpi @P@, %a0, %a1 : tensor<@B@xi8>", {{"P", pred}})),
          {x.arg(), y.arg(), out.arg()});
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(out.geti(i) == fn(x.geti(i), y.geti(i)));
    }
  }
  SECTION("cmpf, with NaNs") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::pair<const char *, std::function<bool(double, double)>> preds[] = {
        {"false", [](double, double) { return false; }},
        {"oeq", [](double a, double b) { return a == b; }},
        {"ogt", [](double a, double b) { return a > b; }},
        {"oge", [](double a, double b) { return a >= b; }},
        {"olt", [](double a, double b) { return a < b; }},
        {"ole", [](double a, double b) { return a <= b; }},
        {"one", [](double a, double b) { return a < b || a > b; }},
        {"ord", [](double a, double b) { return !std::isnan(a) && !std::isnan(b); }},
        {"ueq", [](double a, double b) { return !(a < b || a > b); }},
        {"ugt", [](double a, double b) { return !(a <= b); }},
        {"uge", [](double a, double b) { return !(a < b); }},
        {"ult", [](double a, double b) { return !(a >= b); }},
        {"ule", [](double a, double b) { return !(a > b); }},
        {"une", [](double a, double b) { return a != b; }},
        {"uno", [](double a, double b) { return std::isnan(a) || std::isnan(b); }},
        {"true", [](double, double) { return true; }},
    };
    for (const auto &[pred, fn] : preds) {
      Buf x(DType::F32, n), y(DType::F32, n), out(DType::Bool, n);
      fill(x, rng, -3, 3);
      fill(y, rng, -3, 3);
      for (int64_t i = 0; i < n; i += 7)
        y.set(i, x.get(i)); // ties
      for (int64_t i = 3; i < n; i += 11)
        (i % 2 ? x : y).set(i, nan);
      run(elementwiseKernel({DType::F32, DType::F32}, DType::Bool, n,
                            subst("%r = arith.cmpf @P@, %a0, %a1 : tensor<@B@xf32>", {{"P", pred}})),
          {x.arg(), y.arg(), out.arg()});
      for (int64_t i = 0; i < n; ++i) {
        INFO(pred << " " << x.get(i) << " " << y.get(i));
        REQUIRE(out.geti(i) == fn(x.get(i), y.get(i)));
      }
    }
  }
}

TEST_CASE("interpreter: select, constants, splat and scalar parameters", "[interpreter]") {
  std::mt19937 rng(5);
  const int64_t n = 4097;
  Buf x(DType::F32, n), out(DType::F32, n);
  fill(x, rng, -5, 5);
  // out = x > 0 ? x * scale : (x + c) where c is a dense constant [1, 2, 3, 4] tiled.
  std::string ir = elementwiseKernel({DType::F32}, DType::F32, n, R"(
    %zero = arith.constant dense<0.0> : tensor<@B@xf32>
    %pos = arith.cmpf ogt, %a0, %zero : tensor<@B@xf32>
    %s = tile.splat %scale : f32 -> tensor<@B@xf32>
    %scaled = arith.mulf %a0, %s : tensor<@B@xf32>
    %four = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %c4 = tile.expand_dims %four axis = 0 : tensor<4xf32> -> tensor<1x4xf32>
    %c4b = tile.broadcast %c4 : tensor<1x4xf32> -> tensor<@Q@x4xf32>
    %cr = tile.reshape %c4b : tensor<@Q@x4xf32> -> tensor<@B@xf32>
    %shift = arith.addf %a0, %cr : tensor<@B@xf32>
    %r = arith.select %pos, %scaled, %shift : tensor<@B@xi1>, tensor<@B@xf32>)");
  ir = subst(ir, {{"Q", "64"}});
  // Add the scalar parameter before the output.
  size_t at = ir.find("%out:");
  ir.insert(at, "%scale: f32 {tile.name = \"scale\"}, ");
  std::vector<HostArg> args{x.arg(), HostArg::value(1.7), out.arg()};
  interpret_ir(ir, args);
  for (int64_t i = 0; i < n; ++i) {
    double xi = x.get(i);
    double ref = xi > 0 ? double(float(xi * double(1.7f))) : double(float(xi + double(i % 4 + 1)));
    REQUIRE(out.get(i) == ref);
  }
}

TEST_CASE("interpreter: tile.cast between every pair of dtypes", "[interpreter]") {
  const DType all[] = {DType::BF16, DType::F16, DType::F32,  DType::F64,    DType::I8,
                       DType::I32,  DType::I64, DType::Bool, DType::F8E4M3, DType::F8E5M2};
  std::mt19937 rng(6);
  const int64_t n = 17;
  for (DType from : all)
    for (DType to : all) {
      INFO(mlirType(from) << " -> " << mlirType(to));
      Buf x(from, n), out(to, n);
      if (from == DType::Bool)
        for (int64_t i = 0; i < n; ++i)
          x.seti(i, i % 3 != 0);
      else if (is_floating(from))
        fill(x, rng, -100, 100);
      else
        fillInt(x, rng, -100, 100);
      if (from == DType::F32 || from == DType::F64) {
        x.set(0, 1000.5); // saturates to 448 in e4m3, to 127 in i8
        x.set(1, -0.75);  // truncates to 0; a non-zero bool
      }
      run(elementwiseKernel({from}, to, n,
                            subst("%r = tile.cast %a0 : tensor<@B@x@F@> to tensor<@B@x@T@>",
                                  {{"F", mlirType(from)}, {"T", mlirType(to)}})),
          {x.arg(), out.arg()});
      for (int64_t i = 0; i < n; ++i) {
        double v = is_floating(from) ? x.get(i) : double(x.geti(i));
        INFO("value " << v);
        if (to == DType::Bool) {
          REQUIRE(out.geti(i) == (v != 0));
        } else if (is_floating(to)) {
          double ref = to == DType::F8E4M3 ? std::clamp(v, -448.0, 448.0) : v;
          REQUIRE(out.get(i) == roundTo(to, ref));
        } else {
          double t = std::trunc(v);
          double lo = to == DType::I8 ? -128 : -1e30, hi = to == DType::I8 ? 127 : 1e30;
          int64_t ref = static_cast<int64_t>(std::clamp(t, lo, hi));
          if (!is_floating(from) && to == DType::I8)
            ref = static_cast<int8_t>(x.geti(i)); // integer narrowing wraps
          REQUIRE(out.geti(i) == ref);
        }
      }
    }
}

TEST_CASE("interpreter: arith conversions", "[interpreter]") {
  std::mt19937 rng(7);
  const int64_t n = 17;
  Buf x(DType::I32, n), y(DType::F32, n), out(DType::F64, n);
  fillInt(x, rng, -300, 300);
  fill(y, rng, -50, 50);
  // out = f64(sitofp(trunci(x) to i8) : f16) + extf(f32(fptosi(y) : i64)) + uitofp(extui(x>0))
  run(elementwiseKernel({DType::I32, DType::F32}, DType::F64, n, R"(
    %t8 = arith.trunci %a0 : tensor<@B@xi32> to tensor<@B@xi8>
    %e64 = arith.extsi %t8 : tensor<@B@xi8> to tensor<@B@xi64>
    %h = arith.sitofp %e64 : tensor<@B@xi64> to tensor<@B@xf16>
    %hd = arith.extf %h : tensor<@B@xf16> to tensor<@B@xf64>
    %yi = arith.fptosi %a1 : tensor<@B@xf32> to tensor<@B@xi64>
    %yf = arith.sitofp %yi : tensor<@B@xi64> to tensor<@B@xf64>
    %zero = arith.constant dense<0> : tensor<@B@xi32>
    %pos = arith.cmpi sgt, %a0, %zero : tensor<@B@xi32>
    %pu = arith.extui %pos : tensor<@B@xi1> to tensor<@B@xi32>
    %pf = arith.uitofp %pu : tensor<@B@xi32> to tensor<@B@xf64>
    %s1 = arith.addf %hd, %yf : tensor<@B@xf64>
    %r = arith.addf %s1, %pf : tensor<@B@xf64>)"),
      {x.arg(), y.arg(), out.arg()});
  for (int64_t i = 0; i < n; ++i) {
    double ref = double(int8_t(x.geti(i))) + std::trunc(y.get(i)) + (x.geti(i) > 0 ? 1 : 0);
    REQUIRE(out.get(i) == ref);
  }
}

namespace {

/// Row statistics of x [R, C] in blocks of [8, 128] rows: block loads with 0 / -inf / +inf
/// padding, reductions along both axes and to a scalar, block stores of the partial rows,
/// atomic column sums and an atomic total.
const char *kRowStats = R"(
module {
  func.func @rowstats(%x: !tile.ptr<@T@> {tile.name = "x", tile.shape = array<i64: @R@, @C@>},
      %sum: !tile.ptr<f32> {tile.name = "sum", tile.output, tile.shape = array<i64: @R@>},
      %max: !tile.ptr<@T@> {tile.name = "max", tile.output, tile.shape = array<i64: @R@>},
      %min: !tile.ptr<@T@> {tile.name = "min", tile.output, tile.shape = array<i64: @R@>},
      %amax: !tile.ptr<i32> {tile.name = "amax", tile.output, tile.shape = array<i64: @R@>},
      %copy: !tile.ptr<@T@> {tile.name = "copy", tile.output, tile.shape = array<i64: @R@, @C@>},
      %colsum: !tile.ptr<f32> {tile.name = "colsum", tile.output, tile.shape = array<i64: @C@>},
      %total: !tile.ptr<f32> {tile.name = "total", tile.output, tile.shape = array<i64: 1>})
      attributes {tile.kernel, tile.grid = array<i64: @G@, 1, 1>, tile.num_warps = 4 : i32} {
    %pid = tile.program_id 0 : i32
    %c8 = arith.constant 8 : i32
    %row = arith.muli %pid, %c8 : i32
    %c0 = arith.constant 0 : i32
    %xz = tile.block_load %x[%row, %c0] {dims = array<i64: @R@, @C@>, strides = array<i64: @C@, 1>, padding = 0.0 : f64} : !tile.ptr<@T@> -> tensor<8x128x@T@>
    %xlo = tile.block_load %x[%row, %c0] {dims = array<i64: @R@, @C@>, strides = array<i64: @C@, 1>, padding = 0xFFF0000000000000 : f64} : !tile.ptr<@T@> -> tensor<8x128x@T@>
    %xhi = tile.block_load %x[%row, %c0] {dims = array<i64: @R@, @C@>, strides = array<i64: @C@, 1>, padding = 0x7FF0000000000000 : f64} : !tile.ptr<@T@> -> tensor<8x128x@T@>
    %xf = tile.cast %xz : tensor<8x128x@T@> to tensor<8x128xf32>
    %s = tile.reduce sum %xf axis = 1 : tensor<8x128xf32> -> tensor<8xf32>
    tile.block_store %sum[%row], %s {dims = array<i64: @R@>, strides = array<i64: 1>} : !tile.ptr<f32>, tensor<8xf32>
    %m = tile.reduce max %xlo axis = 1 : tensor<8x128x@T@> -> tensor<8x@T@>
    tile.block_store %max[%row], %m {dims = array<i64: @R@>, strides = array<i64: 1>} : !tile.ptr<@T@>, tensor<8x@T@>
    %n = tile.reduce min %xhi axis = 1 : tensor<8x128x@T@> -> tensor<8x@T@>
    tile.block_store %min[%row], %n {dims = array<i64: @R@>, strides = array<i64: 1>} : !tile.ptr<@T@>, tensor<8x@T@>
    %am = tile.reduce argmax %xlo axis = 1 : tensor<8x128x@T@> -> tensor<8xi32>
    tile.block_store %amax[%row], %am {dims = array<i64: @R@>, strides = array<i64: 1>} : !tile.ptr<i32>, tensor<8xi32>
    tile.block_store %copy[%row, %c0], %xz {dims = array<i64: @R@, @C@>, strides = array<i64: @C@, 1>} : !tile.ptr<@T@>, tensor<8x128x@T@>
    %cs = tile.reduce sum %xf axis = 0 : tensor<8x128xf32> -> tensor<128xf32>
    %cols = tile.arange 0 to 128 : tensor<128xi32>
    %cc = arith.constant @C@ : i32
    %ccs = tile.splat %cc : i32 -> tensor<128xi32>
    %inb = arith.cmpi slt, %cols, %ccs : tensor<128xi32>
    %pc = tile.splat %colsum : !tile.ptr<f32> -> tensor<128x!tile.ptr<f32>>
    %pcs = tile.addptr %pc, %cols : tensor<128x!tile.ptr<f32>>, tensor<128xi32>
    %old = tile.atomic_rmw add %pcs, %cs, %inb : tensor<128x!tile.ptr<f32>>, tensor<128xf32>, tensor<128xi1> -> tensor<128xf32>
    %tot = tile.reduce sum %s axis = 0 : tensor<8xf32> -> f32
    %tot1 = tile.splat %tot : f32 -> tensor<1xf32>
    %pt = tile.splat %total : !tile.ptr<f32> -> tensor<1x!tile.ptr<f32>>
    %old2 = tile.atomic_rmw add %pt, %tot1 : tensor<1x!tile.ptr<f32>>, tensor<1xf32> -> tensor<1xf32>
    return
  }
}
)";

} // namespace

TEST_CASE("interpreter: block loads with padding, reductions, block stores, atomic sums",
          "[interpreter]") {
  const DType types[] = {DType::BF16, DType::F16, DType::F32, DType::F64, DType::F8E4M3,
                         DType::F8E5M2, DType::I8, DType::I32, DType::I64};
  std::mt19937 rng(8);
  for (DType d : types)
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {17, 100}, {3, 128}, {9, 77}}) {
      INFO(mlirType(d) << " " << rows << "x" << cols);
      Buf x(d, rows * cols), sum(DType::F32, rows), max(d, rows), min(d, rows),
          amax(DType::I32, rows), copy(d, rows * cols), colsum(DType::F32, cols),
          total(DType::F32, 1);
      if (is_floating(d))
        fill(x, rng, -8, 8);
      else
        fillInt(x, rng, -100, 100);
      // Ties for the maximum: argmax must give the first one.
      for (int64_t r = 0; r < rows && cols > 3; ++r) {
        int64_t first = (r * 7) % (cols - 2);
        x.set(r * cols + first, 100);
        x.set(r * cols + cols - 1, 100);
      }
      int64_t grid = (rows + 7) / 8;
      std::string ir = subst(kRowStats, {{"T", mlirType(d)}, {"R", std::to_string(rows)},
                                         {"C", std::to_string(cols)}, {"G", std::to_string(grid)}});
      run(ir, {x.arg(), sum.arg(), max.arg(), min.arg(), amax.arg(), copy.arg(), colsum.arg(),
               total.arg()});
      auto v = [&](int64_t r, int64_t c) { return is_floating(d) ? x.get(r * cols + c) : double(x.geti(r * cols + c)); };
      auto out = [&](const Buf &b, int64_t i) { return is_floating(d) ? b.get(i) : double(b.geti(i)); };
      std::vector<float> colRef(cols, 0.0f);
      float totalRef = 0;
      for (int64_t p = 0; p < grid; ++p) {
        std::vector<double> part(cols, 0.0);
        double blockTotal = 0;
        for (int64_t r = p * 8; r < std::min(rows, p * 8 + 8); ++r) {
          double s = 0, mx = -INFINITY, mn = INFINITY;
          int64_t arg = 0;
          for (int64_t c = 0; c < cols; ++c) {
            s += double(float(v(r, c)));
            part[c] += double(float(v(r, c)));
            if (v(r, c) > mx) {
              mx = v(r, c);
              arg = c;
            }
            mn = std::min(mn, v(r, c));
          }
          REQUIRE(sum.get(r) == double(float(s)));
          REQUIRE(out(max, r) == mx);
          REQUIRE(out(min, r) == mn);
          REQUIRE(amax.geti(r) == arg);
          blockTotal += double(float(s));
        }
        for (int64_t c = 0; c < cols; ++c)
          colRef[c] = float(double(colRef[c]) + double(float(part[c])));
        totalRef = float(double(totalRef) + double(float(blockTotal)));
      }
      for (int64_t i = 0; i < rows * cols; ++i)
        REQUIRE(std::memcmp(copy.at(i), x.at(i), dtype_size(d)) == 0);
      for (int64_t c = 0; c < cols; ++c)
        REQUIRE(colsum.get(c) == colRef[c]);
      REQUIRE(total.get(0) == totalRef);
    }
}

TEST_CASE("interpreter: block access offsets outside the tensor read the padding",
          "[interpreter]") {
  // x has 5 elements; blocks of 8 at offsets -3 and 2 pad with 7.5, and stores at
  // negative offsets drop the out-of-range part.
  const char *ir = R"(
module {
  func.func @pad(%x: !tile.ptr<f16> {tile.name = "x", tile.shape = array<i64: 5>},
      %out: !tile.ptr<f16> {tile.name = "out", tile.output, tile.shape = array<i64: 16>},
      %back: !tile.ptr<f16> {tile.name = "back", tile.output, tile.shape = array<i64: 5>},
      %flags: !tile.ptr<i1> {tile.name = "flags", tile.shape = array<i64: 3, 3>},
      %fout: !tile.ptr<i1> {tile.name = "fout", tile.output, tile.shape = array<i64: 4, 4>}) attributes {tile.kernel, tile.grid = array<i64: 1, 1, 1>} {
    %cm3 = arith.constant -3 : i32
    %c2 = arith.constant 2 : i32
    %c0 = arith.constant 0 : i32
    %c8 = arith.constant 8 : i32
    %a = tile.block_load %x[%cm3] {dims = array<i64: 5>, strides = array<i64: 1>, padding = 7.5 : f64} : !tile.ptr<f16> -> tensor<8xf16>
    %b = tile.block_load %x[%c2] {dims = array<i64: 5>, strides = array<i64: 1>, padding = 7.5 : f64} : !tile.ptr<f16> -> tensor<8xf16>
    tile.block_store %out[%c0], %a {dims = array<i64: 16>, strides = array<i64: 1>} : !tile.ptr<f16>, tensor<8xf16>
    tile.block_store %out[%c8], %b {dims = array<i64: 16>, strides = array<i64: 1>} : !tile.ptr<f16>, tensor<8xf16>
    tile.block_store %back[%cm3], %a {dims = array<i64: 5>, strides = array<i64: 1>} : !tile.ptr<f16>, tensor<8xf16>
    %f = tile.block_load %flags[%c0, %c0] {dims = array<i64: 3, 3>, strides = array<i64: 3, 1>, padding = 1.0 : f64} : !tile.ptr<i1> -> tensor<4x4xi1>
    tile.block_store %fout[%c0, %c0], %f {dims = array<i64: 4, 4>, strides = array<i64: 4, 1>} : !tile.ptr<i1>, tensor<4x4xi1>
    return
  }
}
)";
  std::mt19937 rng(9);
  Buf x(DType::F16, 5), out(DType::F16, 16), back(DType::F16, 5);
  fill(x, rng, -3, 3);
  Buf flags(DType::Bool, 9), fout(DType::Bool, 16);
  for (int64_t i = 0; i < 9; ++i)
    flags.seti(i, rng() & 1);
  run(ir, {x.arg(), out.arg(), back.arg(), flags.arg(), fout.arg()});
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 4; ++c)
      REQUIRE(fout.geti(r * 4 + c) == (r < 3 && c < 3 ? flags.geti(r * 3 + c) : 1));
  for (int64_t i = 0; i < 8; ++i) {
    int64_t ia = i - 3, ib = i + 2;
    REQUIRE(out.get(i) == (ia >= 0 && ia < 5 ? x.get(ia) : 7.5));
    REQUIRE(out.get(8 + i) == (ib < 5 ? x.get(ib) : 7.5));
  }
  for (int64_t i = 0; i < 5; ++i)
    REQUIRE(back.get(i) == x.get(i));
}

TEST_CASE("interpreter: integer sum reductions wrap; 1-D tiles reduce to scalars",
          "[interpreter]") {
  const char *ir = R"(
module {
  func.func @isum(%x: !tile.ptr<i8> {tile.name = "x", tile.shape = array<i64: 32, 4>},
      %out: !tile.ptr<i8> {tile.name = "out", tile.output, tile.shape = array<i64: 5>}) attributes {tile.kernel, tile.grid = array<i64: 1, 1, 1>} {
    %c0 = arith.constant 0 : i32
    %t = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 4>, strides = array<i64: 4, 1>} : !tile.ptr<i8> -> tensor<32x4xi8>
    %s = tile.reduce sum %t axis = 0 : tensor<32x4xi8> -> tensor<4xi8>
    tile.block_store %out[%c0], %s {dims = array<i64: 5>, strides = array<i64: 1>} : !tile.ptr<i8>, tensor<4xi8>
    %all = tile.reduce max %s axis = 0 : tensor<4xi8> -> i8
    %all1 = tile.splat %all : i8 -> tensor<1xi8>
    %c4 = arith.constant 4 : i32
    tile.block_store %out[%c4], %all1 {dims = array<i64: 5>, strides = array<i64: 1>} : !tile.ptr<i8>, tensor<1xi8>
    return
  }
}
)";
  std::mt19937 rng(10);
  Buf x(DType::I8, 128), out(DType::I8, 5);
  fillInt(x, rng, 50, 127); // the column sums overflow i8
  run(ir, {x.arg(), out.arg()});
  int8_t best = -128;
  for (int64_t c = 0; c < 4; ++c) {
    int64_t s = 0;
    for (int64_t r = 0; r < 32; ++r)
      s += x.geti(r * 4 + c);
    REQUIRE(out.geti(c) == int8_t(s));
    best = std::max(best, int8_t(s));
  }
  REQUIRE(out.geti(4) == best);
}

TEST_CASE("interpreter: trans, reshape, expand_dims, broadcast, convert_layout",
          "[interpreter]") {
  const char *ir = R"(
module {
  func.func @shapes(%x: !tile.ptr<i32> {tile.name = "x", tile.shape = array<i64: 2, 4, 8>},
      %t: !tile.ptr<i32> {tile.name = "t", tile.output, tile.shape = array<i64: 8, 2, 4>},
      %r: !tile.ptr<i32> {tile.name = "r", tile.output, tile.shape = array<i64: 8, 8>},
      %b: !tile.ptr<i32> {tile.name = "b", tile.output, tile.shape = array<i64: 4, 8>}) attributes {tile.kernel, tile.grid = array<i64: 1, 1, 1>} {
    %c0 = arith.constant 0 : i32
    %v = tile.block_load %x[%c0, %c0, %c0] {dims = array<i64: 2, 4, 8>, strides = array<i64: 32, 8, 1>} : !tile.ptr<i32> -> tensor<2x4x8xi32>
    %tv = tile.trans %v [2, 0, 1] : tensor<2x4x8xi32> -> tensor<8x2x4xi32>
    %tc = tile.convert_layout %tv : tensor<8x2x4xi32> -> tensor<8x2x4xi32>
    tile.block_store %t[%c0, %c0, %c0], %tc {dims = array<i64: 8, 2, 4>, strides = array<i64: 8, 4, 1>} : !tile.ptr<i32>, tensor<8x2x4xi32>
    %rv = tile.reshape %v : tensor<2x4x8xi32> -> tensor<8x8xi32>
    tile.block_store %r[%c0, %c0], %rv {dims = array<i64: 8, 8>, strides = array<i64: 8, 1>} : !tile.ptr<i32>, tensor<8x8xi32>
    %row = tile.block_load %x[%c0, %c0, %c0] {dims = array<i64: 2, 4, 8>, strides = array<i64: 32, 8, 1>} : !tile.ptr<i32> -> tensor<1x1x8xi32>
    %row2 = tile.reshape %row : tensor<1x1x8xi32> -> tensor<8xi32>
    %re = tile.expand_dims %row2 axis = 0 : tensor<8xi32> -> tensor<1x8xi32>
    %rb = tile.broadcast %re : tensor<1x8xi32> -> tensor<4x8xi32>
    %col = tile.arange 0 to 4 : tensor<4xi32>
    %ce = tile.expand_dims %col axis = 1 : tensor<4xi32> -> tensor<4x1xi32>
    %cb = tile.broadcast %ce : tensor<4x1xi32> -> tensor<4x8xi32>
    %sum = arith.addi %rb, %cb : tensor<4x8xi32>
    tile.block_store %b[%c0, %c0], %sum {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : !tile.ptr<i32>, tensor<4x8xi32>
    tile.barrier
    return
  }
}
)";
  std::mt19937 rng(11);
  Buf x(DType::I32, 64), t(DType::I32, 64), r(DType::I32, 64), b(DType::I32, 32);
  fillInt(x, rng, -1000, 1000);
  run(ir, {x.arg(), t.arg(), r.arg(), b.arg()});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 8; ++k)
        REQUIRE(t.geti(k * 8 + i * 4 + j) == x.geti(i * 32 + j * 8 + k));
  for (int64_t i = 0; i < 64; ++i)
    REQUIRE(r.geti(i) == x.geti(i));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 8; ++k)
      REQUIRE(b.geti(i * 8 + k) == x.geti(k) + i);
}

TEST_CASE("interpreter: dot accumulates in f32 (f64 for f64)", "[interpreter]") {
  const char *ir = R"(
module {
  func.func @mm(%a: !tile.ptr<@T@> {tile.name = "a", tile.shape = array<i64: @M@, @K@>},
      %b: !tile.ptr<@T@> {tile.name = "b", tile.shape = array<i64: @K@, @N@>},
      %c: !tile.ptr<@A@> {tile.name = "c", tile.output, tile.shape = array<i64: @M@, @N@>}) attributes {tile.kernel, tile.grid = array<i64: 1, 1, 1>} {
    %c0 = arith.constant 0 : i32
    %ta = tile.block_load %a[%c0, %c0] {dims = array<i64: @M@, @K@>, strides = array<i64: @K@, 1>} : !tile.ptr<@T@> -> tensor<16x8x@T@>
    %tb = tile.block_load %b[%c0, %c0] {dims = array<i64: @K@, @N@>, strides = array<i64: @N@, 1>} : !tile.ptr<@T@> -> tensor<8x32x@T@>
    %tc = tile.block_load %c[%c0, %c0] {dims = array<i64: @M@, @N@>, strides = array<i64: @N@, 1>} : !tile.ptr<@A@> -> tensor<16x32x@A@>
    %d = tile.dot %ta, %tb, %tc : tensor<16x8x@T@>, tensor<8x32x@T@> -> tensor<16x32x@A@>
    tile.block_store %c[%c0, %c0], %d {dims = array<i64: @M@, @N@>, strides = array<i64: @N@, 1>} : !tile.ptr<@A@>, tensor<16x32x@A@>
    return
  }
}
)";
  std::mt19937 rng(12);
  const int64_t m = 13, k = 7, n = 29;
  for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F8E4M3, DType::F64}) {
    DType acc = d == DType::F64 ? DType::F64 : DType::F32;
    INFO(mlirType(d));
    Buf a(d, m * k), b(d, k * n), c(acc, m * n);
    fill(a, rng, -2, 2);
    fill(b, rng, -2, 2);
    fill(c, rng, -2, 2);
    Buf c0 = c;
    run(subst(ir, {{"T", mlirType(d)}, {"A", mlirType(acc)}, {"M", std::to_string(m)},
                   {"K", std::to_string(k)}, {"N", std::to_string(n)}}),
        {a.arg(), b.arg(), c.arg()});
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = c0.get(i * n + j), mag = std::fabs(s);
        for (int64_t q = 0; q < k; ++q) {
          s += a.get(i * k + q) * b.get(q * n + j);
          mag += std::fabs(a.get(i * k + q) * b.get(q * n + j));
        }
        // One rounding to the accumulator type, up to double summation-order error.
        double got = c.get(i * n + j), ref = roundTo(acc, s);
        REQUIRE(std::fabs(got - ref) <= relTol(acc) * std::fabs(ref) + 1e-15 * mag);
      }
  }
}

TEST_CASE("interpreter: scf.for with iter_args, scf.if with results, scf.while",
          "[interpreter]") {
  std::mt19937 rng(13);
  SECTION("row sums over column blocks in an scf.for") {
    const char *ir = R"(
module {
  func.func @rows(%x: !tile.ptr<bf16> {tile.name = "x", tile.shape = array<i64: @R@, @C@>},
      %y: !tile.ptr<f32> {tile.name = "y", tile.output, tile.shape = array<i64: @R@>}) attributes {tile.kernel, tile.grid = array<i64: @R@, 1, 1>} {
    %pid = tile.program_id 0 : i32
    %c0 = arith.constant 0 : i32
    %cc = arith.constant @C@ : i32
    %step = arith.constant 256 : i32
    %zero = arith.constant dense<0.0> : tensor<1x256xf32>
    %acc = scf.for %k = %c0 to %cc step %step iter_args(%a = %zero) -> (tensor<1x256xf32>) : i32 {
      %t = tile.block_load %x[%pid, %k] {dims = array<i64: @R@, @C@>, strides = array<i64: @C@, 1>, padding = 0.0 : f64} : !tile.ptr<bf16> -> tensor<1x256xbf16>
      %tf = tile.cast %t : tensor<1x256xbf16> to tensor<1x256xf32>
      %n = arith.addf %a, %tf : tensor<1x256xf32>
      scf.yield %n : tensor<1x256xf32>
    }
    %s = tile.reduce sum %acc axis = 1 : tensor<1x256xf32> -> tensor<1xf32>
    tile.block_store %y[%pid], %s {dims = array<i64: @R@>, strides = array<i64: 1>} : !tile.ptr<f32>, tensor<1xf32>
    return
  }
}
)";
    for (int64_t cols : {int64_t(1), int64_t(17), int64_t(1000), int64_t(4097)}) {
      const int64_t rows = 3;
      Buf x(DType::BF16, rows * cols), y(DType::F32, rows);
      fill(x, rng, -4, 4);
      run(subst(ir, {{"R", std::to_string(rows)}, {"C", std::to_string(cols)}}),
          {x.arg(), y.arg()});
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> lanes(256, 0.0f);
        for (int64_t c = 0; c < cols; ++c)
          lanes[c % 256] = float(double(lanes[c % 256]) + x.get(r * cols + c));
        double s = 0;
        for (float l : lanes)
          s += l;
        REQUIRE(y.get(r) == double(float(s)));
      }
    }
  }
  SECTION("scf.if picks a branch per program instance") {
    const int64_t n = 1000;
    Buf x(DType::F32, n), out(DType::F32, n);
    fill(x, rng, -4, 4);
    run(elementwiseKernel({DType::F32}, DType::F32, n, R"(
    %c2 = arith.constant 2 : i32
    %c0i = arith.constant 0 : i32
    %rem = arith.remsi %pid, %c2 : i32
    %even = arith.cmpi eq, %rem, %c0i : i32
    %r = scf.if %even -> (tensor<@B@xf32>) {
      %two = arith.constant dense<2.0> : tensor<@B@xf32>
      %d = arith.mulf %a0, %two : tensor<@B@xf32>
      scf.yield %d : tensor<@B@xf32>
    } else {
      %one = arith.constant dense<1.0> : tensor<@B@xf32>
      %e = arith.addf %a0, %one : tensor<@B@xf32>
      scf.yield %e : tensor<@B@xf32>
    })"),
        {x.arg(), out.arg()});
    for (int64_t i = 0; i < n; ++i) {
      bool even = (i / 256) % 2 == 0;
      REQUIRE(out.get(i) == double(float(even ? x.get(i) * 2 : x.get(i) + 1)));
    }
  }
  SECTION("scf.while") {
    const char *ir = R"(
module {
  func.func @w(%out: !tile.ptr<i32> {tile.name = "out", tile.output, tile.shape = array<i64: 1>}) attributes {tile.kernel, tile.grid = array<i64: 1, 1, 1>} {
    %c1 = arith.constant 1 : i32
    %c3 = arith.constant 3 : i32
    %lim = arith.constant 1000 : i32
    %res = scf.while (%i = %c1) : (i32) -> i32 {
      %cond = arith.cmpi slt, %i, %lim : i32
      scf.condition(%cond) %i : i32
    } do {
    ^bb0(%j: i32):
      %n = arith.muli %j, %c3 : i32
      scf.yield %n : i32
    }
    %t = tile.splat %res : i32 -> tensor<1xi32>
    %c0 = arith.constant 0 : i32
    tile.block_store %out[%c0], %t {dims = array<i64: 1>, strides = array<i64: 1>} : !tile.ptr<i32>, tensor<1xi32>
    return
  }
}
)";
    Buf out(DType::I32, 1);
    run(ir, {out.arg()});
    REQUIRE(out.geti(0) == 2187);
  }
}

TEST_CASE("interpreter: program ids and counts over a 3-D grid, in grid order",
          "[interpreter]") {
  const char *ir = R"(
module {
  func.func @g(%ids: !tile.ptr<i32> {tile.name = "ids", tile.output, tile.shape = array<i64: 24>},
      %order: !tile.ptr<i64> {tile.name = "order", tile.output, tile.shape = array<i64: 24>},
      %counter: !tile.ptr<i64> {tile.name = "counter", tile.output, tile.shape = array<i64: 1>},
      %facc: !tile.ptr<f64> {tile.name = "facc", tile.output, tile.shape = array<i64: 1>},
      %bias: i32 {tile.name = "bias"}, %step: f64 {tile.name = "step"}) attributes {tile.kernel, tile.grid = array<i64: 3, 2, 4>} {
    %x = tile.program_id 0 : i32
    %y = tile.program_id 1 : i32
    %z = tile.program_id 2 : i32
    %nx = tile.num_programs 0 : i32
    %ny = tile.num_programs 1 : i32
    %nz = tile.num_programs 2 : i32
    %c10 = arith.constant 10 : i32
    %c100 = arith.constant 100 : i32
    %c1000 = arith.constant 1000 : i32
    %y10 = arith.muli %y, %c10 : i32
    %z100 = arith.muli %z, %c100 : i32
    %n0 = arith.muli %nx, %c1000 : i32
    %c10000 = arith.constant 10000 : i32
    %n1 = arith.muli %ny, %c10000 : i32
    %c100000 = arith.constant 100000 : i32
    %n2 = arith.muli %nz, %c100000 : i32
    %n01 = arith.addi %n0, %n1 : i32
    %n = arith.addi %n01, %n2 : i32
    %v0 = arith.addi %x, %y10 : i32
    %v1 = arith.addi %v0, %z100 : i32
    %v3 = arith.addi %v1, %n : i32
    %v2 = arith.addi %v3, %bias : i32
    %zy = arith.muli %z, %ny : i32
    %zyy = arith.addi %zy, %y : i32
    %zyx = arith.muli %zyy, %nx : i32
    %idx = arith.addi %zyx, %x : i32
    %vt = tile.splat %v2 : i32 -> tensor<1xi32>
    tile.block_store %ids[%idx], %vt {dims = array<i64: 24>, strides = array<i64: 1>} : !tile.ptr<i32>, tensor<1xi32>
    %one = arith.constant dense<1> : tensor<1xi64>
    %pc = tile.splat %counter : !tile.ptr<i64> -> tensor<1x!tile.ptr<i64>>
    %ticket = tile.atomic_rmw add %pc, %one : tensor<1x!tile.ptr<i64>>, tensor<1xi64> -> tensor<1xi64>
    tile.block_store %order[%idx], %ticket {dims = array<i64: 24>, strides = array<i64: 1>} : !tile.ptr<i64>, tensor<1xi64>
    %idxf = arith.sitofp %idx : i32 to f64
    %inc = arith.mulf %idxf, %step : f64
    %inct = tile.splat %inc : f64 -> tensor<1xf64>
    %pf = tile.splat %facc : !tile.ptr<f64> -> tensor<1x!tile.ptr<f64>>
    %fold = tile.atomic_rmw add %pf, %inct : tensor<1x!tile.ptr<f64>>, tensor<1xf64> -> tensor<1xf64>
    return
  }
}
)";
  std::string text = ir;
  Buf ids(DType::I32, 24), order(DType::I64, 24), counter(DType::I64, 1), facc(DType::F64, 1);
  run(text, {ids.arg(), order.arg(), counter.arg(), facc.arg(), HostArg::value(-7),
             HostArg::value(0.1)});
  double fref = 0;
  for (int64_t i = 0; i < 24; ++i)
    fref += i * 0.1; // sequential, in program order
  REQUIRE(facc.get(0) == fref);
  for (int64_t z = 0; z < 4; ++z)
    for (int64_t y = 0; y < 2; ++y)
      for (int64_t x = 0; x < 3; ++x) {
        int64_t idx = (z * 2 + y) * 3 + x;
        REQUIRE(ids.geti(idx) == x + 10 * y + 100 * z + 423000 - 7);
        REQUIRE(order.geti(idx) == idx); // x fastest, then y, then z
      }
  REQUIRE(counter.geti(0) == 24);
}

TEST_CASE("interpreter: atomic max and compare-and-swap across program instances",
          "[interpreter]") {
  const char *ir = R"(
module {
  func.func @am(%x: !tile.ptr<@T@> {tile.name = "x", tile.shape = array<i64: @G@, @C@>},
      %m: !tile.ptr<@T@> {tile.name = "m", tile.output, tile.shape = array<i64: @C@>},
      %lock: !tile.ptr<i32> {tile.name = "lock", tile.output, tile.shape = array<i64: 1>},
      %olds: !tile.ptr<i32> {tile.name = "olds", tile.output, tile.shape = array<i64: @G@>}) attributes {tile.kernel, tile.grid = array<i64: @G@, 1, 1>} {
    %pid = tile.program_id 0 : i32
    %c0 = arith.constant 0 : i32
    %t = tile.block_load %x[%pid, %c0] {dims = array<i64: @G@, @C@>, strides = array<i64: @C@, 1>} : !tile.ptr<@T@> -> tensor<1x128x@T@>
    %v = tile.reshape %t : tensor<1x128x@T@> -> tensor<128x@T@>
    %cols = tile.arange 0 to 128 : tensor<128xi32>
    %cc = arith.constant @C@ : i32
    %ccs = tile.splat %cc : i32 -> tensor<128xi32>
    %inb = arith.cmpi slt, %cols, %ccs : tensor<128xi32>
    %pm = tile.splat %m : !tile.ptr<@T@> -> tensor<128x!tile.ptr<@T@>>
    %pms = tile.addptr %pm, %cols : tensor<128x!tile.ptr<@T@>>, tensor<128xi32>
    %old = tile.atomic_rmw max %pms, %v, %inb : tensor<128x!tile.ptr<@T@>>, tensor<128x@T@>, tensor<128xi1> -> tensor<128x@T@>
    %pl = tile.splat %lock : !tile.ptr<i32> -> tensor<1x!tile.ptr<i32>>
    %cmp = tile.splat %pid : i32 -> tensor<1xi32>
    %c1 = arith.constant dense<1> : tensor<1xi32>
    %next = arith.addi %cmp, %c1 : tensor<1xi32>
    %got = tile.atomic_cas %pl, %cmp, %next : tensor<1x!tile.ptr<i32>>, tensor<1xi32>
    %bad = arith.constant dense<-5> : tensor<1xi32>
    %never = arith.constant dense<77> : tensor<1xi32>
    %got2 = tile.atomic_cas %pl, %bad, %never : tensor<1x!tile.ptr<i32>>, tensor<1xi32>
    %diff = arith.subi %got2, %got : tensor<1xi32>
    %sum = arith.addi %got, %diff : tensor<1xi32>
    %sum2 = arith.subi %sum, %c1 : tensor<1xi32>
    tile.block_store %olds[%pid], %sum2 {dims = array<i64: @G@>, strides = array<i64: 1>} : !tile.ptr<i32>, tensor<1xi32>
    return
  }
}
)";
  std::mt19937 rng(14);
  for (DType d : {DType::F32, DType::I32, DType::I64}) {
    const int64_t g = 37, c = 100;
    INFO(mlirType(d));
    Buf x(d, g * c), m(d, c), lock(DType::I32, 1), olds(DType::I32, g);
    if (is_floating(d))
      fill(x, rng, -100, 100);
    else
      fillInt(x, rng, -1000000, 1000000);
    for (int64_t i = 0; i < c; ++i)
      m.seti(i, -2000000);
    run(subst(ir, {{"T", mlirType(d)}, {"G", std::to_string(g)}, {"C", std::to_string(c)}}),
        {x.arg(), m.arg(), lock.arg(), olds.arg()});
    for (int64_t j = 0; j < c; ++j) {
      double best = -2000000;
      for (int64_t p = 0; p < g; ++p)
        best = std::max(best, is_floating(d) ? x.get(p * c + j) : double(x.geti(p * c + j)));
      REQUIRE((is_floating(d) ? m.get(j) : double(m.geti(j))) == best);
    }
    // Program p finds the lock at p (set by p - 1) and advances it; the failing CAS
    // returns p + 1 without writing, so olds[p] = (p + 1) - 1.
    REQUIRE(lock.geti(0) == g);
    for (int64_t p = 0; p < g; ++p)
      REQUIRE(olds.geti(p) == p);
  }
}

TEST_CASE("interpreter: argument checks and out-of-bounds accesses throw tokamax::Error",
          "[interpreter]") {
  const int64_t n = 17;
  std::string ir = elementwiseKernel({DType::BF16}, DType::BF16, n,
                                     "%r = arith.addf %a0, %a0 : tensor<@B@xbf16>");
  Buf x(DType::BF16, n), out(DType::BF16, n), small(DType::BF16, n - 1);
  std::mt19937 rng(15);
  fill(x, rng, -1, 1);
  SECTION("a tensor of the wrong size names the parameter and both sizes") {
    try {
      run(ir, {x.arg(), small.arg()});
      FAIL("no error");
    } catch (const Error &e) {
      std::string msg = e.what();
      INFO(msg);
      REQUIRE(msg.find("'out'") != std::string::npos);
      REQUIRE(msg.find("34 bytes") != std::string::npos);
      REQUIRE(msg.find("32") != std::string::npos);
    }
  }
  SECTION("the wrong number of arguments") {
    REQUIRE_THROWS_AS(run(ir, {x.arg()}), Error);
  }
  SECTION("an unmasked out-of-bounds gather") {
    std::string bad = ir;
    bad.replace(bad.find("%qx0, %mask : tensor<32x!tile.ptr<bf16>>, tensor<32xi1>"),
                std::string("%qx0, %mask : tensor<32x!tile.ptr<bf16>>, tensor<32xi1>").size(),
                "%qx0 : tensor<32x!tile.ptr<bf16>>");
    try {
      run(bad, {x.arg(), out.arg()});
      FAIL("no error");
    } catch (const Error &e) {
      std::string msg = e.what();
      INFO(msg);
      REQUIRE(msg.find("tile.load") != std::string::npos);
      REQUIRE(msg.find("'x0'") != std::string::npos);
      REQUIRE(msg.find("offset 17") != std::string::npos);
      REQUIRE(msg.find("17 elements") != std::string::npos);
    }
  }
  SECTION("an unmasked out-of-bounds scatter") {
    std::string bad = ir;
    bad.replace(bad.find(", %mask : tensor<32x!tile.ptr<bf16>>, tensor<32xbf16>, tensor<32xi1>"),
                std::string(", %mask : tensor<32x!tile.ptr<bf16>>, tensor<32xbf16>, tensor<32xi1>").size(),
                " : tensor<32x!tile.ptr<bf16>>, tensor<32xbf16>");
    REQUIRE_THROWS_WITH(run(bad, {x.arg(), out.arg()}),
                        Catch::Contains("tile.store") && Catch::Contains("'out'"));
  }
  SECTION("an unsupported operation") {
    std::string bad = elementwiseKernel({DType::I32}, DType::I32, n,
                                        "%r = math.ctpop %a0 : tensor<@B@xi32>");
    Buf xi(DType::I32, n), oi(DType::I32, n);
    REQUIRE_THROWS_WITH(run(bad, {xi.arg(), oi.arg()}),
                        Catch::Contains("interpreter: unsupported operation math.ctpop"));
  }
  SECTION("an unsupported operation in a branch that never runs") {
    std::string bad = elementwiseKernel({DType::I32}, DType::I32, n, R"(
    %never = arith.constant false
    %r = scf.if %never -> (tensor<@B@xi32>) {
      %p = math.ctpop %a0 : tensor<@B@xi32>
      scf.yield %p : tensor<@B@xi32>
    } else {
      scf.yield %a0 : tensor<@B@xi32>
    })");
    Buf xi(DType::I32, n), oi(DType::I32, n);
    REQUIRE_THROWS_WITH(run(bad, {xi.arg(), oi.arg()}),
                        Catch::Contains("interpreter: unsupported operation math.ctpop"));
  }
  SECTION("IR that does not parse") {
    REQUIRE_THROWS_AS(run("module { func.func @k( }", {}), Error);
  }
}

TEST_CASE("interpreter: TOKAMAX_INTERPRET=1 requests the interpreter", "[interpreter]") {
  const char *saved = std::getenv("TOKAMAX_INTERPRET");
  std::string keep = saved ? saved : "";
  setenv("TOKAMAX_INTERPRET", "1", 1);
  REQUIRE(interpreter_requested());
  setenv("TOKAMAX_INTERPRET", "0", 1);
  REQUIRE_FALSE(interpreter_requested());
  unsetenv("TOKAMAX_INTERPRET");
  REQUIRE_FALSE(interpreter_requested());
  if (saved)
    setenv("TOKAMAX_INTERPRET", keep.c_str(), 1);
}

//===----------------------------------------------------------------------===//
// Kernels built with the DSL
//===----------------------------------------------------------------------===//

namespace dsl = tokamax::dsl;

TEST_CASE("interpreter: DSL row scale with block loads (the Kernel.h example)", "[interpreter]") {
  std::mt19937 rng(20);
  for (int64_t cols : {int64_t(1), int64_t(17), int64_t(1000)}) {
    const int64_t rows = 17;
    dsl::Kernel k("scale");
    auto x = k.input("x", DType::BF16, {rows, cols});
    auto y = k.output("y", DType::BF16, {rows, cols});
    k.grid(rows);
    dsl::Value row = k.program_id(0);
    dsl::Value t = x.load({row, 0}, {1, 1024}).to(DType::F32);
    y.store({row, 0}, (t * 2.0).to(DType::BF16));
    Buf xb(DType::BF16, rows * cols), yb(DType::BF16, rows * cols);
    fill(xb, rng, -100, 100);
    std::vector<HostArg> args{xb.arg(), yb.arg()};
    interpret(k, args);
    for (int64_t i = 0; i < rows * cols; ++i)
      REQUIRE(yb.get(i) == roundTo(DType::BF16, xb.get(i) * 2));
  }
}

TEST_CASE("interpreter: DSL softmax over rows", "[interpreter]") {
  std::mt19937 rng(21);
  const int64_t rows = 9, cols = 100;
  dsl::Kernel k("softmax");
  auto x = k.input("x", DType::F32, {rows, cols});
  auto y = k.output("y", DType::F32, {rows, cols});
  k.grid(rows);
  dsl::Value row = k.program_id(0);
  dsl::Value t = x.load({row, 0}, {1, 128}, -INFINITY);
  dsl::Value m = t.max(1).expand(1);
  dsl::Value e = dsl::exp(t - m);
  dsl::Value s = e.sum(1).expand(1);
  y.store({row, 0}, e / s);
  Buf xb(DType::F32, rows * cols), yb(DType::F32, rows * cols);
  fill(xb, rng, -5, 5);
  std::vector<HostArg> args{xb.arg(), yb.arg()};
  interpret(k, args);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      mx = std::max(mx, xb.get(r * cols + c));
    for (int64_t c = 0; c < cols; ++c)
      sum += std::exp(xb.get(r * cols + c) - mx);
    for (int64_t c = 0; c < cols; ++c) {
      double ref = std::exp(xb.get(r * cols + c) - mx) / sum;
      REQUIRE(std::fabs(yb.get(r * cols + c) - ref) <= 1e-6 * ref);
    }
  }
}

TEST_CASE("interpreter: DSL gathers and scatters through pointer arithmetic", "[interpreter]") {
  std::mt19937 rng(22);
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    const int64_t block = 256;
    dsl::Kernel k("gather");
    auto x = k.input("x", DType::F16, {n});
    auto idx = k.input("idx", DType::I32, {n});
    auto y = k.output("y", DType::F16, {n});
    k.grid(dsl::cdiv(n, block));
    dsl::Value offs = k.program_id(0) * int64_t(block) + k.arange(0, block);
    dsl::Value mask = offs < n;
    // y[i] = f(x[idx[i]]) with f(v) = v > 0 ? sqrt(v) : -v
    dsl::Value src = dsl::load(idx.ptr() + offs, mask);
    dsl::Value v = dsl::load(x.ptr() + src, mask, 1.0);
    dsl::store(y.ptr() + offs, dsl::where(v > 0.0, dsl::sqrt(v), -v), mask);
    Buf xb(DType::F16, n), ib(DType::I32, n), yb(DType::F16, n);
    fill(xb, rng, -10, 10);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    for (int64_t i = 0; i < n; ++i)
      ib.seti(i, pick(rng));
    std::vector<HostArg> args{xb.arg(), ib.arg(), yb.arg()};
    interpret(k, args);
    for (int64_t i = 0; i < n; ++i) {
      double v = xb.get(ib.geti(i));
      REQUIRE(close(DType::F16, yb.get(i), roundTo(DType::F16, v > 0 ? std::sqrt(v) : -v)));
    }
  }
}

TEST_CASE("interpreter: DSL loop, if_else, when and a scalar parameter", "[interpreter]") {
  std::mt19937 rng(23);
  const int64_t rows = 6, cols = 1000;
  dsl::Kernel k("rowsum");
  auto x = k.input("x", DType::F32, {rows, cols});
  auto y = k.output("y", DType::F32, {rows});
  auto flag = k.output("flag", DType::I32, {1});
  dsl::Value scale = k.scalar("scale", DType::F32);
  k.grid(rows);
  dsl::Value row = k.program_id(0);
  auto acc = k.loop(0, int64_t(cols), 128, {k.full({1, 128}, 0.0, DType::F32)},
                    [&](dsl::Value c, std::vector<dsl::Value> carried) {
                      return std::vector<dsl::Value>{carried[0] + x.load({row, c}, {1, 128})};
                    });
  dsl::Value total = acc[0].sum(1);
  auto scaled = k.if_else(row % 2 == 0, [&] { return std::vector<dsl::Value>{total * scale}; },
                          [&] { return std::vector<dsl::Value>{total}; });
  y.store({row}, scaled[0]);
  k.when(row == int64_t(rows - 1), [&] { flag.store({0}, k.full({1}, 42, DType::I32)); });
  Buf xb(DType::F32, rows * cols), yb(DType::F32, rows), fb(DType::I32, 1);
  fill(xb, rng, -1, 1);
  std::vector<HostArg> args{xb.arg(), yb.arg(), fb.arg(), HostArg::value(0.5)};
  interpret(k, args);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      s += xb.get(r * cols + c);
      mag += std::fabs(xb.get(r * cols + c));
    }
    double ref = r % 2 == 0 ? s * 0.5 : s;
    REQUIRE(std::fabs(yb.get(r) - ref) <= 1e-6 * mag);
  }
  REQUIRE(fb.geti(0) == 42);
}

TEST_CASE("interpreter: DSL atomics: histogram, maximum, tickets", "[interpreter]") {
  std::mt19937 rng(24);
  const int64_t n = 1000, bins = 16, block = 128;
  const int64_t grid = dsl::cdiv(n, block);
  dsl::Kernel k("hist");
  auto x = k.input("x", DType::I32, {n});
  auto hist = k.output("hist", DType::I32, {bins});
  auto best = k.output("best", DType::I32, {1});
  auto counter = k.output("counter", DType::I32, {1});
  auto tickets = k.output("tickets", DType::I32, {grid});
  k.grid(grid);
  dsl::Value pid = k.program_id(0);
  dsl::Value offs = pid * int64_t(block) + k.arange(0, block);
  dsl::Value mask = offs < n;
  dsl::Value v = dsl::load(x.ptr() + offs, mask);
  dsl::atomic_add(hist.ptr() + v % int64_t(bins), 1, mask);
  dsl::atomic_max(best.ptr() + k.full({block}, 0, DType::I32), v, mask);
  dsl::Value ticket = dsl::atomic_cas(counter.ptr() + k.full({1}, 0, DType::I32),
                                      pid.to(DType::I32), pid + 1);
  tickets.store({pid}, ticket);
  Buf xb(DType::I32, n), hb(DType::I32, bins), bb(DType::I32, 1), cb(DType::I32, 1),
      tb(DType::I32, grid);
  fillInt(xb, rng, 1, 100000);
  std::vector<HostArg> args{xb.arg(), hb.arg(), bb.arg(), cb.arg(), tb.arg()};
  interpret(k, args);
  std::vector<int64_t> ref(bins, 0);
  int64_t mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    ++ref[xb.geti(i) % bins];
    mx = std::max(mx, xb.geti(i));
  }
  for (int64_t b = 0; b < bins; ++b)
    REQUIRE(hb.geti(b) == ref[b]);
  REQUIRE(bb.geti(0) == mx);
  REQUIRE(cb.geti(0) == grid);
  for (int64_t p = 0; p < grid; ++p)
    REQUIRE(tb.geti(p) == p);
}

TEST_CASE("interpreter: DSL dot with a transposed operand, argmax and reshape", "[interpreter]") {
  std::mt19937 rng(25);
  const int64_t m = 13, kk = 30, n = 11;
  dsl::Kernel k("mm");
  auto a = k.input("a", DType::BF16, {m, kk});
  auto b = k.input("b", DType::BF16, {n, kk});
  auto c = k.output("c", DType::F32, {m, n});
  auto am = k.output("am", DType::I32, {m});
  dsl::Value ta = a.load({0, 0}, {16, 32});
  dsl::Value tb = b.load({0, 0}, {16, 32});
  dsl::Value prod = dsl::dot(ta, tb.trans(), k.full({16, 16}, 0.0, DType::F32));
  c.store({0, 0}, prod);
  // Columns beyond n are 0; make them lose the argmax by subtracting a large value there.
  dsl::Value cols = k.arange(0, 16).expand(0).broadcast_to({16, 16});
  dsl::Value masked = dsl::where(cols < n, prod, -1e30);
  am.store({0}, masked.argmax(1).reshape({16}));
  Buf ab(DType::BF16, m * kk), bb(DType::BF16, n * kk), cb(DType::F32, m * n), amb(DType::I32, m);
  fill(ab, rng, -1, 1);
  fill(bb, rng, -1, 1);
  std::vector<HostArg> args{ab.arg(), bb.arg(), cb.arg(), amb.arg()};
  interpret(k, args);
  for (int64_t i = 0; i < m; ++i) {
    int64_t arg = 0;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < kk; ++q)
        s += ab.get(i * kk + q) * bb.get(j * kk + q);
      REQUIRE(cb.get(i * n + j) == double(float(s)));
      if (cb.get(i * n + j) > cb.get(i * n + arg))
        arg = j;
    }
    REQUIRE(amb.geti(i) == arg);
  }
}

TEST_CASE("interpreter: DSL kernels report bad arguments by parameter name", "[interpreter]") {
  dsl::Kernel k("copy");
  auto x = k.input("source", DType::F64, {10});
  auto y = k.output("dest", DType::F64, {10});
  y.store({0}, x.load({0}, {16}));
  Buf xb(DType::F64, 10), small(DType::F64, 9);
  std::vector<HostArg> args{xb.arg(), small.arg()};
  REQUIRE_THROWS_WITH(interpret(k, args), Catch::Contains("'dest'") && Catch::Contains("80 bytes") &&
                                              Catch::Contains("72"));
}
