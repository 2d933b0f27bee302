//===- PagedAttentionTestCase.h - paged_attention against float64 -*- C++ -*-===//
//
// One case (sequences' lengths, heads, page size, dtype, implementation, config): a
// paged cache built with plain loops (pages handed out in a shuffled order, so a
// sequence's pages are scattered; page memory starts as NaN, so a kernel that reads a
// key past its sequence, or an unused page, poisons its row; page-table entries past a
// sequence's pages hold out-of-range garbage), the call run on the interpreter (or on
// the device by the GPU tests through `Runner`), and out / lse compared with the float64
// reference below, which gathers each key through the page table in plain loops.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"

#include <tokamax/ops/PagedAttention.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace paged_test {

using attention_test::Comparison;
using attention_test::HostBuffer;
using attention_test::Tolerance;
using tokamax::DType;
constexpr double kInf = attention_test::kInf;

struct Case {
  std::vector<int64_t> lengths{17};  ///< keys per sequence, the new tokens included
  int64_t tq = 1, n = 4, k = 1, h = 64, hv = 64, page_size = 16;
  DType dtype = DType::BF16;
  std::optional<double> softcap;
  std::optional<std::string> implementation;
  std::optional<tokamax::Config> config;
  int64_t spare_pages = 3;  ///< pages no sequence uses (NaN)
  int64_t extra_entries = 1;  ///< page-table columns past the longest sequence's pages

  int64_t b() const { return int64_t(lengths.size()); }
  int64_t pagesOf(int64_t length) const { return (length + page_size - 1) / page_size; }
  int64_t maxPages() const {
    int64_t m = 1;
    for (int64_t l : lengths)
      m = std::max(m, pagesOf(l));
    return m + extra_entries;
  }
  int64_t numPages() const {
    int64_t total = spare_pages;
    for (int64_t l : lengths)
      total += pagesOf(l);
    return std::max<int64_t>(total, 1);
  }
  DType compute() const { return dtype == DType::F64 ? DType::F64 : DType::F32; }
  double scale() const { return 1.0 / std::sqrt(double(h)); }
  tokamax::PagedAttentionOptions options() const { return {std::nullopt, softcap, implementation, config}; }
  std::string name() const {
    return fmt::format("lengths [{}] Tq {} N {} K {} H {} Hv {} page {} {}{} {} {}", fmt::join(lengths, ", "), tq, n,
                       k, h, hv, page_size, tokamax::dtype_name(dtype),
                       softcap ? fmt::format(" cap {}", *softcap) : "", implementation.value_or("auto"),
                       config ? config->to_json() : "heuristic");
  }
};

/// The cache and the new tokens of a case, on the host.
struct Paged {
  HostBuffer q, kPages, vPages, table, lengths;
  std::vector<std::vector<int64_t>> pages;  ///< each sequence's pages, in order
};

/// A sequence's keys [length, K, H] (or values) written into its pages.
inline void writeSequence(const Case &c, HostBuffer &pagesBuffer, const std::vector<int64_t> &pages,
                          const std::vector<double> &rows, int64_t length, int64_t dim) {
  for (int64_t j = 0; j < length; ++j)
    for (int64_t kh = 0; kh < c.k; ++kh)
      for (int64_t d = 0; d < dim; ++d) {
        const int64_t page = pages[size_t(j / c.page_size)], slot = j % c.page_size;
        pagesBuffer.set(((page * c.page_size + slot) * c.k + kh) * dim + d, rows[size_t((j * c.k + kh) * dim + d)]);
      }
}

inline Paged makePaged(const Case &c, uint64_t seed) {
  const int64_t np = c.numPages(), mp = c.maxPages();
  Paged p{HostBuffer(c.dtype, {c.b(), c.tq, c.n, c.h}, attention_test::randomNormal(size_t(c.b() * c.tq * c.n * c.h),
                                                                                     c.dtype, seed)),
          HostBuffer(c.dtype, {np, c.page_size, c.k, c.h}), HostBuffer(c.dtype, {np, c.page_size, c.k, c.hv}),
          HostBuffer(DType::I32, {c.b(), mp}, std::vector<double>(size_t(c.b() * mp), 0.0)),
          HostBuffer(DType::I32, {c.b()}, std::vector<double>(c.lengths.begin(), c.lengths.end())),
          {}};
  std::vector<int64_t> order(static_cast<size_t>(np));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 7));
  size_t next = 0;
  for (int64_t s = 0; s < c.b(); ++s) {
    const int64_t length = c.lengths[size_t(s)];
    std::vector<int64_t> pages;
    for (int64_t i = 0; i < c.pagesOf(length); ++i)
      pages.push_back(order[next++]);
    for (int64_t i = 0; i < mp; ++i)  // entries past the sequence: garbage, never read
      p.table.set(s * mp + i, i < int64_t(pages.size()) ? double(pages[size_t(i)]) : double(np + 5 + i));
    p.pages.push_back(pages);
  }
  // Each sequence's keys and values (a stream of their own) into its own pages: the
  // sequences in parallel (the decode shapes hold up to 0.5 G values).
  attention_test::parallelChunks(c.b(), 1, attention_test::hostThreads(), [&](int, int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t length = c.lengths[size_t(s)];
      const std::vector<int64_t> &pages = p.pages[size_t(s)];
      writeSequence(c, p.kPages, pages,
                    attention_test::randomNormal(size_t(length * c.k * c.h), c.dtype, seed + 100 + uint64_t(s)),
                    length, c.h);
      writeSequence(c, p.vPages, pages,
                    attention_test::randomNormal(size_t(length * c.k * c.hv), c.dtype, seed + 200 + uint64_t(s)),
                    length, c.hv);
    }
  });
  return p;
}

