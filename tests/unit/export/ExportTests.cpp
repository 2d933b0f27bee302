// Exports with no GPU: every section round-trips (bytes, file, accessors), the recorded
// plan replays on the interpreter bit for bit like the Function, configs and
// implementations are the ones chosen for the target, a file refuses another device
// kind naming both, the format-version-1 fixture keeps loading and replaying, and a
// newer version is refused. The fixture's generator is the hidden test at the end.
#include "unit/export/ExportTestUtil.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/TempDir.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

using namespace tokamax;
using namespace export_test;
using Catch::Matchers::Contains;

TEST_CASE("an export round-trips through bytes and a file, every section intact", "[export]") {
  const Function g = small_grad();
  ExportOptions options;
  options.target = h200();
  ExportedFunction e = export_function(g, options);
  ExportedFunction back = ExportedFunction::load(e.bytes());
  CHECK(back.bytes() == e.bytes());
  CHECK(back.format_version() == ExportedFunction::kFormatVersion);
  CHECK_THAT(back.producer(), Contains("tokamax "));
  // Target (manifest).
  CHECK(back.target() == h200());
  CHECK(back.target().device_kind() == "NVIDIA H200:9.0");
  // The function section is the Function's own JSON.
  CHECK(back.function_json() == g.to_json());
  CHECK(Function::from_json(back.function_json()).to_json() == g.to_json());
  // Plan: specs, calls (op, arguments, implementation, config, slots).
  REQUIRE(back.input_specs().size() == 2);
  CHECK(back.input_specs()[0].first == std::vector<int64_t>{5, 33});
  CHECK(back.input_specs()[0].second == DType::BF16);
  CHECK(back.output_specs().size() == 2);
  REQUIRE(back.calls().size() == g.calls().size());
  for (size_t i = 0; i < g.calls().size(); ++i) {
    const Function::Call &c = g.calls()[i];
    const Implementation &impl = c.op->select(c.args, c.implementation, "sm_90a");
    CHECK(back.calls()[i].op == c.op->name());
    CHECK(back.calls()[i].args_json == nlohmann::json::parse(c.args.to_json()).dump());
    CHECK(back.calls()[i].implementation == impl.name());
    CHECK(Config::from_json(back.calls()[i].config_json) == c.op->resolve_config(impl, c.args, std::nullopt));
    CHECK(back.calls()[i].slots == c.slots);
  }
  // Kernels: launch metadata, cubin, PTX and IR, each kernel once, every one launched.
  std::set<std::string> irs;
  for (const dsl::Kernel &k : g.kernels("sm_90a"))
    irs.insert(k.ir());
  const std::vector<ExportedKernel> kernels = back.kernels();
  CHECK(kernels.size() == irs.size());
  size_t launches = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    CHECK(kernels[k].launch.to_json() == e.kernels()[k].launch.to_json());
    CHECK(kernels[k].cubin_bytes > 0);
    CHECK(kernels[k].ptx_bytes > 0);
    CHECK(kernels[k].ir_bytes > 0);
    CHECK(kernels[k].launches > 0);
    launches += kernels[k].launches;
  }
  CHECK(launches == back.launch_count());
  // A file holds the same bytes.
  test::TempDir dir("tokamax-export");
  e.save(dir.path / "g.tkx");
  CHECK(read_bytes(dir.path / "g.tkx") == e.bytes());
  CHECK(ExportedFunction::load(dir.path / "g.tkx").bytes() == e.bytes());
  // describe() names the target, the calls and the kernels.
  const std::string text = back.describe();
  CHECK_THAT(text, Contains("sm_90a on NVIDIA H200 (compute capability 9.0)"));
  CHECK_THAT(text, Contains("layer_norm_vjp"));
  CHECK_THAT(text, Contains(kernels[0].launch.kernel_name));
  CHECK_THAT(text, Contains("format version 1"));
}

