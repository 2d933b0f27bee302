//===- ReferenceProducts.h - float64 matrix products of the references -*- C++ -*-===//
//
// The three products the float64 references of ragged_dot, the GLU and the cross-entropy
// are made of, on row-major matrices with leading dimensions (a sub-matrix is a pointer
// and its row stride). Each runs in parallel over output tiles (no element has two
// writers) and sums every element in index order of the reduction.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/HostBuffers.h"

#include <algorithm>
#include <cstdint>

namespace reference_products {

/// Output tiles: 16 rows by 256 columns (the tile stays in cache while the other operand
/// streams past), reductions in blocks of 64 where the reduction is split over tiles.
constexpr int64_t kRows = 16, kCols = 256, kBlock = 64;

inline int64_t blocksOf(int64_t n, int64_t block) { return (n + block - 1) / block; }

/// c[m, n] += a[m, k] b[k, n]. Four steps of k per pass over the tile: the same sums in the
/// same order, with a quarter of the tile's loads and stores.
inline void addAB(const double *a, int64_t lda, const double *b, int64_t ldb, double *c, int64_t ldc, int64_t m,
                  int64_t k, int64_t n) {
  const int64_t panels = blocksOf(n, kCols);
  attention_test::parallelChunks(blocksOf(m, kRows) * panels, 1, attention_test::hostThreads(),
                                 [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / panels * kRows, r1 = std::min(m, r0 + kRows);
      const int64_t c0 = t % panels * kCols, cols = std::min(n - c0, kCols);
      int64_t s = 0;
      for (; s + 4 <= k; s += 4) {
        const double *b0 = b + s * ldb + c0, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        for (int64_t i = r0; i < r1; ++i) {
          const double *ai = a + i * lda + s;
          const double a0 = ai[0], a1 = ai[1], a2 = ai[2], a3 = ai[3];
          double *ci = c + i * ldc + c0;
          for (int64_t j = 0; j < cols; ++j)
            ci[j] = ci[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
      }
      for (; s < k; ++s) {
        const double *bs = b + s * ldb + c0;
        for (int64_t i = r0; i < r1; ++i) {
          const double as = a[i * lda + s];
          double *ci = c + i * ldc + c0;
          for (int64_t j = 0; j < cols; ++j)
            ci[j] += as * bs[j];
        }
      }
    }
  });
}

/// c[m, n] += a[m, k] b[n, k]^T: dot products of rows, four rows of a side by side
/// (independent chains hide the adds' latency, each still in index order).
inline void addABt(const double *a, int64_t lda, const double *b, int64_t ldb, double *c, int64_t ldc, int64_t m,
                   int64_t k, int64_t n) {
  const int64_t nBlocks = blocksOf(n, kBlock);
  attention_test::parallelChunks(blocksOf(m, kRows) * nBlocks, 1, attention_test::hostThreads(),
                                 [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / nBlocks * kRows, r1 = std::min(m, r0 + kRows);
      const int64_t j0 = t % nBlocks * kBlock, j1 = std::min(n, j0 + kBlock);
      for (int64_t s0 = 0; s0 < k; s0 += kCols) {
        const int64_t steps = std::min(k - s0, kCols);
        for (int64_t j = j0; j < j1; ++j) {
          const double *bj = b + j * ldb + s0;
          int64_t i = r0;
          for (; i + 4 <= r1; i += 4) {
            const double *a0 = a + i * lda + s0, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            double *ci = c + i * ldc + j;
            double s0v = ci[0], s1v = ci[ldc], s2v = ci[2 * ldc], s3v = ci[3 * ldc];
            for (int64_t s = 0; s < steps; ++s) {
              s0v += a0[s] * bj[s];
              s1v += a1[s] * bj[s];
              s2v += a2[s] * bj[s];
              s3v += a3[s] * bj[s];
            }
            ci[0] = s0v;
            ci[ldc] = s1v;
            ci[2 * ldc] = s2v;
            ci[3 * ldc] = s3v;
          }
          for (; i < r1; ++i) {
            const double *ai = a + i * lda + s0;
            double sum = c[i * ldc + j];
            for (int64_t s = 0; s < steps; ++s)
              sum += ai[s] * bj[s];
            c[i * ldc + j] = sum;
          }
        }
      }
    }
  });
}

/// c[k, n] += a[m, k]^T b[m, n]: tiles of (k, n), four rows of a and b per pass.
inline void addAtB(const double *a, int64_t lda, const double *b, int64_t ldb, double *c, int64_t ldc, int64_t m,
                   int64_t k, int64_t n) {
  const int64_t panels = blocksOf(n, kCols);
  attention_test::parallelChunks(blocksOf(k, kBlock) * panels, 1, attention_test::hostThreads(),
                                 [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t q0 = t / panels * kBlock, q1 = std::min(k, q0 + kBlock);
      const int64_t c0 = t % panels * kCols, cols = std::min(n - c0, kCols);
      int64_t r = 0;
      for (; r + 4 <= m; r += 4) {
        const double *b0 = b + r * ldb + c0, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        for (int64_t q = q0; q < q1; ++q) {
          const double a0 = a[r * lda + q], a1 = a[(r + 1) * lda + q], a2 = a[(r + 2) * lda + q],
                       a3 = a[(r + 3) * lda + q];
          double *cq = c + q * ldc + c0;
          for (int64_t j = 0; j < cols; ++j)
            cq[j] = cq[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
      }
      for (; r < m; ++r) {
        const double *br = b + r * ldb + c0;
        for (int64_t q = q0; q < q1; ++q) {
          const double ar = a[r * lda + q];
          double *cq = c + q * ldc + c0;
          for (int64_t j = 0; j < cols; ++j)
            cq[j] += ar * br[j];
        }
      }
    }
  });
}

} // namespace reference_products
