// Interpreter numerics: elementwise arithmetic, math, comparisons and casts.
#include "unit/interpreter/InterpreterTestUtil.h"

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