TEST_CASE("without PTX or IR the export keeps only cubins, and interpret says why it cannot run", "[export]") {
  ExportOptions options;
  options.target = ExportTarget::parse("sm_80");
  options.include_ptx = false;
  options.include_ir = false;
  ExportedFunction e = export_function(small_grad(), options);
  for (const ExportedKernel &k : e.kernels()) {
    CHECK(k.cubin_bytes > 0);
    CHECK(k.ptx_bytes == 0);
    CHECK(k.ir_bytes == 0);
  }
  CHECK(e.target().device_name.empty());
  HostBuffers b(small_grad().input_specs(), small_grad().output_specs(), 1);
  CHECK_THROWS_WITH(interpret(e, b.inViews, b.outViews), Contains("has no tile IR"));
}

TEST_CASE("the exported plan replays on the interpreter with the Function's bits", "[export][interpreter]") {
  const Function g = small_grad();
  ExportedFunction e = ExportedFunction::load(small_export_bytes());
  HostBuffers a(g.input_specs(), g.output_specs(), 7), b(g.input_specs(), g.output_specs(), 7, 0xA5);
  g.interpret(a.inViews, a.outViews);
  interpret(e, b.inViews, b.outViews);
  CHECK(a.out == b.out);
  // Wrong views are refused by name before anything runs.
  CHECK_THROWS_WITH(interpret(e, std::span(b.inViews).first(1), b.outViews), Contains("expected 2 inputs"));
  std::vector<TensorView> swapped = {b.inViews[1], b.inViews[0]};
  CHECK_THROWS_WITH(interpret(e, swapped, b.outViews), Contains("input 0 is f32 [33]"));
}

namespace {

/// `g` exported for an H200 without PTX, checked to replay on the interpreter with the
/// bits of `g` itself (inputs from `seed`); the export, for the caller's own checks.
ExportedFunction replayedOnInterpreter(const Function &g, uint32_t seed) {
  ExportOptions options;
  options.target = h200();
  options.include_ptx = false;
  ExportedFunction e = export_function(g, options);
  HostBuffers a(g.input_specs(), g.output_specs(), seed), b(g.input_specs(), g.output_specs(), seed, 0xA5);
  g.interpret(a.inViews, a.outViews);
  interpret(e, b.inViews, b.outViews);
  CHECK(a.out == b.out);
  return e;
}

} // namespace

TEST_CASE("the headline gradient's export replays on the interpreter with the Function's bits",
          "[export][interpreter][attention]") {
  // layer_norm tile -> attention chunked -> layer_norm -> attention tile -> sum, and back:
  // attention's scratch, several kernels per call, fan-out adds.
  std::ifstream in(std::string(TOKAMAX_TEST_DATA) + "/headline-grad-function.json");
  REQUIRE(in);
  const Function g = Function::from_json(std::string(std::istreambuf_iterator<char>(in), {}));
  ExportedFunction e = replayedOnInterpreter(g, 23);
  CHECK(e.calls().size() == g.calls().size());
}

TEST_CASE("the headline gradient with its hopper attention exports for sm_90a and replays with its bits",
          "[export][interpreter][attention]") {
  // Built with no GPU: the second attention's forward and VJP are hopper's TMA / wgmma
  // kernels (a producer warpgroup, tensor maps), recorded with their launch metadata.
  ExportedFunction e = replayedOnInterpreter(headline_grad("hopper"), 29);
  size_t hopperCalls = 0;
  for (const auto &c : e.calls())
    hopperCalls += c.implementation == "hopper";
  CHECK(hopperCalls == 2u);  // the forward and its VJP
  CHECK_THAT(e.describe(), Contains("hopper"));
}

