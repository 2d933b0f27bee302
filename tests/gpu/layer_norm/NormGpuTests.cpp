// GPU numerics of layer_norm / rms_norm (forward and VJP) through the device path
// (op -> implementation choice -> JIT -> launch), against float64 references computed
// here row by row, at odd and large shapes. "[gpu-bench]" (hidden) times them.
#include <catch2/catch.hpp>

#include "common/Numerics.h"
#include "unit/layer_norm/NormTestUtil.h"

#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tokamax;

namespace {

/// Typed host bytes of one tensor.
struct Host {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  Host(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)), bytes(size_t(numel()) * dtype_size(d), 0xA5) {}
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t v : shape)
      n *= v;
    return n;
  }
  double at(int64_t i) const { return load_as_double(dtype, bytes.data() + size_t(i) * dtype_size(dtype)); }
  void set(int64_t i, double v) { store_from_double(dtype, bytes.data() + size_t(i) * dtype_size(dtype), v); }
};

/// Runs body(begin, end) over [0, n) in contiguous pieces of pieceSize(n) on the host's cores (the float64
/// references of the large shapes would take minutes on one). `body` must not throw or
/// use Catch2's assertions (not thread-safe); callers merge per-piece results afterwards.
int64_t pieceSize(int64_t n) {
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  return std::max<int64_t>(1, (n + workers - 1) / workers);
}
template <class Body> void parallelPieces(int64_t n, Body body) {
  const int64_t per = pieceSize(n);
  std::vector<std::thread> threads;
  for (int64_t begin = 0; begin < n; begin += per)
    threads.emplace_back(body, begin, std::min(n, begin + per));
  for (std::thread &t : threads)
    t.join();
}

/// Non-zero values of either sign with magnitudes in [lo, hi], rounded to `d`. Each
/// 64 Ki-element block has its own generator (seeded from `seed` and the block), so the
/// values do not depend on the number of cores.
Host randomHost(DType d, std::vector<int64_t> shape, uint32_t seed, double lo = 0.05, double hi = 3.0) {
  Host h(d, std::move(shape));
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (h.numel() + kBlock - 1) / kBlock;
  parallelPieces(blocks, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      std::mt19937 rng(seed * 1000003u + uint32_t(blk));
      std::uniform_real_distribution<double> dist(lo, hi);
      for (int64_t i = blk * kBlock; i < std::min(h.numel(), (blk + 1) * kBlock); ++i)
        h.set(i, (rng() & 1 ? 1 : -1) * dist(rng));
    }
  });
  return h;
}

Tensor upload(const Host &h) {
  Tensor t = Tensor::empty(h.shape, h.dtype);
  t.copy_from_host(h.bytes.data(), h.bytes.size());
  return t;
}

/// Output tensors start poisoned (0xA5 bytes) so unwritten elements show.
Tensor poisoned(DType d, std::vector<int64_t> shape) { return upload(Host(d, std::move(shape))); }

Host download(const Tensor &t) {
  Host h(t.dtype(), std::vector<int64_t>(t.shape().begin(), t.shape().end()));
  t.copy_to_host(h.bytes.data(), h.bytes.size());
  return h;
}

/// Accumulates ||got - ref|| / ||ref||.
/// With `scale`: the error is measured against max(||ref||, 1e-2 ||scale||), for dx, whose
/// terms (dy * scale * rstd) can cancel to far less than their size (rows of one element)
/// where any f32 evaluation loses digits.
struct Err {
  double num = 0, den = 0, scale = 0;
  void add(double got, double ref, double size = 0) {
    num += (got - ref) * (got - ref);
    den += ref * ref;
    scale += size * size;
  }
  void merge(const Err &other) {
    num += other.num;
    den += other.den;
    scale += other.scale;
  }
  double value() const {
    double e = std::sqrt(num) / std::max({std::sqrt(den), 1e-2 * std::sqrt(scale), 1e-30});
    return std::isnan(e) ? INFINITY : e;
  }
};

struct Result {
  Err y, mean, rstd, dx, dscale, doffset;
};

