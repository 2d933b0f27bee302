//===- ExportPlan.cpp - The manifest and plan sections as checked JSON ------===//
#include "export/lib/ExportPlan.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace tokamax::export_detail {

using json = nlohmann::json;

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr uint64_t kMaxBufferBytes = uint64_t(1) << 48;

[[noreturn]] void fail(const std::string &where, const std::string &what) {
  throw Error(fmt::format("export file: {}: {}", where, what));
}

json parse(std::string_view text, const char *section) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception &e) {
    throw Error(fmt::format("export file: the {} section is not valid JSON: {}", section, e.what()));
  }
}

const json &member(const json &j, const char *key, const std::string &where) {
  if (!j.is_object())
    fail(where, fmt::format("expected an object, got {}", j.type_name()));
  auto it = j.find(key);
  if (it == j.end())
    fail(where, fmt::format("\"{}\" is missing", key));
  return *it;
}

const json &array(const json &j, const std::string &where) {
  if (!j.is_array())
    fail(where, fmt::format("expected an array, got {}", j.type_name()));
  return j;
}

std::string string(const json &j, const std::string &where) {
  if (!j.is_string())
    fail(where, fmt::format("expected a string, got {}", j.type_name()));
  return j.get<std::string>();
}

int64_t integer(const json &j, const std::string &where, int64_t lo, int64_t hi) {
  if (!j.is_number_integer())
    fail(where, fmt::format("expected an integer, got {}", j.type_name()));
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(where, fmt::format("{} is out of range ({} to {})", j.get<uint64_t>(), lo, hi));
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    fail(where, fmt::format("{} is out of range ({} to {})", v, lo, hi));
  return v;
}

int count(size_t n) { return static_cast<int>(std::min<size_t>(n, std::numeric_limits<int>::max())); }

DType dtypeOf(const json &j, const std::string &where) {
  try {
    return parse_dtype(string(j, where));
  } catch (const Error &e) {
    fail(where, e.what());
  }
}

/// Bytes of `shape` x `dtype`, refusing dims out of range and products past kMaxBufferBytes.
uint64_t checkedBytes(std::span<const int64_t> shape, DType dtype, const std::string &where) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim)
      fail(where, fmt::format("dim {} is out of range (0 to {})", d, kMaxDim));
    if (d != 0 && n > kMaxBufferBytes / static_cast<uint64_t>(d))
      fail(where, fmt::format("the tensor's bytes exceed {}", kMaxBufferBytes));
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

/// Every number in `j` must be an integer of int64 range (LaunchInfo::from_json converts
/// them to uint32 / int64, which a float or a larger number would overflow).
void checkIntegers(const json &j, const std::string &where) {
  if (j.is_number_float())
    fail(where, fmt::format("{} is not an integer", j.dump()));
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(where, fmt::format("{} is out of range", j.dump()));
  if (j.is_structured())
    for (const json &child : j)
      checkIntegers(child, where);
}

json refToJson(const BufferRef &r) { return {{"value", r.value}, {"offset", r.offset}}; }

BufferRef refFromJson(const json &j, const Plan &plan, uint64_t bytes, const std::string &where) {
  BufferRef r;
  r.value = static_cast<int>(integer(member(j, "value", where), where + ".value", -1, count(plan.values.size()) - 1));
  r.offset = static_cast<uint64_t>(integer(member(j, "offset", where), where + ".offset", 0, int64_t(kMaxBufferBytes)));
  const uint64_t size = plan.buffer_bytes(r);
  if (r.offset > size || bytes > size - r.offset)
    fail(where, fmt::format("{} bytes at offset {} run past the end of {} ({} bytes)", bytes, r.offset,
                            r.value < 0 ? std::string("the scratch buffer") : fmt::format("value {}", r.value), size));
  return r;
}

} // namespace

uint64_t ValueSpec::bytes() const { return checkedBytes(shape, dtype, "value"); }

std::string ValueSpec::text() const { return fmt::format("{} [{}]", dtype_name(dtype), fmt::join(shape, ", ")); }

