// Interpreter runs of DSL-built kernels.
#include "unit/interpreter/InterpreterTestUtil.h"

#include "common/AsyncRingKernel.h"
#include "common/BlockAtomicKernel.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

TEST_CASE("interpreter: tile.exp2 with a share on the FMA pipes is 2^x rounded to f32", "[interpreter]") {
  std::mt19937 rng(22);
  const int64_t n = 300;
  dsl::Kernel k("exp2_share");
  auto x = k.input("x", DType::F32, {n});
  auto y = k.output("y", DType::F32, {n});
  y.store({0}, dsl::exp2(x.load({0}, {512}), 3, 8));
  Buf xb(DType::F32, n), yb(DType::F32, n);
  fill(xb, rng, -130, 20);
  xb.set(0, -INFINITY);
  std::vector<HostArg> args{xb.arg(), yb.arg()};
  interpret(k, args);
  for (int64_t i = 0; i < n; ++i)
    REQUIRE(yb.get(i) == roundTo(DType::F32, std::exp2(xb.get(i))));
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

TEST_CASE("interpreter: DSL dot with a_k_interleaved reads a's columns in the accumulator's order",
          "[interpreter]") {
  // K index 16 g + 4 q + i reads a's column 16 g + 2 q + i % 2 + 8 (i / 2): with b's
  // rows stored in that order the product equals the plain one; with b as it is, it
  // differs (the order matters).
  std::mt19937 rng(26);
  const int64_t m = 16, kk = 32, n = 16;
  auto column = [](int64_t k) { return k / 16 * 16 + 2 * (k % 16 / 4) + k % 2 + 8 * (k % 4 / 2); };
  std::vector<int64_t> seen(kk, 0);
  for (int64_t k = 0; k < kk; ++k)
    ++seen[column(k)];
  REQUIRE(std::count(seen.begin(), seen.end(), 1) == kk);  // a permutation
  dsl::Kernel k("interleaved");
  auto a = k.input("a", DType::F32, {m, kk});
  auto b = k.input("b", DType::F32, {kk, n});
  auto c = k.output("c", DType::F32, {m, n});
  c.store({0, 0}, dsl::dot(a.load({0, 0}, {m, kk}), b.load({0, 0}, {kk, n}), k.full({m, n}, 0.0, DType::F32),
                           {.a_k_interleaved = true}));
  Buf ab(DType::F32, m * kk), bb(DType::F32, kk * n), permuted(DType::F32, kk * n), cb(DType::F32, m * n);
  fill(ab, rng, -1, 1);
  fill(bb, rng, -1, 1);
  for (int64_t q = 0; q < kk; ++q)  // row q holds b's row column(q)
    for (int64_t j = 0; j < n; ++j)
      permuted.set(q * n + j, bb.get(column(q) * n + j));
  for (bool storedInOrder : {true, false}) {
    std::vector<HostArg> args{ab.arg(), (storedInOrder ? permuted : bb).arg(), cb.arg()};
    interpret(k, args);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < kk; ++q)
          s += ab.get(i * kk + q) * bb.get(q * n + j);
        worst = std::max(worst, std::abs(cb.get(i * n + j) - s));
      }
    if (storedInOrder)
      CHECK(worst < 1e-5);
    else
      CHECK(worst > 1e-2);
  }
  // K must be whole 16-wide groups.
  dsl::Kernel bad("interleaved_k8");
  auto x = bad.input("x", DType::F32, {16, 8});
  auto y = bad.input("y", DType::F32, {8, 16});
  REQUIRE_THROWS_WITH(dsl::dot(x.load({0, 0}, {16, 8}), y.load({0, 0}, {8, 16}), bad.full({16, 16}, 0.0, DType::F32),
                               {.a_k_interleaved = true}),
                      Catch::Contains("multiple of 16"));
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


