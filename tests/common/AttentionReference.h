//===- AttentionReference.h - float64 attention for the tests ------*- C++ -*-===//
//
// An independent float64 dot_product_attention, forward and VJP, written with plain
// loops from the formulas in Attention.h (none of the kernels' structure: no blocks, no
// online softmax), and the numeric helpers of the attention tests: random normal inputs,
// host buffers of any float dtype, and a comparison with dtype-aware tolerances that
// reports the worst element. (AttentionTestCase.h builds test cases on top.)
//
// Layouts (row-major, B = the batch dims flattened): q [B, T, N, H], k [B, S, K, H],
// v [B, S, K, Hv], out / dout [B, T, N, Hv], lse [B, N, T]; bias and mask broadcast to
// [B..., N, T, S], each dim 1 or full.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace attention_test {

using tokamax::DType;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline int64_t product(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

inline std::vector<int64_t> concat(std::vector<int64_t> head, std::initializer_list<int64_t> tail) {
  head.insert(head.end(), tail);
  return head;
}

/// The sizes of one call: batch dims B... (any number, none included), T queries, S keys,
/// N query heads, K kv heads, head dims H (q, k) and Hv (v, out).
struct Dims {
  std::vector<int64_t> batch;
  int64_t t = 1, s = 1, n = 1, k = 1, h = 32, hv = 32;

  int64_t rows() const { return product(batch); }
  std::vector<int64_t> qShape() const { return concat(batch, {t, n, h}); }
  std::vector<int64_t> kShape() const { return concat(batch, {s, k, h}); }
  std::vector<int64_t> vShape() const { return concat(batch, {s, k, hv}); }
  std::vector<int64_t> outShape() const { return concat(batch, {t, n, hv}); }
  std::vector<int64_t> lseShape() const { return concat(batch, {n, t}); }
  std::vector<int64_t> logitsShape() const { return concat(batch, {n, t, s}); }
  /// [B..., N, T, S] with the dims not named in `full` ("b", "n", "t", "s") set to 1.
  std::vector<int64_t> broadcastShape(const std::string &full) const {
    auto keep = [&](char c, int64_t d) { return full.find(c) != std::string::npos ? d : int64_t(1); };
    std::vector<int64_t> shape;
    for (int64_t d : batch)
      shape.push_back(keep('b', d));
    return concat(shape, {keep('n', n), keep('t', t), keep('s', s)});
  }
};

struct Window {
  std::optional<int64_t> left, right;  ///< key j visible to query i when i - left <= j <= i + right
};

struct Options {
  std::optional<double> scale;  ///< default 1 / sqrt(H)
  bool is_causal = false;
  std::optional<Window> window;
  std::optional<double> soft_cap;
};

/// Offsets into a tensor broadcast to [B..., N, T, S]: its rank is that of [B..., N, T, S]
/// (missing leading dims count as 1) and each dim is 1 or full.
class Broadcast {
public:
  Broadcast() = default;
  Broadcast(const Dims &d, const std::vector<int64_t> &shape) {
    const std::vector<int64_t> full = d.logitsShape();
    if (shape.size() > full.size())
      throw std::invalid_argument(fmt::format("broadcast shape [{}] has too many dims", fmt::join(shape, ", ")));
    std::vector<int64_t> padded(full.size() - shape.size(), 1);
    padded.insert(padded.end(), shape.begin(), shape.end());
    std::vector<int64_t> strides(full.size());
    for (int64_t i = int64_t(full.size()) - 1, stride = 1; i >= 0; --i) {
      if (padded[i] != 1 && padded[i] != full[i])
        throw std::invalid_argument(fmt::format("[{}] does not broadcast to [{}]", fmt::join(shape, ", "),
                                                fmt::join(full, ", ")));
      strides[i] = padded[i] == 1 ? 0 : stride;
      stride *= padded[i];
      disjoint_rows_ &= i == int64_t(full.size()) - 1 || full[i] == 1 || padded[i] != 1;
    }
    const size_t nb = d.batch.size();
    n_stride_ = strides[nb], t_stride_ = strides[nb + 1], s_stride_ = strides[nb + 2];
    for (int64_t row = 0; row < d.rows(); ++row) {
      int64_t offset = 0;
      for (int64_t i = int64_t(nb) - 1, rest = row; i >= 0; --i) {
        offset += (rest % d.batch[i]) * strides[i];
        rest /= d.batch[i];
      }
      row_offsets_.push_back(offset);
    }
  }
  int64_t at(int64_t row, int64_t n, int64_t t, int64_t s) const {
    return row_offsets_[row] + n * n_stride_ + t * t_stride_ + s * s_stride_;
  }
  /// Whether distinct query rows (row, n, t) reach distinct elements (no sum over B, N, T).
  bool disjointRows() const { return disjoint_rows_; }

private:
  std::vector<int64_t> row_offsets_;
  int64_t n_stride_ = 0, t_stride_ = 0, s_stride_ = 0;
  bool disjoint_rows_ = true;
};

/// Values in the layouts above; an empty vector is an absent tensor (dout: forward only).
struct Inputs {
  std::vector<double> q, k, v;
  std::vector<double> bias;
  std::vector<int64_t> bias_shape;
  std::vector<uint8_t> mask;  ///< 0 = hidden, else attended
  std::vector<int64_t> mask_shape;
  std::vector<int32_t> q_lengths, kv_lengths;  ///< one per flattened batch row
  std::vector<double> sinks;  ///< [N]: one more logit of each row's softmax, with a zero value row
  std::vector<double> dout;
};

struct Outputs {
  std::vector<double> out, lse, dq, dk, dv, dbias;  ///< dbias: bias's shape
  std::vector<double> dsinks;                       ///< [N], with sinks
  std::vector<uint8_t> row_attends;  ///< [B, N, T]: the query row sees at least one key
  std::vector<uint8_t> key_seen;     ///< [B, S, K]: some attending query row sees the key
};

/// Runs body(worker, begin, end) over [0, n) in chunks of `chunk` taken in turn by
/// `threads` workers (inline for one). `body` must not throw or use Catch2.
template <class Body> void parallelChunks(int64_t n, int64_t chunk, int threads, Body body) {
  std::atomic<int64_t> next{0};
  auto worker = [&](int id) {
    for (int64_t begin; (begin = next.fetch_add(chunk)) < n;)
      body(id, begin, std::min(n, begin + chunk));
  };
  if (threads <= 1)
    return worker(0);
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back(worker, id);
  for (std::thread &t : pool)
    t.join();
}

inline int hostThreads() { return int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 64)); }

