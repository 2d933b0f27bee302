// GPU numerics of dot_product_attention (forward and VJP) through the device path (op ->
// implementation choice -> JIT -> launch) against the float64 reference of
// unit/AttentionReference.h, computed on every host core, at shapes from one query or key
// to 4097 (T != S), MHA / GQA 8:2 / MQA 8:1, H from 32 to 256 with Hv != H, every option,
// bf16 / f16 on "tile" and "chunked", f32 / f64 on "chunked" and "reference"; every
// case's forward and VJP rerun and compared bit for bit. Sinks (and dsinks) on tile and
// hopper at the device cases' shapes and S1's head dim with a small batch.
#include <catch2/catch.hpp>

#include "common/DeviceRuns.h"

#include "unit/attention/AttentionTestCase.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <chrono>
#include <functional>
#include <optional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

using gpu_test::download;
using gpu_test::upload;

/// A device tensor holding NaN (floats), so unwritten elements show.
Tensor poisoned(DType d, const std::vector<int64_t> &shape) { return upload(HostBuffer(d, shape)); }

struct DeviceRun {
  Results results;
  bool same_bits = true;  ///< the later forwards and VJPs reproduced every output bit for bit
  std::string differing;  ///< the outputs that did not
  double seconds = 0;     ///< every run, with the first call's compilation
};

/// The case on the device `runs` times (each into fresh poisoned outputs).
DeviceRun runOnDevice(const Case &c, const CaseData &data, Stream &stream, int runCount = 2) {
  const Dims &d = c.dims;
  const auto start = std::chrono::steady_clock::now();
  // BNTH: the tensors go over in that layout and the outputs come back turned to BTNH.
  auto layout = [&](const HostBuffer &b) { return c.bnth ? swapSeqHeads(b) : b; };
  auto shaped = [&](std::vector<int64_t> s) {
    if (c.bnth)
      std::swap(s[s.size() - 3], s[s.size() - 2]);
    return s;
  };
  Tensor q = upload(layout(data.q)), k = upload(layout(data.k)), v = upload(layout(data.v));
  std::optional<Tensor> bias, mask, ql, kvl, sinks, dout;
  for (auto [host, device] : {std::pair{&data.bias, &bias}, {&data.mask, &mask}, {&data.q_lengths, &ql},
                              {&data.kv_lengths, &kvl}, {&data.sinks, &sinks}})
    if (*host)
      device->emplace(upload(**host));
  if (c.vjp)
    dout.emplace(upload(layout(data.dout)));
  auto view = [](const std::optional<Tensor> &t) { return t ? &t->view() : nullptr; };
  AttentionOptions options = apiOptions(c, view(bias), view(mask), view(ql), view(kvl), view(sinks));

  std::vector<std::vector<HostBuffer>> runs;
  for (int run = 0; run < runCount; ++run) {
    Tensor out = poisoned(c.dtype, shaped(d.outShape())), lse = poisoned(lseDtype(c.dtype), d.lseShape());
    dot_product_attention(q, k, v, out, stream, options, &lse.view());
    std::vector<HostBuffer> results;
    if (c.vjp) {
      Tensor dq = poisoned(c.dtype, shaped(d.qShape())), dk = poisoned(c.dtype, shaped(d.kShape())),
             dv = poisoned(c.dtype, shaped(d.vShape()));
      std::optional<Tensor> dbias, dsinks;
      if (bias)
        dbias.emplace(poisoned(bias->dtype(), data.bias->shape));
      if (sinks)
        dsinks.emplace(poisoned(DType::F32, data.sinks->shape));
      AttentionOptions vjpOptions = options;
      if (c.vjp_config)
        vjpOptions.config = c.vjp_config;
      dot_product_attention_vjp(*dout, q, k, v, out, lse, dq, dk, dv, stream, vjpOptions, view(dbias), view(dsinks));
      stream.synchronize();
      results = {layout(download(out)), download(lse), layout(download(dq)), layout(download(dk)),
                 layout(download(dv))};
      if (dbias)
        results.push_back(download(*dbias));
      if (dsinks)  // (after dbias where both are)
        results.push_back(download(*dsinks));
    } else {
      stream.synchronize();
      results = {layout(download(out)), download(lse)};
    }
    runs.push_back(std::move(results));
  }
  DeviceRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<const char *> names = {"out", "lse", "dq", "dk", "dv"};
  std::vector<std::vector<double> *> into = {&r.results.out, &r.results.lse, &r.results.dq, &r.results.dk,
                                             &r.results.dv};
  if (bias && c.vjp)
    names.push_back("dbias"), into.push_back(&r.results.dbias);
  if (sinks && c.vjp)
    names.push_back("dsinks"), into.push_back(&r.results.dsinks);
  for (size_t i = 0; i < runs[0].size(); ++i)
    for (size_t later = 1; later < runs.size(); ++later)
      if (runs[0][i].storage != runs[later][i].storage) {
        r.same_bits = false;
        r.differing += std::string(r.differing.empty() ? "" : ", ") + names[i];
        break;
      }
  for (size_t i = 0; i < runs[0].size(); ++i)
    *into[i] = runs[0][i].values();
  return r;
}

