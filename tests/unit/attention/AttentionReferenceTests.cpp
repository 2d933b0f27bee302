//===- AttentionReferenceTests.cpp - the float64 attention reference itself ---===//
//
// The attention tests trust AttentionReference.h, so it is checked on its own: the VJP
// against central finite differences of the forward (every option, GQA, Hv != H),
// softmax rows summing to one, each mask option against the explicit mask it stands
// for, GQA against repeated kv heads, a broadcast bias against its expansion (dbias the
// sum), threads against one thread, and the buffers / comparison helpers.
//
//===----------------------------------------------------------------------===//
#include "common/AttentionReference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace attention_test;
using tokamax::DType;

namespace {

Inputs randomInputs(const Dims &d, uint64_t seed, bool vjp = true) {
  Inputs in;
  in.q = randomNormal(size_t(product(d.qShape())), DType::F64, seed);
  in.k = randomNormal(size_t(product(d.kShape())), DType::F64, seed + 1);
  in.v = randomNormal(size_t(product(d.vShape())), DType::F64, seed + 2);
  if (vjp)
    in.dout = randomNormal(size_t(product(d.outShape())), DType::F64, seed + 3);
  return in;
}

void addBias(Inputs &in, const Dims &d, const std::string &full, uint64_t seed) {
  in.bias_shape = d.broadcastShape(full);
  in.bias = randomNormal(size_t(product(in.bias_shape)), DType::F64, seed);
}

/// The mask [B..., N, T, S] (full) that `visible` of a reference without a mask gives.
std::vector<uint8_t> explicitMask(const Dims &d, const Reference &ref) {
  std::vector<uint8_t> m;
  for (int64_t row = 0; row < d.rows(); ++row)
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t t = 0; t < d.t; ++t)
        for (int64_t s = 0; s < d.s; ++s)
          m.push_back(ref.visible(row, n, t, s));
  return m;
}

/// sum(out * dout): the loss whose gradient the VJP is.
double loss(const Dims &d, const Options &o, const Inputs &in) {
  Inputs fwd = in;
  fwd.dout.clear();
  std::vector<double> out = Reference(d, o, fwd).run().out;
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i)
    l += out[i] * in.dout[i];
  return l;
}