/// Runs forward + VJP on the device (last axis), then checks every row's residuals, y and
/// dx on sampled rows, and dscale / doffset over all rows against float64.
Result runAndCheck(bool layer, DType d, int64_t rows, int64_t n, std::optional<DType> paramType, Stream &stream,
                   const NormOptions &fwd = {}, const NormOptions &vjp = {}) {
  const DType compute = d == DType::F64 ? DType::F64 : DType::F32;
  Host x = randomHost(d, {rows, n}, 11), dy = randomHost(d, {rows, n}, 12);
  std::optional<Host> scale, offset;
  if (paramType) {
    scale = randomHost(*paramType, {n}, 13, 0.5, 1.5);
    offset = randomHost(*paramType, {n}, 14);
  }
  Tensor xt = upload(x), dyt = upload(dy), yt = poisoned(d, {rows, n}), dxt = poisoned(d, {rows, n});
  Tensor mt = poisoned(compute, {rows}), rt = poisoned(compute, {rows});
  DType pt = paramType.value_or(DType::F32);
  Tensor dst = poisoned(pt, {n}), dot = poisoned(pt, {n});
  std::optional<Tensor> st, ot;
  if (scale) {
    st = upload(*scale);
    ot = upload(*offset);
  }
  const TensorView *sv = st ? &st->view() : nullptr, *ov = ot ? &ot->view() : nullptr;
  if (layer) {
    layer_norm(xt, sv, ov, yt, stream, fwd, &mt.view(), &rt.view());
    layer_norm_vjp(dyt, xt, sv, mt, rt, dxt, &dst.view(), &dot.view(), stream, vjp);
  } else {
    rms_norm(xt, sv, yt, stream, fwd, &rt.view());
    rms_norm_vjp(dyt, xt, sv, rt, dxt, &dst.view(), stream, vjp);
  }
  stream.synchronize();
  Host y = download(yt), dx = download(dxt), m = download(mt), r = download(rt), ds = download(dst), dof = download(dot);

  // Each piece of rows accumulates its own errors and parameter-gradient sums.
  struct Piece {
    Result res;
    std::vector<double> refDs, refDo;
  };
  const int64_t perPiece = pieceSize(rows);
  std::vector<Piece> pieces(size_t((rows + perPiece - 1) / perPiece));
  const int64_t sampleStride = std::max<int64_t>(1, rows / 4096);
  parallelPieces(rows, [&](int64_t first, int64_t last) {
    Piece &p = pieces[size_t(first / perPiece)];
    Result &res = p.res;
    p.refDs.assign(size_t(n), 0);
    p.refDo.assign(size_t(n), 0);
    std::vector<double> xr(n), gr(n);
    for (int64_t row = first; row < last; ++row) {
      const int64_t base = row * n;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) {
        xr[j] = x.at(base + j);
        gr[j] = dy.at(base + j);
        mean += xr[j];
      }
      mean = layer ? mean / double(n) : 0.0;
      for (int64_t j = 0; j < n; ++j)
        var += (xr[j] - mean) * (xr[j] - mean);
      double rstd = 1 / std::sqrt(var / double(n) + fwd.epsilon);
      if (layer)
        res.mean.add(m.at(row), mean);
      res.rstd.add(r.at(row), rstd);
      bool sampled = row % sampleStride == 0 || row == rows - 1;
      double c1 = 0, c2 = 0;
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (xr[j] - mean) * rstd, s = scale ? scale->at(j) : 1.0;
        p.refDs[j] += gr[j] * xhat;
        p.refDo[j] += gr[j];
        c1 += gr[j] * s * xhat;
        c2 += gr[j] * s;
        if (sampled)
          res.y.add(y.at(base + j), xhat * s + (layer && offset ? offset->at(j) : 0.0));
      }
      if (!sampled)
        continue;
      c1 /= double(n);
      c2 /= double(n);
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (xr[j] - mean) * rstd, s = scale ? scale->at(j) : 1.0;
        res.dx.add(dx.at(base + j), rstd * (gr[j] * s - (layer ? c2 : 0.0) - xhat * c1), rstd * gr[j] * s);
      }
    }
  });
  Result res;
  std::vector<double> refDs(n, 0), refDo(n, 0);
  for (const Piece &p : pieces) {
    for (auto [into, from] : {std::pair{&res.y, &p.res.y}, {&res.mean, &p.res.mean}, {&res.rstd, &p.res.rstd},
                              {&res.dx, &p.res.dx}})
      into->merge(*from);
    for (int64_t j = 0; j < n; ++j) {
      refDs[j] += p.refDs[j];
      refDo[j] += p.refDo[j];
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    res.dscale.add(ds.at(j), refDs[j]);
    if (layer)
      res.doffset.add(dof.at(j), refDo[j]);
  }
  return res;
}

