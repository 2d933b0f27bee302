// GPU numerics of paged_attention through the device path (op -> implementation choice
// -> JIT -> launch) against the float64 reference of unit/PagedAttentionTestCase.h:
// the decode benchmark's shapes (GQA 32:8, H 128, bf16; batch 1, 8 and 64 at about
// 4096 keys a sequence, pages of 16 and 64; Tq 1 and 4), every search-space config of
// tile at batch 8, f16 and the reference; every run twice, the second bit for bit the
// first. paged_kv_append on the device writes exactly what the interpreter writes.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/paged_attention/PagedAttentionTestCase.h"

#include <tokamax/ops/PagedAttention.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <vector>

using namespace tokamax;
using namespace paged_test;

namespace {

/// Runs the call on the device twice into NaN-filled outputs (gpu_test::run_twice).
void onDevice(const Case &c, const std::vector<HostBuffer *> &in, const std::vector<HostBuffer *> &out) {
  gpu_test::run_twice(in, out, [&](Stream &stream, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs) {
    const TensorView lse = outputs[1];
    paged_attention(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], outputs[0], stream, c.options(), &lse);
  });
}

void expectOk(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

/// The benchmark's heads at about `context` keys a sequence: lengths differ by a few
/// pages and are not multiples of the page.
Case decodeCase(int64_t batch, int64_t context, int64_t page, int64_t tq) {
  Case c;
  c.lengths.clear();
  for (int64_t s = 0; s < batch; ++s)
    c.lengths.push_back(context - (s * 37) % (3 * page) - (s % 2));
  c.tq = tq, c.n = 32, c.k = 8, c.h = 128, c.hv = 128, c.page_size = page;
  return c;
}

} // namespace

TEST_CASE("paged_attention on the device: the decode shapes match float64", "[gpu][paged_attention]") {
  // Batch 64 once: its float64 reference on the host takes most of the test's time (on
  // an H100 the whole grid passed 7 cases in 60 s, numerics within bounds).
  uint64_t seed = 100;
  for (int64_t batch : {1, 8})
    for (int64_t page : {16, 64})
      for (int64_t tq : {1, 4}) {
        Case c = decodeCase(batch, 4096, page, tq);
        expectOk(check(c, seed++, onDevice));
      }
  expectOk(check(decodeCase(64, 4096, 64, 4), seed++, onDevice));
}

TEST_CASE("paged_attention on the device: every search-space config, f16, the reference",
          "[gpu][paged_attention]") {
  uint64_t seed = 300;
  Case c = decodeCase(8, 1000, 16, 2);
  ArgSpec q{{c.b(), c.tq, c.n, c.h}, c.dtype}, pages{{c.numPages(), c.page_size, c.k, c.h}, c.dtype};
  const BoundArgs args = bind_paged_attention(
      {q, pages, pages, {{c.b(), c.maxPages()}, DType::I32}, {{c.b()}, DType::I32}, q, paged_attention_lse_spec(q)});
  for (const auto &impl : paged_attention_op().implementations())
    for (const Config &config : impl->search_space(args)) {
      c.implementation = impl->name(), c.config = config;
      expectOk(check(c, seed++, onDevice));
    }
  Case half = decodeCase(3, 777, 64, 5);
  half.dtype = DType::F16, half.softcap = 30.0;
  expectOk(check(half, seed++, onDevice));
  // Odd lengths: a key short of a page, one past, exactly Tq.
  Case odd;
  odd.lengths = {15, 17, 3, 200}, odd.tq = 3, odd.n = 8, odd.k = 2, odd.h = 128, odd.hv = 128;
  expectOk(check(odd, seed++, onDevice));
}

TEST_CASE("paged_kv_append on the device writes what the interpreter writes", "[gpu][paged_attention]") {
  for (const char *impl : {"tile", "reference"}) {
    Case c = decodeCase(8, 300, 16, 3);
    Paged p = makePaged(c, 500);
    HostBuffer k(c.dtype, {c.b(), c.tq, c.k, c.h}, attention_test::randomNormal(size_t(c.b() * c.tq * c.k * c.h), c.dtype, 501));
    HostBuffer v(c.dtype, {c.b(), c.tq, c.k, c.hv},
                 attention_test::randomNormal(size_t(c.b() * c.tq * c.k * c.hv), c.dtype, 502));
    Stream stream = Stream::create(Device::get());
    Tensor kd = gpu_test::upload(k), vd = gpu_test::upload(v), table = gpu_test::upload(p.table),
           lengths = gpu_test::upload(p.lengths), kPages = gpu_test::upload(p.kPages),
           vPages = gpu_test::upload(p.vPages);
    paged_kv_append(kd, vd, table, lengths, kPages, vPages, stream, {impl, std::nullopt});
    stream.synchronize();
    HostBuffer kGot = p.kPages, vGot = p.vPages;
    kPages.copy_to_host(kGot.bytes(), kGot.nbytes());
    vPages.copy_to_host(vGot.bytes(), vGot.nbytes());
    paged_kv_append_host(k.view(), v.view(), p.table.view(), p.lengths.view(), p.kPages.view(), p.vPages.view(),
                         {impl, std::nullopt});
    INFO(impl);
    CHECK(kGot.storage == p.kPages.storage);
    CHECK(vGot.storage == p.vPages.storage);
  }
}
