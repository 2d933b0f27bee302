//===- AttentionReference.h - float64 attention for the tests ------*- C++ -*-===//
//
// An independent float64 dot_product_attention, forward and VJP, written with plain
// loops from the formulas in Attention.h (none of the kernels' structure: no blocks, no
// online softmax); the host buffers, inputs and comparisons the tests check it with are
// HostBuffers.h's. (AttentionTestCase.h builds test cases on top.)
//
// Layouts (row-major, B = the batch dims flattened): q [B, T, N, H], k [B, S, K, H],
// v [B, S, K, Hv], out / dout [B, T, N, Hv], lse [B, N, T]; bias and mask broadcast to
// [B..., N, T, S], each dim 1 or full.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attention_test {

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

} // namespace attention_test