void checkResult(const Result &r, bool layer, DType d, std::optional<DType> paramType) {
  const DType compute = d == DType::F64 ? DType::F64 : DType::F32;
  double tol = tolerance(d), ptol = std::max(tolerance(paramType.value_or(DType::F32)), 1e-4);
  CHECK(r.y.value() <= tol);
  if (layer)
    CHECK(r.mean.value() <= tolerance(compute));
  CHECK(r.rstd.value() <= tolerance(compute));
  CHECK(r.dx.value() <= std::max(tol, d == DType::F64 ? 1e-10 : 1e-4));
  CHECK(r.dscale.value() <= (d == DType::F64 ? 1e-10 : ptol));
  if (layer)
    CHECK(r.doffset.value() <= (d == DType::F64 ? 1e-10 : ptol));
}

} // namespace

TEST_CASE("norms on the device match float64 at odd and large shapes", "[gpu][norm]") {
  Stream stream = Stream::create(Device::get());
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {1000, 4097}, {1048576, 64}, {16384, 8192}})
    for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F64})
      for (bool layer : {true, false}) {
        INFO((layer ? "layer_norm " : "rms_norm ") << rows << "x" << n << " " << dtype_name(d));
        // Auto: tile for bf16 / f16 / f32, reference for f64.
        BoundArgs args = bind_rms_norm(ArgSpec{{rows, n}, d}, std::nullopt, ArgSpec{{rows, n}, d}, std::nullopt, -1, 1e-5);
        CHECK(rms_norm_op().select(args, std::nullopt, Device::get().arch()).name() ==
              (d == DType::F64 ? "reference" : "tile"));
        Result r = runAndCheck(layer, d, rows, n, d, stream);
        INFO("y " << r.y.value() << " mean " << r.mean.value() << " rstd " << r.rstd.value() << " dx " << r.dx.value()
                  << " dscale " << r.dscale.value() << " doffset " << r.doffset.value());
        checkResult(r, layer, d, d);
      }
}

TEST_CASE("norm parameter gradients over a million bf16 rows are accurate and deterministic", "[gpu][norm]") {
  Stream stream = Stream::create(Device::get());
  for (bool layer : {true, false}) {
    INFO((layer ? "layer_norm" : "rms_norm"));
    Result r = runAndCheck(layer, DType::BF16, 1048576, 64, DType::F32, stream);
    INFO("dscale " << r.dscale.value() << " doffset " << r.doffset.value());
    CHECK(r.dscale.value() <= 1e-3);
    if (layer)
      CHECK(r.doffset.value() <= 1e-3);
    checkResult(r, layer, DType::BF16, DType::F32);
  }
  // Same inputs, same bits.
  const int64_t rows = 1048576, n = 64;
  Tensor x = upload(randomHost(DType::BF16, {rows, n}, 1)), dy = upload(randomHost(DType::BF16, {rows, n}, 2));
  Tensor y = Tensor::empty({rows, n}, DType::BF16), dx = Tensor::empty({rows, n}, DType::BF16);
  Tensor m = Tensor::empty({rows}, DType::F32), r = Tensor::empty({rows}, DType::F32);
  layer_norm(x, nullptr, nullptr, y, stream, {}, &m.view(), &r.view());
  std::vector<std::vector<uint8_t>> bits;
  for (int run = 0; run < 3; ++run) {
    Tensor ds = Tensor::empty({n}, DType::F32), dof = Tensor::empty({n}, DType::F32);
    layer_norm_vjp(dy, x, nullptr, m, r, dx, &ds.view(), &dof.view(), stream);
    stream.synchronize();
    bits.push_back(download(ds).bytes);
  }
  CHECK(bits[0] == bits[1]);
  CHECK(bits[1] == bits[2]);
}

