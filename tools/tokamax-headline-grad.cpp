// tokamax-headline-grad: the headline gradient of examples/attention.cpp (the same traced
// Function: examples/common/Headline.h) on one set of inputs, saved as .npy files for an
// accuracy check against float64 (bench/peers/seed_accuracy.py), with the variants that
// say where its error comes from:
//
//   headline             the example's implementations (norms tile / auto, attention
//                        chunked / --second)                 loss.npy dx.npy dscale.npy
//   reference            every call on "reference"           *_reference.npy
//   attention_reference  the headline's norms, both attention calls on "reference"
//                                                            *_attention_reference.npy
//   norms_reference      both norms on "reference", the headline's attention
//                                                            *_norms_reference.npy
//
// Inputs: x [B, T, N, H] bf16 = random_host_values({shape, bf16}, seed) and scale [H] f32 =
// random_host_values({[H], f32}, seed + 1) times --scale-factor (<tokamax/runtime/Benchmark.h>;
// seed 1 and factor 1 give the example's inputs), saved as x.npy and scale.npy. Those
// scales (magnitudes up to 3) make both attentions nearly one-hot (each query's own key
// takes almost all the weight: q = k); a factor of 0.25 gives spread-out weights. Every .npy holds float32 ('<f4'): bf16
// values widened exactly. loss*.npy is the forward loss, shape (1,). meta.json says the
// shape, seed, device, each variant's implementations (as chosen on the arch), the traced
// epsilons and attention scales, and the files.
//
//   tokamax-headline-grad [--shape B,T,N,H] [--seed N] [--scale-factor F] [--second IMPL] --out DIR
//
// Runs on the GPU, else on the CPU interpreter (as on sm_90a; default shape 1,32,2,64 there).
#include "common/Example.h"
#include "common/Headline.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tokamax;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

/// Where the Functions run: a GPU, or the interpreter (device == nullptr).
struct Target {
  Device *device = nullptr;
  std::string arch = "sm_90a";  // what the interpreter's implementation choice assumes
  std::string description = "CPU interpreter (implementations as on sm_90a)";
};

Target findTarget() {
  Target target;
  if (interpreter_requested())
    return target;
  try {
    if (Device::count() == 0)
      return target;
  } catch (const Error &) {  // no driver
    return target;
  }
  target.device = &Device::get();
  target.arch = target.device->arch();
  target.description = describe(*target.device);
  return target;
}

/// A tensor held on the host: its spec and bytes.
struct HostTensor {
  ArgSpec spec;
  std::vector<uint8_t> bytes;

