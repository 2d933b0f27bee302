//===- RaggedDotTestCase.h - ragged_dot calls against float64 -------*- C++ -*-===//
//
// One case (shape, group sizes, dtype, implementation, config): random inputs, the call
// run on the interpreter (or on the device by the GPU tests through `Runner`), and the
// results compared with a float64 reference written from the formulas in RaggedDot.h
// (sizes clamped to the rows, rows past the groups zero) with the attention tests'
// dtype-aware tolerances.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "unit/AttentionReference.h"

#include <tokamax/ops/RaggedDot.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace ragged_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;

/// Each group's [start, end) rows as the op reads group_sizes.
inline std::vector<std::pair<int64_t, int64_t>> groupRows(const std::vector<int32_t> &sizes, int64_t m) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t start = 0;
  for (int32_t s : sizes) {
    const int64_t end = std::min<int64_t>(start + std::max<int32_t>(s, 0), m);
    rows.emplace_back(start, end);
    start = end;
  }
  return rows;
}

/// out [m, n] = lhs_g [., k] @ rhs[g] [k, n] per group; rows past the groups zero.
/// Tiles of 16 rows by 256 columns run in parallel: the tile stays in cache while rhs[g]
/// streams past once, and each element still sums over k in order.
inline std::vector<double> forward(const std::vector<double> &lhs, const std::vector<double> &rhs,
                                   const std::vector<int32_t> &sizes, int64_t m, int64_t k, int64_t n) {
  std::vector<double> out(size_t(m * n), 0.0);
  std::vector<int64_t> groupOf(size_t(m), -1);
  const auto rows = groupRows(sizes, m);
  for (size_t g = 0; g < rows.size(); ++g)
    std::fill(groupOf.begin() + rows[g].first, groupOf.begin() + rows[g].second, int64_t(g));
  constexpr int64_t kRows = 16, kCols = 256;
  const int64_t blocks = (m + kRows - 1) / kRows, panels = (n + kCols - 1) / kCols;
  attention_test::parallelChunks(blocks * panels, 1, attention_test::hostThreads(), [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c0 = t % panels * kCols, w = std::min(n - c0, kCols), r1 = std::min(m, (t / panels + 1) * kRows);
      // Runs of rows in one group; rows past the groups (-1) stay zero.
      for (int64_t r0 = t / panels * kRows, e; r0 < r1; r0 = e) {
        const int64_t g = groupOf[size_t(r0)];
        for (e = r0 + 1; e < r1 && groupOf[size_t(e)] == g; ++e) {
        }
        if (g < 0)
          continue;
        int64_t i = 0;
        // Four steps of k per pass over the tile: the same sums in the same order, with a
        // quarter of the tile's loads and stores.
        for (; i + 4 <= k; i += 4) {
          const double *b0 = &rhs[size_t((g * k + i) * n + c0)], *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
          for (int64_t r = r0; r < e; ++r) {
            const double a0 = lhs[size_t(r * k + i)], a1 = lhs[size_t(r * k + i + 1)],
                         a2 = lhs[size_t(r * k + i + 2)], a3 = lhs[size_t(r * k + i + 3)];
            double *o = &out[size_t(r * n + c0)];
            for (int64_t c = 0; c < w; ++c)
              o[c] = o[c] + a0 * b0[c] + a1 * b1[c] + a2 * b2[c] + a3 * b3[c];
          }
        }
        for (; i < k; ++i) {
          const double *b = &rhs[size_t((g * k + i) * n + c0)];
          for (int64_t r = r0; r < e; ++r) {
            const double a = lhs[size_t(r * k + i)];
            double *o = &out[size_t(r * n + c0)];
            for (int64_t c = 0; c < w; ++c)
              o[c] += a * b[c];
          }
        }
      }
    }
  });
  return out;
}

struct Gradients {
  std::vector<double> dlhs, drhs;
};