TEST_CASE("norm implementations and variants on the device", "[gpu][norm]") {
  Stream stream = Stream::create(Device::get());
  struct Variant {
    const char *what;
    int64_t rows, n;
    DType d;
    std::optional<DType> param;
    NormOptions fwd, vjp;
  };
  NormOptions ref;
  ref.implementation = "reference";
  NormOptions tileLoopFwd, tileLoopVjp;
  tileLoopFwd.implementation = tileLoopVjp.implementation = "tile";
  tileLoopFwd.config = Config{{"block_rows", 1}, {"block_cols", 1024}, {"num_warps", 4}};
  tileLoopVjp.config = Config{{"block_rows", 1}, {"block_cols", 1024}, {"num_warps", 4}, {"programs", 100}};
  // The staged VJP: rows copied into shared memory, whole (one program a row) and in 2
  // or 4 parts on adjacent programs.
  NormOptions staged, stagedHalves, stagedQuarters;
  staged.implementation = stagedHalves.implementation = stagedQuarters.implementation = "tile";
  staged.config = Config{{"block_rows", 1}, {"block_cols", 2048}, {"num_warps", 8}, {"staged", 1}, {"programs", 66}};
  stagedHalves.config = Config(*staged.config).set("row_split", 2);
  stagedQuarters.config = Config(*staged.config).set("num_warps", 16).set("row_split", 4);
  // The looping VJP in row chunks: each chunk's coefficient and dx kernels back to back,
  // the later chunks adding to the partial rows (1000 rows in chunks of 96: a partial
  // last chunk of 40 rows, fewer programs than the first's).
  NormOptions chunked;
  chunked.implementation = "tile";
  chunked.config = Config{{"block_rows", 1}, {"block_cols", 2048}, {"num_warps", 4}, {"programs", 49}, {"chunk_rows", 96}};
  std::vector<Variant> variants = {
      {"tile VJP looping in row chunks (16384 columns)", 1000, 16384, DType::BF16, DType::F32, {}, chunked},
      {"tile VJP looping in row chunks (12000 columns)", 517, 12000, DType::F16, std::nullopt, {}, chunked},
      {"tile VJP staged (16376 columns)", 300, 16376, DType::BF16, DType::F32, {}, staged},
      {"tile VJP staged in halves (12000 columns)", 1000, 12000, DType::BF16, DType::F32, {}, stagedHalves},
      {"tile VJP staged in quarters (16384 columns)", 517, 16384, DType::F16, DType::F32, {}, stagedQuarters},
      {"reference bf16", 1000, 4097, DType::BF16, DType::BF16, ref, ref},
      {"reference f32, no parameters", 300, 17, DType::F32, std::nullopt, ref, ref},
      {"tile looping (explicit)", 1000, 4097, DType::BF16, DType::F32, tileLoopFwd, tileLoopVjp},
      {"tile looping (heuristic, 20000 columns)", 256, 20000, DType::BF16, DType::BF16, {}, {}},
      {"tile looping (heuristic, 65536 columns)", 64, 65536, DType::F16, DType::F32, {}, {}},
      {"tile VJP looping (9000 columns)", 512, 9000, DType::F32, DType::F32, {}, {}},
      {"tile, f32 parameters with bf16 x", 4096, 1024, DType::BF16, DType::F32, {}, {}},
      {"reference beyond the tile limit", 8, 100000, DType::F32, DType::F32, {}, {}},
  };
  for (const Variant &v : variants)
    for (bool layer : {true, false}) {
      INFO(v.what << " " << (layer ? "layer_norm " : "rms_norm ") << v.rows << "x" << v.n << " " << dtype_name(v.d));
      Result r = runAndCheck(layer, v.d, v.rows, v.n, v.param, stream, v.fwd, v.vjp);
      INFO("y " << r.y.value() << " dx " << r.dx.value() << " dscale " << r.dscale.value());
      checkResult(r, layer, v.d, v.param);
    }
}

