// matmul on the device (tensor cores through tile.dot -> mma.sync) against float64 host
// references: M, N, K from {1, 17, 127, 1000, 4097}, all four transposes, bf16, f16 and
// f32 (tf32) inputs, bias and alpha, and f64 through the reference kernel; the hopper
// kernel (TMA + wgmma) on every shape whose rows suit TMA, with the auto choice and
// the NotSupported reasons for the rest. Also a DSL
// kernel chaining two dots through reductions and elementwise math on the accumulator
// layout (attention-like), which exercises slices of mma layouts and mma -> operand
// conversions.
#include <catch2/catch.hpp>

#include "common/Numerics.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/compiler/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <optional>
#include <tuple>
#include <vector>

using namespace tokamax;

namespace {

/// Values uniform in [-2, 2], exactly representable in `dtype`.
std::vector<double> randomValues(size_t n, DType dtype, uint32_t seed) {
  return test::uniform_values(n, dtype, seed, -2.0, 2.0);
}

Tensor upload(const std::vector<double> &values, std::vector<int64_t> shape, DType dtype) {
  std::vector<uint8_t> bytes = test::to_bytes(values, dtype);
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from_host(bytes.data(), bytes.size());
  return t;
}


/// Tolerance on the relative (Frobenius) error of c, by input and output dtype.
/// tf32 keeps 10 mantissa bits of each f32 operand: one product is off by up to ~1e-3
/// relative, and with K that small nothing averages out (a bias can also cancel part
/// of the result), so very short K gets a looser bound.
double tolerance(DType in, DType out, int64_t k = 1 << 20) {
  if (in == DType::F32 && out == DType::F32 && k < 16)
    return 1e-2;
  if (out == DType::F64)
    return 1e-12;
  if (out == DType::BF16)
    return 1e-2;
  if (out == DType::F16)
    return 2e-3;
  if (in == DType::F32)
    return 2e-3;  // f32 inputs run as tf32
  // fp8 wgmma accumulates with fewer bits than f32: 1.2e-3 at K = 4096 on the H200.
  if (is_fp8(in))
    return std::max(1e-3, 3e-5 * std::sqrt(double(k)));
  // 16-bit products are exact; f32 accumulation error grows like sqrt(K) (wgmma adds
  // each k16 group at the largest exponent: 1.8e-5 at K = 16384 on the H200).
  return std::max(1e-5, 3e-7 * std::sqrt(double(k)));
}

struct Case {
  int64_t m, n, k;
  DType dtype, out;
  bool ta, tb, bias;
  double alpha = 1.0;
  std::string impl = "tile";
  std::optional<MatmulConfig> config = {};
};

/// Runs matmul on the device; returns the relative error against float64.
double runCase(const Case &c, Stream &stream) {
  uint32_t seed = static_cast<uint32_t>(c.m * 7919 + c.n * 131 + c.k);
  std::vector<double> a = randomValues(c.m * c.k, c.dtype, seed), b = randomValues(c.k * c.n, c.dtype, seed + 1);
  std::vector<double> bias = randomValues(c.n, c.out, seed + 2);
  std::vector<double> as = test::stored(a, c.m, c.k, c.ta);
  std::vector<double> bs = test::stored(b, c.k, c.n, c.tb);
  Tensor ta = upload(as, c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k}, c.dtype);
  Tensor tb = upload(bs, c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n}, c.dtype);
  Tensor tbias = upload(bias, {c.n}, c.out);
  Tensor tc = upload(std::vector<double>(c.m * c.n, NAN), {c.m, c.n}, c.out);  // poisoned
  MatmulOptions options;
  options.trans_a = c.ta;
  options.trans_b = c.tb;
  options.alpha = c.alpha;
  options.implementation = c.impl;
  options.config = c.config;
  if (c.bias)
    options.bias = tbias.view();
  matmul(ta, tb, tc, stream, options);
  stream.synchronize();
  std::vector<double> got = tc.to_host_doubles();
  return test::rel_error(got, test::matmul_reference(a, b, c.m, c.n, c.k, c.alpha, c.bias ? &bias : nullptr));
}

