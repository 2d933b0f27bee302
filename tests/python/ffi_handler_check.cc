// The JAX FFI handler's slot mapping (python/tokamax_cpp/ffi/handler.cc, its XLA-free
// part) against the real C ABI on the CPU interpreter: the buffers XLA passes plus the
// presence masks jax.py sends must reach tkx_call_create / tkx_call_run as the op's full
// argument list (NULL for absent optional inputs and outputs). Run by test_ffi_handler.py:
//   ffi_handler_check <libtokamax.so>  -> exit 0 when every check holds.
#define TOKAMAX_FFI_NO_XLA
#include "../../python/tokamax_cpp/ffi/handler.cc"

#include <cmath>
#include <cstdio>

namespace {

int failures = 0;

void check(bool ok, const std::string &what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failures += !ok;
}

// What tkx_call_create last received.
struct Created {
  std::string op;
  int32_t numInputs = -1;
  std::string present;  // '1' / '0' per slot
} created;
decltype(api.call_create) realCreate;

int creations = 0;  // tkx_call_create calls made through the handler

int recordingCreate(const char *op, const TkxTensor *const *inputs, int32_t n, const char *options, TkxCall **call) {
  ++creations;
  created = {op, n, ""};
  for (int32_t i = 0; i < n; ++i)
    created.present += inputs[i] ? '1' : '0';
  return realCreate(op, inputs, n, options, call);
}

struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  Passed passed() { return {2 /* f32 */, static_cast<int32_t>(shape.size()), shape.data(), data.data()}; }
};

Array filled(std::vector<int64_t> shape, float seed) {
  Array a{std::move(shape), {}};
  a.data.resize(a.size());
  for (size_t i = 0; i < a.data.size(); ++i)
    a.data[i] = std::sin(seed + 0.7f * static_cast<float>(i));
  return a;
}

// One handler run as jax.py makes it: `inputs` in the op's order (null: absent), the mask
// from them, the outputs mask and result buffers from the bound call's outputs (rank -1:
// absent). Returns every output (empty where absent); `error` gets a failure.
std::vector<Array> runAsJax(const std::string &op, const std::string &options, std::vector<Array *> inputs,
                            std::string *error = nullptr) {
  std::string inMask;
  std::vector<Passed> args;
  for (Array *a : inputs) {
    inMask += a ? '1' : '0';
    if (a)
      args.push_back(a->passed());
  }
  // The output specs, as jax.py gets them at trace time (through the same fill / bind).
  Buffers in;
  std::string key;
  Failure f = fill("input", inMask, args, -1, in, &key);
  TkxCall *call = f ? nullptr : boundCall(op, options, key, in, f);
  std::vector<Array> outs;
  std::string outMask;
  std::vector<Passed> rets;
  if (call) {
    outs.resize(api.call_num_outputs(call));
    for (size_t i = 0; i < outs.size(); ++i) {
      int32_t dtype = -1, rank = -1;
      int64_t shape[kMaxRank];
      api.call_output(call, static_cast<int32_t>(i), &dtype, &rank, shape);
      outMask += rank < 0 ? '0' : '1';
      if (rank >= 0) {
        outs[i].shape.assign(shape, shape + rank);
        outs[i].data.resize(outs[i].size());
      }
    }
    for (size_t i = 0; i < outs.size(); ++i)
      if (outMask[i] == '1')
        rets.push_back(outs[i].passed());
    f = runCall(nullptr, false, {}, args, rets, inMask, op, options, outMask);
  }
  if (error)
    *error = f.message;
  else
    check(!f, op + " " + inMask + " -> " + outMask + " runs" + (f ? ": " + f.message : ""));
  return outs;
}

// layer_norm over the last axis, in double.
std::vector<double> layerNorm(const Array &x, const Array *scale, const Array *offset) {
  const int64_t h = x.shape.back(), rows = x.size() / h;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < h; ++j)
      mean += x.data[r * h + j] / double(h);
    for (int64_t j = 0; j < h; ++j)
      var += std::pow(x.data[r * h + j] - mean, 2) / double(h);
    for (int64_t j = 0; j < h; ++j)
      y[r * h + j] = (x.data[r * h + j] - mean) / std::sqrt(var + 1e-6) * (scale ? scale->data[j] : 1.0) +
                     (offset ? offset->data[j] : 0.0);
  }
  return y;
}

double maxError(const Array &got, const std::vector<double> &want) {
  double e = got.data.size() == want.size() ? 0 : INFINITY;
  for (size_t i = 0; i < want.size() && i < got.data.size(); ++i)
    e = std::max(e, std::abs(got.data[i] - want[i]));
  return e;
}