/// Element loops of the big buffers (a GPU test's [4096, 131072] weights: ~0.5 G
/// elements) in parallel chunks of kElementChunk; smaller ones inline. body(begin, end).
constexpr int64_t kElementChunk = int64_t(1) << 20, kParallelElements = int64_t(1) << 22;
template <class Body> void forElements(int64_t n, Body body) {
  if (n < kParallelElements)
    return body(int64_t(0), n);
  parallelChunks(n, kElementChunk, hostThreads(), [&](int, int64_t begin, int64_t end) { body(begin, end); });
}

/// float64 attention: forward by query rows, then (with dout) dq by query rows and dk /
/// dv by key columns, each recomputing the probabilities (so every piece runs in parallel).
class Reference {
public:
  Reference(const Dims &d, const Options &o, const Inputs &in) : d_(d), o_(o), in_(in) {
    if (d.n % d.k != 0)
      throw std::invalid_argument("reference: N % K != 0");
    auto expect = [](size_t got, int64_t want, const char *what) {
      if (int64_t(got) != want)
        throw std::invalid_argument(fmt::format("reference: {} has {} values, expected {}", what, got, want));
    };
    expect(in.q.size(), product(d.qShape()), "q");
    expect(in.k.size(), product(d.kShape()), "k");
    expect(in.v.size(), product(d.vShape()), "v");
    if (!in.dout.empty())
      expect(in.dout.size(), product(d.outShape()), "dout");
    if (!in.bias.empty()) {
      expect(in.bias.size(), product(in.bias_shape), "bias");
      bias_ = Broadcast(d, in.bias_shape);
    }
    if (!in.mask.empty()) {
      expect(in.mask.size(), product(in.mask_shape), "mask");
      mask_ = Broadcast(d, in.mask_shape);
    }
    for (const auto *lengths : {&in.q_lengths, &in.kv_lengths})
      if (!lengths->empty())
        expect(lengths->size(), d.rows(), "seq lengths");
    scale_ = o.scale.value_or(1.0 / std::sqrt(double(d.h)));
  }