/// Each case (a section of its own) against float64, and its reruns (`runs` in all) bit
/// for bit. `mayDiffer` names the outputs, as DeviceRun::differing lists them ("dq"), whose
/// bits may differ between reruns: the reruns reproduce every output or differ in exactly
/// those.
void checkOnDevice(const std::vector<Case> &cases, Stream &stream, std::string_view mayDiffer = {}, int runs = 2) {
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      Outputs ref = Reference(c.dims, c.options, data.inputs).run(hostThreads());
      DeviceRun run = runOnDevice(c, data, stream, runs);
      checkResults(c, ref, run.results, &data.inputs);
      INFO("outputs that differ between runs: " << run.differing);
      CHECK((run.same_bits || run.differing == mayDiffer));
    }
}

Case makeCase(const char *impl, DType dtype, Dims dims) {
  Case c;
  c.implementation = impl;
  c.dtype = dtype;
  c.dims = std::move(dims);
  return c;
}

/// ~12 cases covering T, S in {1, 17, 128, 1000, 4097} (T != S), N = 3 K = 1, GQA 8:2,
/// MQA 8:1, H in {32, 64, 128, 256} with Hv != H, each option, each implementation and
/// dtype. The float64 reference of all of them is ~1e11 multiply-adds.
std::vector<Case> deviceCases() {
  std::vector<Case> cases;
  auto add = [&](Case c, auto edit) {
    edit(c);
    c.seed = cases.size() + 1;
    cases.push_back(std::move(c));
  };
  auto plain = [](Case &) {};
  const DType bf16 = DType::BF16, f16 = DType::F16, f32 = DType::F32, f64 = DType::F64;
  add(makeCase("tile", bf16, {.batch = {2}, .t = 1, .s = 4097, .n = 8, .k = 1, .h = 128, .hv = 128}), plain);
  add(makeCase("tile", bf16, {.batch = {1}, .t = 4097, .s = 1000, .n = 8, .k = 2, .h = 128, .hv = 128}),
      [](Case &c) { c.bias_dims = "bnts"; });
  add(makeCase("tile", f16, {.batch = {1}, .t = 1000, .s = 4097, .n = 8, .k = 2, .h = 128, .hv = 64}),
      [](Case &c) { c.options.window = Window{256, 64}, c.kv_lengths = {3000}; });
  add(makeCase("tile", bf16, {.batch = {3}, .t = 17, .s = 128, .n = 8, .k = 1, .h = 256, .hv = 256}),
      [](Case &c) { c.mask_dims = "bts", c.q_lengths = {17, 9, 0}; });
  add(makeCase("tile", bf16, {.batch = {1}, .t = 1000, .s = 4097, .n = 3, .k = 1, .h = 256, .hv = 128}),
      [](Case &c) { c.options.scale = 0.1, c.options.soft_cap = 2.0; });
  add(makeCase("tile", f16, {.batch = {4}, .t = 17, .s = 1, .n = 8, .k = 2, .h = 32, .hv = 32}), plain);
  add(makeCase("chunked", bf16, {.batch = {1}, .t = 4097, .s = 1000, .n = 3, .k = 1, .h = 64, .hv = 64}),
      [](Case &c) { c.options.is_causal = true; });
  add(makeCase("chunked", f16, {.batch = {2}, .t = 128, .s = 4097, .n = 8, .k = 2, .h = 128, .hv = 128}),
      [](Case &c) { c.options.is_causal = true, c.q_lengths = {100, 128}, c.kv_lengths = {4097, 77}; });
  add(makeCase("chunked", f32, {.batch = {4}, .t = 128, .s = 17, .n = 3, .k = 1, .h = 32, .hv = 64}),
      [](Case &c) { c.bias_dims = "bnts", c.options.soft_cap = 3.0; });
  add(makeCase("chunked", f32, {.batch = {1}, .t = 4097, .s = 17, .n = 3, .k = 1, .h = 64, .hv = 32}),
      [](Case &c) { c.options.window = Window{8, 8}, c.mask_dims = "bnts", c.mask_empty_row = true; });
  add(makeCase("chunked", f64, {.batch = {2}, .t = 1000, .s = 128, .n = 8, .k = 2, .h = 64, .hv = 128}),
      [](Case &c) { c.options.is_causal = true, c.bias_dims = "ns"; });
  add(makeCase("chunked", f64, {.batch = {2}, .t = 1, .s = 17, .n = 8, .k = 1, .h = 256, .hv = 32}), plain);
  add(makeCase("reference", f32, {.batch = {2}, .t = 128, .s = 1000, .n = 3, .k = 1, .h = 128, .hv = 128}),
      [](Case &c) {
        c.options = {.is_causal = true, .window = Window{std::nullopt, 16}, .soft_cap = 4.0};
        c.bias_dims = "nts", c.bias_dtype = DType::F32;
      });
  add(makeCase("reference", f64, {.batch = {1}, .t = 4097, .s = 128, .n = 8, .k = 1, .h = 64, .hv = 64}),
      [](Case &c) { c.mask_dims = "ts", c.kv_lengths = {100}; });
  return cases;
}

} // namespace

