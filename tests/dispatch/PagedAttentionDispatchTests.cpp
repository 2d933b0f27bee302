// paged_attention and paged_kv_append through the device path (under the null driver on
// machines with no GPU): every launch's arguments pass the loaded kernel's checks (the
// interpreter does not check a view's shape against the kernel's: q, out and lse are
// passed in the kernels' [B, Tq, K, G, ...] shapes), for the tile split and combine
// kernels, one split, no ring, the reference's gather and dense kernels and both appends;
// a repeated call replays its cached plan.
#include "dispatch/DispatchTestUtil.h"

#include <tokamax/ops/PagedAttention.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>

#include <catch2/catch.hpp>

#include <vector>

using namespace tokamax;

namespace {

Tensor random(std::vector<int64_t> shape, DType dtype, uint32_t seed) {
  return standardize({std::move(shape), dtype}, seed, Device::get());
}

Tensor ints(std::vector<int64_t> shape, const std::vector<int32_t> &values) {
  Tensor t = Tensor::empty(shape, DType::I32);
  t.copy_from_host(values.data(), values.size() * sizeof(int32_t));
  return t;
}

} // namespace

TEST_CASE("paged_attention and paged_kv_append launch on the device path and replay their plans",
          "[paged_attention]") {
  Stream stream = Stream::create(Device::get());
  // 2 sequences of 40 and 17 keys on pages of 16, 8 query heads on 2 kv heads, Tq 2.
  Tensor q = random({2, 2, 8, 64}, DType::BF16, 1), kPages = random({6, 16, 2, 64}, DType::BF16, 2),
         vPages = random({6, 16, 2, 64}, DType::BF16, 3);
  Tensor k = random({2, 2, 2, 64}, DType::BF16, 4), v = random({2, 2, 2, 64}, DType::BF16, 5);
  Tensor table = ints({2, 3}, {0, 1, 2, 3, 4, 5}), lengths = ints({2}, {40, 17});
  Tensor out = Tensor::empty({2, 2, 8, 64}, DType::BF16), lse = Tensor::empty({2, 8, 2}, DType::F32);
  const TensorView lseView = lse.view();
  auto tile = [](int64_t splits, int64_t stages) {
    return Config{{"block_rows", 16}, {"pages_per_step", 1}, {"num_splits", splits}, {"num_warps", 4},
                  {"stages", stages}};
  };
  const std::vector<PagedAttentionOptions> calls{{.implementation = "tile"},
                                                 {.implementation = "tile", .config = tile(1, 3)},
                                                 {.implementation = "tile", .config = tile(3, 1)},
                                                 {.logits_soft_cap = 10.0, .implementation = "reference"}};
  for (const PagedAttentionOptions &o : calls) {
    auto call = [&] { paged_attention(q, kPages, vPages, table, lengths, out, stream, o, &lseView); };
    INFO((o.config ? o.config->to_json() : *o.implementation));
    CHECK_NOTHROW(call());
    CHECK(test::cache_outcome(call).hit());
  }
  for (const char *impl : {"tile", "reference"}) {
    auto call = [&] { paged_kv_append(k, v, table, lengths, kPages, vPages, stream, {impl, std::nullopt}); };
    INFO(impl);
    CHECK_NOTHROW(call());
    CHECK(test::cache_outcome(call).hit());
  }
  stream.synchronize();
}