/// The float64 reference: out [B, Tq, N, Hv] and lse [B, N, Tq], each key read through
/// the page table; query t sits at length - Tq + t and sees keys up to there.
struct Expected {
  std::vector<double> out, lse;
};

inline Expected reference(const Case &c, const Paged &p) {
  const int64_t g = c.n / c.k;
  Expected e{std::vector<double>(size_t(c.b() * c.tq * c.n * c.hv), 0.0),
             std::vector<double>(size_t(c.b() * c.n * c.tq), kInf)};
  const std::vector<double> q = p.q.values(), kPages = p.kPages.values(), vPages = p.vPages.values();
  // Row j of kv head kh of sequence s in a [num_pages, page_size, K, dim] cache.
  auto rowAt = [&](const std::vector<double> &pages, int64_t s, int64_t j, int64_t kh, int64_t dim) {
    const int64_t page = p.pages[size_t(s)][size_t(j / c.page_size)], slot = j % c.page_size;
    return &pages[size_t(((page * c.page_size + slot) * c.k + kh) * dim)];
  };
  // Rows (s, t, n) in parallel, each summed in key order (the same figures whatever the
  // thread count).
  const int64_t rows = c.b() * c.tq * c.n;
  attention_test::parallelChunks(rows, 4, attention_test::hostThreads(), [&](int, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t s = r / (c.tq * c.n), t = r / c.n % c.tq, n = r % c.n;
      const int64_t position = c.lengths[size_t(s)] - c.tq + t, kh = n / g;
      if (position < 0)
        continue;
      const double *qRow = &q[size_t(((s * c.tq + t) * c.n + n) * c.h)];
      std::vector<double> logits;
      for (int64_t j = 0; j <= position; ++j) {
        const double *kRow = rowAt(kPages, s, j, kh, c.h);
        double dot = 0;
        for (int64_t d = 0; d < c.h; ++d)
          dot += qRow[d] * kRow[d];
        double x = dot * c.scale();
        if (c.softcap)
          x = *c.softcap * std::tanh(x / *c.softcap);
        logits.push_back(x);
      }
      const double m = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (double &x : logits)
        sum += (x = std::exp(x - m));
      double *outRow = &e.out[size_t(((s * c.tq + t) * c.n + n) * c.hv)];
      for (int64_t j = 0; j <= position; ++j) {
        const double *vRow = rowAt(vPages, s, j, kh, c.hv);
        for (int64_t d = 0; d < c.hv; ++d)
          outRow[d] += logits[size_t(j)] * vRow[d];
      }
      for (int64_t d = 0; d < c.hv; ++d)
        outRow[d] /= sum;
      e.lse[size_t((s * c.n + n) * c.tq + t)] = m + std::log(sum);
    }
  });
  return e;
}

/// Runs paged_attention (inputs q, k_pages, v_pages, page_table, seq_lengths | out, lse).
using Runner =
    std::function<void(const Case &, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out)>;

inline void interpret(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  const tokamax::TensorView lse = out[1]->view();
  tokamax::paged_attention_host(in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(), in[4]->view(),
                                out[0]->view(), c.options(), &lse);
}

struct Result {
  bool ok = true;
  std::string message;
  HostBuffer out, lse;
};

inline Tolerance lseTolerance(DType d) {
  return d == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(DType::F32);
}

inline Result check(const Case &c, uint64_t seed, const Runner &run = interpret) {
  Paged p = makePaged(c, seed);
  Result r{true, "", HostBuffer(c.dtype, {c.b(), c.tq, c.n, c.hv}), HostBuffer(c.compute(), {c.b(), c.n, c.tq})};
  run(c, {&p.q, &p.kPages, &p.vPages, &p.table, &p.lengths}, {&r.out, &r.lse});
  const Expected e = reference(c, p);
  const Tolerance tol = c.dtype == DType::F64 ? Tolerance{1e-11, 1e-13} : attention_test::tolerance(c.dtype);
  const Comparison co = attention_test::compare("out", r.out.values(), e.out, r.out.shape, tol, 1e-3);
  const Comparison cl = attention_test::compare("lse", r.lse.values(), e.lse, r.lse.shape, lseTolerance(c.dtype));
  r.ok = co.ok && cl.ok;
  r.message = c.name() + "\n" + co.message + "\n" + cl.message;
  return r;
}

} // namespace paged_test
