//===- ExportedFunction.cpp - Loading, saving and describing exports --------===//
//
// Everything here needs only the runtime and the launch metadata: no compiler, no ops,
// no config resolution. Running is in ExportRun.cpp.
//
//===----------------------------------------------------------------------===//
#include "export/lib/ExportState.h"
#include "runtime/lib/CacheFile.h"  // Fd, read_at

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace tokamax {

using namespace export_detail;

//===----------------------------------------------------------------------===//
// ExportTarget
//===----------------------------------------------------------------------===//

ExportTarget ExportTarget::of(const Device &device) {
  return {device.arch(), device.name(), device.cc_major(), device.cc_minor()};
}

ExportTarget ExportTarget::parse(const std::string &arch, const std::string &device_kind) {
  const Arch target = Arch::parse(arch, "export target");
  ExportTarget t{target.name(), "", target.cc_major(), target.cc_minor()};
  if (device_kind.empty())
    return t;
  // NAME:MAJOR.MINOR, the capability as one or two digits, a dot and one digit.
  const size_t colon = device_kind.rfind(':');
  int major = 0, minor = 0;
  const char *end = device_kind.data() + device_kind.size();
  auto digitsAt = [&](const char *from, int &out) -> const char * {
    auto [ptr, ec] = std::from_chars(from, end, out);
    return ec == std::errc() && ptr - from <= 2 ? ptr : nullptr;
  };
  const char *p = colon == std::string::npos ? nullptr : digitsAt(device_kind.data() + colon + 1, major);
  p = p && p < end && *p == '.' ? digitsAt(p + 1, minor) : nullptr;
  if (!p || p != end || major < 1 || minor < 0 || minor > 9)
    throw Error(fmt::format("export target: device kind must look like \"NVIDIA H200:9.0\" (name:major.minor), "
                            "got \"{}\"",
                            device_kind));
  if (major != t.cc_major || minor != t.cc_minor)
    throw Error(fmt::format("export target: device kind \"{}\" has compute capability {}.{} but arch {} is {}.{}",
                            device_kind, major, minor, arch, t.cc_major, t.cc_minor));
  t.device_name = device_kind.substr(0, colon);
  return t;
}

std::string ExportTarget::device_kind() const { return fmt::format("{}:{}.{}", device_name, cc_major, cc_minor); }

std::string ExportTarget::to_string() const {
  return fmt::format("{} on {} (compute capability {}.{})", arch, device_name.empty() ? "any device" : device_name,
                     cc_major, cc_minor);
}

bool ExportTarget::accepts(const ExportTarget &device) const {
  return arch == device.arch && cc_major == device.cc_major && cc_minor == device.cc_minor &&
         (device_name.empty() || device_name == device.device_name);
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

std::unique_ptr<ExportedFunction::State> ExportedFunction::State::parse(std::vector<uint8_t> bytes) {
  auto state = std::make_unique<State>();
  state->file = std::move(bytes);
  Container c = read_container(state->file, kFormatVersion);
  state->version = c.version;
  state->sections = std::move(c.sections);
  std::vector<SectionKind> kinds;
  int manifest = -1, function = -1, plan = -1;
  for (size_t i = 0; i < state->sections.size(); ++i) {
    SectionKind kind = state->sections[i].kind;
    kinds.push_back(kind);
    int *slot = kind == SectionKind::Manifest ? &manifest
                : kind == SectionKind::Function ? &function
                : kind == SectionKind::Plan    ? &plan
                                                : nullptr;
    if (!slot)
      continue;
    if (*slot >= 0)
      throw Error(fmt::format("export file: sections {} and {} are both {} sections", *slot, i,
                              section_kind_name(kind)));
    *slot = static_cast<int>(i);
  }
  for (auto [index, kind] : {std::pair{manifest, SectionKind::Manifest}, std::pair{function, SectionKind::Function},
                             std::pair{plan, SectionKind::Plan}})
    if (index < 0)
      throw Error(fmt::format("export file: the {} section is missing", section_kind_name(kind)));
  state->manifest = manifest_from_json(state->sections[manifest].text());
  const std::string_view functionText = state->sections[function].text();
  nlohmann::json fj = nlohmann::json::parse(functionText.begin(), functionText.end(), nullptr, false);
  if (fj.is_discarded() || !fj.is_object() || !fj.contains("format") || fj["format"] != "tokamax-function")
    throw Error("export file: the function section is not a Function's JSON (\"format\": \"tokamax-function\")");
  state->function_json = std::string(functionText);
  state->plan = plan_from_json(state->sections[plan].text(), kinds);
  for (size_t k = 0; k < state->plan.kernels.size(); ++k)
    if (state->sections[state->plan.kernels[k].cubin].payload.empty())
      throw Error(fmt::format("export file: plan.kernels[{}] ({}): its cubin is empty", k,
                              state->plan.kernels[k].launch.kernel_name));
  return state;
}

ExportedFunction::ExportedFunction() = default;
ExportedFunction::ExportedFunction(std::unique_ptr<State> state) : state_(std::move(state)) {}
ExportedFunction::~ExportedFunction() = default;
ExportedFunction::ExportedFunction(ExportedFunction &&) noexcept = default;
ExportedFunction &ExportedFunction::operator=(ExportedFunction &&) noexcept = default;

ExportedFunction ExportedFunction::load(std::span<const uint8_t> bytes) {
  return ExportedFunction(State::parse(std::vector<uint8_t>(bytes.begin(), bytes.end())));
}

ExportedFunction ExportedFunction::load(const std::filesystem::path &path) {
  // One read of the size fstat gives (a byte-wise stream read was most of a load).
  cache_file::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    throw Error(fmt::format("export: cannot open '{}': {}", path.string(), std::strerror(errno)));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(fmt::format("export: cannot read '{}': not a regular file", path.string()));
  std::vector<uint8_t> bytes;
  if (int err = cache_file::read_at(fd.get(), 0, static_cast<uint64_t>(st.st_size), bytes))
    throw Error(fmt::format("export: cannot read '{}': {}", path.string(), std::strerror(err)));
  try {
    return ExportedFunction(State::parse(std::move(bytes)));
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()));
  }
}