  bool visible(int64_t row, int64_t n, int64_t t, int64_t s) const {
    if (o_.is_causal && s > t)
      return false;
    if (o_.window && ((o_.window->left && s < t - *o_.window->left) || (o_.window->right && s > t + *o_.window->right)))
      return false;
    if ((!in_.q_lengths.empty() && t >= in_.q_lengths[row]) || (!in_.kv_lengths.empty() && s >= in_.kv_lengths[row]))
      return false;
    return in_.mask.empty() || in_.mask[mask_.at(row, n, t, s)] != 0;
  }

  /// One visible logit: before the soft cap (`pre`, what bias adds to) and after it.
  void logit(int64_t row, int64_t n, int64_t t, int64_t s, double &pre, double &capped) const {
    const int64_t kh = n / (d_.n / d_.k);
    const double bias = in_.bias.empty() ? 0.0 : in_.bias[bias_.at(row, n, t, s)];
    pre = scale_ * dot(qRow(row, t, n), kRow(row, s, kh), d_.h) + bias;
    capped = o_.soft_cap ? *o_.soft_cap * std::tanh(pre / *o_.soft_cap) : pre;
  }

  /// softmax probabilities of (row, n) as [T, S]; a row that sees no key is all zeros.
  std::vector<double> probabilities(int64_t row, int64_t n) const {
    std::vector<double> p(size_t(d_.t * d_.s), 0.0), pre(d_.s), z(d_.s);
    std::vector<uint8_t> vis(d_.s);
    for (int64_t t = 0; t < d_.t; ++t) {
      const double lse = rowLse(row, n, t, pre.data(), z.data(), vis.data());
      for (int64_t s = 0; s < d_.s && lse < kInf; ++s)
        p[t * d_.s + s] = vis[s] ? std::exp(z[s] - lse) : 0.0;
    }
    return p;
  }

  Outputs run(int threads = 1) const {
    const int64_t B = d_.rows(), rowsTotal = B * d_.n * d_.t;
    const bool vjp = !in_.dout.empty();
    Outputs o;
    o.out.assign(product(d_.outShape()), 0.0);
    o.lse.assign(rowsTotal, kInf);
    o.row_attends.assign(rowsTotal, 0);
    std::vector<double> delta(rowsTotal, 0.0);
    const bool sharedBias = vjp && !in_.bias.empty() && !bias_.disjointRows();
    std::vector<std::vector<double>> partialDbias(sharedBias ? std::max(threads, 1) : 0,
                                                  std::vector<double>(in_.bias.size(), 0.0));
    if (vjp) {
      o.dq.assign(in_.q.size(), 0.0);
      o.dk.assign(in_.k.size(), 0.0);
      o.dv.assign(in_.v.size(), 0.0);
      o.dbias.assign(in_.bias.size(), 0.0);
      o.key_seen.assign(B * d_.s * d_.k, 0);
    }
    parallelChunks(rowsTotal, 8, threads, [&](int worker, int64_t begin, int64_t end) {
      std::vector<double> pre(d_.s), z(d_.s);
      std::vector<uint8_t> vis(d_.s);
      double *dbias = sharedBias ? partialDbias[worker].data() : o.dbias.data();
      for (int64_t r = begin; r < end; ++r)
        queryRow(r / (d_.n * d_.t), r / d_.t % d_.n, r % d_.t, o, delta, dbias, pre.data(), z.data(), vis.data());
    });
    for (const std::vector<double> &partial : partialDbias)
      for (size_t i = 0; i < partial.size(); ++i)
        o.dbias[i] += partial[i];
    // d out / d sink = -P(sink) out for each row, P(sink) = exp(sink - lse): dsink = -sum
    // over the rows of P(sink) (dout . out) = -sum P(sink) delta.
    if (vjp && !in_.sinks.empty()) {
      o.dsinks.assign(d_.n, 0.0);
      for (int64_t r = 0; r < rowsTotal; ++r)
        if (o.lse[r] < kInf)
          o.dsinks[r / d_.t % d_.n] -= std::exp(in_.sinks[r / d_.t % d_.n] - o.lse[r]) * delta[r];
    }
    if (vjp)
      parallelChunks(B * d_.k * d_.s, 8, threads, [&](int, int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c)
          keyColumn(c / (d_.k * d_.s), c / d_.s % d_.k, c % d_.s, o, delta);
      });
    return o;
  }