void check_launch_info(const LaunchInfo &info, const std::string &where) {
  if (info.kernel_name.empty())
    fail(where, "the kernel name is empty");
  const uint32_t gridLimit[3] = {0x7fffffffu, 65535u, 65535u};
  for (int i = 0; i < 3; ++i)
    if (info.grid[i] == 0 || info.grid[i] > gridLimit[i])
      fail(where, fmt::format("grid[{}] = {} is out of range (1 to {})", i, info.grid[i], gridLimit[i]));
  if (info.block_threads == 0 || info.block_threads > 1024 || info.block_threads % 32 != 0)
    fail(where, fmt::format("block_threads = {} is not a multiple of 32 from 32 to 1024", info.block_threads));
  if (info.shared_bytes > 256 * 1024)
    fail(where, fmt::format("shared_bytes = {} is over 256 KiB", info.shared_bytes));
  if (info.cluster == 0 || info.cluster > 16 || info.grid[0] % info.cluster != 0)
    fail(where, fmt::format("cluster = {} must be 1 to 16 and divide grid[0] = {}", info.cluster, info.grid[0]));
  if (info.params.size() > 32)
    fail(where, fmt::format("{} parameters (at most 32)", info.params.size()));
  for (size_t i = 0; i < info.params.size(); ++i) {
    const KernelParam &p = info.params[i];
    const std::string pw = fmt::format("{}.params[{}]", where, i);
    if (p.is_tensor)
      checkedBytes(p.shape, p.dtype, pw);
    else if (!p.shape.empty() || p.is_output)
      fail(pw, "a scalar parameter has a shape or is an output");
  }
  for (size_t i = 0; i < info.tensor_maps.size(); ++i) {
    const TensorMapParam &m = info.tensor_maps[i];
    const std::string mw = fmt::format("{}.tensor_maps[{}]", where, i);
    if (m.param >= info.params.size() || !info.params[m.param].is_tensor ||
        info.params[m.param].shape.size() != (m.batch_rows ? 3u : 2u))
      fail(mw, fmt::format("parameter {} is not a {} tensor parameter of the kernel", m.param,
                           m.batch_rows ? "3-D (batched)" : "2-D"));
    if (m.box_inner == 0 || m.box_inner > 256 || m.box_outer == 0 || m.box_outer > 256)
      fail(mw, fmt::format("box {} x {} is out of range (1 to 256)", m.box_inner, m.box_outer));
    if (m.swizzle != 32 && m.swizzle != 64 && m.swizzle != 128)
      fail(mw, fmt::format("swizzle {} is not 32, 64 or 128", m.swizzle));
    if (m.batch_rows != 0 && info.params[m.param].shape[1] != m.batch_rows)
      fail(mw, fmt::format("batches of {} rows, but the tensor's batches have {}", m.batch_rows,
                           info.params[m.param].shape[1]));
  }
}

std::string manifest_to_json(const Manifest &m) {
  json j;
  j["format"] = "tokamax-export";
  j["producer"] = m.producer;
  j["target"] = {{"arch", m.target.arch},
                 {"device_name", m.target.device_name},
                 {"cc_major", m.target.cc_major},
                 {"cc_minor", m.target.cc_minor}};
  j["opt_level"] = m.opt_level;
  j["ptx_isa"] = m.ptx_isa;
  j["llvm"] = m.llvm;
  j["assembler"] = m.assembler;
  return j.dump(1);
}

Manifest manifest_from_json(std::string_view text) {
  const json j = parse(text, "manifest");
  const std::string w = "manifest";
  if (string(member(j, "format", w), w + ".format") != "tokamax-export")
    fail(w + ".format", "expected \"tokamax-export\"");
  Manifest m;
  m.producer = string(member(j, "producer", w), w + ".producer");
  const json &t = member(j, "target", w);
  const std::string tw = w + ".target";
  std::string arch = string(member(t, "arch", tw), tw + ".arch");
  std::string device = string(member(t, "device_name", tw), tw + ".device_name");
  int major = static_cast<int>(integer(member(t, "cc_major", tw), tw + ".cc_major", 1, 99));
  int minor = static_cast<int>(integer(member(t, "cc_minor", tw), tw + ".cc_minor", 0, 9));
  try {
    m.target = ExportTarget::parse(arch, device.empty() ? "" : fmt::format("{}:{}.{}", device, major, minor));
  } catch (const Error &e) {
    fail(tw, e.what());
  }
  if (m.target.cc_major != major || m.target.cc_minor != minor)
    fail(tw, fmt::format("compute capability {}.{} does not match arch {}", major, minor, arch));
  m.opt_level = static_cast<int>(integer(member(j, "opt_level", w), w + ".opt_level", 0, 3));
  m.ptx_isa = string(member(j, "ptx_isa", w), w + ".ptx_isa");
  m.llvm = string(member(j, "llvm", w), w + ".llvm");
  m.assembler = string(member(j, "assembler", w), w + ".assembler");
  return m;
}

