// GPU numerics: DSL kernels run on the device (through the JIT and its caches) and on
// the interpreter, both checked against float64 host references, on odd shapes.
#include <catch2/catch.hpp>

#include "common/AsyncRingKernel.h"
#include "common/BlockAtomicKernel.h"
#include "common/DeviceRuns.h"
#include "common/Numerics.h"
#include "common/SemaphoreKernel.h"
#include "common/TmaReduceKernel.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <cmath>
#include <functional>
#include <atomic>
#include <random>
#include <thread>

using namespace tokamax;
using namespace tokamax::dsl;

namespace {

using test::random_values;

struct Buffer {
  DType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DType d, const std::vector<double> &values) : dtype(d), bytes(test::to_bytes(values, d)) {}
  Buffer(DType d, size_t n) : dtype(d), bytes(n * dtype_size(d), 0xA5) {} // poisoned
  std::vector<double> values() const { return test::from_bytes(bytes, dtype); }
};


/// Runs the kernel on the device and on the interpreter with copies of `buffers`;
/// returns {device outputs, interpreter outputs} for buffer `out`.
std::pair<std::vector<double>, std::vector<double>> runBoth(const Kernel &k, std::vector<Buffer> buffers, size_t out) {
  std::vector<Buffer> host = buffers;
  auto args = [](std::vector<Buffer> &bs) {
    std::vector<HostArg> a;
    for (auto &b : bs)
      a.push_back(HostArg::tensor(b.bytes.data(), b.bytes.size()));
    return a;
  };
  auto deviceArgs = args(buffers), hostArgs = args(host);
  run_on_device(k, deviceArgs, Device::get());
  interpret(k, hostArgs);
  return {buffers[out].values(), host[out].values()};
}

} // namespace