private:
  static double dot(const double *a, const double *b, int64_t n) {
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j)
        acc[j] += a[i + j] * b[i + j];
    for (; i < n; ++i)
      acc[0] += a[i] * b[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  static void axpy(double *y, double alpha, const double *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      y[i] += alpha * x[i];
  }
  int64_t qIndex(int64_t row, int64_t t, int64_t n) const { return (row * d_.t + t) * d_.n + n; }
  int64_t kIndex(int64_t row, int64_t s, int64_t kh) const { return (row * d_.s + s) * d_.k + kh; }
  const double *qRow(int64_t row, int64_t t, int64_t n) const { return &in_.q[qIndex(row, t, n) * d_.h]; }
  const double *kRow(int64_t row, int64_t s, int64_t kh) const { return &in_.k[kIndex(row, s, kh) * d_.h]; }
  const double *vRow(int64_t row, int64_t s, int64_t kh) const { return &in_.v[kIndex(row, s, kh) * d_.hv]; }
  const double *doutRow(int64_t row, int64_t t, int64_t n) const { return &in_.dout[qIndex(row, t, n) * d_.hv]; }
  double dCap(double pre) const {  // d capped / d pre
    if (!o_.soft_cap)
      return 1.0;
    const double th = std::tanh(pre / *o_.soft_cap);
    return 1.0 - th * th;
  }

  /// Logits of one query row into pre / z with visibility; returns the row's lse (+inf
  /// when it sees no key; with sinks, the sink is one more term: a row that sees no key
  /// gets lse = sink, a padding row past its q_seq_length +inf).
  double rowLse(int64_t row, int64_t n, int64_t t, double *pre, double *z, uint8_t *vis) const {
    double m = -kInf;
    for (int64_t s = 0; s < d_.s; ++s)
      if ((vis[s] = visible(row, n, t, s))) {
        logit(row, n, t, s, pre[s], z[s]);
        m = std::max(m, z[s]);
      }
    const bool padding = !in_.q_lengths.empty() && t >= in_.q_lengths[row];
    const double sink = in_.sinks.empty() || padding ? -kInf : in_.sinks[n];
    if (m == -kInf)
      return sink > -kInf ? sink : kInf;
    const double top = std::max(m, sink);
    double l = std::exp(sink - top);
    for (int64_t s = 0; s < d_.s; ++s)
      if (vis[s])
        l += std::exp(z[s] - top);
    return top + std::log(l);
  }

  void queryRow(int64_t row, int64_t n, int64_t t, Outputs &o, std::vector<double> &delta, double *dbias, double *pre,
                double *z, uint8_t *vis) const {
    const int64_t r = (row * d_.n + n) * d_.t + t, kh = n / (d_.n / d_.k);
    const double lse = rowLse(row, n, t, pre, z, vis);
    if (lse == kInf)
      return;  // out 0, lse +inf, no gradient
    o.lse[r] = lse;  // the sink where no key is seen: out 0, no gradient
    o.row_attends[r] = std::find(vis, vis + d_.s, 1) != vis + d_.s;
    double *out = &o.out[qIndex(row, t, n) * d_.hv];
    for (int64_t s = 0; s < d_.s; ++s)
      if (vis[s]) {
        z[s] = std::exp(z[s] - lse);  // now the probability
        axpy(out, z[s], vRow(row, s, kh), d_.hv);
      }
    if (in_.dout.empty())
      return;
    const double *dout = doutRow(row, t, n);
    delta[r] = dot(dout, out, d_.hv);
    double *dq = &o.dq[qIndex(row, t, n) * d_.h];
    for (int64_t s = 0; s < d_.s; ++s)
      if (vis[s]) {
        const double dpre = z[s] * (dot(dout, vRow(row, s, kh), d_.hv) - delta[r]) * dCap(pre[s]);
        if (!in_.bias.empty())
          dbias[bias_.at(row, n, t, s)] += dpre;
        axpy(dq, scale_ * dpre, kRow(row, s, kh), d_.h);
      }
  }

  void keyColumn(int64_t row, int64_t kh, int64_t s, Outputs &o, const std::vector<double> &delta) const {
    const int64_t group = d_.n / d_.k;
    double *dk = &o.dk[kIndex(row, s, kh) * d_.h], *dv = &o.dv[kIndex(row, s, kh) * d_.hv];
    for (int64_t n = kh * group; n < (kh + 1) * group; ++n)
      for (int64_t t = 0; t < d_.t; ++t) {
        const int64_t r = (row * d_.n + n) * d_.t + t;
        if (!o.row_attends[r] || !visible(row, n, t, s))
          continue;
        o.key_seen[kIndex(row, s, kh)] = 1;
        double pre, z;
        logit(row, n, t, s, pre, z);
        const double p = std::exp(z - o.lse[r]), *dout = doutRow(row, t, n);
        const double dpre = p * (dot(dout, vRow(row, s, kh), d_.hv) - delta[r]) * dCap(pre);
        axpy(dk, scale_ * dpre, qRow(row, t, n), d_.h);
        axpy(dv, p, dout, d_.hv);
      }
  }

  Dims d_;
  Options o_;
  const Inputs &in_;
  Broadcast bias_, mask_;
  double scale_ = 1;
};