TEST_CASE("configs of an autotuning result are used and recorded per call", "[export][autotune]") {
  const Function g = small_grad();
  const Function::Call *ln = first_call(g, "layer_norm");
  REQUIRE(ln);
  const Implementation &tile = ln->op->implementation("tile");
  Config other{{"block_rows", 1}, {"num_warps", 1}};
  REQUIRE_FALSE(tile.check_config(ln->args, other).has_value());
  REQUIRE(other != tile.heuristic(ln->args));
  auto tuned = std::make_shared<AutotuningResult>();
  tuned->add(TuningEntry{ln->args, "tile", other, {}});
  ExportOptions options;
  options.target = h200();
  options.autotuning = tuned;
  ExportedFunction e = export_function(g, options);
  size_t matched = 0;
  for (const ExportedCall &c : e.calls())
    if (c.args_json == nlohmann::json::parse(ln->args.to_json()).dump()) {
      CHECK(c.implementation == "tile");
      CHECK(Config::from_json(c.config_json) == other);
      ++matched;
    }
  CHECK(matched >= 1);
  // The tuned kernels are the ones compiled: the plan still replays the Function's bits
  // under the same result.
  AutotuningScope scope(tuned);
  HostBuffers a(g.input_specs(), g.output_specs(), 3), b(g.input_specs(), g.output_specs(), 3, 0x5A);
  g.interpret(a.inViews, a.outViews);
  interpret(e, b.inViews, b.outViews);
  CHECK(a.out == b.out);
}

TEST_CASE("an export runs only on its device kind, and the error names both", "[export][target]") {
  ExportedFunction e = ExportedFunction::load(small_export_bytes());
  CHECK_NOTHROW(e.check_device(h200()));
  const ExportTarget a100 = ExportTarget::parse("sm_80", "NVIDIA A100-SXM4-80GB:8.0");
  CHECK_THROWS_WITH(e.check_device(a100), Contains("built for sm_90a on NVIDIA H200 (compute capability 9.0)") &&
                                              Contains("cannot run on sm_80 on NVIDIA A100-SXM4-80GB"));
  const ExportTarget h100 = ExportTarget::parse("sm_90a", "NVIDIA H100 80GB HBM3:9.0");
  CHECK_THROWS_WITH(e.check_device(h100), Contains("NVIDIA H200") && Contains("NVIDIA H100 80GB HBM3"));
  // Through load(path, device) too.
  test::TempDir dir("tokamax-export");
  e.save(dir.path / "g.tkx");
  CHECK_THROWS_WITH(ExportedFunction::load(dir.path / "g.tkx", a100), Contains("cannot run on sm_80"));
  CHECK_NOTHROW(ExportedFunction::load(dir.path / "g.tkx", h200()));
  // A target without a device name takes any device of its capability, no other.
  const ExportTarget any = ExportTarget::parse("sm_90a");
  CHECK(any.accepts(h100));
  CHECK(any.accepts(h200()));
  CHECK_FALSE(any.accepts(a100));
}

TEST_CASE("export targets are checked when parsed", "[export][target]") {
  CHECK(ExportTarget::parse("sm_80").cc_major == 8);
  CHECK(ExportTarget::parse("sm_86").cc_minor == 6);
  CHECK(ExportTarget::parse("sm_100a").cc_major == 10);
  CHECK(ExportTarget::parse("sm_90a", "NVIDIA H200:9.0").device_name == "NVIDIA H200");
  CHECK_THROWS_WITH(ExportTarget::parse("gfx90a"), Contains("arch must look like sm_80 or sm_90a, got 'gfx90a'"));
  CHECK_THROWS_WITH(ExportTarget::parse("sm_9"), Contains("got 'sm_9'"));
  CHECK_THROWS_WITH(ExportTarget::parse("sm_90b"), Contains("got 'sm_90b'"));
  CHECK_THROWS_WITH(ExportTarget::parse("sm_90a", "NVIDIA H200"), Contains("name:major.minor"));
  CHECK_THROWS_WITH(ExportTarget::parse("sm_90a", "NVIDIA H200:9.0x"), Contains("name:major.minor"));
  CHECK_THROWS_WITH(ExportTarget::parse("sm_90a", "NVIDIA A100:8.0"),
                    Contains("compute capability 8.0 but arch sm_90a is 9.0"));
}