/// dlhs [r, i] = sum_c dout[r, c] rhs[g, i, c] by tiles of (rows, i), and drhs [g, i, c] =
/// sum over g's rows of lhs[r, i] dout[r, c] by tiles of (g, i, c): no element has two
/// writers, and each still sums in index order (c for dlhs, r for drhs).
inline Gradients vjp(const std::vector<double> &dout, const std::vector<double> &lhs, const std::vector<double> &rhs,
                     const std::vector<int32_t> &sizes, int64_t m, int64_t k, int64_t n) {
  Gradients d{std::vector<double>(size_t(m * k), 0.0), std::vector<double>(sizes.size() * size_t(k * n), 0.0)};
  std::vector<int64_t> groupOf(size_t(m), -1);
  const auto rows = groupRows(sizes, m);
  for (size_t g = 0; g < rows.size(); ++g)
    std::fill(groupOf.begin() + rows[g].first, groupOf.begin() + rows[g].second, int64_t(g));
  constexpr int64_t kRows = 16, kBlock = 64, kCols = 256;
  const int threads = attention_test::hostThreads();
  const int64_t rowBlocks = (m + kRows - 1) / kRows, iBlocks = (k + kBlock - 1) / kBlock;
  attention_test::parallelChunks(rowBlocks * iBlocks, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t % iBlocks * kBlock, i1 = std::min(k, i0 + kBlock);
      const int64_t r1 = std::min(m, (t / iBlocks + 1) * kRows);
      for (int64_t r0 = t / iBlocks * kRows, e; r0 < r1; r0 = e) {
        const int64_t g = groupOf[size_t(r0)];
        for (e = r0 + 1; e < r1 && groupOf[size_t(e)] == g; ++e) {
        }
        if (g < 0)
          continue;
        for (int64_t c0 = 0; c0 < n; c0 += kCols) {
          const int64_t w = std::min(n - c0, kCols);
          for (int64_t i = i0; i < i1; ++i) {
            const double *b = &rhs[size_t((g * k + i) * n + c0)];
            int64_t r = r0;
            // Four rows' sums side by side: independent chains hide the adds' latency, each
            // still in column order.
            for (; r + 4 <= e; r += 4) {
              const double *o0 = &dout[size_t(r * n + c0)], *o1 = o0 + n, *o2 = o1 + n, *o3 = o2 + n;
              double *s = &d.dlhs[size_t(r * k + i)];
              double s0 = s[0], s1 = s[k], s2 = s[2 * k], s3 = s[3 * k];
              for (int64_t c = 0; c < w; ++c) {
                s0 += o0[c] * b[c];
                s1 += o1[c] * b[c];
                s2 += o2[c] * b[c];
                s3 += o3[c] * b[c];
              }
              s[0] = s0;
              s[k] = s1;
              s[2 * k] = s2;
              s[3 * k] = s3;
            }
            for (; r < e; ++r) {
              const double *o = &dout[size_t(r * n + c0)];
              double s = d.dlhs[size_t(r * k + i)];
              for (int64_t c = 0; c < w; ++c)
                s += o[c] * b[c];
              d.dlhs[size_t(r * k + i)] = s;
            }
          }
        }
      }
    }
  });
  const int64_t panels = (n + kCols - 1) / kCols, perGroup = iBlocks * panels;
  attention_test::parallelChunks(int64_t(rows.size()) * perGroup, 1, threads, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t g = t / perGroup, i0 = t % perGroup / panels * kBlock, i1 = std::min(k, i0 + kBlock);
      const int64_t c0 = t % panels * kCols, w = std::min(n - c0, kCols);
      const int64_t r1 = rows[size_t(g)].second;
      int64_t r = rows[size_t(g)].first;
      // Four rows per pass, as in forward.
      for (; r + 4 <= r1; r += 4) {
        const double *o0 = &dout[size_t(r * n + c0)], *o1 = o0 + n, *o2 = o1 + n, *o3 = o2 + n;
        for (int64_t i = i0; i < i1; ++i) {
          const double a0 = lhs[size_t(r * k + i)], a1 = lhs[size_t((r + 1) * k + i)],
                       a2 = lhs[size_t((r + 2) * k + i)], a3 = lhs[size_t((r + 3) * k + i)];
          double *dr = &d.drhs[size_t((g * k + i) * n + c0)];
          for (int64_t c = 0; c < w; ++c)
            dr[c] = dr[c] + a0 * o0[c] + a1 * o1[c] + a2 * o2[c] + a3 * o3[c];
        }
      }
      for (; r < r1; ++r) {
        const double *o = &dout[size_t(r * n + c0)];
        for (int64_t i = i0; i < i1; ++i) {
          const double a = lhs[size_t(r * k + i)];
          double *dr = &d.drhs[size_t((g * k + i) * n + c0)];
          for (int64_t c = 0; c < w; ++c)
            dr[c] += a * o[c];
        }
      }
    }
  });
  return d;
}