void checkCreated(const std::string &op, const std::string &present) {
  check(created.op == op && created.numInputs == static_cast<int32_t>(present.size()) && created.present == present,
        "tkx_call_create(" + op + ", num_inputs " + std::to_string(present.size()) + ", slots " + present +
            ") - got (" + created.op + ", " + std::to_string(created.numInputs) + ", " + created.present + ")");
}

void layerNormCases() {
  Array x = filled({3, 16}, 0.1f), scale = filled({16}, 1.3f), offset = filled({16}, 2.9f);
  const std::pair<const char *, std::vector<Array *>> cases[] = {
      {"100", {&x, nullptr, nullptr}}, {"110", {&x, &scale, nullptr}}, {"111", {&x, &scale, &offset}}};
  for (const auto &[present, inputs] : cases) {
    std::vector<Array> outs = runAsJax("layer_norm", "{\"residuals\":false}", inputs);
    checkCreated("layer_norm", present);
    check(outs.size() == 3 && outs[1].shape.empty() && outs[2].shape.empty(),
          std::string("layer_norm ") + present + ": residuals off, mean / rstd absent (NULL at the run)");
    if (!outs.empty())
      check(maxError(outs[0], layerNorm(x, inputs[1], inputs[2])) < 1e-4,
            std::string("layer_norm ") + present + ": y matches the float64 reference");
  }
}

void layerNormVjpCase() {
  // jax.py's _apply_fwd / _apply_bwd for x, scale (no offset): the forward with residuals,
  // then layer_norm_vjp (ct, x, scale, mean, rstd) with doffset off.
  Array x = filled({2, 8}, 0.4f), scale = filled({8}, 1.1f), ct = filled({2, 8}, 3.3f);
  std::vector<Array> fwd = runAsJax("layer_norm", "{}", {&x, &scale, nullptr});
  checkCreated("layer_norm", "110");
  if (fwd.size() != 3 || fwd[1].shape.empty() || fwd[2].shape.empty())
    return check(false, "layer_norm with residuals gives mean and rstd");
  std::vector<Array> grads = runAsJax("layer_norm_vjp", "{\"axis\":-1,\"doffset\":false}",
                                      {&ct, &x, &scale, &fwd[1], &fwd[2]});
  checkCreated("layer_norm_vjp", "11111");
  if (grads.size() != 3)
    return check(false, "layer_norm_vjp has 3 outputs");
  check(grads[2].shape.empty(), "layer_norm_vjp: no doffset (absent output)");
  // dx against central differences of sum(ct * y).
  auto loss = [&](const Array &at) {
    std::vector<double> y = layerNorm(at, &scale, nullptr);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i)
      s += ct.data[i] * y[i];
    return s;
  };
  double worst = 0;
  for (size_t i = 0; i < x.data.size(); ++i) {
    Array plus = x, minus = x;
    plus.data[i] += 1e-2f, minus.data[i] -= 1e-2f;
    worst = std::max(worst, std::abs((loss(plus) - loss(minus)) / 2e-2 - grads[0].data[i]));
  }
  check(worst < 2e-2, "layer_norm_vjp: dx matches central differences (max error " + std::to_string(worst) + ")");
}

void attentionCase() {
  // q [B, T, N, H], k / v [B, S, K, H]; no bias, mask or sequence lengths.
  Array q = filled({1, 4, 2, 8}, 0.2f), k = filled({1, 5, 2, 8}, 1.7f), v = filled({1, 5, 2, 8}, 2.5f);
  std::vector<Array> outs =
      runAsJax("attention", "{\"residuals\":false}", {&q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr});
  checkCreated("attention", "11100000");
  if (outs.size() != 2 || outs[0].data.empty())
    return check(false, "attention gives out");
  check(outs[1].shape.empty(), "attention: residuals off, lse absent");
  std::vector<double> want(outs[0].data.size());
  const int64_t T = 4, S = 5, N = 2, H = 8;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> p(S);
      double top = -INFINITY, sum = 0;
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < H; ++h)
          p[s] += q.data[(t * N + n) * H + h] * k.data[(s * N + n) * H + h] / std::sqrt(double(H));
        top = std::max(top, p[s]);
      }
      for (double &e : p)
        sum += e = std::exp(e - top);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          want[(t * N + n) * H + h] += p[s] / sum * v.data[(s * N + n) * H + h];
    }
  check(maxError(outs[0], want) < 1e-4, "attention: out matches the float64 reference");
}

void maskMismatchCase() {
  Array x = filled({2, 8}, 0.0f);
  Buffers in;
  Failure f = fill("input", "110", {x.passed()}, -1, in, nullptr);
  check(f.kind == Failure::kInvalidArgument, "1 buffer against the mask '110' is refused: " + f.message);
}