TEST_CASE("norms over a non-last axis on the device", "[gpu][norm]") {
  Stream stream = Stream::create(Device::get());
  for (DType d : {DType::BF16, DType::F32, DType::F64}) {
    for (auto [shape, axis] : {std::pair<std::vector<int64_t>, int>{{64, 300, 33}, 1}, {{1000, 8, 16}, 0}, {{2, 3, 4096, 5}, 2}}) {
      INFO(dtype_name(d) << " axis " << axis);
      int64_t n = shape[axis], inner = 1, outer = 1;
      for (int i = 0; i < int(shape.size()); ++i) {
        if (i < axis)
          outer *= shape[i];
        if (i > axis)
          inner *= shape[i];
      }
      const DType compute = d == DType::F64 ? DType::F64 : DType::F32;
      Host x = randomHost(d, shape, 21), dy = randomHost(d, shape, 22), s = randomHost(d, {n}, 23, 0.5, 1.5),
           b = randomHost(d, {n}, 24);
      Tensor xt = upload(x), dyt = upload(dy), st = upload(s), bt = upload(b);
      Tensor yt = poisoned(d, shape), dxt = poisoned(d, shape), mt = poisoned(compute, {outer * inner}),
             rt = poisoned(compute, {outer * inner}), dst = poisoned(d, {n}), dbt = poisoned(d, {n});
      NormOptions o;
      o.axis = axis;
      layer_norm(xt, &st.view(), &bt.view(), yt, stream, o, &mt.view(), &rt.view());
      layer_norm_vjp(dyt, xt, &st.view(), mt, rt, dxt, &dst.view(), &dbt.view(), stream, o);
      stream.synchronize();
      Host y = download(yt), dx = download(dxt), ds = download(dst), db = download(dbt);
      Err ey, edx, eds, edb;
      std::vector<double> refDs(n, 0), refDb(n, 0);
      for (int64_t oi = 0; oi < outer; ++oi)
        for (int64_t ii = 0; ii < inner; ++ii) {
          auto at = [&](int64_t j) { return (oi * n + j) * inner + ii; };
          double mean = 0, var = 0, c1 = 0, c2 = 0;
          for (int64_t j = 0; j < n; ++j)
            mean += x.at(at(j));
          mean /= double(n);
          for (int64_t j = 0; j < n; ++j)
            var += (x.at(at(j)) - mean) * (x.at(at(j)) - mean);
          double rstd = 1 / std::sqrt(var / double(n) + o.epsilon);
          for (int64_t j = 0; j < n; ++j) {
            double xhat = (x.at(at(j)) - mean) * rstd;
            ey.add(y.at(at(j)), xhat * s.at(j) + b.at(j));
            c1 += dy.at(at(j)) * s.at(j) * xhat;
            c2 += dy.at(at(j)) * s.at(j);
            refDs[j] += dy.at(at(j)) * xhat;
            refDb[j] += dy.at(at(j));
          }
          c1 /= double(n);
          c2 /= double(n);
          for (int64_t j = 0; j < n; ++j) {
            double xhat = (x.at(at(j)) - mean) * rstd;
            edx.add(dx.at(at(j)), rstd * (dy.at(at(j)) * s.at(j) - c2 - xhat * c1));
          }
        }
      for (int64_t j = 0; j < n; ++j) {
        eds.add(ds.at(j), refDs[j]);
        edb.add(db.at(j), refDb[j]);
      }
      INFO("y " << ey.value() << " dx " << edx.value() << " dscale " << eds.value() << " doffset " << edb.value());
      CHECK(ey.value() <= tolerance(d));
      CHECK(edx.value() <= std::max(tolerance(d), d == DType::F64 ? 1e-10 : 1e-4));
      CHECK(eds.value() <= std::max(tolerance(d), d == DType::F64 ? 1e-10 : 1e-4));
      CHECK(edb.value() <= std::max(tolerance(d), d == DType::F64 ? 1e-10 : 1e-4));
    }
  }
}