TEST_CASE("attention on the device matches float64 and reruns bit for bit", "[gpu][attention]") {
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  const bool tileRuns = attention_op().implementation("tile").supported_on(device);
  if (!tileRuns)
    WARN("skipped: the tile attention kernels need sm_80+, this GPU is " << device.arch());
  for (const Case &c : deviceCases()) {
    if (c.implementation == "tile" && !tileRuns)
      continue;
    DYNAMIC_SECTION(describe(c)) {  // each case in a section: one that throws fails alone
      CaseData data = makeData(c);
      const auto start = std::chrono::steady_clock::now();
      Outputs ref = Reference(c.dims, c.options, data.inputs).run(hostThreads());
      const double refSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      DeviceRun run = runOnDevice(c, data, stream);
      INFO("device " << run.seconds << " s (two runs), reference " << refSeconds << " s");
      checkResults(c, ref, run.results);
      INFO("outputs that differ between runs: " << run.differing);
      CHECK(run.same_bits);
    }
  }
}

TEST_CASE("attention with its products on wgmma matches float64 and reruns bit for bit", "[gpu][attention][wgmma]") {
  Device &device = Device::get();
  if (!gpu_test::sm90a_or_skip("wgmma"))
    return;
  Stream stream = Stream::create(device);
  // The tile cases (H 32 to 256, Hv != H, GQA, every option) on the cp.async ring with
  // "wgmma": 1, forward and VJP; and the bench's blocks at H 64 and 128.
  std::vector<Case> cases;
  for (Case c : deviceCases())
    if (c.implementation == "tile" && c.dims.h % 8 == 0 && c.dims.hv % 8 == 0) {
      const bool wide = std::max(c.dims.h, c.dims.hv) >= 256;
      c.config = Config{{"block_q", 64}, {"block_kv", wide ? 32 : 64}, {"num_warps", wide ? 8 : 4},
                        {"async_copy", 1}, {"wgmma", 1}};
      cases.push_back(c);
    }
  // (The 4-warp 64 x 64 VJP at H 64 is refused: wrong dk / dv on an H100, an open bug.)
  for (int64_t h : {64, 128})
    for (Config config : {Config{{"block_q", 128}, {"block_kv", 64}, {"num_warps", 8}},
                          Config{{"block_q", 64}, {"block_kv", h == 64 ? 32 : 64}, {"num_warps", 4}, {"stages", 3}}}) {
      config.set("async_copy", 1);
      config.set("wgmma", 1);
      Case c = makeCase("tile", DType::BF16, {.batch = {2}, .t = 1000, .s = 777, .n = 4, .k = 2, .h = h, .hv = h});
      c.options.is_causal = h == 128;
      c.config = config;
      cases.push_back(c);
    }
  checkOnDevice(cases, stream);
}

