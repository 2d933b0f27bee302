// Interpreter: the program instances of a grid (their ids and counts, the order they
// run in, TOKAMAX_INTERPRETER_ORDER=reverse) and atomics across them.
#include "unit/interpreter/InterpreterTestUtil.h"
#include "common/ScopedState.h"

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
  // TOKAMAX_INTERPRETER_ORDER=reverse runs the same programs last to first (the check
  // that kernels do not depend on the order uses it).
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    test::EnvGuard programOrder("TOKAMAX_INTERPRETER_ORDER", reverse ? "reverse" : nullptr);
    std::string text = ir;
    Buf ids(DType::I32, 24), order(DType::I64, 24), counter(DType::I64, 1), facc(DType::F64, 1);
    run(text, {ids.arg(), order.arg(), counter.arg(), facc.arg(), HostArg::value(-7),
               HostArg::value(0.1)});
    double fref = 0;
    for (int64_t i = 0; i < 24; ++i)
      fref += (reverse ? 23 - i : i) * 0.1; // sequential, in program order
    REQUIRE(facc.get(0) == fref);
    for (int64_t z = 0; z < 4; ++z)
      for (int64_t y = 0; y < 2; ++y)
        for (int64_t x = 0; x < 3; ++x) {
          int64_t idx = (z * 2 + y) * 3 + x;
          REQUIRE(ids.geti(idx) == x + 10 * y + 100 * z + 423000 - 7);
          REQUIRE(order.geti(idx) == (reverse ? 23 - idx : idx)); // x fastest, then y, then z
        }
    REQUIRE(counter.geti(0) == 24);
  }
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