std::string plan_to_json(const Plan &plan) {
  json j;
  j["values"] = json::array();
  for (const ValueSpec &v : plan.values)
    j["values"].push_back({{"shape", v.shape}, {"dtype", std::string(dtype_name(v.dtype))}});
  j["inputs"] = plan.inputs;
  j["outputs"] = plan.outputs;
  j["scratch_bytes"] = plan.scratch_bytes;
  j["calls"] = json::array();
  for (const ExportedCall &c : plan.calls)
    j["calls"].push_back({{"op", c.op},
                          {"args", json::parse(c.args_json)},
                          {"implementation", c.implementation},
                          {"config", json::parse(c.config_json)},
                          {"slots", c.slots}});
  j["kernels"] = json::array();
  auto section = [](int i) { return i < 0 ? json(nullptr) : json(i); };
  for (const KernelEntry &k : plan.kernels)
    j["kernels"].push_back({{"launch", json::parse(k.launch.to_json())},
                            {"cubin", k.cubin},
                            {"ptx", section(k.ptx)},
                            {"ir", section(k.ir)}});
  j["steps"] = json::array();
  for (const Step &s : plan.steps) {
    if (s.kernel < 0) {
      json zero = refToJson(s.buffer);
      zero["bytes"] = s.zero_bytes;
      j["steps"].push_back({{"call", s.call}, {"zero", zero}});
      continue;
    }
    json args = json::array();
    for (const StepArg &a : s.args)
      args.push_back(a.is_scalar ? json(a.scalar) : refToJson(a.buffer));
    j["steps"].push_back({{"call", s.call}, {"kernel", s.kernel}, {"args", args}});
  }
  return j.dump();
}