namespace {

/// A hopper case of the device tests' shape (2 batch rows, T 1000 not a multiple of the
/// query block, S 768, GQA 4:2), bf16 or f16 alternating with `index`.
Case hopperCase(int index, int64_t h, int64_t hv) {
  return makeCase("hopper", index % 2 ? DType::F16 : DType::BF16,
                  {.batch = {2}, .t = 1000, .s = index % 2 ? 700 : 768, .n = 4, .k = 2, .h = h, .hv = hv});
}

/// The hopper forward (and the VJP after it, on one fixed config) at H 64 and 128, three
/// variants each: unmasked, causal, then query lengths {1000, 517} with `kvLengths`;
/// `config(h, index, variant)` gives each case's forward config (index counts the cases).
std::vector<Case> forwardVariants(std::vector<int32_t> kvLengths,
                                  const std::function<Config(int64_t, int, int)> &config) {
  std::vector<Case> cases;
  int index = 0;
  for (int64_t h : {64, 128})
    for (int variant = 0; variant < 3; ++variant, ++index) {
      Case c = hopperCase(index, h, h);
      c.options.is_causal = variant == 1;
      if (variant == 2)
        c.q_lengths = {1000, 517}, c.kv_lengths = kvLengths;
      c.config = config(h, index, variant);
      c.vjp_config = Config{{"block_q", 64}, {"block_kv", 64}, {"num_warps", 8}, {"stages", 2}};
      cases.push_back(c);
    }
  return cases;
}

/// `h` with a second batch row of +inf after its first (and only) one.
HostBuffer withInfiniteRow(const HostBuffer &h) {
  std::vector<int64_t> shape = h.shape;
  shape[0] *= 2;
  std::vector<double> values = h.values();
  values.resize(values.size() * 2, std::numeric_limits<double>::infinity());
  return HostBuffer(h.dtype, shape, values);
}

} // namespace