TEST_CASE("math functions on the device match float64", "[gpu]") {
  using Fn = std::function<Value(Value)>;
  struct Case { const char *name; Fn fn; std::function<double(double)> ref; double tol; bool positive; };
  std::vector<Case> cases = {
      {"exp", [](Value x) { return exp(x); }, [](double x) { return std::exp(x); }, 1e-5, false},
      {"exp2", [](Value x) { return exp2(x); }, [](double x) { return std::exp2(x); }, 1e-5, false},
      {"log", [](Value x) { return log(x); }, [](double x) { return std::log(x); }, 1e-5, true},
      {"sqrt", [](Value x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 1e-6, true},
      {"rsqrt", [](Value x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 1e-5, true},
      {"tanh", [](Value x) { return tanh(x); }, [](double x) { return std::tanh(x); }, 2e-3, false},
      {"erf", [](Value x) { return erf(x); }, [](double x) { return std::erf(x); }, 1e-5, false},
      {"abs", [](Value x) { return abs(x); }, [](double x) { return std::fabs(x); }, 0, false},
      {"where/max", [](Value x) { return where(x > 0.5, maximum(x, 1.0), minimum(x * x, 2.0)); },
       [](double x) { return x > 0.5 ? std::max(x, 1.0) : std::min(x * x, 2.0); }, 1e-6, false},
  };
  for (int64_t n : {1, 17, 1000, 4097}) {
    for (const Case &c : cases) {
      Kernel k("math", {4});
      auto x = k.input("x", DType::F32, {n});
      auto y = k.output("y", DType::F32, {n});
      k.grid(cdiv(n, 256));
      Value off = k.program_id(0) * 256;
      y.store({off}, c.fn(x.load({off}, {256})));
      auto in = random_values(n, DType::F32, 11, 0.05, 3.0);
      if (c.positive)
        for (auto &v : in) v = std::fabs(v);
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = c.ref(in[i]);
      auto [dev, interp] = runBoth(k, {Buffer(DType::F32, in), Buffer(DType::F32, n)}, 1);
      INFO(c.name << " n=" << n);
      CHECK(test::rel_error(dev, ref) <= std::max(c.tol, 1e-7));
      CHECK(test::rel_error(interp, ref) <= std::max(c.tol, 1e-7));
    }
  }
}

TEST_CASE("exp2 with a share of registers on the FMA pipes matches float64 on the device", "[gpu]") {
  // Every kind of argument the polynomial meets: random, integers (fraction 0), just
  // below an integer, the clamp's edges, -inf, NaN.
  std::vector<double> in = random_values(2000, DType::F32, 12, 0.05, 40.0);
  for (double v : {0.0, -1.0, -0.999999, 1.0, 3.5, -126.0, -126.5, -127.0, -127.5, -200.0, 20.0, -0.0})
    in.push_back(v);
  in.push_back(-INFINITY);
  in.push_back(std::nan(""));
  const int64_t n = static_cast<int64_t>(in.size());
  for (auto [count, period] : {std::pair{1, 8}, {3, 8}, {8, 8}, {1, 1}, {1, 2}}) {
    Kernel k("exp2_share", {4});
    auto x = k.input("x", DType::F32, {n});
    auto y = k.output("y", DType::F32, {n});
    k.grid(cdiv(n, 1024));
    Value off = k.program_id(0) * 1024;
    y.store({off}, exp2(x.load({off}, {1024}), count, period));
    auto [dev, interp] = runBoth(k, {Buffer(DType::F32, in), Buffer(DType::F32, n)}, 1);
    INFO(count << " of " << period);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = std::exp2(in[i]);
      bool ok;
      if (std::isnan(in[i]))
        ok = std::isnan(dev[i]) && std::isnan(interp[i]);
      else if (in[i] <= -127)
        ok = dev[i] == 0.0;  // ex2.approx.ftz flushes, the polynomial's 2^-127 is 0
      else if (in[i] < -126)
        ok = dev[i] >= 0 && dev[i] < 1.2e-38;  // subnormal or flushed
      else
        ok = std::fabs(dev[i] - ref) <= 1e-4 * ref && std::fabs(interp[i] - ref) <= 1e-7 * ref;
      if (!ok && bad++ < 5)
        UNSCOPED_INFO("x " << in[i] << ": device " << dev[i] << ", interpreter " << interp[i] << ", 2^x " << ref);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("casts between dtypes on the device", "[gpu]") {
  std::vector<DType> types = {DType::BF16, DType::F16, DType::F32, DType::F64, DType::I8, DType::I32, DType::I64, DType::Bool,
                              DType::F8E4M3, DType::F8E5M2};
  const int64_t n = 1000;
  for (DType from : types) {
    for (DType to : types) {
      Kernel k("cast");
      auto x = k.input("x", from, {n});
      auto y = k.output("y", to, {n});
      k.grid(cdiv(n, 512));
      Value off = k.program_id(0) * 512;
      y.store({off}, x.load({off}, {512}).to(to));
      bool toInt = to == DType::I8 || to == DType::I32 || to == DType::I64;
      auto in = random_values(n, from, 5, 0.05, toInt || from == DType::I8 ? 100.0 : 3.0);
      std::vector<double> ref(n);
      uint8_t one[8];
      for (int64_t i = 0; i < n; ++i) {
        store_from_double(to, one, in[i]);
        ref[i] = load_as_double(to, one);
      }
      auto [dev, interp] = runBoth(k, {Buffer(from, in), Buffer(to, n)}, 1);
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      CHECK(test::rel_error(dev, ref) <= 1e-6);
      CHECK(test::rel_error(interp, ref) <= 1e-6);
    }
  }
}

TEST_CASE("reductions over each axis, across warps, on the device", "[gpu]") {
  for (auto [rows, cols, warps] : {std::tuple<int64_t, int64_t, int>{17, 1000, 4}, {1, 4097, 8}, {1000, 17, 4}, {3, 64, 16}}) {
    for (int axis : {0, 1}) {
      for (int kind = 0; kind < 4; ++kind) {
        int64_t br = 1, bc = 1;
        while (br < rows) br *= 2;
        while (bc < cols) bc *= 2;
        if (br * bc > 8192) (axis == 1 ? br : bc) = std::max<int64_t>(1, 8192 / (axis == 1 ? bc : br));
        Kernel k("reduce", {warps});
        auto x = k.input("x", DType::F32, {rows, cols});
        int64_t outLen = axis == 1 ? rows : cols;
        auto y = k.output("y", kind == 3 ? DType::I32 : DType::F32, {outLen});
        int64_t blockOut = axis == 1 ? br : bc;
        k.grid(cdiv(outLen, blockOut));
        Value p = k.program_id(0) * blockOut;
        double pad = kind == 0 ? 0.0 : kind == 2 ? INFINITY : -INFINITY;
        Value t = axis == 1 ? x.load({p, 0}, {br, bc}, pad) : x.load({0, p}, {br, bc}, pad);
        Value r = kind == 0 ? t.sum(axis) : kind == 1 ? t.max(axis) : kind == 2 ? t.min(axis) : t.argmax(axis);
        y.store({p}, r);
        auto in = random_values(rows * cols, DType::F32, 9);
        std::vector<double> ref(outLen);
        for (int64_t o = 0; o < outLen; ++o) {
          int64_t len = axis == 1 ? cols : rows;
          double acc = kind == 0 ? 0 : kind == 2 ? INFINITY : -INFINITY;
          int64_t arg = 0;
          for (int64_t i = 0; i < len; ++i) {
            double v = axis == 1 ? in[o * cols + i] : in[i * cols + o];
            if (kind == 0) acc += v;
            else if (kind == 2) acc = std::min(acc, v);
            else if (v > acc) { acc = v; arg = i; }
          }
          ref[o] = kind == 3 ? double(arg) : acc;
        }
        auto [dev, interp] = runBoth(k, {Buffer(DType::F32, in), Buffer(kind == 3 ? DType::I32 : DType::F32, outLen)}, 1);
        INFO("rows=" << rows << " cols=" << cols << " axis=" << axis << " kind=" << kind << " warps=" << warps);
        CHECK(test::rel_error(dev, ref) <= 1e-5);
        CHECK(test::rel_error(interp, ref) <= 1e-5);
      }
    }
  }
}

TEST_CASE("shapes, gathers, atomics and loops on the device", "[gpu]") {
  const int64_t n = 1000;
  // Transposed copy through expand/broadcast/trans, a gather with a mask, a loop.
  Kernel k("mix");
  auto x = k.input("x", DType::F32, {32, 64});
  auto idx = k.input("idx", DType::I32, {n});
  auto y = k.output("y", DType::F32, {64, 32});
  auto g = k.output("g", DType::F32, {n});
  auto total = k.output("total", DType::F32, {1});
  k.grid(4);
  Value pid = k.program_id(0);
  Value t = x.load({0, 0}, {32, 64});
  y.store({0, 0}, t.trans() + t.trans().sum(1).expand(1) * 0.0 + 1.0);
  Value off = pid * 256 + k.arange(0, 256);
  Value mask = off < Value(int64_t(n));
  Value gathered = load(x.ptr() + load(idx.ptr() + off, mask, 0), mask, 0.0);
  auto acc = k.loop(0, 3, 1, {gathered}, [&](Value i, std::vector<Value> c) { return std::vector<Value>{c[0] + 1.0}; });
  store(g.ptr() + off, acc[0], mask);
  atomic_add(total.ptr() + (off * 0), acc[0], mask);
  auto in = random_values(32 * 64, DType::F32, 3);
  std::vector<double> ind(n);
  std::mt19937 rng(4);
  for (auto &v : ind) v = double(rng() % (32 * 64));
  std::vector<double> refY(64 * 32), refG(n);
  double refTotal = 0;
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 64; ++c) refY[c * 32 + r] = in[r * 64 + c] + 1.0;
  for (int64_t i = 0; i < n; ++i) { refG[i] = in[int64_t(ind[i])] + 3.0; refTotal += refG[i]; }
  std::vector<Buffer> buffers = {Buffer(DType::F32, in), Buffer(DType::I32, ind), Buffer(DType::F32, 64 * 32),
                                 Buffer(DType::F32, n), Buffer(DType::F32, std::vector<double>{0.0})};
  auto [devY, interpY] = runBoth(k, buffers, 2);
  CHECK(test::rel_error(devY, refY) <= 1e-6);
  CHECK(test::rel_error(interpY, refY) <= 1e-6);
  auto [devG, interpG] = runBoth(k, buffers, 3);
  CHECK(test::rel_error(devG, refG) <= 1e-6);
  auto [devT, interpT] = runBoth(k, buffers, 4);
  CHECK(std::fabs(devT[0] - refTotal) <= 1e-4 * std::fabs(refTotal));
  CHECK(std::fabs(interpT[0] - refTotal) <= 1e-4 * std::fabs(refTotal));
}

TEST_CASE("double-buffered async copies into shared memory feed dots on the device", "[gpu]") {
  // Ragged row counts (zero-filled past the end), a head dim that is not a power of two
  // (zero-filled columns), bf16 and f16; c from dots reading the ring, s elementwise.
  // The dots on mma.sync, on wgmma (sm_90a), and on wgmma issued before the sum.
  for (auto dots : {test::RingDots::Mma, test::RingDots::Wgmma, test::RingDots::WgmmaAsync})
  for (DType dtype : {DType::BF16, DType::F16})
    for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 64}, {17, 40}, {100, 40}, {1000, 64}}) {
      INFO(dtype_name(dtype) << " rows " << rows << " dim " << dim << " dots " << int(dots));
      test::AsyncRingShape sh;
      sh.rows = rows;
      sh.dim = dim;
      Kernel k = test::async_ring_kernel(sh, dtype, dots);
      auto q = random_values(sh.kQ * dim, dtype, 31, 0.05, 1.0);
      auto kv = random_values(sh.batch * rows * sh.heads * dim, dtype, 32, 0.05, 1.0);
      std::vector<double> refC, refS;
      test::async_ring_reference(sh, q, kv, refC, refS);
      std::vector<Buffer> buffers = {Buffer(dtype, q), Buffer(dtype, kv), Buffer(DType::F32, refC.size()),
                                     Buffer(DType::F32, refS.size())};
      auto [devC, interpC] = runBoth(k, buffers, 2);
      CHECK(test::rel_error(devC, refC) <= 1e-5);
      CHECK(test::rel_error(interpC, refC) <= 1e-5);
      auto [devS, interpS] = runBoth(k, buffers, 3);
      CHECK(test::rel_error(devS, refS) <= 1e-6);
      CHECK(test::rel_error(interpS, refS) <= 1e-6);
    }
}