ExportedFunction ExportedFunction::load(const std::filesystem::path &path, const ExportTarget &running_on) {
  ExportedFunction f = load(path);
  f.check_device(running_on);
  return f;
}

//===----------------------------------------------------------------------===//
// Saving and describing
//===----------------------------------------------------------------------===//

std::vector<uint8_t> ExportedFunction::bytes() const { return state_ ? state_->file : std::vector<uint8_t>(); }

void ExportedFunction::save(const std::filesystem::path &path) const {
  if (!state_)
    throw Error("export: save of an empty ExportedFunction");
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp.{}.{}", static_cast<long>(::getpid()), counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(fmt::format("export: cannot create '{}': {}", tmp.string(), std::strerror(errno)));
  const std::vector<uint8_t> &data = state_->file;
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(fmt::format("export: cannot write '{}': {}", tmp.string(), std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int syncErr = errno;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = synced ? errno : syncErr;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("export: cannot {} '{}': {}", synced ? "rename the temp file to" : "fsync",
                            path.string(), std::strerror(err)));
  }
}

std::string ExportedFunction::describe() const {
  if (!state_)
    return "empty export\n";
  const State &s = *state_;
  const Plan &p = s.plan;
  std::string out = fmt::format("tokamax export: format version {}, made by {}, {} bytes\n", s.version,
                                s.manifest.producer, s.file.size());
  out += fmt::format("target: {}\n", s.manifest.target.to_string());
  out += fmt::format("compiled: opt {}, PTX ISA {}, {}, {}\n", s.manifest.opt_level, s.manifest.ptx_isa,
                     s.manifest.llvm, s.manifest.assembler);
  for (auto [name, ids] : {std::pair{"inputs", &p.inputs}, std::pair{"outputs", &p.outputs}}) {
    out += fmt::format("{} ({}):\n", name, ids->size());
    for (size_t i = 0; i < ids->size(); ++i)
      out += fmt::format("  {}: value {} {}\n", i, (*ids)[i], p.values[(*ids)[i]].text());
  }
  std::vector<std::vector<std::string>> callKernels(p.calls.size());
  for (const Step &st : p.steps)
    callKernels[st.call].push_back(st.kernel < 0 ? "zero" : p.kernels[st.kernel].launch.kernel_name);
  out += fmt::format("calls ({}):\n", p.calls.size());
  for (size_t i = 0; i < p.calls.size(); ++i)
    out += fmt::format("  {:>3} {:<16} {:<10} {} -> {}\n", i, p.calls[i].op, p.calls[i].implementation,
                       p.calls[i].config_json, callKernels[i].empty() ? "-" : fmt::format("{}", fmt::join(callKernels[i], ", ")));
  out += fmt::format("kernels ({}):\n", p.kernels.size());
  for (const ExportedKernel &k : kernels())
    out += fmt::format("  {:<28} grid {}x{}x{} block {} shared {} B  cubin {} B  ptx {} B  ir {} B  launches {}\n",
                       k.launch.kernel_name, k.launch.grid[0], k.launch.grid[1], k.launch.grid[2],
                       k.launch.block_threads, k.launch.shared_bytes, k.cubin_bytes, k.ptx_bytes, k.ir_bytes,
                       k.launches);
  out += fmt::format("launches: {}, scratch: {} B\n", launch_count(), p.scratch_bytes);
  return out;
}

const ExportTarget &ExportedFunction::target() const { return state_->manifest.target; }
uint32_t ExportedFunction::format_version() const { return state_->version; }
const std::string &ExportedFunction::producer() const { return state_->manifest.producer; }
const std::string &ExportedFunction::function_json() const { return state_->function_json; }
const std::vector<ExportedCall> &ExportedFunction::calls() const { return state_->plan.calls; }

std::vector<std::pair<std::vector<int64_t>, DType>> ExportedFunction::input_specs() const {
  std::vector<std::pair<std::vector<int64_t>, DType>> out;
  for (int v : state_->plan.inputs)
    out.emplace_back(state_->plan.values[v].shape, state_->plan.values[v].dtype);
  return out;
}

std::vector<std::pair<std::vector<int64_t>, DType>> ExportedFunction::output_specs() const {
  std::vector<std::pair<std::vector<int64_t>, DType>> out;
  for (int v : state_->plan.outputs)
    out.emplace_back(state_->plan.values[v].shape, state_->plan.values[v].dtype);
  return out;
}

std::vector<ExportedKernel> ExportedFunction::kernels() const {
  std::vector<ExportedKernel> out;
  auto size = [&](int section) { return section < 0 ? size_t(0) : state_->sections[section].payload.size(); };
  for (const KernelEntry &k : state_->plan.kernels)
    out.push_back({k.launch, size(k.cubin), size(k.ptx), size(k.ir), 0});
  for (const Step &s : state_->plan.steps)
    if (s.kernel >= 0)
      ++out[s.kernel].launches;
  return out;
}

size_t ExportedFunction::launch_count() const {
  size_t n = 0;
  for (const Step &s : state_->plan.steps)
    n += s.kernel >= 0;
  return n;
}

} // namespace tokamax
