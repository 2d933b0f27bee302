//===- AttentionOrderedDqTests.cpp - The hopper VJP's ordered fused dq -----===//
//
// The hopper VJP's opt-in fused dq ("fused_dq": 1: the dk/dv programs add each step's dS K
// into an f32 dq sum) with AttentionOptions::deterministic (the default): each query
// block's adds wait for their turn at a counter (tile.semaphore_wait / signal), key
// blocks in ascending order. On the interpreter, which runs a kernel that waits in grid
// order and fails a wait whose value is not there (a deadlock on a GPU), every mask
// option must find each key block's turn exactly: plain, causal, local windows, q / kv
// lengths (0 and 1 among them), a mask tensor and a bias, GQA and MQA, T != S, odd T
// and S, H 64 and 128. dq matches float64, reruns (in either program order) give the
// same bits, and they are the bits of the unordered kernel run in grid order (the same
// order of adds). Below the op, the f32 dq sum itself: the unordered kernel's differs
// when its programs run last to first, the ordered one's does not, and each counter ends
// at the number of key blocks that meet its query block. Each test sets the program order
// of its runs itself ([program-order]: the reverse-order ctest run skips them).
//
//===----------------------------------------------------------------------===//
#include "common/ScopedState.h"
#include "unit/attention/AttentionTestCase.h"

#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tokamax;
using namespace attention_test;

namespace {

/// dk/dv hold 16 x num_warps = 64 keys, 64-query steps (block_kv is the dq kernel's,
/// which the fused plan does not run).
const Config kFused{{"block_q", 64}, {"block_kv", 64}, {"num_warps", 4}, {"stages", 2}, {"fused_dq", 1}};

/// One VJP run: its outputs as values and as stored (dq, dk, dv, dbias).
struct VjpRun {
  Results results;
  std::vector<std::vector<uint64_t>> bits;
};

struct RunSpec {
  bool deterministic = true;
  bool reverse = false;  ///< TOKAMAX_INTERPRETER_ORDER=reverse
};

/// The case's forward (the reference implementation, once) and then its hopper VJP at
/// c.vjp_config once per run. `unchecked`: the VJP through the implementation itself,
/// skipping the config's check (the fused dq's H 64 limit is ptxas's registers, which the
/// interpreter does not have), else through dot_product_attention_vjp_host.
std::vector<VjpRun> runVjps(const Case &c, const CaseData &data, const std::vector<RunSpec> &runs,
                            bool unchecked = false) {
  const Dims &d = c.dims;
  TensorView q = data.q.view(), k = data.k.view(), v = data.v.view(), dout = data.dout.view();
  TensorView bias = data.bias ? data.bias->view() : TensorView(), mask = data.mask ? data.mask->view() : TensorView();
  TensorView ql = data.q_lengths ? data.q_lengths->view() : TensorView();
  TensorView kvl = data.kv_lengths ? data.kv_lengths->view() : TensorView();
  AttentionOptions options = apiOptions(c, data.bias ? &bias : nullptr, data.mask ? &mask : nullptr,
                                        data.q_lengths ? &ql : nullptr, data.kv_lengths ? &kvl : nullptr);
  HostBuffer out(c.dtype, d.outShape()), lse(lseDtype(c.dtype), d.lseShape());
  TensorView outView = out.view(), lseView = lse.view();
  {
    AttentionOptions forward = options;
    forward.implementation = "reference";
    forward.config.reset();
    test::EnvGuard order("TOKAMAX_INTERPRETER_ORDER", nullptr);
    dot_product_attention_host(q, k, v, outView, forward, &lseView);
  }
  std::vector<VjpRun> done;
  for (const RunSpec &run : runs) {
    AttentionOptions o = options;
    o.implementation = "hopper";
    o.config = c.vjp_config;
    o.deterministic = run.deterministic;
    HostBuffer dq(c.dtype, d.qShape()), dk(c.dtype, d.kShape()), dv(c.dtype, d.vShape());
    std::optional<HostBuffer> dbias;
    if (data.bias)
      dbias.emplace(data.bias->dtype, data.bias->shape);
    TensorView dqView = dq.view(), dkView = dk.view(), dvView = dv.view();
    TensorView dbiasView = dbias ? dbias->view() : TensorView();
    test::EnvGuard order("TOKAMAX_INTERPRETER_ORDER", run.reverse ? "reverse" : nullptr);
    if (!unchecked) {
      dot_product_attention_vjp_host(dout, q, k, v, outView, lseView, dqView, dkView, dvView, o,
                                     dbias ? &dbiasView : nullptr);
    } else {
      auto specOf = [](const TensorView *t) { return t ? std::optional<ArgSpec>(ArgSpec::of(*t)) : std::nullopt; };
      const BoundArgs b = bind_attention_vjp(
          {ArgSpec::of(dout), ArgSpec::of(q), ArgSpec::of(k), ArgSpec::of(v), ArgSpec::of(outView),
           ArgSpec::of(lseView), specOf(o.bias), specOf(o.mask), specOf(o.q_seq_lengths), specOf(o.kv_seq_lengths),
           ArgSpec::of(dqView), ArgSpec::of(dkView), ArgSpec::of(dvView), dbias ? specOf(&dbiasView) : std::nullopt},
          o);
      const TensorView in[] = {dout, q, k, v, outView, lseView, bias, mask, ql, kvl, TensorView()};  // no sinks
      const TensorView outs[] = {dqView, dkView, dvView, dbiasView, TensorView()};
      attention_vjp_op().implementation("hopper").interpret(b, *c.vjp_config, in, outs);
    }
    VjpRun r;
    r.results.out = out.values();
    r.results.lse = lse.values();
    r.results.dq = dq.values();
    r.results.dk = dk.values();
    r.results.dv = dv.values();
    r.bits = {dq.storage, dk.storage, dv.storage};
    if (dbias) {
      r.results.dbias = dbias->values();
      r.bits.push_back(dbias->storage);
    }
    done.push_back(std::move(r));
  }
  return done;
}

Case fusedCase(Dims dims) {
  Case c;
  c.implementation = "hopper";
  c.dtype = DType::BF16;
  c.dims = std::move(dims);
  c.vjp_config = kFused;
  return c;
}

const char *kOutputNames[] = {"dq", "dk", "dv", "dbias"};

/// The ordered run matches float64; its rerun with the programs last to first matches it
/// bit for bit, and so does the unordered kernel run in grid order (its adds in the same
/// order). (A rerun in grid order is the same computation again on the interpreter.)
void checkOrdered(const Case &c, bool unchecked = false) {
  CaseData data = makeData(c);
  Outputs ref = Reference(c.dims, c.options, data.inputs).run();
  std::vector<VjpRun> runs;
  REQUIRE_NOTHROW(runs = runVjps(c, data, {{true, false}, {true, true}, {false, false}}, unchecked));
  checkResults(c, ref, runs[0].results);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t i = 0; i < runs[0].bits.size(); ++i) {
      INFO((r == 1 ? "rerun, programs last to first" : "deterministic = false, grid order") << ": "
                                                                                              << kOutputNames[i]);
      CHECK(runs[r].bits[i] == runs[0].bits[i]);
    }
}

} // namespace