TEST_CASE("block atomic adds of dot results from overlapping programs on the device", "[gpu]") {
  // Rows that end inside the first block, inside the last, and past every block.
  for (DType dtype : {DType::BF16, DType::F16})
    for (int64_t rows : {int64_t(1), int64_t(100), int64_t(300)}) {
      INFO(dtype_name(dtype) << " rows " << rows);
      test::BlockAtomicShape sh;
      sh.rows = rows;
      Kernel k = test::block_atomic_kernel(sh, dtype);
      auto a = random_values(sh.kBlock * sh.kK, dtype, 41);
      auto b = random_values(sh.programs * sh.kK * sh.kBlock, dtype, 42);
      auto init = random_values(2 * rows * 3 * sh.kBlock, DType::F32, 43);
      std::vector<double> ref = test::block_atomic_reference(sh, a, b, init);
      std::vector<Buffer> buffers = {Buffer(dtype, a), Buffer(dtype, b), Buffer(DType::F32, init)};
      auto [dev, interp] = runBoth(k, buffers, 2);
      CHECK(test::rel_error(dev, ref) <= 1e-5);
      CHECK(test::rel_error(interp, ref) <= 1e-5);
    }
}

TEST_CASE("programs append to a log in a semaphore's order on the device", "[gpu][semaphore]") {
  // Program p waits until the counter holds p: the log comes out in program order
  // whichever order the SMs start them in. At most 64 programs, so that all are resident
  // at once on any GPU we test (a waiting program holds its SM).
  for (int64_t programs : {int64_t(1), int64_t(7), int64_t(64)})
    for (int num_warps : {1, 4, 8}) {
      INFO(programs << " programs, " << num_warps << " warps");
      Kernel k = test::semaphore_log_kernel(programs, num_warps);
      std::vector<int32_t> sem(6, 0), log(static_cast<size_t>(programs + 1), 0);
      std::vector<HostArg> args{HostArg::tensor(sem.data(), sem.size() * 4),
                                HostArg::tensor(log.data(), log.size() * 4)};
      run_on_device(k, args, Device::get());
      CHECK(log == test::semaphore_log_expected(programs));
      CHECK(sem == std::vector<int32_t>{0, 0, 0, 0, 0, static_cast<int32_t>(programs)});
    }
}