TEST_CASE("attention hopper forward and VJP match float64 and rerun bit for bit", "[gpu][attention][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  // Every option (bias with dbias, soft cap), GQA, Hv != H, T and S (700) not multiples
  // of the blocks, several key blocks, 4 and 8 consumer warps, 2-4 ring stages. The VJP
  // holds 16 x num_warps rows and steps 32 or 64.
  std::vector<Case> cases;
  int index = 0;
  for (int64_t h : {64, 128})
    for (int variant = 0; variant < 5; ++variant, ++index) {
      Case c = hopperCase(index, h, variant == 3 ? 64 : h);
      c.options.is_causal = variant == 1;
      if (variant == 2)
        c.options.window = Window{100, 20};
      if (variant == 3)
        c.q_lengths = {1000, 517}, c.kv_lengths = {700, 768};
      if (variant == 4)
        c.bias_dims = "bnts", c.options.soft_cap = 20.0;
      const int64_t warps = index % 3 ? 8 : 4;
      const int64_t bkv = index % 2 ? 64 : 128;
      // 4 stages of 128-key K / V blocks at H 128 pass the shared-memory limit.
      c.config = Config{{"block_q", 16 * warps}, {"block_kv", bkv}, {"num_warps", warps},
                        {"stages", bkv == 128 && h == 128 ? 2 : 2 + index % 3}};
      if (variant % 2 == 0)
        c.config->set("overlap", 1);  // each step's Q K^T before the previous step's P V
      c.vjp_config = Config{{"block_q", index % 2 ? 32 : 64}, {"block_kv", 64}, {"num_warps", warps},
                            {"stages", 2 + index % 2}};
      cases.push_back(c);
    }
  // One query against one 16-key block (causal), S of two 16-key blocks with T 17, and S
  // 5 and 70 (one partial key block, and a partial last one): the heuristic configs.
  for (auto [t, s] : {std::pair<int64_t, int64_t>{1, 16}, {17, 32}, {9, 5}, {40, 70}}) {
    Case c = makeCase("hopper", DType::BF16, {.batch = {3}, .t = t, .s = s, .n = 4, .k = 2, .h = 64, .hv = 64});
    c.options.is_causal = t == 1;
    cases.push_back(c);
  }
  // The heuristic at 8 warps: ping-pong (with overlap where no pair is hidden), the VJP's
  // 128-key dq steps.
  for (bool causal : {false, true}) {
    Case c = makeCase("hopper", DType::BF16, {.batch = {2}, .t = 1000, .s = 768, .n = 4, .k = 2, .h = 128, .hv = 128});
    c.options.is_causal = causal;
    cases.push_back(c);
  }
  checkOnDevice(cases, stream);
}

/// The fused-dq VJP config both fused-dq device tests run.
const Config kFusedDqConfig{{"block_q", 64}, {"block_kv", 128}, {"num_warps", 4}, {"stages", 2}, {"fused_dq", 1}};

TEST_CASE("attention hopper: the opt-in fused-dq VJP (TMA reduce-adds) matches float64 on the device",
          "[gpu][attention][tma_ring][fused_dq]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  // T and S not multiples of the steps, GQA, causal, Hv != H, lengths; deterministic =
  // false: the adds unordered (the ordered ones: the test below).
  std::vector<Case> cases;
  for (int variant = 0; variant < 4; ++variant) {
    Case c = makeCase("hopper", DType::BF16,
                      {.batch = {2}, .t = 1000, .s = 700, .n = 4, .k = 2, .h = 64, .hv = variant == 2 ? 32 : 64});
    c.options.is_causal = variant == 1;
    if (variant == 3)
      c.q_lengths = {1000, 517}, c.kv_lengths = {700, 333};
    c.vjp_config = kFusedDqConfig;
    c.deterministic = false;
    c.seed = 70 + variant;
    cases.push_back(c);
  }
  // dq's adds land in no fixed order; every other output reruns bit for bit.
  checkOnDevice(cases, stream, "dq");
}

TEST_CASE("attention hopper: the fused-dq VJP with ordered adds (deterministic) matches float64 and reruns bit for "
          "bit on the device",
          "[gpu][attention][tma_ring][fused_dq]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  // AttentionOptions::deterministic (the default): each query block's dS K adds wait for
  // the key blocks before them (semaphores), so dq reruns bit for bit (three runs). The
  // seed's shape, causal or not; T and S not multiples of the steps, GQA and MQA, a left
  // window (the first key block that meets a query block is not 0), lengths, Hv != H.
  std::vector<Case> cases;
  auto add = [&](Dims dims, auto edit) {
    Case c = makeCase("hopper", DType::BF16, std::move(dims));
    edit(c);
    c.vjp_config = kFusedDqConfig;
    c.seed = 90 + cases.size();
    cases.push_back(c);
  };
  const Dims seed{.batch = {2}, .t = 2048, .s = 2048, .n = 16, .k = 16, .h = 64, .hv = 64};
  add(seed, [](Case &) {});
  add(seed, [](Case &c) { c.options.is_causal = true; });
  add({.batch = {2}, .t = 1000, .s = 700, .n = 4, .k = 2, .h = 64, .hv = 64},
      [](Case &c) { c.options.is_causal = true; });
  add({.batch = {2}, .t = 1000, .s = 1300, .n = 4, .k = 2, .h = 64, .hv = 64}, [](Case &c) {
    c.options.window = Window{300, 40}, c.q_lengths = {1000, 517}, c.kv_lengths = {1300, 1};
  });
  add({.batch = {1}, .t = 513, .s = 1025, .n = 8, .k = 1, .h = 64, .hv = 32}, [](Case &c) {
    c.options.is_causal = true, c.options.window = Window{200, std::nullopt};
  });
  checkOnDevice(cases, stream, {}, /*runs=*/3);
}