TEST_CASE("attention hopper: the ordered fused dq (deterministic) matches float64 and reruns bit for bit under "
          "every mask",
          "[attention][hopper][program-order]") {
  std::vector<Case> cases;
  auto add = [&](Dims dims, auto edit) {
    Case c = fusedCase(std::move(dims));
    edit(c);
    cases.push_back(c);
  };
  auto none = [](Case &) {};
  auto causal = [](Case &c) { c.options.is_causal = true; };
  // Several key blocks a query block (64 keys a program) and several query blocks a key block.
  const Dims square{.batch = {2}, .t = 160, .s = 160, .n = 2, .k = 2, .h = 64, .hv = 64};
  add(square, none);
  add(square, causal);
  // Windows: the first key block that meets query block t0 is max(t0 - left, 0) / 64, not 0.
  add(square, [](Case &c) { c.options.window = Window{20, 30}; });
  add(square, [](Case &c) { c.options.is_causal = true, c.options.window = Window{70, std::nullopt}; });
  add(square, [](Case &c) { c.options.window = Window{std::nullopt, 0}; });
  // Lengths of 0 and 1: programs with no step, query blocks no program meets.
  add({.batch = {4}, .t = 150, .s = 190, .n = 2, .k = 1, .h = 64, .hv = 64}, [](Case &c) {
    c.q_lengths = {150, 0, 1, 77}, c.kv_lengths = {1, 190, 0, 100};
  });
  add({.batch = {3}, .t = 130, .s = 130, .n = 2, .k = 2, .h = 64, .hv = 64}, [](Case &c) {
    c.options.is_causal = true, c.q_lengths = {130, 65, 1}, c.kv_lengths = {64, 0, 129};
    c.options.window = Window{40, std::nullopt};
  });
  // A mask tensor and a bias (with dbias): every block masked, no range changes.
  add({.batch = {2}, .t = 130, .s = 150, .n = 2, .k = 1, .h = 64, .hv = 64}, [](Case &c) {
    c.mask_dims = "bnts", c.bias_dims = "nts", c.bias_dtype = DType::F32;
  });
  // GQA and MQA: a program walks every query head of its group, each with its counters.
  add({.batch = {2}, .t = 130, .s = 140, .n = 4, .k = 2, .h = 64, .hv = 64}, causal);
  add({.batch = {1}, .t = 100, .s = 170, .n = 4, .k = 1, .h = 64, .hv = 32}, none);
  // T != S, odd T and S (steps past T and S).
  add({.batch = {2}, .t = 77, .s = 130, .n = 2, .k = 1, .h = 64, .hv = 64}, causal);
  add({.batch = {2}, .t = 77, .s = 130, .n = 2, .k = 1, .h = 64, .hv = 64}, none);
  add({.batch = {1}, .t = 193, .s = 67, .n = 2, .k = 2, .h = 64, .hv = 64}, causal);
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { checkOrdered(c); }
}