/// `g` random group sizes summing to `total` (some of them zero).
inline std::vector<int32_t> randomSizes(int64_t g, int64_t total, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 0; i + 1 < g; ++i)
    cuts.push_back(std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> sizes;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    sizes.push_back(int32_t(cuts[i + 1] - cuts[i]));
  return sizes;
}

struct Case {
  int64_t m = 1, k = 1, n = 1;
  std::vector<int32_t> sizes;  ///< G = sizes.size()
  DType dtype = DType::BF16;
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;

  int64_t g() const { return int64_t(sizes.size()); }
  tokamax::RaggedDotOptions options() const { return {implementation, config}; }
  std::string name() const {
    return fmt::format("m {} k {} n {} sizes [{}] {} {} {}", m, k, n, fmt::join(sizes, ", "),
                       tokamax::dtype_name(dtype), implementation.value_or("auto"),
                       config ? config->to_json() : "heuristic");
  }
};

struct Inputs {
  std::vector<double> lhs, rhs, dout;
};

inline Inputs randomInputs(const Case &c, uint64_t seed) {
  const double scale = 1 / std::sqrt(double(std::max<int64_t>(c.k, 1)));
  return {attention_test::randomNormal(size_t(c.m * c.k), c.dtype, seed),
          attention_test::randomNormal(size_t(c.g() * c.k * c.n), c.dtype, seed + 1, scale),
          attention_test::randomNormal(size_t(c.m * c.n), c.dtype, seed + 2)};
}

/// Runs the forward (out) or the VJP (dlhs, drhs) on host buffers.
using Runner = std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpretForward(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::ragged_dot_host(in[0]->view(), in[1]->view(), in[2]->view(), out[0]->view(), c.options());
}
inline void interpretVjp(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  tokamax::ragged_dot_vjp_host(in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(), out[0]->view(),
                               out[1]->view(), c.options());
}

inline Tolerance raggedTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(d);
}

inline HostBuffer sizesBuffer(const Case &c) {
  return HostBuffer(DType::I32, {c.g()}, std::vector<double>(c.sizes.begin(), c.sizes.end()));
}

struct Result {
  bool ok = true;
  std::string message;
};

inline Result checkForward(const Case &c, uint64_t seed, const Runner &run = interpretForward) {
  Inputs in = randomInputs(c, seed);
  HostBuffer lhs(c.dtype, {c.m, c.k}, in.lhs), rhs(c.dtype, {c.g(), c.k, c.n}, in.rhs), sizes = sizesBuffer(c);
  HostBuffer out(c.dtype, {c.m, c.n});
  run(c, {&lhs, &rhs, &sizes}, {&out});
  Comparison cmp = attention_test::compare("out", out.values(), forward(in.lhs, in.rhs, c.sizes, c.m, c.k, c.n),
                                           out.shape, raggedTolerance(c.dtype), 1e-3);
  return {cmp.ok, c.name() + "\n" + cmp.message};
}

inline Result checkVjp(const Case &c, uint64_t seed, const Runner &run = interpretVjp) {
  Inputs in = randomInputs(c, seed);
  HostBuffer dout(c.dtype, {c.m, c.n}, in.dout), lhs(c.dtype, {c.m, c.k}, in.lhs),
      rhs(c.dtype, {c.g(), c.k, c.n}, in.rhs), sizes = sizesBuffer(c);
  HostBuffer dlhs(c.dtype, {c.m, c.k}), drhs(c.dtype, {c.g(), c.k, c.n});
  run(c, {&dout, &lhs, &rhs, &sizes}, {&dlhs, &drhs});
  Gradients ref = vjp(in.dout, in.lhs, in.rhs, c.sizes, c.m, c.k, c.n);
  Tolerance tol = raggedTolerance(c.dtype);
  Comparison cl = attention_test::compare("dlhs", dlhs.values(), ref.dlhs, dlhs.shape, tol, 1e-3);
  Comparison cr = attention_test::compare("drhs", drhs.values(), ref.drhs, drhs.shape, tol, 1e-3);
  return {cl.ok && cr.ok, c.name() + "\n" + cl.message + "\n" + cr.message};
}

} // namespace ragged_test