// A repeated execution binds nothing again: no tkx_call_create, the thread's entry found
// by the same key; other specs bind once more.
void repeatedRunCase() {
  Array x = filled({3, 16}, 0.5f), y = filled({3, 16}, 0.0f);
  auto runOnce = [&](Array &in, Array &out) {
    std::vector<Passed> rets = {out.passed()};
    Failure f = runCall(nullptr, false, {}, {in.passed()}, rets, "100", "layer_norm", R"({"residuals":false})", "100");
    check(!f, "layer_norm 100 -> 100 runs" + (f ? ": " + f.message : std::string()));
  };
  runOnce(x, y);
  const int before = creations;
  const size_t entries = threadCalls.size();
  Array x2 = filled({3, 16}, 1.5f), y2 = filled({3, 16}, 0.0f);
  for (int i = 0; i < 3; ++i)
    runOnce(x2, y2);
  check(creations == before && threadCalls.size() == entries, "a repeated run re-creates no tkx_call");
  Array x3 = filled({5, 16}, 0.5f), y3 = filled({5, 16}, 0.0f);
  runOnce(x3, y3);
  runOnce(x3, y3);
  check(creations == before + 1 && threadCalls.size() == entries + 1, "other specs bind once");
}

// The workspace result ('w' ending the outputs mask): the last result buffer is not an
// output of the op. On the host the interpreter needs none and ignores it.
void hostWorkspaceResultCase() {
  Array x = filled({3, 16}, 0.5f), y = filled({3, 16}, 0.0f), workspace = filled({64}, 0.0f);
  std::vector<Passed> rets = {y.passed(), workspace.passed()};
  Failure f = runCall(nullptr, false, {}, {x.passed()}, rets, "100", "layer_norm", R"({"residuals":false})", "100w");
  check(!f && maxError(y, layerNorm(x, nullptr, nullptr)) < 1e-4,
        "layer_norm 100 -> 100w: the workspace result is not an output" + (f ? ": " + f.message : std::string()));
}

// Device runs (under the null driver, whose memory is host memory): layer_norm_vjp needs a
// workspace there. A large enough workspace result is used and nothing is allocated; a
// too small one falls back to the scratch allocator, or is an error where there is none
// (the command-buffer handler).
void deviceWorkspaceCases() {
  const int64_t rows = 64, h = 256;
  Array ct = filled({rows, h}, 0.1f), x = filled({rows, h}, 0.2f), scale = filled({h}, 0.3f),
        mean = filled({rows}, 0.0f), rstd = filled({rows}, 1.0f);
  Array dx = filled({rows, h}, 0.0f), dscale = filled({h}, 0.0f);
  const std::string options = R"({"axis":-1,"doffset":false})";
  const std::vector<Passed> args = {ct.passed(), x.passed(), scale.passed(), mean.passed(), rstd.passed()};
  int allocations = 0;
  std::vector<uint8_t> scratch(1 << 24);
  auto allocate = [&](size_t bytes) -> std::optional<void *> {
    ++allocations;
    return bytes <= scratch.size() ? std::optional<void *>(scratch.data()) : std::nullopt;
  };
  auto run = [&](int64_t givenBytes, bool withScratch, Failure &f) {
    std::vector<uint8_t> given(static_cast<size_t>(givenBytes));
    int64_t extent = givenBytes;
    std::vector<Passed> rets = {dx.passed(), dscale.passed(), {5 /* unused dtype */, 1, &extent, given.data()}};
    std::function<std::optional<void *>(size_t)> none;
    f = runCall(nullptr, true, withScratch ? std::function<std::optional<void *>(size_t)>(allocate) : none, args, rets,
                "11111", "layer_norm_vjp", options, "110w");
  };
  Failure f;
  run(1 << 22, true, f);
  check(!f && allocations == 0,
        "device run: a large enough workspace result is used, nothing allocated" + (f ? ": " + f.message : ""));
  run(16, true, f);
  check(!f && allocations == 1, "device run: a too small workspace result falls back to the scratch allocator" +
                                    (f ? ": " + f.message : ""));
  run(16, false, f);
  check(f.kind == Failure::kInternal && f.message.find("bytes of workspace") != std::string::npos,
        "device run without a scratch allocator: a too small workspace result is an error: " + f.message);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || tokamax_ffi_init(argv[1]) != 0) {
    std::printf("usage: ffi_handler_check <libtokamax.so> [device] (tokamax_ffi_init failed)\n");
    return 2;
  }
  realCreate = api.call_create;
  api.call_create = recordingCreate;
  if (argc > 2 && std::string(argv[2]) == "device") {  // under the null driver
    deviceWorkspaceCases();
    std::printf("%d failed\n", failures);
    return failures ? 1 : 0;
  }
  hostWorkspaceResultCase();
  layerNormCases();
  layerNormVjpCase();
  attentionCase();
  maskMismatchCase();
  repeatedRunCase();
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