std::string describe(const Case &c) {
  return c.impl + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " +
         std::string(dtype_name(c.dtype)) + "->" + std::string(dtype_name(c.out)) + (c.ta ? " a^T" : "") +
         (c.tb ? " b^T" : "") + (c.bias ? " +bias" : "");
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;

} // namespace

TEST_CASE("matmul on the device: odd shapes, all transposes, bf16/f16/f32", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  // Host references stay below ~3e8 multiply-adds per case.
  std::vector<Shape> shapes{{1, 1, 1},       {17, 127, 1},   {127, 17, 17},  {1, 127, 127},
                            {127, 127, 127}, {4097, 127, 17}, {17, 4097, 127}, {127, 17, 4097},
                            {1, 4097, 1000}, {1000, 1, 4097}, {1000, 1000, 17}, {4097, 17, 1000}};
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : shapes) {
        Case c{m, n, k, dtype, dtype, bool(t & 1), bool(t & 2), (m + n + k + t) % 3 == 0};
        double err = runCase(c, stream);
        INFO(describe(c) << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
}

TEST_CASE("tile matmul on the device through the cp.async ring: ragged shapes, configs", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  // Rows of a and b that are whole 16-byte chunks (multiples of 8 16-bit or 4 f32
  // elements) stream through the ring; M, N and K still leave partial blocks and slices.
  // Where a transpose makes a row odd (M = 1 stored [K, M]) the masked path runs instead.
  std::vector<Shape> shapes{{8, 8, 8},          {1, 136, 264},     {1000, 1000, 1000},
                            {4104, 136, 520},   {136, 4104, 72},   {520, 264, 4104}};
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : shapes) {
        Case c{m, n, k, dtype, t == 2 ? DType::F32 : dtype, bool(t & 1), bool(t & 2), (m + t) % 3 == 0, 0.5};
        double err = runCase(c, stream);
        INFO(describe(c) << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // Every block shape, warp count, K slice and ring depth of the search space.
  int index = 0;
  for (auto [bm, bn, warps] : {Shape{128, 128, 4}, {128, 128, 8}, {128, 256, 8}, {256, 128, 8}, {64, 128, 4},
                               {64, 64, 4}, {16, 16, 1}})
    for (int64_t bk : {32, 64})
      for (int64_t stages : {2, 3, 4}) {
        MatmulConfig config = default_config({});
        config.block_m = bm, config.block_n = bn, config.num_warps = static_cast<int>(warps);
        config.block_k = bk, config.num_stages = stages;
        int t = index++ % 4;
        Case c{1000, 520, 1000, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 1, 1.0, "tile", config};
        double err = runCase(c, stream);
        INFO(describe(c) << " block " << bm << "x" << bn << "x" << bk << " warps " << warps << " stages " << stages
                         << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
}

TEST_CASE("matmul on the device: 1000^3, f32 output, alpha and bias", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  for (DType dtype : {DType::BF16, DType::F16, DType::F32})
    for (DType out : {dtype, DType::F32}) {
      if (dtype == DType::F32 && out != dtype)
        continue;
      Case c{1000, 1000, 1000, dtype, out, out == DType::F32, false, true, 0.5};
      double err = runCase(c, stream);
      INFO(describe(c) << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
  // Large N and M tiles with a long K loop and every transpose.
  for (int t = 0; t < 4; ++t) {
    Case c{4097, 129, 4097, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 2, -2.0};
    double err = runCase(c, stream);
    INFO(describe(c) << ": relative error " << err);
    CHECK(err < tolerance(c.dtype, c.out, c.k));
  }
}

TEST_CASE("matmul on the device: f64 through the reference kernel", "[gpu][matmul]") {
  Stream stream = Stream::create(Device::get());
  for (auto [m, n, k] : std::vector<Shape>{{1, 1, 1}, {17, 127, 1000}, {127, 17, 17}})
    for (int t = 0; t < 4; ++t) {
      Case c{m, n, k, DType::F64, DType::F64, bool(t & 1), bool(t & 2), t == 1, 1.25, "reference"};
      double err = runCase(c, stream);
      INFO(describe(c) << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
}

TEST_CASE("dot results feed reductions, elementwise math and a second dot on the device", "[gpu][matmul]") {
  using namespace tokamax::dsl;
  for (auto [m, n, d, warps] : std::vector<std::tuple<int64_t, int64_t, int64_t, int>>{
           {64, 64, 32, 4}, {16, 32, 16, 1}, {32, 16, 64, 2}, {128, 64, 64, 8}}) {
    // o = softmax(q k^T) v, cs = column sums of q k^T.
    Kernel k("attention_block", {warps});
    auto q = k.input("q", DType::BF16, {m, d});
    auto kt = k.input("k", DType::BF16, {n, d});
    auto v = k.input("v", DType::BF16, {n, d});
    auto o = k.output("o", DType::F32, {m, d});
    auto cs = k.output("cs", DType::F32, {n});
    Value s = dot(q.load({0, 0}, {m, d}), kt.load({0, 0}, {n, d}).trans(), 0.0);
    Value p = exp(s - s.max(1).expand(1));
    cs.store({0}, s.sum(0));
    o.store({0, 0}, dot(p.to(DType::BF16), v.load({0, 0}, {n, d}), 0.0) / p.sum(1).expand(1));

    std::vector<double> qv = randomValues(m * d, DType::BF16, 1), kv = randomValues(n * d, DType::BF16, 2),
                        vv = randomValues(n * d, DType::BF16, 3);
    auto bytes = [](const std::vector<double> &x, DType t) {
      std::vector<uint8_t> b(x.size() * dtype_size(t));
      for (size_t i = 0; i < x.size(); ++i)
        store_from_double(t, b.data() + i * dtype_size(t), x[i]);
      return b;
    };
    std::vector<uint8_t> qb = bytes(qv, DType::BF16), kb = bytes(kv, DType::BF16), vb = bytes(vv, DType::BF16),
                         ob(m * d * 4), cb(n * 4);
    std::vector<HostArg> args{HostArg::tensor(qb.data(), qb.size()), HostArg::tensor(kb.data(), kb.size()),
                              HostArg::tensor(vb.data(), vb.size()), HostArg::tensor(ob.data(), ob.size()),
                              HostArg::tensor(cb.data(), cb.size())};
    run_on_device(k, args, Device::get());

    std::vector<double> sref(m * n), pref(m * n), oref(m * d, 0.0), csref(n, 0.0), rowsum(m, 0.0);
    for (int64_t i = 0; i < m; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d; ++c)
          acc += qv[i * d + c] * kv[j * d + c];
        sref[i * n + j] = acc;
        mx = std::max(mx, acc);
        csref[j] += acc;
      }
      for (int64_t j = 0; j < n; ++j) {
        double e = std::exp(sref[i * n + j] - mx);
        rowsum[i] += e;
        uint8_t one[2];
        store_from_double(DType::BF16, one, e);  // p is rounded to bf16 before the second dot
        pref[i * n + j] = load_as_double(DType::BF16, one);
      }
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j)
          acc += pref[i * n + j] * vv[j * d + c];
        oref[i * d + c] = acc / rowsum[i];
      }
    }
    std::vector<double> og(m * d), cg(n);
    for (int64_t i = 0; i < m * d; ++i)
      og[i] = load_as_double(DType::F32, ob.data() + 4 * i);
    for (int64_t j = 0; j < n; ++j)
      cg[j] = load_as_double(DType::F32, cb.data() + 4 * j);
    INFO(m << "x" << n << "x" << d << " on " << warps << " warps");
    CHECK(test::rel_error(og, oref) < 2e-3);  // exp is approximate; p is bf16
    CHECK(test::rel_error(cg, csref) < 1e-5);
  }
}

namespace {
/// Whether the GPU is sm_90a; otherwise the test says it is skipped and why.
bool hopperOrSkip() {
  if (Device::get().arch() == "sm_90a")
    return true;
  WARN("skipped: the hopper kernel needs sm_90a, this GPU is " << Device::get().arch());
  return false;
}
MatmulSpec specOf(const Case &c) {
  MatmulSpec spec{c.m, c.n, c.k, c.dtype, c.out};
  spec.trans_a = c.ta, spec.trans_b = c.tb, spec.has_bias = c.bias;
  return spec;
}
} // namespace

TEST_CASE("hopper matmul on the device: odd shapes, all transposes, bf16/f16", "[gpu][matmul][hopper]") {
  if (!hopperOrSkip())
    return;
  Stream stream = Stream::create(Device::get());
  const int64_t sizes[] = {1, 8, 17, 127, 1000, 4097, 4104};
  int run = 0, refused = 0;
  for (DType dtype : {DType::BF16, DType::F16})
    for (int t = 0; t < 4; ++t)
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : {int64_t(8), int64_t(17), int64_t(1000), int64_t(4104)}) {
            if (m * n * k > int64_t(1e8) || (m * n * k) % 3 != (t + int(dtype)) % 3)
              continue;  // a third of the grid per transpose, host references stay small
            Case c{m, n, k, dtype, (m + n) % 2 ? DType::F32 : dtype, bool(t & 1), bool(t & 2), (m + n + k) % 2 == 0,
                   t == 3 ? -0.5 : 1.0, "hopper"};
            std::string why = hopper_unsupported(specOf(c));
            if (!why.empty()) {
              CHECK_THROWS_AS(runCase(c, stream), NotSupported);
              ++refused;
              continue;
            }
            double err = runCase(c, stream);
            INFO(describe(c) << ": relative error " << err);
            CHECK(err < tolerance(c.dtype, c.out, c.k));
            ++run;
          }
  INFO(run << " hopper cases run, " << refused << " refused");
  CHECK(run > 100);
  CHECK(refused > 10);
}

TEST_CASE("hopper matmul on the DSL's Hopper primitives (tma_ring) on the device", "[gpu][matmul][hopper][tma_ring]") {
  if (!hopperOrSkip())
    return;
  Stream stream = Stream::create(Device::get());
  // TMA copies into rings, mbarrier phases, async wgmma from shared memory, with and
  // without a producer warpgroup (Kernel::specialized_loop): ragged and length-1 shapes,
  // every transpose, bf16 and f16, one and two warpgroups, 2-4 stages, 128-, 64- and
  // 32-byte K slices, TMA and thread stores, K past several ring turns.
  int run = 0;
  for (int64_t m : {1, 17, 1000})
    for (int64_t n : {8, 200, 1000})
      for (int t = 0; t < 4; ++t, ++run) {
        const int64_t k = run % 3 == 0 ? 8 : (run % 3 == 1 ? 1000 : 4104);
        MatmulConfig config = default_hopper_config({});
        config.tma_ring = true, config.programs = 0;
        config.block_m = run % 2 ? 128 : 64, config.num_warps = run % 2 ? 8 : 4;
        config.block_n = run % 4 < 2 ? 128 : 256;
        config.block_k = 64 >> (run % 3);
        config.num_stages = 2 + run % 3;
        config.tma_store = run % 2 == 0;
        config.warp_specialize = (run / 2) % 2 == 0;  // a producer warpgroup, or every warp in order
        config.programs = config.warp_specialize && run % 3 == 0 ? 7 : 0;  // persistent: uneven shares
        bool ta = t & 1;
        Case c{ta ? m - m % 8 + 8 : m, n, k, run % 2 ? DType::F16 : DType::BF16, run % 3 ? DType::F32 : DType::BF16,
               ta, bool(t & 2), run % 5 == 0, run % 2 ? 1.0 : -0.5, "hopper", config};
        if (!hopper_unsupported(specOf(c)).empty())
          continue;
        double err = runCase(c, stream);
        INFO(describe(c) << " block " << config.block_m << "x" << config.block_n << "x" << config.block_k
                         << " stages " << config.num_stages
                         << (config.warp_specialize ? " warp-specialized" : " in order") << " programs "
                         << config.programs << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  CHECK(run == 36);
}

TEST_CASE("hopper matmul on the device: configs, long K, auto choice", "[gpu][matmul][hopper]") {
  if (!hopperOrSkip())
    return;
  Stream stream = Stream::create(Device::get());
  // Every block shape of the search space, ring depths 2-4, in order and warp-
  // specialized, one program per tile and persistent (7 programs: uneven shares, the
  // producer running into the next tile), every transpose, on a ragged shape.
  int index = 0;
  for (int64_t bn : {64, 128, 256})
    for (int64_t bm : {64, 128, 256})
      for (int variant = 0; variant < 4; ++variant, ++index) {
        MatmulConfig config = default_hopper_config({});
        config.block_m = bm, config.block_n = bn, config.num_stages = 2 + index % 3;
        config.num_warps = bm == 64 ? 4 : 8;
        config.warp_specialize = variant < 2;
        config.programs = variant % 2 ? 7 : 0;
        while (config.num_stages * (bm + bn) * 64 * 2 > 200 * 1024)
          --config.num_stages;
        // Every other config stores c through TMA where its strips fit beside the ring.
        config.tma_store = index % 2 == 0 && config.num_stages * (bm + bn) * 128 + 2 * bm * 128 + 2048 <= 227 * 1024;
        int t = (index + variant) % 4;
        Case c{1000, 520, 1000, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 1, 1.0, "hopper", config};
        double err = runCase(c, stream);
        INFO(describe(c) << " block " << bm << "x" << bn << " stages " << config.num_stages
                         << (config.tma_store ? " TMA stores" : "")
                         << (config.warp_specialize ? " warp-specialized" : " in order") << " programs "
                         << config.programs << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // 2-CTA clusters (b multicast): an odd number of block rows (the last pair's second
  // block lies below M), every transpose, one program per pair member and persistent
  // (uneven shares of pairs), both block shapes that pair along M.
  for (int t = 0; t < 4; ++t)
    for (int64_t programs : {0, 6, 132})
      for (int64_t bn : {128, 256}) {
        MatmulConfig config = default_hopper_config({});
        config.block_n = bn, config.cluster_m = 2, config.programs = programs;
        config.num_stages = bn == 256 ? 4 : 6;
        Case c{1096, 1040, 704, t % 2 ? DType::F16 : DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 1, 1.0,
               "hopper", config};
        double err = runCase(c, stream);
        INFO(describe(c) << " cluster 2, block N " << bn << ", programs " << programs << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // 32- and 16-wide K slices (64- and 32-byte swizzled K-major boxes; MN-major boxes of
  // 32 or 16 K rows): every transpose, f16 and bf16, ragged M, N and K (K = 1000 leaves
  // a partial slice), persistent and one program per tile, in order and warp-specialized.
  for (int64_t bk : {32, 16})
    for (int t = 0; t < 4; ++t)
      for (int variant = 0; variant < 2; ++variant) {
        MatmulConfig config = default_hopper_config({});
        config.block_k = bk, config.num_stages = 8;
        config.warp_specialize = variant == 0;
        config.programs = variant == 0 ? 132 : 0;
        Case c{1000, 520, 1000, t % 2 ? DType::F16 : DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 2, 1.0,
               "hopper", config};
        double err = runCase(c, stream);
        INFO(describe(c) << " block_k " << bk << (config.warp_specialize ? " warp-specialized" : " in order")
                         << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // A from registers (wgmma RS, a as [M, K]): ldmatrix through each swizzle width (K
  // slices of 128, 64 and 32 bytes), b either way, f16 and bf16, persistent and in order.
  for (int64_t bk : {64, 32, 16})
    for (int t = 0; t < 2; ++t)
      for (bool specialized : {true, false}) {
        MatmulConfig config = default_hopper_config({});
        config.block_k = bk, config.num_stages = bk == 64 ? 4 : 8, config.a_in_registers = true;
        config.warp_specialize = specialized;
        config.programs = specialized ? 132 : 0;
        Case c{1000, 520, 1000, t ? DType::F16 : DType::BF16, DType::F32, false, t == 1, t == 0, 1.0, "hopper",
               config};
        double err = runCase(c, stream);
        INFO(describe(c) << " block_k " << bk << " A in registers"
                         << (specialized ? " warp-specialized" : " in order") << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
      }
  // Registers rebalanced between the warp roles (each role its own copy of the tile
  // loop, setmaxnreg): every transpose, uneven persistent shares (5 or 12 programs for
  // 45 tiles of 128 x 256, 25 pairs in a cluster, 90 tiles of 64 x 256: a program count
  // of at least the tiles leaves no loop to split), SS and RS with 128-byte slices (which
  // only fit without serialization this way), a 2-CTA cluster, and 4 consumer warps
  // (split without setmaxnreg).
  for (int t = 0; t < 4; ++t)
    for (int variant = 0; variant < 4; ++variant) {
      MatmulConfig config = default_hopper_config({});
      config.rebalance_registers = true;
      config.programs = variant == 1 ? 5 : 12;
      config.a_in_registers = variant == 2 && !(t & 1);
      config.cluster_m = variant == 3 && t >= 2 ? 2 : 1;
      if (variant == 3 && t < 2)
        config.block_m = 64, config.num_warps = 4;
      Case c{1096, 1040, 704, t % 2 ? DType::F16 : DType::BF16, DType::F32, bool(t & 1), bool(t & 2), t == 3, 1.0,
             "hopper", config};
      double err = runCase(c, stream);
      INFO(describe(c) << " rebalanced registers, programs " << config.programs << ", block " << config.block_m
                       << (config.a_in_registers ? ", A in registers" : "")
                       << (config.cluster_m == 2 ? ", cluster 2" : "") << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
  // Short K: 2-8 slices, where the consumer loop is unrolled (a final wgmma.wait_group
  // once duplicated into lane-dependent branches there and hung), one program per tile
  // and persistent.
  for (int64_t k : {128, 192, 256, 320, 512})
    for (int64_t programs : {0, 5}) {
      MatmulConfig config = default_hopper_config({});
      config.programs = programs;
      Case c{520, 1000, k, DType::BF16, DType::BF16, false, k % 128 == 0, false, 1.0, "hopper", config};
      double err = runCase(c, stream);
      INFO(describe(c) << " programs " << programs << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
  // A long K loop (many trips around the ring) against float64.
  for (int t = 0; t < 4; ++t) {
    Case c{256, 384, 16384, DType::BF16, DType::F32, bool(t & 1), bool(t & 2), true, 2.0, "hopper"};
    double err = runCase(c, stream);
    INFO(describe(c) << ": relative error " << err);
    CHECK(err < tolerance(c.dtype, c.out, c.k));
  }
  // Auto picks hopper where it serves and falls back to tile where it does not.
  Case autoCase{127, 1000, 17, DType::BF16, DType::BF16, false, false, false, 1.0, ""};
  CHECK(runCase(autoCase, stream) < tolerance(DType::BF16, DType::BF16));
  autoCase.k = 1000;
  CHECK(runCase(autoCase, stream) < tolerance(DType::BF16, DType::BF16));
}

TEST_CASE("hopper matmul on the device: fp8 e4m3 and e5m2", "[gpu][matmul][hopper]") {
  if (!hopperOrSkip())
    return;
  Stream stream = Stream::create(Device::get());
  // a [M, K], b [N, K] (K-major, as wgmma reads 8-bit operands); odd M and N, K
  // multiples of 16 (16-byte rows), one of them long; bf16 and f32 out, bias, alpha.
  int run = 0;
  for (DType dtype : {DType::F8E4M3, DType::F8E5M2})
    for (auto [m, n, k] : std::vector<Shape>{{1, 17, 16}, {127, 1000, 4096}, {1000, 127, 1008}, {4097, 520, 528}})
      for (DType out : {DType::BF16, DType::F32}) {
        Case c{m, n, k, dtype, out, false, true, out == DType::F32, out == DType::F32 ? 0.75 : 1.0, "hopper"};
        double err = runCase(c, stream);
        INFO(describe(c) << ": relative error " << err);
        CHECK(err < tolerance(c.dtype, c.out, c.k));
        ++run;
      }
  CHECK(run == 16);
  // 64- and 32-wide fp8 K slices (64- and 32-byte swizzles), a partial last slice; A
  // from registers (wgmma RS) at 128 and 64 bytes.
  for (int64_t bk : {128, 64, 32})
    for (DType dtype : {DType::F8E4M3, DType::F8E5M2}) {
      MatmulConfig config = default_hopper_config({});
      config.block_k = bk, config.num_stages = bk == 128 ? 4 : 8;
      config.a_in_registers = bk != 32;
      Case c{1000, 520, 1008, dtype, DType::BF16, false, true, false, 1.0, "hopper", config};
      double err = runCase(c, stream);
      INFO(describe(c) << " block_k " << bk << ": relative error " << err);
      CHECK(err < tolerance(c.dtype, c.out, c.k));
    }
  // Auto: fp8 takes hopper where it can; MN-major b falls back to the reference kernel.
  Case autoCase{130, 72, 64, DType::F8E4M3, DType::F32, false, false, false, 1.0, ""};
  CHECK(runCase(autoCase, stream) < tolerance(DType::F8E4M3, DType::F32, 64));
  autoCase.impl = "hopper";
  CHECK_THROWS_AS(runCase(autoCase, stream), NotSupported);
}

TEST_CASE("matmul on the device: operands that are not 16-byte aligned get a clear error", "[gpu][matmul][hopper]") {
  if (!hopperOrSkip())
    return;
  // a starts 2 bytes into its buffer (a view one bf16 element in): every implementation
  // reads with 16-byte vectors (hopper with TMA), so auto and explicit choices both refuse it.
  Stream stream = Stream::create(Device::get());
  const int64_t m = 64, n = 64, k = 64;
  Tensor ta = upload(randomValues(m * k + 8, DType::BF16, 11), {m * k + 8}, DType::BF16);
  Tensor tb = upload(randomValues(k * n, DType::BF16, 12), {k, n}, DType::BF16);
  Tensor tc = upload(std::vector<double>(m * n, NAN), {m, n}, DType::F32);
  int64_t shapeA[2] = {m, k};
  TensorView va(ta.data() + 2, DType::BF16, shapeA, ta.view().device());
  CHECK_THROWS_WITH(matmul(va, tb, tc, stream), Catch::Contains("'a' must be 16-byte aligned"));
  for (const char *impl : {"hopper", "tile", "reference"}) {
    MatmulOptions options;
    options.implementation = impl;
    CHECK_THROWS_WITH(matmul(va, tb, tc, stream, options), Catch::Contains("'a' must be 16-byte aligned"));
  }
  // The same data 16 bytes in is aligned and multiplies correctly.
  TensorView aligned(ta.data() + 16, DType::BF16, shapeA, ta.view().device());
  std::vector<double> a = ta.to_host_doubles(), b = tb.to_host_doubles();
  matmul(aligned, tb, tc, stream);
  stream.synchronize();
  std::vector<double> viewed(a.begin() + 8, a.end());
  CHECK(test::rel_error(tc.to_host_doubles(), test::matmul_reference(viewed, b, m, n, k, 1.0)) < 1e-5);
}

TEST_CASE("matmul on the device refuses a null a or c before launching; the context stays usable",
          "[gpu][matmul]") {
  // Regression: a null pointer was launched, and CUDA_ERROR_ILLEGAL_ADDRESS then poisoned
  // the process's context.
  Stream stream = Stream::create(Device::get());
  Tensor a = Tensor::empty({64, 64}, DType::BF16), b = Tensor::empty({64, 64}, DType::BF16);
  Tensor c = Tensor::empty({64, 64}, DType::F32);
  const int64_t shape[] = {64, 64};
  TensorView nullA(0, DType::BF16, shape, a.view().device()), nullC(0, DType::F32, shape, c.view().device());
  CHECK_THROWS_WITH(matmul(nullA, b, c, stream), Catch::Contains("a has no data"));
  CHECK_THROWS_WITH(matmul(a, b, nullC, stream), Catch::Contains("c has no data"));
  CHECK_NOTHROW(matmul(a, b, c, stream));
  CHECK_NOTHROW(stream.synchronize());
}

TEST_CASE("matmul on the device: empty products; M or N = 0 is a no-op, K = 0 gives bias or 0", "[gpu][matmul]") {
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  const int64_t m = 37, n = 24;
  std::vector<float> biasValues(n), garbage(m * n, std::nanf(""));
  for (int64_t j = 0; j < n; ++j)
    biasValues[j] = 0.5f * float(j) - 3.0f;
  const int64_t biasShape[] = {n}, cShape[] = {m, n};
  Tensor bias = Tensor::from_host_floats(biasValues, biasShape, DType::F32, device);
  const int64_t aShape[] = {m, 0}, bShape[] = {0, n};
  TensorView a(0, DType::BF16, aShape, device.ordinal()), b(0, DType::BF16, bShape, device.ordinal());
  for (const char *impl : {"", "hopper", "tile", "reference"}) {
    INFO("implementation \"" << impl << "\"");
    MatmulOptions options;
    options.implementation = impl;
    Tensor c = Tensor::from_host_floats(garbage, cShape, DType::F32, device);
    matmul(a, b, c, stream, options);
    stream.synchronize();
    for (double v : c.to_host_doubles())
      CHECK(v == 0.0);
    c = Tensor::from_host_floats(garbage, cShape, DType::F32, device);
    options.bias = bias.view();
    matmul(a, b, c, stream, options);
    stream.synchronize();
    std::vector<double> got = c.to_host_doubles();
    for (int64_t i = 0; i < m * n; ++i)
      CHECK(got[i] == biasValues[i % n]);
    // No rows: a no-op (nothing launched, the context stays usable).
    const int64_t emptyA[] = {0, 16}, kb[] = {16, n}, emptyC[] = {0, n};
    Tensor bb = Tensor::empty(kb, DType::BF16, device);
    matmul(TensorView(0, DType::BF16, emptyA, device.ordinal()), bb, TensorView(0, DType::F32, emptyC, device.ordinal()),
           stream, options);
    CHECK_NOTHROW(stream.synchronize());
  }
}

TEST_CASE("hopper matmul with A in registers in order at block_k 16 (wrong under memcheck before the warp reconverged)",
          "[gpu][matmul][hopper]") {
  // Regression: thread 0's refill branch left warp 0 diverged at the next iteration's
  // .sync.aligned ldmatrix / wgmma; under compute-sanitizer memcheck these two cases
  // came out with relative error inf. scripts/gpu-sanitize.sh runs this case.
  if (!hopperOrSkip())
    return;
  Stream stream = Stream::create(Device::get());
  for (int t = 0; t < 2; ++t) {
    MatmulConfig config = default_hopper_config({});
    config.block_k = 16, config.num_stages = 8, config.a_in_registers = true;
    config.warp_specialize = false, config.programs = 0;
    Case c{1000, 520, 1000, t ? DType::F16 : DType::BF16, DType::F32, false, t == 1, t == 0, 1.0, "hopper", config};
    double err = runCase(c, stream);
    INFO(describe(c) << ": relative error " << err);
    CHECK(err < tolerance(c.dtype, c.out, c.k));
  }
}