// ---- Host buffers, random inputs, comparison. ----

/// A host tensor of one dtype in 8-byte aligned storage (for host_view and uploads).
/// New float buffers hold NaN and others 0xA5 bytes, so unwritten elements show.
struct HostBuffer {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostBuffer() = default;
  HostBuffer(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    storage.assign((size_t(numel()) * tokamax::dtype_size(d) + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);
    if (tokamax::is_floating(d))
      forElements(numel(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          set(i, std::numeric_limits<double>::quiet_NaN());
      });
  }
  /// `values` rounded to `d` (nearest even).
  HostBuffer(DType d, std::vector<int64_t> s, const std::vector<double> &values) : dtype(d), shape(std::move(s)) {
    storage.assign((size_t(numel()) * tokamax::dtype_size(d) + 7) / 8, 0);
    forElements(numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        set(i, values[size_t(i)]);
    });
  }
  int64_t numel() const { return product(shape); }
  size_t nbytes() const { return size_t(numel()) * tokamax::dtype_size(dtype); }
  uint8_t *bytes() { return reinterpret_cast<uint8_t *>(storage.data()); }
  const uint8_t *bytes() const { return reinterpret_cast<const uint8_t *>(storage.data()); }
  const uint8_t *element(int64_t i) const { return bytes() + size_t(i) * tokamax::dtype_size(dtype); }
  double at(int64_t i) const { return tokamax::load_as_double(dtype, element(i)); }
  void set(int64_t i, double v) {
    tokamax::store_from_double(dtype, bytes() + size_t(i) * tokamax::dtype_size(dtype), v);
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    forElements(numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        v[size_t(i)] = at(i);
    });
    return v;
  }
  tokamax::TensorView view() const { return tokamax::host_view(storage.data(), dtype, shape); }
};

/// `values` rounded to `d` and back (what a buffer of `d` holds).
inline std::vector<double> roundedTo(DType d, std::vector<double> values) {
  forElements(int64_t(values.size()), [&](int64_t begin, int64_t end) {
    uint64_t one;
    for (int64_t i = begin; i < end; ++i) {
      tokamax::store_from_double(d, &one, values[size_t(i)]);
      values[size_t(i)] = tokamax::load_as_double(d, &one);
    }
  });
  return values;
}

/// `count` normal values (mean 0, `stddev`) into `out`, never zero (magnitudes below 1e-3
/// of stddev are drawn again). Box-Muller over a 64-bit Mersenne Twister seeded with
/// `state`: the same values with every standard library.
inline void fillNormal(double *out, size_t count, uint64_t state, double stddev) {
  std::mt19937_64 rng(state);
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  size_t filled = 0;
  while (filled < count) {
    const double radius = std::sqrt(-2 * std::log(uniform())), angle = 2 * std::numbers::pi * uniform();
    for (double x : {radius * std::cos(angle), radius * std::sin(angle)})
      if (std::abs(x) >= 1e-3 && filled < count)
        out[filled++] = stddev * x;
  }
}