TEST_CASE("attention hopper: the ordered fused dq at H 128 (past its config check) keeps its order",
          "[attention][hopper][program-order]") {
  // The config check refuses fused_dq at H 128 (ptxas spills its registers); the kernels
  // build and order their adds the same way, which the interpreter checks.
  const Implementation &hopper = attention_vjp_op().implementation("hopper");
  std::vector<Case> cases;
  const Dims dims{.batch = {2}, .t = 140, .s = 150, .n = 2, .k = 1, .h = 128, .hv = 128};
  cases.push_back(fusedCase(dims));
  cases.push_back(fusedCase(dims));
  cases.back().options.is_causal = true, cases.back().options.window = Window{50, std::nullopt};
  cases.back().kv_lengths = {150, 70};
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) {
      const ArgSpec q{c.dims.qShape(), c.dtype}, kv{c.dims.kShape(), c.dtype};
      const BoundArgs args =
          bind_attention_vjp({q, q, kv, kv, q, attention_lse_spec(q), {}, {}, {}, {}, q, kv, kv, {}});
      CHECK_THAT(hopper.check_config(args, kFused).value_or("valid"), Catch::Contains("H 64"));
      checkOrdered(c, /*unchecked=*/true);
    }
}

namespace {

/// The dk/dv kernel of a fused call run alone on the interpreter (q, k, v, dout random;
/// lse 3 and random delta: what matters is that every run adds the same values): its f32
/// dq sum and, ordered, its counters.
struct DkDvRun {
  std::vector<float> sum;
  std::vector<int32_t> counters;
};

struct KernelCase {
  Dims dims;
  bool causal = false;
  std::optional<Window> window;
  std::vector<int32_t> kv_lengths;
};

DkDvRun runDkDv(const KernelCase &kc, bool deterministic, bool reverse) {
  const Dims &d = kc.dims;
  const int64_t B = d.rows(), sumRows = (d.t + 63) / 64 * 64;
  const ArgSpec q{d.qShape(), DType::BF16}, kv{d.kShape(), DType::BF16};
  const std::optional<ArgSpec> lengths =
      kc.kv_lengths.empty() ? std::nullopt : std::optional<ArgSpec>(ArgSpec{{B}, DType::I32});
  AttentionOptions o;
  o.is_causal = kc.causal;
  if (kc.window)
    o.local_window = LocalWindow{kc.window->left, kc.window->right};
  o.deterministic = deterministic;
  const BoundArgs args =
      bind_attention_vjp({q, q, kv, kv, q, attention_lse_spec(q), {}, {}, {}, lengths, q, kv, kv, {}}, o);
  std::vector<dsl::Kernel> kernels = attention_vjp_op().implementation("hopper").kernels(args, kFused);
  REQUIRE(kernels.size() == 3u);
  const dsl::Kernel &dkdv = kernels[1];
  CHECK(dkdv.name() == std::string("attention_dkdv_dq_hopper_bf16_h64_64x64") + (deterministic ? "_ordered" : ""));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto halves = [&](int64_t n) {  // bf16 storage of N(0, 1) values
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (uint16_t &x : h) {
      float f = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    }
    return h;
  };
  std::vector<uint16_t> qs = halves(product(d.qShape())), ks = halves(product(d.kShape())),
                        vs = halves(product(d.vShape())), douts = halves(product(d.outShape()));
  std::vector<float> lse(static_cast<size_t>(B * d.n * d.t), 3.0f), delta(lse.size());
  for (float &x : delta)
    x = normal(rng);
  std::vector<uint16_t> dk(static_cast<size_t>(product(d.kShape()))), dv(static_cast<size_t>(product(d.vShape())));
  std::vector<int32_t> kvl(kc.kv_lengths);
  DkDvRun run;
  run.sum.assign(static_cast<size_t>(B * sumRows * d.n * d.h), 0.0f);
  run.counters.assign(static_cast<size_t>(B * d.n * sumRows / 64), 0);
  auto tensor = [](auto &v) { return HostArg::tensor(v.data(), v.size() * sizeof(v[0])); };
  std::vector<HostArg> host{tensor(qs), tensor(ks), tensor(vs)};
  if (!kvl.empty())
    host.push_back(tensor(kvl));
  for (HostArg a : {tensor(douts), tensor(lse), tensor(delta), tensor(dk), tensor(dv), tensor(run.sum)})
    host.push_back(a);
  if (deterministic)
    host.push_back(tensor(run.counters));
  test::EnvGuard order("TOKAMAX_INTERPRETER_ORDER", reverse ? "reverse" : nullptr);
  tokamax::interpret(dkdv, host);
  return run;
}

/// How many key blocks (64 keys) see a query of each query block (64 rows) of each
/// (batch row, head): a brute-force count over every pair.
std::vector<int32_t> meetingKeyBlocks(const KernelCase &kc) {
  const Dims &d = kc.dims;
  const int64_t B = d.rows(), queryBlocks = (d.t + 63) / 64, keyBlocks = (d.s + 63) / 64;
  std::vector<int32_t> count(static_cast<size_t>(B * d.n * queryBlocks), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t kvValid = kc.kv_lengths.empty() ? d.s : std::clamp<int64_t>(kc.kv_lengths[b], 0, d.s);
    for (int64_t i = 0; i < queryBlocks; ++i)
      for (int64_t j = 0; j < keyBlocks; ++j) {
        bool meets = false;
        for (int64_t r = i * 64; r < std::min(d.t, i * 64 + 64) && !meets; ++r)
          for (int64_t s = j * 64; s < std::min(kvValid, j * 64 + 64) && !meets; ++s)
            meets = (!kc.causal || s <= r) && (!kc.window || !kc.window->left || r - s <= *kc.window->left) &&
                    (!kc.window || !kc.window->right || s - r <= *kc.window->right);
        for (int64_t n = 0; meets && n < d.n; ++n)
          ++count[static_cast<size_t>((b * d.n + n) * queryBlocks + i)];
      }
  }
  return count;
}

} // namespace