/// Central differences of the loss with respect to every element of `param`.
std::vector<double> numericGradient(const Dims &d, const Options &o, Inputs in, std::vector<double> Inputs::*param) {
  const double h = 1e-5;
  std::vector<double> g((in.*param).size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double saved = (in.*param)[i];
    (in.*param)[i] = saved + h;
    const double up = loss(d, o, in);
    (in.*param)[i] = saved - h;
    const double down = loss(d, o, in);
    (in.*param)[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void checkBitwise(const std::vector<double> &a, const std::vector<double> &b, const char *what) {
  INFO(what);
  CHECK(a == b);
}

} // namespace

TEST_CASE("attention reference: the VJP matches finite differences of the forward", "[attention][reference]") {
  struct Variant {
    const char *what;
    Options options;
    std::optional<std::string> bias;
    std::optional<std::string> mask;
    std::vector<int32_t> q_lengths, kv_lengths;
  };
  const std::vector<Variant> variants = {
      {"plain", {}, {}, {}, {}, {}},
      {"scale, full bias, soft cap", {.scale = 0.7, .soft_cap = 1.5}, "bnts", {}, {}, {}},
      {"causal, bias over S, kv lengths", {.is_causal = true}, "s", {}, {}, {4, 2}},
      {"window, mask, q lengths, bias constant along S", {.window = Window{1, 2}}, "nt", "bts", {3, 2}, {}},
      {"bias over queries and keys", {}, "ts", {}, {}, {}},
      {"window one side, bias over heads, cap", {.window = Window{std::nullopt, 0}, .soft_cap = 3.0}, "bn", {}, {}, {}},
  };
  const Dims d{.batch = {2}, .t = 3, .s = 5, .n = 4, .k = 2, .h = 3, .hv = 2};
  for (const Variant &v : variants) {
    DYNAMIC_SECTION(v.what) {
      Inputs in = randomInputs(d, 11);
      if (v.bias)
        addBias(in, d, *v.bias, 21);
      if (v.mask) {
        in.mask_shape = d.broadcastShape(*v.mask);
        in.mask = randomMask(size_t(product(in.mask_shape)), 31, 0.7);
      }
      in.q_lengths = v.q_lengths, in.kv_lengths = v.kv_lengths;
      Outputs o = Reference(d, v.options, in).run();
      auto check = [&](const char *name, std::vector<double> Inputs::*param, const std::vector<double> &analytic) {
        std::vector<double> numeric = numericGradient(d, v.options, in, param);
        Comparison c = compare(name, analytic, numeric, {int64_t(numeric.size())}, {1e-7, 1e-8});
        INFO(c.message);
        CHECK(c.ok);
      };
      check("dq", &Inputs::q, o.dq);
      check("dk", &Inputs::k, o.dk);
      check("dv", &Inputs::v, o.dv);
      // Without a soft cap, a bias constant along S shifts whole softmax rows: its gradient is zero.
      if (v.bias && (v.bias->find('s') != std::string::npos || v.options.soft_cap))
        check("dbias", &Inputs::bias, o.dbias);
      else if (v.bias)
        CHECK(std::all_of(o.dbias.begin(), o.dbias.end(), [](double g) { return std::abs(g) < 1e-12; }));
    }
  }
}

TEST_CASE("attention reference: softmax rows sum to one, rows that see no key are zero", "[attention][reference]") {
  const Dims d{.batch = {2}, .t = 6, .s = 7, .n = 2, .k = 1, .h = 4, .hv = 3};
  Inputs in = randomInputs(d, 41);
  in.q_lengths = {6, 4};
  in.kv_lengths = {7, 3};
  in.mask_shape = d.broadcastShape("bnts");
  in.mask = randomMask(size_t(product(in.mask_shape)), 42, 0.8);
  for (int64_t s = 0; s < d.s; ++s)
    in.mask[s + 2 * d.s] = 0;  // row 0, head 0, query 2
  const Options o{.is_causal = true, .soft_cap = 4.0};
  const Reference ref(d, o, in);
  const Outputs out = ref.run();
  int64_t hidden = 0;
  for (int64_t row = 0; row < d.rows(); ++row)
    for (int64_t n = 0; n < d.n; ++n) {
      std::vector<double> p = ref.probabilities(row, n);
      for (int64_t t = 0; t < d.t; ++t) {
        const int64_t r = (row * d.n + n) * d.t + t;
        double sum = 0;
        for (int64_t s = 0; s < d.s; ++s) {
          if (!ref.visible(row, n, t, s))
            CHECK(p[t * d.s + s] == 0.0);
          sum += p[t * d.s + s];
        }
        hidden += !out.row_attends[r];
        if (out.row_attends[r]) {
          CHECK(sum == Approx(1.0).epsilon(1e-14));
          CHECK(std::isfinite(out.lse[r]));
        } else {
          CHECK(sum == 0.0);
          CHECK(out.lse[r] == kInf);
          for (int64_t j = 0; j < d.h; ++j)
            CHECK(out.dq[((row * d.t + t) * d.n + n) * d.h + j] == 0.0);
        }
      }
    }
  CHECK(hidden >= 1 + 2 * 2);  // the empty mask row and batch row 1's padded queries
  // Keys past kv_lengths get no gradient.
  for (int64_t s = 3; s < d.s; ++s)
    CHECK(out.dk[((1 * d.s + s) * d.k) * d.h] == 0.0);
  CHECK_FALSE(out.key_seen[(1 * d.s + 3) * d.k]);
}

TEST_CASE("attention reference: causal / window / lengths equal their explicit masks", "[attention][reference]") {
  const Dims d{.batch = {3}, .t = 5, .s = 9, .n = 2, .k = 2, .h = 4, .hv = 4};
  struct Variant {
    const char *what;
    Options options;
    std::vector<int32_t> q_lengths, kv_lengths;
  };
  const std::vector<Variant> variants = {{"causal", {.is_causal = true}, {}, {}},
                                         {"window", {.window = Window{2, 1}}, {}, {}},
                                         {"causal and window", {.is_causal = true, .window = Window{1, {}}}, {}, {}},
                                         {"lengths", {}, {5, 0, 3}, {9, 4, 1}}};
  for (const Variant &v : variants) {
    DYNAMIC_SECTION(v.what) {
      Inputs in = randomInputs(d, 51);
      in.q_lengths = v.q_lengths, in.kv_lengths = v.kv_lengths;
      Reference byOption(d, v.options, in);
      Outputs a = byOption.run();
      Inputs masked = in;
      masked.q_lengths.clear(), masked.kv_lengths.clear();
      masked.mask = explicitMask(d, byOption);
      masked.mask_shape = d.logitsShape();
      Outputs b = Reference(d, {}, masked).run();
      checkBitwise(a.out, b.out, "out");
      checkBitwise(a.lse, b.lse, "lse");
      checkBitwise(a.dq, b.dq, "dq");
      checkBitwise(a.dk, b.dk, "dk");
      checkBitwise(a.dv, b.dv, "dv");
    }
  }
}

TEST_CASE("attention reference: GQA equals repeated kv heads and a broadcast bias its expansion", "[attention][reference]") {
  const Dims gqa{.batch = {2}, .t = 4, .s = 6, .n = 6, .k = 2, .h = 5, .hv = 3};
  Dims repeated = gqa;
  repeated.k = gqa.n;
  Inputs in = randomInputs(gqa, 61);
  addBias(in, gqa, "ns", 62);
  Inputs rep = in;
  rep.k.clear(), rep.v.clear();
  const int64_t group = gqa.n / gqa.k;
  for (int64_t row = 0; row < gqa.rows(); ++row)
    for (int64_t s = 0; s < gqa.s; ++s)
      for (int64_t n = 0; n < gqa.n; ++n) {
        const int64_t src = (row * gqa.s + s) * gqa.k + n / group;
        rep.k.insert(rep.k.end(), in.k.begin() + src * gqa.h, in.k.begin() + (src + 1) * gqa.h);
        rep.v.insert(rep.v.end(), in.v.begin() + src * gqa.hv, in.v.begin() + (src + 1) * gqa.hv);
      }
  // The bias expanded to [B, N, T, S].
  const Broadcast bias(gqa, in.bias_shape);
  rep.bias.clear();
  rep.bias_shape = gqa.logitsShape();
  for (int64_t row = 0; row < gqa.rows(); ++row)
    for (int64_t n = 0; n < gqa.n; ++n)
      for (int64_t t = 0; t < gqa.t; ++t)
        for (int64_t s = 0; s < gqa.s; ++s)
          rep.bias.push_back(in.bias[bias.at(row, n, t, s)]);
  const Options o{.is_causal = true, .soft_cap = 2.5};
  Outputs a = Reference(gqa, o, in).run(), b = Reference(repeated, o, rep).run();
  checkBitwise(a.out, b.out, "out");
  checkBitwise(a.dq, b.dq, "dq");
  // dk / dv of a kv head: the sum over its group; dbias: the sum over the broadcast dims.
  std::vector<double> dkSum(a.dk.size(), 0.0), dvSum(a.dv.size(), 0.0), dbiasSum(a.dbias.size(), 0.0);
  for (int64_t row = 0; row < gqa.rows(); ++row)
    for (int64_t s = 0; s < gqa.s; ++s)
      for (int64_t n = 0; n < gqa.n; ++n) {
        const int64_t dst = (row * gqa.s + s) * gqa.k + n / group, src = (row * gqa.s + s) * gqa.n + n;
        for (int64_t j = 0; j < gqa.h; ++j)
          dkSum[dst * gqa.h + j] += b.dk[src * gqa.h + j];
        for (int64_t j = 0; j < gqa.hv; ++j)
          dvSum[dst * gqa.hv + j] += b.dv[src * gqa.hv + j];
      }
  int64_t i = 0;
  for (int64_t row = 0; row < gqa.rows(); ++row)
    for (int64_t n = 0; n < gqa.n; ++n)
      for (int64_t t = 0; t < gqa.t; ++t)
        for (int64_t s = 0; s < gqa.s; ++s)
          dbiasSum[bias.at(row, n, t, s)] += b.dbias[i++];
  for (auto [name, got, want] :
       {std::tuple{"dk", &a.dk, &dkSum}, {"dv", &a.dv, &dvSum}, {"dbias", &a.dbias, &dbiasSum}}) {
    Comparison c = compare(name, *got, *want, {int64_t(want->size())}, {1e-13, 1e-14});
    INFO(c.message);
    CHECK(c.ok);
  }
}

TEST_CASE("attention reference: threads give the one-thread results", "[attention][reference]") {
  const Dims d{.batch = {2, 3}, .t = 9, .s = 13, .n = 4, .k = 1, .h = 8, .hv = 16};
  Inputs in = randomInputs(d, 71);
  addBias(in, d, "nts", 72);  // summed over the batch dims: per-thread partial sums
  const Options o{.window = Window{4, 3}};
  Outputs one = Reference(d, o, in).run(1), many = Reference(d, o, in).run(4);
  checkBitwise(one.out, many.out, "out");
  checkBitwise(one.lse, many.lse, "lse");
  checkBitwise(one.dq, many.dq, "dq");
  checkBitwise(one.dk, many.dk, "dk");
  checkBitwise(one.dv, many.dv, "dv");
  Comparison c = compare("dbias", many.dbias, one.dbias, in.bias_shape, {1e-14, 1e-15});
  INFO(c.message);
  CHECK(c.ok);
}

TEST_CASE("attention test helpers: dtype buffers / random inputs / comparison", "[attention][reference]") {
  // Narrow dtypes round to nearest even.
  CHECK(roundedTo(DType::BF16, {1.0 / 3})[0] == 0.333984375);
  CHECK(roundedTo(DType::F16, {1.0 / 3})[0] == 0.333251953125);
  CHECK(roundedTo(DType::F32, {1.0 / 3})[0] == double(1.0f / 3));
  for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
    std::vector<double> v = randomNormal(1000, d, 5);
    CHECK(HostBuffer(d, {10, 100}, v).values() == v);  // exactly representable
    CHECK(std::none_of(v.begin(), v.end(), [](double x) { return x == 0.0; }));
    CHECK(std::isnan(HostBuffer(d, {3}).at(2)));  // new buffers are poisoned
  }
  std::vector<double> v = randomNormal(100000, DType::F64, 6);
  double mean = 0, var = 0;
  for (double x : v)
    mean += x / double(v.size());
  for (double x : v)
    var += (x - mean) * (x - mean) / double(v.size());
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(var - 1) < 0.02);
  CHECK(randomNormal(10, DType::F32, 7) == randomNormal(10, DType::F32, 7));

  const std::vector<double> ref = {1.0, -2.0, kInf, 0.5};
  CHECK(compare("x", ref, ref, {4}, tolerance(DType::F64)).ok);
  Comparison off = compare("x", {1.0, -2.0, kInf, 0.6}, ref, {2, 2}, tolerance(DType::BF16));
  CHECK_FALSE(off.ok);
  CHECK(off.worst == 3);
  CHECK_THAT(off.message, Catch::Contains("at [1, 1]"));
  CHECK_FALSE(compare("x", {1.0, -2.0, NAN, 0.5}, ref, {4}, tolerance(DType::BF16)).ok);
  CHECK_FALSE(compare("x", {1.0, -2.0, 3.0, 0.5}, ref, {4}, tolerance(DType::BF16)).ok);
  CHECK(compare("x", {1.001, -2.0, kInf, 0.5}, ref, {4}, tolerance(DType::BF16)).ok);
  // Results that cancel to zero are measured against the floor; small rows against their own size.
  CHECK_FALSE(compare("x", {1e-7, 0.0}, {0.0, 0.0}, {2}, tolerance(DType::F16)).ok);
  CHECK(compare("x", {1e-7, 0.0}, {0.0, 0.0}, {2}, tolerance(DType::F16), 1e-3).ok);
  CHECK(compare("x", {0.0, 20.0, 1e-3, 2e-3}, {0.0, 20.0, 0.0, 2e-3}, {2, 2}, tolerance(DType::BF16)).ok);
  CHECK_FALSE(compare("x", {0.2, 20.0, 0.0, 2e-3}, {0.0, 20.0, 0.0, 2e-3}, {2, 2}, tolerance(DType::BF16)).ok);

  const Dims d{.batch = {2, 3}, .t = 4, .s = 5, .n = 6};
  CHECK(d.broadcastShape("nts") == std::vector<int64_t>{1, 1, 6, 4, 5});
  CHECK(d.broadcastShape("bs") == std::vector<int64_t>{2, 3, 1, 1, 5});
  CHECK_THROWS(Broadcast(d, {2, 2, 1, 1, 5}));
  CHECK(Broadcast(d, {4, 5}).at(5, 3, 2, 1) == 2 * 5 + 1);  // leading dims missing = 1
}