  static HostTensor of(const ArgSpec &spec, const std::vector<double> &values) {
    HostTensor t{spec, std::vector<uint8_t>(values.size() * dtype_size(spec.dtype))};
    for (size_t i = 0; i < values.size(); ++i)
      store_from_double(spec.dtype, t.bytes.data() + i * dtype_size(spec.dtype), values[i]);
    return t;
  }
  std::vector<float> floats() const {
    std::vector<float> v(size_t(spec.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = float(load_as_double(spec.dtype, bytes.data() + i * dtype_size(spec.dtype)));
    return v;
  }
};

/// Runs `f` on `inputs` (on the GPU, or interpreted) and returns its outputs.
std::vector<HostTensor> runFunction(const Function &f, const std::vector<HostTensor> &inputs, const Target &target) {
  std::vector<HostTensor> outputs;
  for (const ArgSpec &spec : f.output_specs())
    outputs.push_back({spec, std::vector<uint8_t>(size_t(spec.numel()) * dtype_size(spec.dtype))});
  if (!target.device) {
    std::vector<TensorView> in, out;
    for (const HostTensor &t : inputs)
      in.push_back(host_view(t.bytes.data(), t.spec.dtype, t.spec.shape));
    for (HostTensor &t : outputs)
      out.push_back(host_view(t.bytes.data(), t.spec.dtype, t.spec.shape));
    f.interpret(in, out);
    return outputs;
  }
  std::vector<Tensor> in, out;
  std::vector<TensorView> inViews, outViews;
  for (const HostTensor &t : inputs) {
    in.push_back(Tensor::empty(t.spec.shape, t.spec.dtype, *target.device));
    in.back().copy_from_host(t.bytes.data(), t.bytes.size());
    inViews.push_back(in.back().view());
  }
  for (const HostTensor &t : outputs) {
    out.push_back(Tensor::empty(t.spec.shape, t.spec.dtype, *target.device));
    outViews.push_back(out.back().view());
  }
  Stream stream = Stream::create(*target.device);
  f.run(inViews, outViews, stream);
  stream.synchronize();
  for (size_t i = 0; i < outputs.size(); ++i)
    out[i].copy_to_host(outputs[i].bytes.data(), outputs[i].bytes.size());
  return outputs;
}

/// Writes `values` as a little-endian float32 .npy (format 1.0: magic, version, header
/// length, a Python dict literal padded with spaces to a multiple of 64 bytes, the data).
void writeNpy(const fs::path &path, const std::vector<float> &values, const std::vector<int64_t> &shape) {
  static_assert(std::endian::native == std::endian::little, "the data are written as '<f4'");
  std::string dims;
  for (int64_t d : shape)
    dims += fmt::format("{}, ", d);
  if (shape.size() > 1)
    dims.resize(dims.size() - 2);  // "(4, 2048)"; a 1-tuple keeps its comma: "(64,)"
  else if (!dims.empty())
    dims.pop_back();
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  const size_t prefix = 10;  // magic (6), version (2), header length (2)
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  const uint16_t length = uint16_t(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char *>(&length), 2);
  out << header;
  out.write(reinterpret_cast<const char *>(values.data()), std::streamsize(values.size() * sizeof(float)));
  if (!out)
    throw Error(fmt::format("cannot write '{}'", path.string()));
}

std::vector<int64_t> parseShape(const std::string &text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t d = 0;
    try {
      d = std::stoll(item, &used);
    } catch (const std::exception &) {
    }
    if (used != item.size() || d <= 0)
      throw Error(fmt::format("--shape: '{}' is not a positive integer (want B,T,N,H)", item));
    shape.push_back(d);
  }
  if (shape.size() != 4)
    throw Error(fmt::format("--shape: want four sizes B,T,N,H, got '{}'", text));
  return shape;
}

struct Variant {
  std::string name, suffix;
  example::HeadlineImplementations implementations;
};

std::vector<Variant> variants(const example::HeadlineImplementations &headline) {
  const example::HeadlineImplementations ref = example::reference_implementations();
  // The reference first: the others print their distance from it.
  return {{"reference", "_reference", ref},
          {"headline", "", headline},
          {"attention_reference", "_attention_reference",
           {headline.first_norm, ref.first_attention, headline.second_norm, ref.second_attention}},
          {"norms_reference", "_norms_reference",
           {ref.first_norm, headline.first_attention, ref.second_norm, headline.second_attention}}};
}

/// "op: implementation" of each call of `f` as it runs on `arch` (pinned or auto's choice).
Json callImplementations(const Function &f, const std::string &arch) {
  Json calls = Json::array();
  for (const Function::Call &call : f.calls())
    calls.push_back(call.args.op + ": " + call.op->select(call.args, call.implementation, arch).name());
  return calls;
}

/// ||got - ref|| / ||ref|| (example::relative_error; NaN prints as inf).
double relativeL2(const std::vector<float> &got, const std::vector<float> &ref) {
  return example::relative_error({got.begin(), got.end()}, {ref.begin(), ref.end()});
}

double sum(const std::vector<float> &v) {
  double s = 0;
  for (float x : v)
    s += x;
  return s;
}

double sumAbs(const std::vector<float> &v) {
  double s = 0;
  for (float x : v)
    s += std::fabs(x);
  return s;
}

/// x and scale as documented above, and their description for meta.json.
std::vector<HostTensor> makeInputs(const std::vector<int64_t> &shape, uint32_t seed, double scaleFactor, Json &meta) {
  const ArgSpec x{shape, DType::BF16}, scale{{shape.back()}, DType::F32};
  std::vector<double> scaleValues = random_host_values({scale.shape, scale.dtype}, seed + 1);
  for (double &v : scaleValues)
    v *= scaleFactor;
  meta["inputs"] = {
      {"x", {{"file", "x.npy"}, {"dtype", "bf16"}, {"values", fmt::format("random_host_values seed {}", seed)}}},
      {"scale",
       {{"file", "scale.npy"},
        {"dtype", "f32"},
        {"values", fmt::format("random_host_values seed {} times {}", seed + 1, scaleFactor)}}}};
  return {HostTensor::of(x, random_host_values({x.shape, x.dtype}, seed)), HostTensor::of(scale, scaleValues)};
}

int run(const std::vector<int64_t> &shape, uint32_t seed, double scaleFactor, const std::string &second,
        const fs::path &dir, const Target &target) {
  Json meta{{"tool", "tokamax-headline-grad"},
            {"shape", shape},
            {"seed", seed},
            {"device", target.description},
            {"arch", target.arch},
            {"npy", "float32 ('<f4') everywhere; bf16 tensors (x, dx) widened exactly"}};
  const std::vector<HostTensor> inputs = makeInputs(shape, seed, scaleFactor, meta);
  const std::vector<int64_t> scaleShape{shape.back()};
  fs::create_directories(dir);
  writeNpy(dir / "x.npy", inputs[0].floats(), shape);
  writeNpy(dir / "scale.npy", inputs[1].floats(), scaleShape);

  example::HeadlineImplementations headline = example::headline_implementations(target.arch);
  if (!second.empty())
    headline.second_attention = second;
  Json variantsJson = Json::object();
  std::vector<float> refDx, refDscale;
  double refLoss = 0;
  for (const Variant &v : variants(headline)) {
    const Function loss = example::headline(shape, v.implementations);
    const Function dloss = grad(loss, {0, 1});
    if (v.name == "headline") {  // the traced constants, for the float64 chain
      for (const Function::Call &call : loss.calls()) {
        if (call.op == &layer_norm_op())
          meta["epsilons"].push_back(call.args.float_attribute("epsilon"));
        if (call.op == &attention_op())
          meta["attention_scales"].push_back(call.args.float_attribute("scale"));
      }
    }
    const float lossValue = runFunction(loss, inputs, target)[0].floats()[0];
    const std::vector<HostTensor> grads = runFunction(dloss, inputs, target);
    const std::vector<float> dx = grads[0].floats(), dscale = grads[1].floats();
    const Json files{{"loss", "loss" + v.suffix + ".npy"}, {"dx", "dx" + v.suffix + ".npy"},
                     {"dscale", "dscale" + v.suffix + ".npy"}};
    writeNpy(dir / files["loss"].get<std::string>(), {lossValue}, {1});
    writeNpy(dir / files["dx"].get<std::string>(), dx, shape);
    writeNpy(dir / files["dscale"].get<std::string>(), dscale, scaleShape);
    variantsJson[v.name] = {{"loss", lossValue},
                            {"files", files},
                            {"forward", callImplementations(loss, target.arch)},
                            {"gradient", callImplementations(dloss, target.arch)}};
    fmt::print("{:<20} loss {:.6e}  sum dx {:.6e}  sum |dx| {:.6e}  sum dscale {:.6e}  dx[0] {:.6e}\n", v.name,
               lossValue, sum(dx), sumAbs(dx), sum(dscale), dx[0]);
    if (v.name == "reference") {
      refDx = dx, refDscale = dscale, refLoss = lossValue;
    } else if (!refDx.empty()) {
      fmt::print("{:<20} vs reference: loss {:.3e}, dx {:.3e}, dscale {:.3e} (relative L2)\n", "",
                 std::fabs(lossValue - refLoss) / std::fabs(refLoss), relativeL2(dx, refDx),
                 relativeL2(dscale, refDscale));
    }
  }
  meta["variants"] = variantsJson;
  std::ofstream(dir / "meta.json") << meta.dump(2) << "\n";
  fmt::print("wrote {} (x, scale, and loss, dx, dscale of {} variants; meta.json)\n", dir.string(),
             variantsJson.size());
  return 0;
}

} // namespace

int main(int argc, char **argv) try {
  CLI::App app{"tokamax-headline-grad: the headline gradient and its reference variants, saved as .npy"};
  std::string shapeText, second, out;
  uint32_t seed = 1;
  double scaleFactor = 1;
  app.add_option("--shape", shapeText, "B,T,N,H (default 4,2048,16,64 on a GPU, 1,32,2,64 interpreted)");
  app.add_option("--seed", seed, "input seed: x takes it, scale seed + 1")->capture_default_str();
  app.add_option("--scale-factor", scaleFactor, "multiplies the scale's random values")->capture_default_str();
  app.add_option("--second", second, "the second attention's implementation (default hopper on sm_90a, else tile)");
  app.add_option("--out", out, "the directory to write")->required();
  CLI11_PARSE(app, argc, argv);
  const Target target = findTarget();
  if (shapeText.empty())
    shapeText = target.device ? "4,2048,16,64" : "1,32,2,64";
  const std::vector<int64_t> shape = parseShape(shapeText);
  fmt::print("{}; shape {}, seed {}, scale factor {}\n", target.description, shapeText, seed, scaleFactor);
  return run(shape, seed, scaleFactor, second, out, target);
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-headline-grad: error: {}\n", e.what());
  return 1;
}