TEST_CASE("export refuses what it cannot record, naming it", "[export]") {
  ExportOptions options;
  options.target.arch = "sm9";
  CHECK_THROWS_WITH(export_function(small_grad(), options), Contains("got 'sm9'"));
  // matmul's interpret() does not plan through an executor: refused before it runs.
  const ArgSpec m{{16, 16}, DType::F32};
  nlohmann::json f = {{"format", "tokamax-function"},
                      {"version", 2},
                      {"values", {nlohmann::json::parse(m.to_json()), nlohmann::json::parse(m.to_json()),
                                  nlohmann::json::parse(m.to_json())}},
                      {"inputs", {0, 1}},
                      {"outputs", {2}},
                      {"calls",
                       {{{"args", nlohmann::json::parse(bind_matmul(m, m, std::nullopt, m, false, false, 1.0).to_json())},
                         {"slots", {0, 1, -1, 2}},
                         {"implementation", nullptr}}}}};
  options.target = h200();
  CHECK_THROWS_WITH(export_function(Function::from_json(f.dump()), options),
                    Contains("calls[0] (matmul): op \"matmul\" cannot be exported"));
}

TEST_CASE("save is atomic: it replaces a file whole and leaves no temp file", "[export]") {
  ExportedFunction e = ExportedFunction::load(small_export_bytes());
  test::TempDir dir("tokamax-export");
  const auto path = dir.path / "g.tkx";
  { std::ofstream(path) << "an older file"; }
  e.save(path);
  CHECK(read_bytes(path) == e.bytes());
  size_t files = 0;
  for ([[maybe_unused]] const auto &entry : std::filesystem::directory_iterator(dir.path))
    ++files;
  CHECK(files == 1);
  CHECK_THROWS_WITH(e.save(dir.path / "missing" / "g.tkx"), Contains("cannot create") && Contains("missing"));
  CHECK_THROWS_WITH(ExportedFunction::load(dir.path / "none.tkx"), Contains("cannot open") && Contains("none.tkx"));
}

TEST_CASE("the format-version-1 fixture in tests/data loads, validates and replays", "[export][fixture]") {
  // Made by the hidden test below; every later library must keep reading it.
  ExportedFunction e = ExportedFunction::load(fixture_path());
  CHECK(e.format_version() == 1);
  CHECK(e.target() == h200());
  CHECK(e.kernels().size() >= 5);
  std::ifstream in(fixture_function_path());
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  CHECK(e.function_json() == text);
  // The recorded launches still compute what the Function does with the recorded
  // configs (within rounding: the fixture's kernels are frozen, today's may change).
  Function g = Function::from_json(e.function_json());
  HostBuffers a(g.input_specs(), g.output_specs(), 5), b(g.input_specs(), g.output_specs(), 5, 0xA5);
  {
    AutotuningScope scope(recorded_configs(e));
    g.interpret(a.inViews, a.outViews);
  }
  interpret(e, b.inViews, b.outViews);
  CHECK(outputs_close(a.out, b.out, g.output_specs(), 2e-2));
  CHECK_THAT(e.describe(), Contains("layer_norm_vjp"));
}

TEST_CASE("a file of a newer format version is refused with the versions named", "[export][fixture]") {
  std::vector<uint8_t> file = read_bytes(fixture_path());
  REQUIRE(file.size() > 64);
  set_le(file, 8, ExportedFunction::kFormatVersion + 1, 4);
  CHECK_THROWS_WITH(ExportedFunction::load(file),
                    Contains("format version 2 was written by a newer tokamax") && Contains("reads versions 1 to 1"));
  set_le(file, 8, 0, 4);
  CHECK_THROWS_WITH(ExportedFunction::load(file), Contains("format version 0 is not a format version"));
}

TEST_CASE("generate the export fixture (tests/data/export-v1.tkx)", "[.generate-export-fixture]") {
  // Run by hand when a format version is released:
  //   tokamax-unit-tests "[.generate-export-fixture]"
  // writes the small gradient's function JSON and its export (sm_90a, NVIDIA H200, no PTX)
  // into tests/data.
  const Function g = small_grad();
  { std::ofstream(fixture_function_path()) << g.to_json() << "\n"; }
  ExportOptions options;
  options.target = h200();
  options.include_ptx = false;
  export_function(g, options).save(fixture_path());
}