TEST_CASE("TMA reduce-adds of dot results from overlapping programs on the device", "[gpu][tma]") {
  if (!gpu_test::sm90a_or_skip("TensorArg::tma_reduce_add"))
    return;
  // Blocks over the bottom and right edges, neighbours overlapping; a tensor every block
  // but the first misses.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{100, 72}, {150, 108}, {1, 4}}) {
    INFO("out [" << rows << ", " << cols << "]");
    test::TmaReduceShape sh;
    sh.rows = rows, sh.cols = cols;
    Kernel k = test::tma_reduce_kernel(sh, DType::BF16);
    auto a = random_values(sh.kBlock * sh.kK, DType::BF16, 51);
    auto b = random_values(sh.programs * sh.kK * sh.kBlock, DType::BF16, 52);
    auto init = random_values(rows * cols, DType::F32, 53);
    std::vector<double> ref = test::tma_reduce_reference(sh, a, b, init);
    std::vector<Buffer> buffers = {Buffer(DType::BF16, a), Buffer(DType::BF16, b), Buffer(DType::F32, init)};
    auto [dev, interp] = runBoth(k, buffers, 2);
    CHECK(test::rel_error(dev, ref) <= 1e-5);
    CHECK(test::rel_error(interp, ref) <= 1e-5);
  }
}

