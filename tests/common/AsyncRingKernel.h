// A kernel that walks the rows of a tensor through a double-buffered ring of
// asynchronous shared-memory copies (TensorArg::load_async), the way the attention
// kernels walk K and V, and uses each block both as a dot operand (transposed, read
// from shared memory by the dot) and elementwise (moved into registers). The unit tests
// run it on the interpreter, the GPU tests on the device; both against float64.
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <vector>

namespace test {

/// How the ring's dots run: mma.sync, wgmma (sm_90a; elsewhere mma.sync), or wgmma
/// issued asynchronously with the elementwise sum placed before its wait.
enum class RingDots { Mma, Wgmma, WgmmaAsync };

struct AsyncRingShape {
  int64_t batch = 2, rows = 100, heads = 3, dim = 40;  ///< k is [batch, rows, heads, dim], q [64, dim]
  int64_t head = 1;                                    ///< the head walked
  static constexpr int64_t kQ = 64, kStep = 32, kDimBlock = 64;
};

/// c[b] = q @ (sum over steps j of k[b, j : j + 32, head, :])^T  ([64, 32], f32), and
/// s[b] = sum over steps of those blocks ([32, 64] f32, columns past dim zero).
inline tokamax::dsl::Kernel async_ring_kernel(const AsyncRingShape &sh, tokamax::DType dtype,
                                              RingDots dots = RingDots::Mma) {
  namespace dsl = tokamax::dsl;
  using tokamax::DType;
  using dsl::Value;
  const int64_t Q = AsyncRingShape::kQ, step = AsyncRingShape::kStep, D = AsyncRingShape::kDimBlock;
  dsl::Kernel k("async_ring", {.num_warps = 4, .mma_rows_per_warp = true, .wgmma_dots = dots != RingDots::Mma});
  auto q = k.input("q", dtype, {Q, sh.dim});
  auto kt = k.input("k", dtype, {sh.batch, sh.rows, sh.heads, sh.dim});
  auto c = k.output("c", DType::F32, {sh.batch, Q, step});
  auto s = k.output("s", DType::F32, {sh.batch, step, D});
  k.grid(sh.batch);
  Value b = k.program_id(0);
  Value qb = q.load({0, 0}, {Q, D});
  dsl::SharedBuffer ring = k.shared_buffer(2);
  auto copy = [&](Value r0, Value slot) { return kt.load_async({b, r0, sh.head, 0}, {1, step, 1, D}, ring, slot); };
  Value slot0 = k.constant(0, DType::I32);
  std::vector<Value> init{k.full({Q, step}, 0.0, DType::F32), k.full({step, D}, 0.0, DType::F32), copy(0, slot0),
                          slot0};
  auto out = k.loop(0, sh.rows, step, init, [&](Value j, std::vector<Value> cur) {
    k.wait_async(0);
    Value other = 1 - cur[3];
    Value next = copy(j + step, other);
    Value acc, sum;
    if (dots == RingDots::WgmmaAsync) {
      Value pending = dsl::dot_async(qb, cur[2].trans(), cur[0]);
      sum = cur[1] + cur[2].to(DType::F32);  // runs while the product does
      acc = dsl::dot_wait(pending);
    } else {
      acc = dsl::dot(qb, cur[2].trans(), cur[0]);
      sum = cur[1] + cur[2].to(DType::F32);
    }
    return std::vector<Value>{acc, sum, next, other};
  });
  k.wait_async(0);
  c.store({b, 0, 0}, out[0].reshape({1, Q, step}));
  s.store({b, 0, 0}, out[1].reshape({1, step, D}));
  return k;
}

/// The float64 references of c and s from the inputs' values (as rounded to dtype).
inline void async_ring_reference(const AsyncRingShape &sh, const std::vector<double> &q,
                                 const std::vector<double> &k, std::vector<double> &c, std::vector<double> &s) {
  const int64_t Q = AsyncRingShape::kQ, step = AsyncRingShape::kStep, D = AsyncRingShape::kDimBlock;
  c.assign(sh.batch * Q * step, 0.0);
  s.assign(sh.batch * step * D, 0.0);
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t row = 0; row < sh.rows; ++row) {
      int64_t r = row % step;
      const double *kr = &k[((b * sh.rows + row) * sh.heads + sh.head) * sh.dim];
      for (int64_t h = 0; h < sh.dim; ++h)
        s[(b * step + r) * D + h] += kr[h];
      for (int64_t i = 0; i < Q; ++i) {
        double dotv = 0;
        for (int64_t h = 0; h < sh.dim; ++h)
          dotv += q[i * sh.dim + h] * kr[h];
        c[(b * Q + i) * step + r] += dotv;
      }
    }
}

} // namespace test