TEST_CASE("interpreter: DSL double-buffered async copies feed a dot and elementwise math", "[interpreter]") {
  std::mt19937 rng(26);
  for (auto dots : {test::RingDots::Mma, test::RingDots::Wgmma, test::RingDots::WgmmaAsync})
  for (int64_t rows : {int64_t(1), int64_t(17), int64_t(100)}) {
    INFO("rows=" << rows << " dots " << int(dots));
    test::AsyncRingShape sh;
    sh.rows = rows;
    dsl::Kernel k = test::async_ring_kernel(sh, DType::BF16, dots);
    const int64_t Q = sh.kQ, step = sh.kStep, D = sh.kDimBlock;
    Buf qb(DType::BF16, Q * sh.dim), kb(DType::BF16, sh.batch * rows * sh.heads * sh.dim);
    Buf cb(DType::F32, sh.batch * Q * step), sb(DType::F32, sh.batch * step * D);
    fill(qb, rng, -1, 1);
    fill(kb, rng, -1, 1);
    std::vector<HostArg> args{qb.arg(), kb.arg(), cb.arg(), sb.arg()};
    interpret(k, args);
    std::vector<double> c, s;
    test::async_ring_reference(sh, qb.values(), kb.values(), c, s);
    for (size_t i = 0; i < c.size(); ++i)
      REQUIRE(std::fabs(cb.get(i) - c[i]) <= 1e-5 * (1 + std::fabs(c[i])));
    for (size_t i = 0; i < s.size(); ++i)
      REQUIRE(std::fabs(sb.get(i) - s[i]) <= 1e-6 * (1 + std::fabs(s[i])));
  }
}

TEST_CASE("interpreter: DSL block atomic adds of dot results from overlapping programs", "[interpreter]") {
  std::mt19937 rng(27);
  for (int64_t rows : {int64_t(1), int64_t(100), int64_t(300)}) {
    INFO("rows=" << rows);
    test::BlockAtomicShape sh;
    sh.rows = rows;
    dsl::Kernel k = test::block_atomic_kernel(sh, DType::BF16);
    const int64_t n = sh.kBlock, kk = sh.kK;
    Buf ab(DType::BF16, n * kk), bb(DType::BF16, sh.programs * kk * n), ob(DType::F32, 2 * rows * 3 * n);
    fill(ab, rng, -1, 1);
    fill(bb, rng, -1, 1);
    fill(ob, rng, -1, 1);
    std::vector<double> ref = test::block_atomic_reference(sh, ab.values(), bb.values(), ob.values());
    std::vector<HostArg> args{ab.arg(), bb.arg(), ob.arg()};
    interpret(k, args);
    for (size_t i = 0; i < ref.size(); ++i)
      REQUIRE(std::fabs(ob.get(i) - ref[i]) <= 1e-5 * (1 + std::fabs(ref[i])));
  }
}

TEST_CASE("interpreter: DSL block atomic adds check dtype and block shape", "[interpreter]") {
  dsl::Kernel k("bad_atomic_add");
  auto half = k.output("half", DType::BF16, {8, 64});
  auto out = k.output("out", DType::F32, {2, 8, 64});
  dsl::Value t = k.full({8, 64}, 1.0, DType::F32);
  CHECK_THROWS_WITH(half.atomic_add({0, 0}, {8, 64}, t.to(DType::BF16)),
                    Catch::Contains("atomic_add half: adds into f32, f64, i32 or i64 tensors, got bf16"));
  CHECK_THROWS_WITH(out.atomic_add({0, 0, 0}, {8, 64}, t), Catch::Contains("must have the tensor's rank 3"));
  CHECK_THROWS_WITH(out.atomic_add({0, 0, 0}, {1, 4, 64}, t), Catch::Contains("needs the block [1, 4, 64] without its unit dims, [4, 64]"));
  CHECK_THROWS_WITH(out.atomic_add({0, 0, 0}, {1, 8, 64}, t.to(DType::F64)), Catch::Contains("does not match the tensor dtype f32"));
}

TEST_CASE("interpreter: a tensor argument of the right size but another shape is refused, as a launch refuses it",
          "[interpreter]") {
  dsl::Kernel k("copy_rows");
  auto x = k.input("x", DType::F32, {4, 6});
  auto y = k.output("y", DType::F32, {4, 6});
  k.grid(4);
  dsl::Value row = k.program_id(0);
  y.store({row, 0}, x.load({row, 0}, {1, 8}));
  Buf xb(DType::F32, 24), yb(DType::F32, 24);
  const std::vector<int64_t> right{4, 6}, wrong{6, 4};
  std::vector<HostArg> ok{HostArg::tensor(xb.arg().data, xb.arg().bytes, right), yb.arg()};
  interpret(k, ok);  // the same bytes with the declared shape (or none given) run
  std::vector<HostArg> bad{HostArg::tensor(xb.arg().data, xb.arg().bytes, wrong), yb.arg()};
  REQUIRE_THROWS_WITH(interpret(k, bad), Catch::Contains("argument 'x' has shape [6, 4], expected [4, 6]"));
}
