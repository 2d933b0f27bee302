// attention: the headline function and its gradient.
//   loss(x, scale) = sum(attention_hopper(l2, l2, l2)),  l2 = layer_norm(a1, scale),
//   a1 = attention_chunked(l1, l1, l1),                   l1 = layer_norm_tile(x, scale)
// with x (32, 2048, 16, 64) bf16 and scale (64,) f32 (q = k = v: grad adds the three
// contributions). The second attention runs on `hopper` where it can (sm_90a, and on the
// interpreter), else `tile`, its VJP too. Each call of the gradient prints the
// implementation it runs on, and asking `hopper` for what it cannot serve (f64 inputs, an
// sm_80 target) prints the NotSupported message a user would get. On the GPU the
// gradient is checked against the same chain run with the `reference` implementations
// (materialised f32 logits), timed, autotuned (every op call, forward and VJP), dumped,
// loaded and rerun inside the loaded result's scope (twice, bit for bit) and timed again;
// on the interpreter a small shape runs the same chain against the reference.
#include "common/Example.h"
#include "common/Headline.h"
#include "common/Tuning.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Benchmark.h>

#include <string>

using namespace tokamax;

namespace {

/// Which implementation each call of `f` runs on (pinned or chosen by auto) on `arch`.
void printImplementations(const Function &f, const std::string &arch) {
  for (const Function::Call &call : f.calls())
    fmt::print("  {:<24} {:<6} {}\n", call.args.op, call.implementation ? "pinned" : "auto",
               call.op->select(call.args, call.implementation, arch).name());
}

/// What asking "hopper" for a call it cannot serve tells the user.
void printRefusals() {
  auto specs = [](DType d) {
    ArgSpec x{{2, 256, 16, 64}, d};
    return bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
  };
  auto ask = [](const char *what, const BoundArgs &args, const std::string &arch) {
    try {
      attention_op().select(args, "hopper", arch);
      fmt::print("  {}: served\n", what);
    } catch (const NotSupported &e) {
      fmt::print("  {}: NotSupported: {}\n", what, e.what());
    }
  };
  fmt::print("asking \"hopper\" for what it cannot serve:\n");
  ask("f64 inputs on sm_90a", specs(DType::F64), "sm_90a");
  ask("bf16 inputs on sm_80", specs(DType::BF16), "sm_80");
}

int runOnGpu() {
  const std::vector<int64_t> shape{32, 2048, 16, 64};
  Device &device = Device::get();
  Stream stream = Stream::create(device);
  Tensor x = standardize({shape, DType::BF16}, 1, device), scale = standardize({{64}, DType::F32}, 2, device);
  Function dloss = grad(example::headline(shape, example::headline_implementations(device.arch())), {0, 1});
  fmt::print("grad(loss) calls on {}:\n", device.arch());
  printImplementations(dloss, device.arch());
  Function dref = grad(example::headline(shape, example::reference_implementations()), {0, 1});
  Tensor gx = Tensor::empty(shape, DType::BF16), gs = Tensor::empty({64}, DType::F32);
  Tensor rx = Tensor::empty(shape, DType::BF16), rs = Tensor::empty({64}, DType::F32);
  TensorView in[] = {x, scale}, out[] = {gx, gs}, refOut[] = {rx, rs};
  auto step = [&] { dloss.run(in, out, stream); };
  step();
  dref.run(in, refOut, stream);
  stream.synchronize();
  int status = example::report("d loss / d x (vs reference implementations)",
                               example::relative_error(gx.to_host_doubles(), rx.to_host_doubles()), 3e-2);
  status |= example::report("d loss / d scale (vs reference implementations)",
                            example::relative_error(gs.to_host_doubles(), rs.to_host_doubles()), 3e-2);
  example::print_timing("grad(loss) step", time_on_stream(stream, step, 3, 10), 0);
  fmt::print("grad(loss): {} op calls\n", dloss.calls().size());
  // The same chain with nothing pinned (auto: hopper for both attentions on sm_90a), the
  // peer of JAX's chain with cuDNN attention (bench/peers/headline.py).
  Function dauto = grad(example::headline(shape, example::HeadlineImplementations{}), {0, 1});
  example::print_timing("grad(loss) step, auto implementations",
                        time_on_stream(stream, [&] { dauto.run(in, out, stream); }, 3, 10), 0);

  // Autotune every op of the gradient (forward and VJP calls), dump, load, and rerun
  // inside the loaded result's scope: two reruns give the same bits.
  AutotuningResult loaded = example::autotune_dump_load(dloss);
  {
    AutotuningScope scope(loaded);
    step();
    stream.synchronize();
    const std::vector<double> firstX = gx.to_host_doubles(), firstScale = gs.to_host_doubles();
    step();
    stream.synchronize();
    const bool same = firstX == gx.to_host_doubles() && firstScale == gs.to_host_doubles();
    fmt::print("two reruns in the loaded result's scope: {}\n", same ? "bitwise identical" : "DIFFER");
    status |= same ? 0 : 1;
    example::print_timing("grad(loss) step, tuned", time_on_stream(stream, step, 3, 10), 0);
  }
  printRefusals();
  return status;
}

int runOnHost() {
  const std::vector<int64_t> shape{2, 48, 2, 64};  // S a multiple of 16, as hopper needs
  const int64_t n = 2 * 48 * 2 * 64;
  auto xb = example::to_bytes(example::random_values(n, DType::BF16, 1), DType::BF16);
  std::vector<float> scale(64);
  for (size_t i = 0; i < scale.size(); ++i)
    scale[i] = 0.5f + 0.01f * float(i);
  std::vector<uint8_t> gx(n * 2), rx(n * 2);
  std::vector<float> gs(64), rs(64);
  TensorView in[] = {host_view(xb.data(), DType::BF16, shape), host_view(scale.data(), DType::F32, {64})};
  TensorView out[] = {host_view(gx.data(), DType::BF16, shape), host_view(gs.data(), DType::F32, {64})};
  TensorView refOut[] = {host_view(rx.data(), DType::BF16, shape), host_view(rs.data(), DType::F32, {64})};
  Function dloss = grad(example::headline(shape, example::headline_implementations("sm_90a")), {0, 1});
  fmt::print("grad(loss) calls (interpreter, as on sm_90a):\n");
  printImplementations(dloss, "sm_90a");
  dloss.interpret(in, out);
  grad(example::headline(shape, example::reference_implementations()), {0, 1}).interpret(in, refOut);
  int status = example::report("d loss / d x (interpreter, vs reference implementations)",
                               example::relative_error(example::from_bytes(gx, DType::BF16),
                                                       example::from_bytes(rx, DType::BF16)),
                               3e-2);
  status |= example::report("d loss / d scale (interpreter, vs reference implementations)",
                            example::relative_error({gs.begin(), gs.end()}, {rs.begin(), rs.end()}), 3e-2);
  printRefusals();
  return status;
}

} // namespace

int main() try {
  return example::use_gpu() ? runOnGpu() : runOnHost();
} catch (const std::exception &e) {
  fmt::print(stderr, "attention: error: {}\n", e.what());
  return 1;
}