TEST_CASE("attention hopper: the fused dq's f32 sum is the same in either program order only when ordered",
          "[attention][hopper][program-order]") {
  for (const KernelCase &kc :
       {KernelCase{{.batch = {2}, .t = 200, .s = 250, .n = 4, .k = 2, .h = 64, .hv = 64}},
        KernelCase{{.batch = {2}, .t = 200, .s = 250, .n = 2, .k = 1, .h = 64, .hv = 64}, true, {}, {250, 130}},
        KernelCase{{.batch = {1}, .t = 250, .s = 250, .n = 2, .k = 2, .h = 64, .hv = 64}, false, Window{80, 10}, {}}}) {
    DYNAMIC_SECTION("T" << kc.dims.t << " S" << kc.dims.s << " N" << kc.dims.n << " K" << kc.dims.k
                        << (kc.causal ? " causal" : "") << (kc.window ? " window" : "")
                        << (kc.kv_lengths.empty() ? "" : " kv lengths")) {
      DkDvRun ordered = runDkDv(kc, true, false), orderedReverse = runDkDv(kc, true, true);
      DkDvRun plain = runDkDv(kc, false, false), plainReverse = runDkDv(kc, false, true);
      auto bits = [](const std::vector<float> &v) {
        std::vector<uint32_t> b(v.size());
        std::memcpy(b.data(), v.data(), v.size() * 4);
        return b;
      };
      CHECK(bits(orderedReverse.sum) == bits(ordered.sum));
      CHECK(bits(plain.sum) == bits(ordered.sum));  // grid order: the same order of adds
      // The unordered kernel's programs last to first add in another order: other bits.
      CHECK(bits(plainReverse.sum) != bits(plain.sum));
      // Each counter ends at the number of key blocks that meet its query block (every
      // visitor signalled once, no other program did).
      CHECK(ordered.counters == meetingKeyBlocks(kc));
      CHECK(orderedReverse.counters == ordered.counters);
    }
  }
}
