// Exports on the GPU: an exported gradient Function (layer_norm alone, and the headline
// layer_norm -> attention chunked -> layer_norm -> attention hopper -> sum) run through
// ExportedFunction::run gives bitwise the outputs of Function::run under the same
// configs (heuristics, or one AutotuningResult for both); a second run on another stream
// gives them again, as does an export whose device was prepared ahead of its first run;
// a file for another device kind is refused (run and prepare) naming both kinds; the
// format-version-1 fixture runs where it was built for (an H200), close to its Function
// under the configs it recorded, and is refused elsewhere.
#include "unit/export/ExportTestUtil.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <catch2/catch.hpp>

#include "common/TempDir.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

using namespace tokamax;
using namespace export_test;
using Catch::Matchers::Contains;

namespace {

/// Device copies of host buffers' inputs, and fresh outputs.
struct DeviceBuffers {
  std::vector<Tensor> in, out;
  std::vector<TensorView> inViews, outViews;

  DeviceBuffers(const HostBuffers &host, const std::vector<ArgSpec> &inputs, const std::vector<ArgSpec> &outputs) {
    Device &device = Device::get(0);
    for (size_t i = 0; i < inputs.size(); ++i) {
      in.push_back(Tensor::empty(inputs[i].shape, inputs[i].dtype, device));
      in.back().copy_from_host(host.in[i].data(), host.in[i].size());
    }
    for (const ArgSpec &s : outputs)
      out.push_back(Tensor::empty(s.shape, s.dtype, device));
    for (const Tensor &t : in)
      inViews.push_back(t.view());
    for (const Tensor &t : out)
      outViews.push_back(t.view());
  }

  std::vector<std::vector<uint8_t>> outputs() const {
    std::vector<std::vector<uint8_t>> bytes;
    for (const Tensor &t : out) {
      bytes.emplace_back(t.nbytes());
      t.copy_to_host(bytes.back().data(), bytes.back().size());
    }
    return bytes;
  }
};

/// Runs `g` directly and its export for this device on the same inputs; both outputs.
/// With `prepareFirst`, the device is prepared before the export's first run.
void expectSameBits(const Function &g, const ExportOptions &options, bool prepareFirst = false) {
  ExportedFunction e = ExportedFunction::load(export_function(g, options).bytes());
  if (prepareFirst) {
    e.prepare(Device::get(0));
    e.prepare(Device::get(0));  // already ready: nothing more
  }
  HostBuffers host(g.input_specs(), g.output_specs(), 17);
  DeviceBuffers direct(host, g.input_specs(), g.output_specs()), exported(host, g.input_specs(), g.output_specs());
  Stream stream = Stream::create(Device::get(0));
  g.run(direct.inViews, direct.outViews, stream);
  e.run(exported.inViews, exported.outViews, stream);
  stream.synchronize();
  const auto want = direct.outputs();
  CHECK(exported.outputs() == want);
  // Again on another stream: kernels, intermediates and scratch are reused.
  Stream other = Stream::create(Device::get(0));
  DeviceBuffers again(host, g.input_specs(), g.output_specs());
  e.run(again.inViews, again.outViews, other);
  other.synchronize();
  CHECK(again.outputs() == want);
}

ExportOptions forThisDevice() {
  ExportOptions options;
  options.target = ExportTarget::of(Device::get(0));
  return options;
}

} // namespace

TEST_CASE("an exported layer_norm gradient gives the Function's bits", "[gpu][export]") {
  expectSameBits(small_grad(), forThisDevice());
}

TEST_CASE("an export prepared ahead of its first run gives the Function's bits", "[gpu][export]") {
  expectSameBits(small_grad(), forThisDevice(), true);
}

TEST_CASE("the exported headline gradient gives the Function's bits", "[gpu][export]") {
  // Its second attention on hopper (its VJP too) where the device is sm_90a.
  expectSameBits(headline_grad(Device::get(0).arch() == "sm_90a" ? "hopper" : "tile"), forThisDevice());
}

TEST_CASE("an export and its Function under one AutotuningResult give the same bits", "[gpu][export]") {
  const Function g = small_grad();
  const Function::Call *ln = first_call(g, "layer_norm");
  REQUIRE(ln);
  auto tuned = std::make_shared<AutotuningResult>();
  tuned->add(TuningEntry{ln->args, "tile", Config{{"block_rows", 1}, {"num_warps", 1}}, {}});
  ExportOptions options = forThisDevice();
  options.autotuning = tuned;
  AutotuningScope scope(tuned);  // the direct run takes the same configs
  expectSameBits(g, options);
}

TEST_CASE("an export for another device kind is refused, naming both", "[gpu][export]") {
  const ExportTarget here = ExportTarget::of(Device::get(0));
  ExportOptions options;
  options.target = here.arch == "sm_80" ? h200() : ExportTarget::parse("sm_80", "NVIDIA A100-SXM4-80GB:8.0");
  const Function g = small_grad();
  ExportedFunction e = export_function(g, options);
  HostBuffers host(g.input_specs(), g.output_specs(), 1);
  DeviceBuffers d(host, g.input_specs(), g.output_specs());
  Stream stream = Stream::create(Device::get(0));
  CHECK_THROWS_WITH(e.run(d.inViews, d.outViews, stream),
                    Contains(options.target.to_string()) && Contains(here.to_string()));
  CHECK_THROWS_WITH(e.prepare(Device::get(0)), Contains(options.target.to_string()) && Contains(here.to_string()));
  // The same arch under another device name is refused as well.
  ExportOptions renamed;
  renamed.target = ExportTarget::parse(here.arch, fmt::format("Another GPU:{}.{}", here.cc_major, here.cc_minor));
  test::TempDir dir("tokamax-export-gpu");
  export_function(g, renamed).save(dir.path / "g.tkx");
  CHECK_THROWS_WITH(ExportedFunction::load(dir.path / "g.tkx", here), Contains("Another GPU") && Contains(here.device_name));
}

TEST_CASE("the format-version-1 fixture runs on an H200 and is refused elsewhere", "[gpu][export]") {
  if (!std::filesystem::exists(fixture_path())) {
    WARN("no " << fixture_path() << " (the source tree's tests/data): skipped");
    return;
  }
  ExportedFunction e = ExportedFunction::load(fixture_path());
  Function g = Function::from_json(e.function_json());
  HostBuffers host(g.input_specs(), g.output_specs(), 9);
  DeviceBuffers direct(host, g.input_specs(), g.output_specs()), exported(host, g.input_specs(), g.output_specs());
  Stream stream = Stream::create(Device::get(0));
  const ExportTarget here = ExportTarget::of(Device::get(0));
  if (!e.target().accepts(here)) {
    CHECK_THROWS_WITH(e.run(exported.inViews, exported.outViews, stream), Contains("NVIDIA H200"));
    return;
  }
  {
    AutotuningScope scope(recorded_configs(e));  // the configs the fixture recorded
    g.run(direct.inViews, direct.outViews, stream);
  }
  e.run(exported.inViews, exported.outViews, stream);
  stream.synchronize();
  // Within rounding: the fixture's kernels are frozen, today's may change.
  CHECK(outputs_close(exported.outputs(), direct.outputs(), g.output_specs(), 2e-2));
}