/// Normal values rounded to `d` (fillNormal). Up to kParallelElements from one stream;
/// more (the GPU tests' benchmark-sized operands) from one stream per kElementChunk
/// values, drawn in parallel: the same values whatever the thread count.
inline std::vector<double> randomNormal(size_t count, DType d, uint64_t seed, double stddev = 1.0) {
  const uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<double> v(count);
  if (int64_t(count) < kParallelElements) {
    fillNormal(v.data(), count, state, stddev);
  } else {
    forElements(int64_t(count), [&](int64_t begin, int64_t end) {
      fillNormal(v.data() + begin, size_t(end - begin), state ^ (uint64_t(begin / kElementChunk + 1) * 0xD1B54A32D192ED03ull),
                 stddev);
    });
  }
  return roundedTo(d, std::move(v));
}

/// Mask bytes: 1 with probability `density`.
inline std::vector<uint8_t> randomMask(size_t count, uint64_t seed, double density) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> m(count);
  for (uint8_t &b : m)
    b = double(rng() >> 11) * 0x1.0p-53 < density;
  return m;
}

/// Bounds on got vs ref: every element's |got - ref| / (|ref| + scale) <= max_scaled,
/// where scale is the largest of the rms of ref, the rms of the ref row (last dim) that
/// holds the element, and a floor: relative for large elements, absolute at the size of
/// their row for small ones (a row's rounding errors follow its own size: causal
/// attention's first query rows have far larger dq than the tensor's typical one); and
/// ||got - ref|| / max(||ref||, floor sqrt(n)) <= rms_relative.
struct Tolerance {
  double max_scaled, rms_relative;
  Tolerance operator*(double f) const { return {max_scaled * f, rms_relative * f}; }
};

/// For results stored in `d` (bf16 / f16 outputs carry their rounding; the VJP's terms
/// also go through rounded probabilities and dS). f32 on the GPU goes through the
/// approximate ex2 / lg2 / tanh instructions (tanh.approx: ~5e-4 relative, which a soft
/// cap scales into the logits): 6.6e-6 rms relative was seen there with cap 3.
inline Tolerance tolerance(DType d) {
  switch (d) {
  case DType::BF16: return {4e-2, 6e-3};
  case DType::F16: return {6e-3, 1.2e-3};
  case DType::F32: return {2e-4, 2e-5};
  default: return {1e-11, 1e-13};
  }
}

/// The larger bounds of two: dbias in f32 still carries the errors of bf16 inputs' dS.
inline Tolerance looser(Tolerance a, Tolerance b) {
  return {std::max(a.max_scaled, b.max_scaled), std::max(a.rms_relative, b.rms_relative)};
}

struct Comparison {
  bool ok = true;
  double max_abs_error = 0, max_scaled_error = 0, rms_relative_error = 0, ref_rms = 0;
  int64_t worst = -1, bad_specials = 0;  ///< NaN, or an infinity where the other is not the same
  double got_at_worst = 0, ref_at_worst = 0;
  std::string message;
};

