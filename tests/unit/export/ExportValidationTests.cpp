// Every check of the export loader, one case each: the container (magic, sizes, counts,
// offsets, kinds, reserved fields, checksums) by editing the bytes, and the sections
// behind the checksums (manifest, function, plan: indices, enums, launch metadata,
// offsets against buffer sizes) by editing one section's JSON and sealing the file
// again. Each must be refused with an Error that names the field.
#include "unit/export/ExportTestUtil.h"

#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <functional>

using namespace tokamax;
using namespace export_test;
using Catch::Matchers::Contains;
using json = nlohmann::json;

namespace {

struct Case {
  const char *name;
  std::function<void(std::vector<uint8_t> &)> edit;
  const char *message;
};

void expectRefused(const std::vector<Case> &cases) {
  for (const Case &c : cases) {
    DYNAMIC_SECTION(c.name) {
      std::vector<uint8_t> file = small_export_bytes();
      c.edit(file);
      try {
        ExportedFunction::load(file);
        FAIL("the edited file loaded");
      } catch (const Error &e) {  // any other exception fails the test
        CHECK_THAT(std::string(e.what()), Contains(c.message));
      }
    }
  }
}

/// Edits section `kind`'s JSON and seals the file again.
std::function<void(std::vector<uint8_t> &)> editJson(uint32_t kind, std::function<void(json &)> edit) {
  return [kind, edit](std::vector<uint8_t> &file) {
    std::vector<RawSection> sections = sections_of(file);
    size_t i = find_section(sections, kind);
    REQUIRE(i < sections.size());
    json j = json::parse(sections[i].payload);
    edit(j);
    sections[i].payload = j.dump();
    file = build_file(sections);
  };
}

std::function<void(std::vector<uint8_t> &)> editPlan(std::function<void(json &)> edit) {
  return editJson(Plan, std::move(edit));
}

std::function<void(std::vector<uint8_t> &)> editSections(std::function<void(std::vector<RawSection> &)> edit) {
  return [edit](std::vector<uint8_t> &file) {
    std::vector<RawSection> sections = sections_of(file);
    edit(sections);
    file = build_file(sections);
  };
}

/// The first launch step, and the first whose kernel has a scalar parameter.
json &firstLaunch(json &plan) {
  for (json &s : plan["steps"])
    if (s.contains("kernel"))
      return s;
  FAIL("no launch step");
  throw;
}

size_t scalarParam(const json &plan, const json &step) {
  const json &params = plan["kernels"][step["kernel"].get<size_t>()]["launch"]["params"];
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i]["tensor"].get<bool>())
      return i;
  return params.size();
}

json &launchWithScalar(json &plan) {
  for (json &s : plan["steps"])
    if (s.contains("kernel") && scalarParam(plan, s) < s["args"].size())
      return s;
  FAIL("no launch with a scalar parameter");
  throw;
}

} // namespace

TEST_CASE("the export container's checks, one by one", "[export][validation]") {
  expectRefused({
      {"magic", [](auto &f) { f[0] = 'X'; }, "the magic \"TKMXEXPT\" is missing"},
      {"shorter than the header", [](auto &f) { f.resize(20); }, "shorter than the 32-byte header"},
      {"truncated", [](auto &f) { f.pop_back(); }, "gives a file size of"},
      {"extended", [](auto &f) { f.push_back(0); }, "gives a file size of"},
      {"header reserved field", [](auto &f) { set_le(f, 24, 1, 8); }, "the header's reserved field is 1"},
      {"no sections", [](auto &f) { set_le(f, 12, 0, 4); }, "section count 0 is out of range"},
      {"too many sections", [](auto &f) { set_le(f, 12, 1u << 17, 4); }, "section count 131072 is out of range"},
      {"table past the end", [](auto &f) { set_le(f, 12, 60000, 4); }, "the table of 60000 sections needs"},
      {"header checksum", [](auto &f) { f[table_entry(0) + 30] ^= 1; }, "fail their checksum"},
      {"section kind 0",
       [](auto &f) {
         set_le(f, table_entry(0), 0, 4);
         reseal_header(f);
       },
       "section 0 has kind 0, expected 1 to 6"},
      {"section kind 7",
       [](auto &f) {
         set_le(f, table_entry(1), 7, 4);
         reseal_header(f);
       },
       "section 1 has kind 7"},
      {"section reserved field",
       [](auto &f) {
         set_le(f, table_entry(0) + 4, 9, 4);
         reseal_header(f);
       },
       "section 0 has reserved field 9"},
      {"section offset",
       [](auto &f) {
         set_le(f, table_entry(1) + 8, get_le(f, table_entry(1) + 8, 8) + 1, 8);
         reseal_header(f);
       },
       "section 1 starts at offset"},
      {"section past the end",
       [](auto &f) {
         const size_t last = get_le(f, 12, 4) - 1;
         set_le(f, table_entry(last) + 16, get_le(f, table_entry(last) + 16, 8) + 1000, 8);
         reseal_header(f);
       },
       "runs past the end of the"},
      {"section checksum", [](auto &f) { f[get_le(f, table_entry(2) + 8, 8) + 3] ^= 0x10; },
       "section 2 (plan) fails its checksum"},
      {"bytes after the last section",
       [](auto &f) {
         // The last section one byte shorter, its checksum matching, the file as long.
         const size_t last = get_le(f, 12, 4) - 1;
         const uint64_t offset = get_le(f, table_entry(last) + 8, 8), size = get_le(f, table_entry(last) + 16, 8) - 1;
         set_le(f, table_entry(last) + 16, size, 8);
         auto digest = sha256(std::span<const uint8_t>(f.data() + offset, size));
         std::memcpy(f.data() + table_entry(last) + 24, digest.data(), digest.size());
         reseal_header(f);
       },
       "1 bytes follow the last section"},
  });
}

