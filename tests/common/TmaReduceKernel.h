// Programs adding overlapping blocks into one f32 tensor with TensorArg::tma_reduce_add
// (what a kernel accumulating a gradient over programs does, e.g. attention's dQ):
// program p adds its [64, 64] dot result a @ b[p] (the mma accumulator layout, every
// warp along M) into out [rows, cols] at (29 p, 40 (p % 2)). Neighbouring programs'
// blocks overlap, and the last ones hang over the bottom and right edges (dropped).
// The unit tests run it on the interpreter and assemble its PTX; against float64.
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <vector>

namespace test {

struct TmaReduceShape {
  int64_t rows = 100, cols = 72, programs = 4;
  static constexpr int64_t kBlock = 64, kK = 32, kRowStride = 29, kColStep = 40;
  int64_t row0(int64_t p) const { return p * kRowStride; }
  int64_t col0(int64_t p) const { return p % 2 * kColStep; }
};

inline tokamax::dsl::Kernel tma_reduce_kernel(const TmaReduceShape &sh, tokamax::DType dtype) {
  namespace dsl = tokamax::dsl;
  using tokamax::DType;
  const int64_t n = TmaReduceShape::kBlock, kk = TmaReduceShape::kK;
  dsl::Kernel k("tma_reduce_add", {.num_warps = 4, .mma_rows_per_warp = true});
  auto a = k.input("a", dtype, {n, kk});
  auto b = k.input("b", dtype, {sh.programs, kk, n});
  auto out = k.output("out", DType::F32, {sh.rows, sh.cols});
  k.grid(sh.programs);
  dsl::Value p = k.program_id(0);
  dsl::Value product = dsl::dot(a.load({0, 0}, {n, kk}), b.load({p, 0, 0}, {1, kk, n}).reshape({kk, n}),
                                k.full({n, n}, 0.0, DType::F32));
  out.tma_reduce_add({p * TmaReduceShape::kRowStride, p % 2 * TmaReduceShape::kColStep}, product);
  return k;
}

/// out (initially `init`) after every program's add, in float64.
inline std::vector<double> tma_reduce_reference(const TmaReduceShape &sh, const std::vector<double> &a,
                                                const std::vector<double> &b, std::vector<double> init) {
  const int64_t n = TmaReduceShape::kBlock, kk = TmaReduceShape::kK;
  for (int64_t p = 0; p < sh.programs; ++p)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = sh.row0(p) + i, col = sh.col0(p) + j;
        if (row >= sh.rows || col >= sh.cols)
          continue;
        double s = 0;
        for (int64_t x = 0; x < kk; ++x)
          s += a[i * kk + x] * b[(p * kk + x) * n + j];
        init[row * sh.cols + col] += s;
      }
  return init;
}

} // namespace test