inline std::string formatIndex(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> index(shape.size());
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    index[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return fmt::format("[{}]", fmt::join(index, ", "));
}

/// `floor`: the least scale, for results that can cancel to zero (see checkResults).
inline Comparison compare(const std::string &name, const std::vector<double> &got, const std::vector<double> &ref,
                          const std::vector<int64_t> &shape, Tolerance tol, double floor = 0) {
  Comparison c;
  if (got.size() != ref.size()) {
    c.ok = false;
    c.message = fmt::format("{}: {} values, expected {}", name, got.size(), ref.size());
    return c;
  }
  const size_t rowLength = shape.empty() ? 1 : size_t(std::max<int64_t>(1, shape.back()));
  const int64_t rows = int64_t((ref.size() + rowLength - 1) / rowLength);
  std::vector<double> rowScale(size_t(rows) + 1, 0.0);
  // Big buffers in chunks of whole rows, in parallel: each chunk's partial sums and worst
  // element, folded in chunk order (the same figures whatever the thread count; one chunk,
  // the serial sums, below kParallelElements).
  const int64_t rowsPerChunk = int64_t(ref.size()) < kParallelElements
                                   ? std::max<int64_t>(rows, 1)
                                   : std::max<int64_t>(kElementChunk / int64_t(rowLength), 1);
  const int64_t chunks = (rows + rowsPerChunk - 1) / rowsPerChunk;
  struct Partial {
    double sumSq = 0, errSq = 0, maxScaled = 0, maxAbs = 0, gotAtWorst = 0, refAtWorst = 0;
    size_t finite = 0;
    int64_t worst = -1, badSpecials = 0;
  };
  std::vector<Partial> parts(static_cast<size_t>(chunks));
  auto overChunks = [&](auto body) {
    if (chunks <= 1)
      return chunks == 1 ? body(int64_t(0)) : void();
    parallelChunks(chunks, 1, hostThreads(), [&](int, int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch)
        body(ch);
    });
  };
  auto rowsOf = [&](int64_t ch) {
    return std::pair{size_t(ch * rowsPerChunk), size_t(std::min(rows, (ch + 1) * rowsPerChunk))};
  };
  overChunks([&](int64_t ch) {
    Partial &part = parts[size_t(ch)];
    for (auto [row, last] = rowsOf(ch); row < last; ++row) {
      double rowSq = 0;
      size_t rowFinite = 0;
      for (size_t i = row * rowLength; i < std::min(ref.size(), (row + 1) * rowLength); ++i)
        if (std::isfinite(ref[i]))
          rowSq += ref[i] * ref[i], ++rowFinite;
      rowScale[row] = std::sqrt(rowSq / double(std::max<size_t>(rowFinite, 1)));
      part.sumSq += rowSq, part.finite += rowFinite;
    }
  });
  double sumSq = 0, errSq = 0;
  size_t finite = 0;
  for (const Partial &part : parts)
    sumSq += part.sumSq, finite += part.finite;
  c.ref_rms = std::sqrt(sumSq / double(std::max<size_t>(finite, 1)));
  overChunks([&](int64_t ch) {
    Partial &part = parts[size_t(ch)];
    const auto [firstRow, lastRow] = rowsOf(ch);
    for (size_t i = firstRow * rowLength; i < std::min(ref.size(), lastRow * rowLength); ++i) {
      const double scale = std::max({c.ref_rms, rowScale[i / rowLength], floor});
      double err, scaled;
      if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
        const bool same = got[i] == ref[i];  // equal infinities; NaN never equals
        err = scaled = same ? 0.0 : kInf;
        part.badSpecials += !same;
      } else {
        err = std::abs(got[i] - ref[i]);
        part.errSq += err * err;
        scaled = err == 0 ? 0.0 : err / (std::abs(ref[i]) + scale);
      }
      if (scaled > part.maxScaled)
        part.maxScaled = scaled, part.worst = int64_t(i), part.gotAtWorst = got[i], part.refAtWorst = ref[i];
      part.maxAbs = std::max(part.maxAbs, err);
    }
  });
  for (const Partial &part : parts) {
    errSq += part.errSq;
    c.bad_specials += part.badSpecials;
    c.max_abs_error = std::max(c.max_abs_error, part.maxAbs);
    if (part.maxScaled > c.max_scaled_error)
      c.max_scaled_error = part.maxScaled, c.worst = part.worst, c.got_at_worst = part.gotAtWorst,
      c.ref_at_worst = part.refAtWorst;
  }
  const double norm = std::max(std::sqrt(sumSq), floor * std::sqrt(double(finite)));
  c.rms_relative_error = norm > 0 ? std::sqrt(errSq) / norm : (errSq > 0 ? kInf : 0.0);
  c.ok = c.bad_specials == 0 && c.max_scaled_error <= tol.max_scaled && c.rms_relative_error <= tol.rms_relative;
  c.message = fmt::format("{}: max |got - ref| {:.3g}, ref rms {:.3g}; scaled error {:.3g} (bound {:.3g}){}; rms "
                          "relative {:.3g} (bound {:.3g}); {} NaN / misplaced infinities",
                          name, c.max_abs_error, c.ref_rms, c.max_scaled_error, tol.max_scaled,
                          c.worst < 0 ? std::string()
                                      : fmt::format(" worst at {} (got {:.6g}, ref {:.6g})",
                                                    formatIndex(c.worst, shape), c.got_at_worst, c.ref_at_worst),
                          c.rms_relative_error, tol.rms_relative, c.bad_specials);
  return c;
}

} // namespace attention_test