TEST_CASE("the export sections' checks, one by one", "[export][validation]") {
  expectRefused({
      {"missing plan", editSections([](auto &s) { s.erase(s.begin() + find_section(s, Plan)); }),
       "the plan section is missing"},
      {"two manifests", editSections([](auto &s) { s.push_back(s[find_section(s, Manifest)]); }),
       "are both manifest sections"},
      {"manifest not JSON", editSections([](auto &s) { s[find_section(s, Manifest)].payload = "{"; }),
       "the manifest section is not valid JSON"},
      {"manifest format", editJson(Manifest, [](json &m) { m["format"] = "other"; }),
       "manifest.format: expected \"tokamax-export\""},
      {"manifest arch", editJson(Manifest, [](json &m) { m["target"]["arch"] = "gfx90a"; }),
       "arch must look like sm_80 or sm_90a"},
      {"manifest capability", editJson(Manifest, [](json &m) { m["target"]["cc_major"] = 8; }),
       "compute capability 8.0"},
      {"manifest opt level", editJson(Manifest, [](json &m) { m["opt_level"] = 7; }),
       "manifest.opt_level: 7 is out of range"},
      {"manifest missing key", editJson(Manifest, [](json &m) { m.erase("producer"); }),
       "manifest: \"producer\" is missing"},
      {"function section", editSections([](auto &s) { s[find_section(s, FunctionJson)].payload = "[1]"; }),
       "the function section is not a Function's JSON"},
      {"value dim", editPlan([](json &p) { p["values"][0]["shape"][0] = -1; }),
       "plan.values[0].shape[0]: -1 is out of range"},
      {"value dtype", editPlan([](json &p) { p["values"][0]["dtype"] = "f128"; }),
       "plan.values[0].dtype: unknown dtype 'f128'"},
      {"value bytes", editPlan([](json &p) { p["values"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40}; }),
       "the tensor's bytes exceed"},
      {"input index", editPlan([](json &p) { p["inputs"][0] = 999; }), "plan.inputs[0]: 999 is out of range"},
      {"input twice", editPlan([](json &p) { p["inputs"][1] = p["inputs"][0]; }), "plan.inputs[1]: value"},
      {"scratch bytes", editPlan([](json &p) { p["scratch_bytes"] = -5; }), "plan.scratch_bytes: -5 is out of range"},
      {"call slot", editPlan([](json &p) { p["calls"][0]["slots"][0] = 4096; }),
       "plan.calls[0].slots[0]: 4096 is out of range"},
      {"call config", editPlan([](json &p) { p["calls"][0]["config"]["block_rows"] = "four"; }),
       "plan.calls[0].config.block_rows: expected an integer"},
      {"call op", editPlan([](json &p) { p["calls"][0]["op"] = 3; }), "plan.calls[0].op: expected a string"},
      {"kernel section kind", editPlan([](json &p) { p["kernels"][0]["cubin"] = 0; }),
       "plan.kernels[0].cubin: section 0 is a manifest section, expected cubin"},
      {"kernel section twice", editPlan([](json &p) { p["kernels"][1]["ir"] = p["kernels"][0]["ir"]; }),
       "is used twice"},
      {"kernel section index", editPlan([](json &p) { p["kernels"][0]["ptx"] = 100000; }),
       "plan.kernels[0].ptx: 100000 is out of range"},
      {"unused section", editSections([](auto &s) { s.push_back({Cubin, "extra"}); }), "belongs to no kernel"},
      {"empty cubin", editSections([](auto &s) { s[find_section(s, Cubin)].payload.clear(); }), "its cubin is empty"},
      {"launch grid", editPlan([](json &p) { p["kernels"][0]["launch"]["grid"][0] = 0; }),
       "plan.kernels[0].launch: grid[0] = 0 is out of range"},
      {"launch block", editPlan([](json &p) { p["kernels"][0]["launch"]["block_threads"] = 2000; }),
       "block_threads = 2000"},
      {"launch shared memory", editPlan([](json &p) { p["kernels"][0]["launch"]["shared_bytes"] = 1 << 20; }),
       "shared_bytes = 1048576 is over 256 KiB"},
      {"launch cluster",
       editPlan([](json &p) {
         p["kernels"][0]["launch"]["grid"][0] = 7;
         p["kernels"][0]["launch"]["cluster"] = 2;
       }),
       "cluster = 2 must be 1 to 16 and divide grid[0] = 7"},
      {"launch tensor map parameter",
       editPlan([](json &p) { p["kernels"][0]["launch"]["tensor_maps"] = json::array({{99, 64, 64, 128}}); }),
       "tensor_maps[0]: parameter 99 is not a 2-D tensor parameter"},
      {"launch tensor map swizzle",
       editPlan([](json &p) {
         json &params = p["kernels"][0]["launch"]["params"];
         params[0]["shape"] = {64, 64};
         p["kernels"][0]["launch"]["tensor_maps"] = json::array({{0, 64, 64, 48}});
       }),
       "swizzle 48 is not 32, 64 or 128"},
      {"launch parameter dtype", editPlan([](json &p) { p["kernels"][0]["launch"]["params"][0]["dtype"] = "x"; }),
       "plan.kernels[0].launch: unknown dtype 'x'"},
      {"launch not an object", editPlan([](json &p) { p["kernels"][0]["launch"] = 1; }),
       "plan.kernels[0].launch: expected an object"},
      {"step call", editPlan([](json &p) { firstLaunch(p)["call"] = 100000; }), "call: 100000 is out of range"},
      {"step kind",
       editPlan([](json &p) { firstLaunch(p)["zero"] = json{{"value", 0}, {"offset", 0}, {"bytes", 1}}; }),
       "a step has exactly one of \"kernel\" and \"zero\""},
      {"step kernel", editPlan([](json &p) { firstLaunch(p)["kernel"] = 100000; }), "kernel: 100000 is out of range"},
      {"step argument count", editPlan([](json &p) { firstLaunch(p)["args"].erase(0); }), "arguments for kernel"},
      {"step value index", editPlan([](json &p) { firstLaunch(p)["args"][0]["value"] = 100000; }),
       "value: 100000 is out of range"},
      {"step offset", editPlan([](json &p) { firstLaunch(p)["args"][0]["offset"] = 1 << 30; }),
       "run past the end of value"},
      {"step scratch offset",
       editPlan([](json &p) { firstLaunch(p)["args"][0] = json{{"value", -1}, {"offset", p["scratch_bytes"]}}; }),
       "run past the end of the scratch buffer"},
      {"step scalar where a tensor is", editPlan([](json &p) { firstLaunch(p)["args"][0] = 1.5; }),
       "expected an object, got number"},
      {"step tensor where a scalar is",
       editPlan([](json &p) {
         json &s = launchWithScalar(p);
         s["args"][scalarParam(p, s)] = json{{"value", 0}, {"offset", 0}};
       }),
       "the parameter is a scalar; got object"},
      {"zero past the end",
       editPlan([](json &p) {
         firstLaunch(p) = json{{"call", 0}, {"zero", {{"value", 0}, {"offset", 8}, {"bytes", 1 << 20}}}};
       }),
       "1048576 bytes at offset 8 run past the end of value 0"},
  });
}