TEST_CASE("example ops on the device at odd and large shapes", "[gpu]") {
  Stream stream = Stream::create(Device::get());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {17, 1000}, {1000, 4097}, {1048576, 64}, {16384, 4096}}) {
    for (DType dtype : {DType::BF16, DType::F32}) {
      auto in = random_values(rows * cols, dtype, 21);
      Buffer xb(dtype, in), yb(dtype, rows * cols);
      Tensor x = Tensor::empty({rows, cols}, dtype), y = Tensor::empty({rows, cols}, dtype);
      x.copy_from_host(xb.bytes.data(), xb.bytes.size());
      y.copy_from_host(yb.bytes.data(), yb.bytes.size());
      softmax(x, y, stream);
      stream.synchronize();
      y.copy_to_host(yb.bytes.data(), yb.bytes.size());
      std::vector<double> ref(rows * cols);
      for (int64_t r = 0; r < rows; ++r) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, in[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) s += std::exp(in[r * cols + c] - m);
        for (int64_t c = 0; c < cols; ++c) ref[r * cols + c] = std::exp(in[r * cols + c] - m) / s;
      }
      INFO("softmax " << rows << "x" << cols << " " << dtype_name(dtype));
      CHECK(test::rel_error(yb.values(), ref) <= (dtype == DType::F32 ? 1e-5 : 1e-2));
      // gelu and vector_add on the same data, viewed flat.
      Buffer gb(dtype, rows * cols);
      gelu(x, y, stream);
      stream.synchronize();
      y.copy_to_host(gb.bytes.data(), gb.bytes.size());
      for (int64_t i = 0; i < rows * cols; ++i) ref[i] = 0.5 * in[i] * (1 + std::erf(in[i] / std::sqrt(2.0)));
      CHECK(test::rel_error(gb.values(), ref) <= (dtype == DType::F32 ? 1e-5 : 1e-2));
      vector_add(x, x, y, stream);
      copy(y, y, stream);
      stream.synchronize();
      y.copy_to_host(gb.bytes.data(), gb.bytes.size());
      for (int64_t i = 0; i < rows * cols; ++i) ref[i] = 2 * in[i];
      CHECK(test::rel_error(gb.values(), ref) <= 1e-6);
    }
  }
}