Plan plan_from_json(std::string_view text, const std::vector<SectionKind> &sections) {
  const json j = parse(text, "plan");
  Plan plan;
  const json &values = array(member(j, "values", "plan"), "plan.values");
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string w = fmt::format("plan.values[{}]", i);
    ValueSpec v;
    for (size_t d = 0; const json &dim : array(member(values[i], "shape", w), w + ".shape"))
      v.shape.push_back(integer(dim, fmt::format("{}.shape[{}]", w, d++), 0, kMaxDim));
    v.dtype = dtypeOf(member(values[i], "dtype", w), w + ".dtype");
    checkedBytes(v.shape, v.dtype, w);
    plan.values.push_back(std::move(v));
  }
  const int numValues = count(plan.values.size());
  for (const char *key : {"inputs", "outputs"}) {
    const json &ids = array(member(j, key, "plan"), fmt::format("plan.{}", key));
    for (size_t i = 0; i < ids.size(); ++i) {
      int id = static_cast<int>(integer(ids[i], fmt::format("plan.{}[{}]", key, i), 0, numValues - 1));
      std::vector<int> &list = std::string(key) == "inputs" ? plan.inputs : plan.outputs;
      if (std::find(list.begin(), list.end(), id) != list.end())
        fail(fmt::format("plan.{}[{}]", key, i), fmt::format("value {} is listed twice", id));
      list.push_back(id);
    }
  }
  plan.scratch_bytes =
      static_cast<uint64_t>(integer(member(j, "scratch_bytes", "plan"), "plan.scratch_bytes", 0, kMaxBufferBytes));

  const json &calls = array(member(j, "calls", "plan"), "plan.calls");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = fmt::format("plan.calls[{}]", i);
    ExportedCall c;
    c.op = string(member(calls[i], "op", w), w + ".op");
    c.implementation = string(member(calls[i], "implementation", w), w + ".implementation");
    const json &args = member(calls[i], "args", w);
    if (!args.is_object())
      fail(w + ".args", "expected an object (BoundArgs)");
    c.args_json = args.dump();
    const json &config = member(calls[i], "config", w);
    if (!config.is_object())
      fail(w + ".config", "expected an object of integers");
    for (const auto &item : config.items())
      integer(item.value(), fmt::format("{}.config.{}", w, item.key()), std::numeric_limits<int64_t>::min(),
              std::numeric_limits<int64_t>::max());
    c.config_json = config.dump();
    const json &slots = array(member(calls[i], "slots", w), w + ".slots");
    for (size_t s = 0; s < slots.size(); ++s)
      c.slots.push_back(static_cast<int>(integer(slots[s], fmt::format("{}.slots[{}]", w, s), -1, numValues - 1)));
    plan.calls.push_back(std::move(c));
  }

  std::vector<bool> used(sections.size(), false);
  auto sectionIndex = [&](const json &v, SectionKind kind, const std::string &w, bool optional) {
    if (optional && v.is_null())
      return -1;
    int s = static_cast<int>(integer(v, w, 0, count(sections.size()) - 1));
    if (sections[s] != kind)
      fail(w, fmt::format("section {} is a {} section, expected {}", s, section_kind_name(sections[s]),
                          section_kind_name(kind)));
    if (used[s])
      fail(w, fmt::format("section {} is used twice", s));
    used[s] = true;
    return s;
  };
  const json &kernels = array(member(j, "kernels", "plan"), "plan.kernels");
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string w = fmt::format("plan.kernels[{}]", i);
    KernelEntry k;
    const json &launch = member(kernels[i], "launch", w);
    if (!launch.is_object())
      fail(w + ".launch", "expected an object");
    checkIntegers(launch, w + ".launch");
    try {
      k.launch = LaunchInfo::from_json(launch.dump());
    } catch (const Error &e) {
      fail(w + ".launch", e.what());
    }
    check_launch_info(k.launch, w + ".launch");
    k.cubin = sectionIndex(member(kernels[i], "cubin", w), SectionKind::Cubin, w + ".cubin", false);
    k.ptx = sectionIndex(member(kernels[i], "ptx", w), SectionKind::Ptx, w + ".ptx", true);
    k.ir = sectionIndex(member(kernels[i], "ir", w), SectionKind::TileIr, w + ".ir", true);
    plan.kernels.push_back(std::move(k));
  }
  for (size_t s = 0; s < sections.size(); ++s)
    if (!used[s] && (sections[s] == SectionKind::Cubin || sections[s] == SectionKind::Ptx ||
                     sections[s] == SectionKind::TileIr))
      fail("plan.kernels", fmt::format("section {} ({}) belongs to no kernel", s, section_kind_name(sections[s])));

  const json &steps = array(member(j, "steps", "plan"), "plan.steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string w = fmt::format("plan.steps[{}]", i);
    const json &sj = steps[i];
    Step s;
    s.call = static_cast<int>(integer(member(sj, "call", w), w + ".call", 0, count(plan.calls.size()) - 1));
    const bool isZero = sj.contains("zero"), isLaunch = sj.contains("kernel");
    if (isZero == isLaunch)
      fail(w, "a step has exactly one of \"kernel\" and \"zero\"");
    if (isZero) {
      const json &z = member(sj, "zero", w);
      s.zero_bytes =
          static_cast<uint64_t>(integer(member(z, "bytes", w + ".zero"), w + ".zero.bytes", 0, kMaxBufferBytes));
      s.buffer = refFromJson(z, plan, s.zero_bytes, w + ".zero");
      plan.steps.push_back(std::move(s));
      continue;
    }
    s.kernel = static_cast<int>(integer(member(sj, "kernel", w), w + ".kernel", 0, count(plan.kernels.size()) - 1));
    const LaunchInfo &info = plan.kernels[s.kernel].launch;
    const json &args = array(member(sj, "args", w), w + ".args");
    if (args.size() != info.params.size())
      fail(w + ".args", fmt::format("{} arguments for kernel {} ({}), which takes {}", args.size(), s.kernel,
                                    info.kernel_name, info.params.size()));
    for (size_t a = 0; a < args.size(); ++a) {
      const std::string aw = fmt::format("{}.args[{}] ({})", w, a, info.params[a].name);
      StepArg arg;
      if (!info.params[a].is_tensor) {
        if (!args[a].is_number())
          fail(aw, fmt::format("the parameter is a scalar; got {}", args[a].type_name()));
        arg.is_scalar = true;
        arg.scalar = args[a].get<double>();
      } else {
        arg.buffer = refFromJson(args[a], plan, checkedBytes(info.params[a].shape, info.params[a].dtype, aw), aw);
      }
      s.args.push_back(arg);
    }
    plan.steps.push_back(std::move(s));
  }
  return plan;
}

} // namespace tokamax::export_detail
