// Programs adding overlapping blocks into one tensor with TensorArg::atomic_add (what a
// split-K or atomic-gradient kernel does): program p adds its [64, 64] dot result
// a @ b[p] (held in the mma accumulator layout) into block {1, 64, 1, 64} of out
// [2, rows, 3, 64] at (1, 37 p, 1, 0). Blocks overlap; rows past the end are dropped.
// The unit tests run it on the interpreter, the GPU tests on the device; both against
// float64.
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <vector>

namespace test {

struct BlockAtomicShape {
  int64_t rows = 100, programs = 4;
  static constexpr int64_t kBlock = 64, kK = 32, kStride = 37;
};

inline tokamax::dsl::Kernel block_atomic_kernel(const BlockAtomicShape &sh, tokamax::DType dtype) {
  namespace dsl = tokamax::dsl;
  using tokamax::DType;
  const int64_t n = BlockAtomicShape::kBlock, kk = BlockAtomicShape::kK;
  dsl::Kernel k("block_atomic_add", {.num_warps = 4, .mma_rows_per_warp = true});
  auto a = k.input("a", dtype, {n, kk});
  auto b = k.input("b", dtype, {sh.programs, kk, n});
  auto out = k.output("out", DType::F32, {2, sh.rows, 3, n});
  k.grid(sh.programs);
  dsl::Value p = k.program_id(0);
  dsl::Value product = dsl::dot(a.load({0, 0}, {n, kk}), b.load({p, 0, 0}, {1, kk, n}).reshape({kk, n}),
                                k.full({n, n}, 0.0, DType::F32));
  out.atomic_add({1, p * BlockAtomicShape::kStride, 1, 0}, {1, n, 1, n}, product);
  return k;
}

/// out (initially `init`) after every program's add, in float64.
inline std::vector<double> block_atomic_reference(const BlockAtomicShape &sh, const std::vector<double> &a,
                                                  const std::vector<double> &b, std::vector<double> init) {
  const int64_t n = BlockAtomicShape::kBlock, kk = BlockAtomicShape::kK;
  for (int64_t p = 0; p < sh.programs; ++p)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = p * BlockAtomicShape::kStride + i;
      if (row >= sh.rows)
        continue;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t x = 0; x < kk; ++x)
          s += a[i * kk + x] * b[(p * kk + x) * n + j];
        init[((1 * sh.rows + row) * 3 + 1) * n + j] += s;
      }
    }
  return init;
}

} // namespace test