TEST_CASE("the JIT compiles once and then hits memory", "[gpu]") {
  Stream stream = Stream::create(Device::get());
  Tensor x = Tensor::empty({333}, DType::F32), y = Tensor::empty({333}, DType::F32);
  JitStats before = Jit::instance().stats();
  gelu(x, y, stream);
  gelu(x, y, stream);
  stream.synchronize();
  JitStats after = Jit::instance().stats();
  CHECK(after.compiles + after.disk_hits - before.compiles - before.disk_hits == 1);
  // Bad input is a clear error, not a launch.
  Tensor wrong = Tensor::empty({334}, DType::F32);
  CHECK_THROWS_WITH(gelu(x, wrong, stream), Catch::Contains("shape"));
}

TEST_CASE("many threads asking for one new kernel compile it once", "[gpu]") {
  Device &device = Device::get();
  Tensor x = Tensor::empty({4099}, DType::F32), y = Tensor::empty({4099}, DType::F32);
  JitStats before = Jit::instance().stats();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      try {
        Stream stream = Stream::create(device);
        gelu(x, y, stream);
        stream.synchronize();
      } catch (...) {
        ++failures;
      }
    });
  for (auto &t : threads)
    t.join();
  JitStats after = Jit::instance().stats();
  CHECK(failures == 0);
  CHECK(after.compiles + after.disk_hits - before.compiles - before.disk_hits == 1);
}

TEST_CASE("must-hit mode refuses to compile", "[gpu]") {
  Stream stream = Stream::create(Device::get());
  // A shape no earlier run has put in the disk cache.
  int64_t cols = 10001 + 2 * int64_t(std::random_device{}() % 10000);
  Tensor x = Tensor::empty({cols}, DType::F32), y = Tensor::empty({cols}, DType::F32);
  setenv("TOKAMAX_CACHE_MUST_HIT", "1", 1);
  CHECK_THROWS_WITH(softmax(x, y, stream), Catch::Contains("TOKAMAX_CACHE_MUST_HIT"));
  unsetenv("TOKAMAX_CACHE_MUST_HIT");
  softmax(x, y, stream); // compiles now
  stream.synchronize();
}

TEST_CASE("kernel keys whose hashes collide get their own kernels", "[gpu]") {
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  const int64_t n = 300;
  auto affine = [&](const char *name, double mul, double add) {
    Kernel k(name, {.num_warps = 4});
    TensorArg x = k.input("x", DType::F32, {n});
    TensorArg y = k.output("y", DType::F32, {n});
    k.grid(1);
    y.store({0}, x.load({0}, {512}) * mul + add);
    return k;
  };
  // Two different keys forced onto one hash: a hit must compare the whole key.
  const uint64_t hash = 0x5eed;
  KernelKey twice = KernelKey("collision", {n, 1}).with_hash(hash);
  KernelKey plusOne = KernelKey("collision", {n, 2}).with_hash(hash);
  REQUIRE(twice.hash() == plusOne.hash());
  REQUIRE_FALSE(twice == plusOne);
  std::vector<double> input = random_values(n, DType::F32, 11);
  std::vector<float> floats(input.begin(), input.end());
  const int64_t shape[] = {n};
  Tensor x = Tensor::from_host_floats(floats, shape, DType::F32, device);
  Tensor y = Tensor::empty({n}, DType::F32, device);
  auto run = [&](const KernelKey &key, const Kernel &k) {
    const LoadedKernel &loaded = Jit::instance().get_ir(key, device, [&] { return k.ir(); });
    CHECK(Jit::instance().find(key, device) == &loaded);
    loaded.launch({x.view(), y.view()}, stream.handle());
    stream.synchronize();
    return y.to_host_doubles();
  };
  std::vector<double> a = run(twice, affine("times_two", 2.0, 0.0));
  std::vector<double> b = run(plusOne, affine("plus_one", 1.0, 1.0));
  CHECK(Jit::instance().find(twice, device) != Jit::instance().find(plusOne, device));
  for (int64_t i = 0; i < n; ++i) {
    CHECK(a[i] == static_cast<double>(static_cast<float>(2.0 * static_cast<float>(input[i]))));
    CHECK(b[i] == static_cast<double>(static_cast<float>(static_cast<float>(input[i]) + 1.0f)));
  }
}