TEST_CASE("attention test helpers: big buffers (parallel chunks) agree with the serial paths",
          "[attention][reference]") {
  // Past kParallelElements the helpers run in chunks on every host thread: random values
  // from one stream per chunk, comparisons folded in chunk order.
  const size_t n = size_t(kParallelElements) + 12345;
  std::vector<double> v = randomNormal(n, DType::BF16, 9);
  CHECK(v == randomNormal(n, DType::BF16, 9));
  CHECK(v != randomNormal(n, DType::BF16, 10));
  CHECK(std::none_of(v.begin(), v.end(), [](double x) { return x == 0.0; }));
  CHECK(v == roundedTo(DType::BF16, v));  // already rounded
  // The chunks' streams differ: the values of chunk 1 are not chunk 0's again.
  CHECK(!std::equal(v.begin(), v.begin() + kElementChunk, v.begin() + kElementChunk));
  double mean = 0, var = 0;
  for (double x : v)
    mean += x / double(n);
  for (double x : v)
    var += (x - mean) * (x - mean) / double(n);
  CHECK(std::abs(mean) < 0.002);
  CHECK(std::abs(var - 1) < 0.01);
  // A buffer of them holds their bits; its poison fill reaches the last element.
  HostBuffer buffer(DType::BF16, {int64_t(n)}, v);
  CHECK(buffer.values() == v);
  CHECK(std::isnan(HostBuffer(DType::BF16, {int64_t(n)}).at(int64_t(n) - 1)));

  // Comparison: the worst element, the NaN count and the sums as one serial pass gives
  // them (rows of 1000, so chunks end inside no row).
  const std::vector<int64_t> shape{int64_t(n) / 1000, 1000};
  std::vector<double> ref(v.begin(), v.begin() + shape[0] * 1000), got = ref;
  got[3 * size_t(kElementChunk) + 17] += 0.5;  // in a chunk past the first
  got[5] = NAN;
  got[size_t(kElementChunk) + 3] = NAN;
  Comparison c = compare("x", got, ref, shape, tolerance(DType::BF16));
  CHECK_FALSE(c.ok);
  CHECK(c.bad_specials == 2);
  CHECK(c.worst == 5);  // NaN's infinite scaled error: the first one wins, as in order
  got[5] = ref[5];
  got[size_t(kElementChunk) + 3] = ref[size_t(kElementChunk) + 3];
  c = compare("x", got, ref, shape, tolerance(DType::BF16));
  CHECK(c.worst == 3 * int64_t(kElementChunk) + 17);
  CHECK(c.max_abs_error == 0.5);
  double sumSq = 0;
  for (double x : ref)
    sumSq += x * x;
  CHECK(c.ref_rms == Approx(std::sqrt(sumSq / double(ref.size()))).epsilon(1e-12));
  CHECK(c.rms_relative_error == Approx(0.5 / std::sqrt(sumSq)).epsilon(1e-12));
}