// Timing (hidden: tokamax-gpu-tests "[gpu-bench]"): every config of each op's search space
// at the benchmark shapes, with the heuristic's time and the best, in GB/s of the bytes a
// kernel must move (x + y, or dy + x + dx); then the host cost of a cached call.
TEST_CASE("norm VJP in row chunks timed against the heuristic", "[.][gpu-bench][chunk_rows]") {
  // 4096x16384 bf16, f32 parameters (the VJP's open miss: 55 % of copy): the heuristic
  // (looping: x and dy read twice from DRAM) against the same config in row chunks
  // (the second read from L2), alternating, twice; GB/s counts dy and x read, dx written.
  Stream stream = Stream::create(Device::get());
  const int64_t rows = 4096, n = 16384;
  const DType d = DType::BF16, pd = DType::F32;
  Tensor x = upload(randomHost(d, {rows, n}, 1)), dy = upload(randomHost(d, {rows, n}, 2));
  Tensor s = upload(randomHost(pd, {n}, 3, 0.5, 1.5)), b = upload(randomHost(pd, {n}, 4));
  Tensor y = Tensor::empty({rows, n}, d), dx = Tensor::empty({rows, n}, d);
  Tensor m = Tensor::empty({rows}, DType::F32), r = Tensor::empty({rows}, DType::F32);
  Tensor ds = Tensor::empty({n}, pd), db = Tensor::empty({n}, pd);
  layer_norm(x, &s.view(), &b.view(), y, stream, {}, &m.view(), &r.view());
  const ArgSpec xs{{rows, n}, d}, ps{{n}, pd}, rs{{rows}, DType::F32};
  const double bytes = double(rows * n * dtype_size(d)) * 3;
  for (bool layer : {true, false}) {
    const BoundArgs args =
        layer ? bind_layer_norm_vjp(xs, xs, ps, rs, rs, xs, ps, ps, -1) : bind_rms_norm_vjp(xs, xs, ps, rs, xs, ps, -1);
    const Implementation &tile = find_op(args.op)->implementation("tile");
    const Config heuristic = tile.heuristic(args);
    std::vector<Config> configs{heuristic};
    for (int64_t chunk : {256, 512, 768})
      configs.push_back(Config(heuristic).set("chunk_rows", chunk));
    for (int round = 0; round < 2; ++round)
      for (const Config &c : configs) {
        NormOptions o;
        o.implementation = "tile";
        o.config = c;
        Timings t = time_on_stream(stream, [&] {
          if (layer)
            layer_norm_vjp(dy, x, &s.view(), m, r, dx, &ds.view(), &db.view(), stream, o);
          else
            rms_norm_vjp(dy, x, &s.view(), r, dx, &ds.view(), stream, o);
        }, 3, 20);
        std::printf("%-13s %lldx%lld %s %.4f ms %.0f GB/s\n", args.op.c_str(), (long long)rows, (long long)n,
                    c.to_json().c_str(), t.median, bytes / t.median / 1e6);
        std::fflush(stdout);
      }
  }
}