TEST_CASE("attention hopper: blocks past T and S read zeros, never the next batch row's", "[gpu][attention][tma_ring]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  // Batch row 1 holds +inf in q, k, v and dout: a block of row 0 reaching past T = 40 or
  // S = 70 into row 1 (forward: K / V; dk/dv: Q / dO) would bring 0 x inf = NaN into row
  // 0's outputs or gradients. Row 0 must match the reference of row 0 alone.
  for (bool causal : {false, true}) {
    Case one = makeCase("hopper", DType::BF16, {.batch = {1}, .t = 40, .s = 70, .n = 4, .k = 2, .h = 64, .hv = 64});
    one.options.is_causal = causal;
    one.seed = causal ? 71 : 70;
    CaseData data = makeData(one);
    Outputs ref = Reference(one.dims, one.options, data.inputs).run(hostThreads());
    Case two = one;
    two.dims.batch = {2};
    CaseData both;
    both.q = withInfiniteRow(data.q), both.k = withInfiniteRow(data.k), both.v = withInfiniteRow(data.v);
    both.dout = withInfiniteRow(data.dout);
    DeviceRun run = runOnDevice(two, both, stream);
    auto firstHalf = [](const std::vector<double> &v) { return std::vector<double>(v.begin(), v.begin() + v.size() / 2); };
    Results rowZero{firstHalf(run.results.out), firstHalf(run.results.lse), firstHalf(run.results.dq),
                    firstHalf(run.results.dk),  firstHalf(run.results.dv),  {}};
    INFO((causal ? "causal" : "no mask"));
    checkResults(one, ref, rowZero);
  }
}

TEST_CASE("attention hopper forward with ping-pong warpgroups matches float64 and reruns bit for bit",
          "[gpu][attention][pingpong]") {
  // Its own case (and tag): turns are named barriers between the consumer warpgroups, and
  // a schedule that never hands a turn over would hang here, not in the case above.
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  checkOnDevice(forwardVariants({700, 768},
                                [](int64_t, int index, int) {
                                  Config c{{"block_q", 128}, {"block_kv", index % 2 ? 64 : 128}, {"num_warps", 8},
                                           {"stages", 2}, {"pingpong", 1}};
                                  if (index % 3 != 2)
                                    c.set("overlap", 1);
                                  return c;
                                }),
                stream);
}

TEST_CASE("attention hopper forward with exponentials on the FMA pipes matches float64 and reruns bit for bit",
          "[gpu][attention][exp2_fma]") {
  // Shares of the softmax's exp2 computed by tile.exp2's polynomial: 1, 2, 4 and all 8
  // eighths, with the masks that send -inf through it (causal, lengths) and a soft cap.
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  std::vector<Case> cases;
  int index = 0;
  for (int64_t h : {64, 128})
    for (int64_t share : {1, 2, 4, 8}) {
      Case c = hopperCase(index++, h, h);
      c.options.is_causal = share == 2;
      if (share == 4)
        c.q_lengths = {1000, 517}, c.kv_lengths = {700, 1};
      if (share == 8)
        c.options.soft_cap = 30.0;
      c.config = Config{{"block_q", 128}, {"block_kv", 128}, {"num_warps", 8}, {"stages", 2}, {"pingpong", 1},
                        {"exp2_fma", share}};
      if (share != 2)
        c.config->set("overlap", 1);
      c.vjp_config = Config{{"block_q", 64}, {"block_kv", 64}, {"num_warps", 8}, {"stages", 2}};
      cases.push_back(c);
    }
  checkOnDevice(cases, stream);
}

