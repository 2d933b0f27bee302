// Interpreter numerics: memory, reductions, shapes, dot, control flow, atomics, errors
// (program instances of a grid: InterpreterProgramTests.cpp).
#include "unit/interpreter/InterpreterTestUtil.h"

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

TEST_CASE("interpreter: integer sum reductions wrap, 1-D tiles reduce to scalars",
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