TEST_CASE("norm timings and config search", "[.][gpu-bench]") {
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  // TOKAMAX_NORM_SEARCH_SHAPES="16384x4096,4096x16384" picks the shapes searched.
  std::vector<std::pair<int64_t, int64_t>> shapes{{16384, 8192}, {1048576, 64}, {32768, 1024}, {4096, 32768}};
  if (const char *list = std::getenv("TOKAMAX_NORM_SEARCH_SHAPES")) {
    shapes.clear();
    std::istringstream in(list);
    for (std::string item; std::getline(in, item, ',');) {
      const size_t x = item.find('x');
      REQUIRE(x != std::string::npos);
      shapes.emplace_back(std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1)));
    }
  }
  for (auto [rows, n] : shapes)
    for (bool layer : {true, false})
      for (bool vjp : {false, true}) {
        const DType d = DType::BF16;
        Tensor x = upload(randomHost(d, {rows, n}, 1)), dy = upload(randomHost(d, {rows, n}, 2));
        // f32 parameters, as tokamax-bench and the targets have them.
        const DType pd = DType::F32;
        Tensor s = upload(randomHost(pd, {n}, 3, 0.5, 1.5)), b = upload(randomHost(pd, {n}, 4));
        Tensor y = Tensor::empty({rows, n}, d), dx = Tensor::empty({rows, n}, d);
        Tensor m = Tensor::empty({rows}, DType::F32), r = Tensor::empty({rows}, DType::F32);
        Tensor ds = Tensor::empty({n}, pd), db = Tensor::empty({n}, pd);
        if (layer)
          layer_norm(x, &s.view(), &b.view(), y, stream, {}, &m.view(), &r.view());
        else
          rms_norm(x, &s.view(), y, stream, {}, &r.view());
        ArgSpec xs{{rows, n}, d}, ps{{n}, pd}, rs{{rows}, DType::F32};
        BoundArgs args = !vjp ? (layer ? bind_layer_norm(xs, ps, ps, xs, std::nullopt, std::nullopt, -1, 1e-5)
                                       : bind_rms_norm(xs, ps, xs, std::nullopt, -1, 1e-5))
                              : (layer ? bind_layer_norm_vjp(xs, xs, ps, rs, rs, xs, ps, ps, -1)
                                       : bind_rms_norm_vjp(xs, xs, ps, rs, xs, ps, -1));
        const Op &op = !vjp ? (layer ? layer_norm_op() : rms_norm_op()) : (layer ? layer_norm_vjp_op() : rms_norm_vjp_op());
        const Implementation &impl = op.select(args, std::nullopt, device.arch());
        double bytes = double(rows * n * dtype_size(d)) * (vjp ? 3 : 2);
        auto run = [&](const Config &c) {
          NormOptions o;
          o.config = c;
          o.implementation = impl.name();
          if (!vjp && layer)
            layer_norm(x, &s.view(), &b.view(), y, stream, o);
          else if (!vjp)
            rms_norm(x, &s.view(), y, stream, o);
          else if (layer)
            layer_norm_vjp(dy, x, &s.view(), m, r, dx, &ds.view(), &db.view(), stream, o);
          else
            rms_norm_vjp(dy, x, &s.view(), r, dx, &ds.view(), stream, o);
        };
        Config heuristic = impl.heuristic(args);
        double heuristicMs = 0;
        std::vector<std::pair<double, Config>> timed;
        for (const Config &c : impl.search_space(args)) {
          Timings t = time_on_stream(stream, [&] { run(c); }, 3, 20);
          if (c == heuristic)
            heuristicMs = t.median;
          timed.emplace_back(t.median, c);
        }
        std::sort(timed.begin(), timed.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
        std::printf("%-14s %7lldx%-6lld %-9s heuristic %s %.4f ms %.0f GB/s | best", op.name().c_str(), (long long)rows,
                    (long long)n, impl.name().c_str(), heuristic.to_json().c_str(), heuristicMs,
                    bytes / heuristicMs / 1e6);
        for (size_t i = 0; i < std::min<size_t>(3, timed.size()); ++i)
          std::printf(" %s %.4f ms %.0f GB/s%s", timed[i].second.to_json().c_str(), timed[i].first,
                      bytes / timed[i].first / 1e6, i + 1 < std::min<size_t>(3, timed.size()) ? ";" : "");
        std::printf("\n");
      }
  // Host cost of a cached call (bind, choice, config, JIT lookup, launch).
  Tensor x = Tensor::empty({64, 1024}, DType::BF16), y = Tensor::empty({64, 1024}, DType::BF16);
  layer_norm(x, nullptr, nullptr, y, stream);
  stream.synchronize();
  const int calls = 2000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i)
    layer_norm(x, nullptr, nullptr, y, stream);
  auto t1 = std::chrono::steady_clock::now();
  stream.synchronize();
  std::printf("layer_norm host cost per cached call: %.2f us\n",
              std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
}
