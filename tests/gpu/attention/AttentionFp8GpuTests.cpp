// GPU numerics of dot_product_attention_fp8 (the device path: op -> implementation ->
// JIT -> launch) against float64 on the fp8 values times their descales, fresh random
// inputs: hopper (fp8 wgmma, V transposed first, P moved into fp8 operands by shuffles)
// at S1 / S2-like shapes with descales, causal, GQA, e4m3 and e5m2, head dims 32-256,
// one query, one key, windows, soft cap, lengths, its search space's other configs;
// reference (sm_89+) beside it. Every call is rerun and compared bit for bit.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/attention/AttentionFp8TestCase.h"

#include <tokamax/ops/AttentionFp8.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <chrono>
#include <optional>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

/// `c` on the device, twice (bit for bit), checked against float64.
void checkOnDevice(const Fp8Case &c) {
  const Dims &d = c.dims;
  const auto start = std::chrono::steady_clock::now();
  Fp8Data data = makeFp8Data(c, hostThreads());
  const double refSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  HostBuffer out(DType::BF16, d.outShape()), lse(DType::F32, d.lseShape());
  std::vector<HostBuffer *> in{&data.q, &data.k, &data.v, &data.q_descale, &data.k_descale, &data.v_descale};
  if (data.q_lengths)
    in.push_back(&*data.q_lengths);
  if (data.kv_lengths)
    in.push_back(&*data.kv_lengths);
  gpu_test::run_twice(in, {&out, &lse}, [&](Stream &stream, const std::vector<Tensor> &t,
                                            const std::vector<Tensor> &o) {
    size_t next = 6;
    const TensorView *ql = data.q_lengths ? &t[next++].view() : nullptr;
    const TensorView *kvl = data.kv_lengths ? &t[next++].view() : nullptr;
    AttentionFp8Descales ds;
    if (c.descales)
      ds = {&t[3].view(), &t[4].view(), &t[5].view()};
    dot_product_attention_fp8(t[0], t[1], t[2], o[0], stream, fp8Options(c, ql, kvl), ds, &o[1].view());
  });
  INFO("float64 reference " << refSeconds << " s");
  checkFp8Results(c, data, out.values(), lse.values(), /*device=*/true);
}

} // namespace

TEST_CASE("attention fp8 on the device: hopper and reference match float64 and rerun bit for bit",
          "[gpu][attention][fp8]") {
  Device &device = Device::get();
  if (!gpu_test::sm90a_or_skip("the hopper fp8 forward"))
    return;
  const std::vector<Fp8Case> cases = {
      {"hopper", {}, DType::F8E4M3, {{2}, 1000, 1500, 8, 2, 128, 128}, {}, true},
      {"hopper", {}, DType::F8E4M3, {{1}, 2048, 2048, 4, 4, 64, 64}, {.is_causal = true}, true, {}, {}, 2},
      {"hopper", {}, DType::F8E5M2, {{2}, 300, 517, 4, 1, 64, 128}, {}, true, {}, {}, 3},
      {"hopper", {}, DType::F8E4M3, {{2}, 333, 900, 4, 2, 128, 128}, {.window = Window{100, 20}, .soft_cap = 20.0},
       true, {333, 100}, {900, 250}, 4},
      {"hopper", {}, DType::F8E4M3, {{1}, 257, 300, 2, 1, 256, 256}, {}, true, {}, {}, 5},
      {"hopper", {}, DType::F8E4M3, {{3}, 1, 1, 2, 1, 32, 32}, {}, false, {}, {}, 6},
      {"hopper", {}, DType::F8E4M3, {{1}, 77, 1, 2, 2, 64, 32}, {.is_causal = true}, true, {}, {}, 7},
      {"hopper", Config().set("block_q", 64).set("block_kv", 32).set("num_warps", 4).set("stages", 3),
       DType::F8E4M3, {{1}, 500, 700, 2, 1, 128, 128}, {.is_causal = true}, true, {}, {}, 8},
      {"hopper", Config().set("block_q", 128).set("block_kv", 256).set("num_warps", 8).set("pingpong", 1),
       DType::F8E4M3, {{1}, 600, 1100, 4, 2, 64, 64}, {}, true, {}, {}, 9},
      {"hopper", Config().set("block_q", 128).set("block_kv", 128).set("num_warps", 8).set("overlap", 1),
       DType::F8E4M3, {{2}, 260, 513, 2, 1, 128, 64}, {}, true, {}, {}, 10},
      // interleave_v: V's keys in the accumulator's column order, P's registers renamed.
      {"hopper", Config().set("block_q", 128).set("block_kv", 128).set("num_warps", 8).set("overlap", 1)
                     .set("pingpong", 1).set("interleave_v", 1),
       DType::F8E4M3, {{2}, 1000, 1500, 8, 2, 128, 128}, {}, true, {}, {}, 13},
      {"hopper", Config().set("block_q", 128).set("block_kv", 128).set("num_warps", 8).set("pingpong", 1)
                     .set("interleave_v", 1),
       DType::F8E5M2, {{1}, 700, 900, 4, 2, 64, 64}, {.is_causal = true}, true, {}, {}, 14},
      {"hopper", Config().set("block_q", 64).set("block_kv", 32).set("num_warps", 4).set("interleave_v", 1),
       DType::F8E4M3, {{2}, 333, 517, 2, 1, 128, 64}, {.window = Window{100, 20}}, true, {333, 100}, {517, 250}, 15},
      {"reference", {}, DType::F8E4M3, {{2}, 100, 150, 4, 2, 128, 128}, {.is_causal = true}, true, {}, {}, 11},
      {"reference", {}, DType::F8E5M2, {{1}, 33, 70, 2, 1, 64, 64}, {}, true, {40}, {9}, 12},
  };
  INFO(device.name());
  for (const Fp8Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { checkOnDevice(c); }
}