TEST_CASE("attention hopper forward with two programs an SM matches float64 and reruns bit for bit",
          "[gpu][attention][blocks_per_sm]") {
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  checkOnDevice(forwardVariants({700, 1},
                                [](int64_t h, int, int variant) {
                                  Config c{{"block_q", 64}, {"block_kv", h == 64 ? 128 : 64}, {"num_warps", 4},
                                           {"stages", 2}, {"blocks_per_sm", 2}};
                                  if (variant == 0)
                                    c.set("overlap", 1);
                                  return c;
                                }),
                stream);
}

TEST_CASE("attention hopper VJP with its row statistics loaded a step ahead matches float64 and reruns bit for bit",
          "[gpu][attention][stats_ahead]") {
  // "stats_ahead": each dk/dv step's lse and delta loaded by the step before, carried in
  // the scores' layout (past the last step, rows of the next head or padding, unused):
  // head dim 64 with 64-query steps, 128 with 32 (the check's reach), Hv 64 and 32,
  // causal, lengths with an empty key range, GQA, bf16 and f16, odd T and S.
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  std::vector<Case> cases;
  for (int variant = 0; variant < 6; ++variant) {
    const int64_t h = variant < 4 ? 64 : 128;
    Case c = hopperCase(variant, h, variant == 3 ? 32 : h);
    c.options.is_causal = variant == 1 || variant == 3 || variant == 5;
    if (variant == 2)
      c.q_lengths = {1000, 517}, c.kv_lengths = {700, 1};
    c.vjp_config = Config{{"block_q", h == 64 ? 64 : 32}, {"block_kv", 128}, {"num_warps", 8}, {"stages", 2},
                          {"stats_ahead", 1}};
    cases.push_back(c);
  }
  checkOnDevice(cases, stream);
}

TEST_CASE("attention hopper's heuristic configs match float64 and rerun bit for bit", "[gpu][attention][tma_ring]") {
  // No config: the heuristics' own picks (at head dim 64 without a hidden pair, 256-key
  // steps without overlap), at odd T and S, GQA, bf16 and f16, causal or not.
  if (!gpu_test::sm90a_or_skip("the hopper implementation"))
    return;
  Stream stream = Stream::create(Device::get());
  std::vector<Case> cases;
  int index = 0;
  for (int64_t h : {64, 128})
    for (bool causal : {false, true}) {
      Case c = hopperCase(index++, h, h);
      c.options.is_causal = causal;
      cases.push_back(c);
    }
  checkOnDevice(cases, stream);
}

TEST_CASE("attention's automatic choice and hopper's reach on the device", "[gpu][attention]") {
  Device &device = Device::get();
  auto specs = [](DType d) {
    return AttentionSpecs{.q = {{2, 128, 8, 128}, d}, .k = {{2, 256, 2, 128}, d}, .v = {{2, 256, 2, 128}, d},
                          .out = {{2, 128, 8, 128}, d}, .lse = ArgSpec{{2, 8, 128}, lseDtype(d)}};
  };
  const std::string arch = device.arch();
  if (attention_op().implementation("tile").supported_on(device))
    CHECK(attention_op().select(bind_attention(specs(DType::BF16)), std::nullopt, arch).name() ==
          (arch == "sm_90a" ? "hopper" : "tile"));
  CHECK(attention_op().select(bind_attention(specs(DType::F32)), std::nullopt, arch).name() == "chunked");
  Stream stream = Stream::create(device);
  Tensor q = poisoned(DType::BF16, {2, 128, 8, 128}), kv = poisoned(DType::BF16, {2, 256, 2, 128});
  Tensor out = poisoned(DType::BF16, {2, 128, 8, 128});
  // hopper serves the forward on sm_90a only (any S), bf16 and f16 only.
  if (arch == "sm_90a") {
    Tensor q32 = poisoned(DType::F32, {2, 128, 8, 128}), kv32 = poisoned(DType::F32, {2, 100, 2, 128});
    Tensor out32 = poisoned(DType::F32, {2, 128, 8, 128});
    CHECK_THROWS_AS(dot_product_attention(q32, kv32, kv32, out32, stream, {.implementation = "hopper"}),
                    NotSupported);
  } else {
    CHECK_THROWS_AS(dot_product_attention(q, kv, kv, out, stream, {.implementation = "hopper"}), NotSupported);
  }
}

TEST_CASE("attention sinks on tile and hopper: forward and VJP (dsinks) match float64 and rerun bit for bit",
          "[gpu][attention][sinks]") {
  Device &device = Device::get();
  if (!attention_op().implementation("tile").supported_on(device)) {
    WARN("skipped: the tile attention kernels need sm_80+, this GPU is " << device.arch());
    return;
  }
  const bool hopper = device.arch() == "sm_90a";
  if (!hopper)
    WARN("hopper's sink cases skipped: this GPU is " << device.arch() << ", not sm_90a");
  Stream stream = Stream::create(device);
  // S1's heads and head dim with a small batch (2, 2048, 16, 64), causal and not; T and S
  // off the blocks with GQA, H 128, lengths (a batch row that sees no key: lse = the
  // sink); a sink far above the logits.
  std::vector<Case> cases;
  for (const char *impl : {"tile", "hopper"}) {
    if (std::string(impl) == "hopper" && !hopper)
      continue;
    for (bool causal : {false, true}) {
      Case c = makeCase(impl, DType::BF16, {.batch = {2}, .t = 2048, .s = 2048, .n = 16, .k = 16, .h = 64, .hv = 64});
      c.options.is_causal = causal;
      c.sinks = true;
      c.seed = causal ? 91 : 90;
      cases.push_back(c);
    }
    Case odd = makeCase(impl, DType::BF16, {.batch = {2}, .t = 1000, .s = 700, .n = 4, .k = 2, .h = 128, .hv = 128});
    odd.sinks = true, odd.kv_lengths = {700, 0}, odd.q_lengths = {1000, 517}, odd.seed = 92;
    cases.push_back(odd);
    Case f16 = makeCase(impl, DType::F16, {.batch = {1}, .t = 257, .s = 1000, .n = 8, .k = 1, .h = 64, .hv = 64});
    f16.sinks = true, f16.sink_mean = 8.0, f16.options.window = Window{128, 0}, f16.seed = 93;
    cases.push_back(f16);
  }
  checkOnDevice(cases, stream);
}

TEST_CASE("attention in SDPA's BNTH layout on the device: BTNH's bits, read and written in place",
          "[gpu][attention][layout]") {
  Stream stream = Stream::create(Device::get());
  std::vector<Case> cases;
  for (const char *impl : {"hopper", "tile"})
    for (Dims d : {Dims{.batch = {2}, .t = 300, .s = 333, .n = 8, .k = 2, .h = 64, .hv = 64},
                   Dims{.batch = {1}, .t = 1, .s = 517, .n = 4, .k = 4, .h = 128, .hv = 128}})
      for (bool causal : {false, true}) {
        if (std::string(impl) == "hopper" && !gpu_test::sm90a_or_skip("hopper in BNTH"))
          continue;
        Case c = makeCase(impl, DType::BF16, d);
        c.options.is_causal = causal;
        cases.push_back(c);
      }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) {
      CaseData data = makeData(c);
      Case heads = c;
      heads.bnth = true;
      DeviceRun btnh = runOnDevice(c, data, stream, 1), bnth = runOnDevice(heads, data, stream, 1);
      Outputs ref = Reference(c.dims, c.options, data.inputs).run(hostThreads());
      checkResults(heads, ref, bnth.results, &data.inputs);
      CHECK(bnth.results.out == btnh.results.out);
      CHECK(bnth.results.lse == btnh.results.lse);
      CHECK(bnth.results.dq == btnh.results.dq);
      CHECK(bnth.results.dk == btnh.results.dk);
      CHECK(bnth.results.dv == btnh.results.dv);
    }
}
