//===- Op.cpp - Bound arguments, configs, implementation choice -------------===//
#include <tokamax/ops/Op.h>
#include <tokamax/ops/Workspace.h>

#include "ops/lib/framework/ArgsAdded.h"
#include "ops/lib/framework/CallCache.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <mutex>
#include <shared_mutex>

namespace tokamax {

using json = nlohmann::json;

namespace {

json parseJson(const std::string &text, const char *what) {
  try {
    return json::parse(text);
  } catch (const json::exception &e) {
    throw Error(fmt::format("{}: invalid JSON: {}", what, e.what()));
  }
}

json specToJson(const ArgSpec &s) { return json{{"shape", s.shape}, {"dtype", std::string(dtype_name(s.dtype))}}; }

ArgSpec specFromJson(const json &j, const std::string &where) {
  if (!j.is_object() || !j.contains("shape") || !j.contains("dtype"))
    throw Error(fmt::format("{}: expected {{\"shape\": [...], \"dtype\": \"...\"}}, got {}", where, j.dump()));
  const json &shape = j["shape"];
  if (!shape.is_array())
    throw Error(fmt::format("{}: \"shape\" must be an array of integers, got {}", where, shape.dump()));
  ArgSpec s;
  for (const json &d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw Error(fmt::format("{}: \"shape\" must hold non-negative integers, got {}", where, shape.dump()));
    s.shape.push_back(d.get<int64_t>());
  }
  if (!j["dtype"].is_string())
    throw Error(fmt::format("{}: \"dtype\" must be a string, got {}", where, j["dtype"].dump()));
  s.dtype = parse_dtype(j["dtype"].get<std::string>());
  return s;
}

} // namespace

//===----------------------------------------------------------------------===//
// ArgSpec
//===----------------------------------------------------------------------===//

ArgSpec ArgSpec::of(const TensorView &t) {
  return ArgSpec{std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.dtype()};
}

int64_t ArgSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string ArgSpec::to_json() const { return specToJson(*this).dump(); }

ArgSpec ArgSpec::from_json(const std::string &text) { return specFromJson(parseJson(text, "ArgSpec"), "ArgSpec"); }

uint64_t ArgSpec::hash() const {
  uint64_t h = hash_combine(0x5a17, static_cast<uint64_t>(dtype));
  h = hash_combine(h, shape.size());
  for (int64_t d : shape)
    h = hash_combine(h, static_cast<uint64_t>(d));
  return h;
}

//===----------------------------------------------------------------------===//
// BoundArgs
//===----------------------------------------------------------------------===//

uint64_t BoundArgs::hash() const {
  uint64_t h = hash64(op);
  h = hash_combine(h, args.size());
  for (const auto &a : args)
    h = hash_combine(h, a ? a->hash() : 0x9e3779b97f4a7c15ull);
  for (const auto &[k, v] : attributes)
    h = hash_combine(hash_combine(h, hash64(k)), hash64(v));
  return h;
}

std::string BoundArgs::digest() const { return sha256_hex(to_json()); }

std::string BoundArgs::to_json() const {
  json j;
  j["op"] = op;
  json list = json::array();
  for (const auto &a : args)
    list.push_back(a ? specToJson(*a) : json(nullptr));
  j["args"] = std::move(list);
  json attrs = json::object();
  for (const auto &[k, v] : attributes)
    attrs[k] = v;
  j["attributes"] = std::move(attrs);
  return j.dump();
}

BoundArgs BoundArgs::from_json(const std::string &text) {
  json j = parseJson(text, "BoundArgs");
  if (!j.is_object())
    throw Error(fmt::format("BoundArgs: expected a JSON object, got {}", j.dump()));
  for (const char *key : {"op", "args", "attributes"})
    if (!j.contains(key))
      throw Error(fmt::format("BoundArgs: missing \"{}\" in {}", key, j.dump()));
  for (const auto &item : j.items())
    if (item.key() != "op" && item.key() != "args" && item.key() != "attributes")
      throw Error(fmt::format("BoundArgs: unknown key \"{}\"", item.key()));
  BoundArgs b;
  if (!j["op"].is_string() || j["op"].get<std::string>().empty())
    throw Error(fmt::format("BoundArgs: \"op\" must be a non-empty string, got {}", j["op"].dump()));
  b.op = j["op"].get<std::string>();
  if (!j["args"].is_array())
    throw Error(fmt::format("BoundArgs: \"args\" must be an array, got {}", j["args"].dump()));
  size_t i = 0;
  for (const json &a : j["args"]) {
    if (a.is_null())
      b.args.push_back(std::nullopt);
    else
      b.args.push_back(specFromJson(a, fmt::format("BoundArgs: args[{}]", i)));
    ++i;
  }
  ops_detail::insert_added(b.args, ops_detail::args_added(b.op, b.args.size()), std::optional<ArgSpec>());
  if (!j["attributes"].is_object())
    throw Error(fmt::format("BoundArgs: \"attributes\" must be an object, got {}", j["attributes"].dump()));
  for (const auto &item : j["attributes"].items()) {
    if (!item.value().is_string())
      throw Error(fmt::format("BoundArgs: attribute \"{}\" must be a string (its canonical printed value), got {}",
                              item.key(), item.value().dump()));
    b.attributes[item.key()] = item.value().get<std::string>();
  }
  return b;
}

const ArgSpec &BoundArgs::arg(size_t i) const {
  if (i >= args.size())
    throw Error(fmt::format("{}: argument {} is out of range ({} arguments)", op, i, args.size()));
  if (!args[i])
    throw Error(fmt::format("{}: argument {} is absent", op, i));
  return *args[i];
}

const std::string &BoundArgs::attribute(const std::string &key) const {
  auto it = attributes.find(key);
  if (it == attributes.end())
    throw Error(fmt::format("{}: missing attribute \"{}\"", op, key));
  return it->second;
}

int64_t BoundArgs::int_attribute(const std::string &key) const {
  const std::string &v = attribute(key);
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw Error(fmt::format("{}: attribute \"{}\" must be an integer, got \"{}\"", op, key, v));
  return out;
}

double BoundArgs::float_attribute(const std::string &key) const {
  const std::string &v = attribute(key);
  double out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw Error(fmt::format("{}: attribute \"{}\" must be a number, got \"{}\"", op, key, v));
  return out;
}

//===----------------------------------------------------------------------===//
// Config
//===----------------------------------------------------------------------===//

int64_t Config::get(const std::string &key) const {
  auto it = values.find(key);
  if (it == values.end()) {
    std::vector<std::string> keys;
    for (const auto &[k, v] : values)
      keys.push_back(k);
    throw Error(fmt::format("config has no \"{}\" (it has: {})", key, keys.empty() ? "nothing" : fmt::format("{}", fmt::join(keys, ", "))));
  }
  return it->second;
}

int64_t Config::get_or(const std::string &key, int64_t fallback) const {
  auto it = values.find(key);
  return it == values.end() ? fallback : it->second;
}

std::string Config::to_json() const {
  json j = json::object();
  for (const auto &[k, v] : values)
    j[k] = v;
  return j.dump();
}

Config Config::from_json(const std::string &text) {
  json j = parseJson(text, "Config");
  if (!j.is_object())
    throw Error(fmt::format("Config: expected a JSON object of integers, got {}", j.dump()));
  Config c;
  for (const auto &item : j.items()) {
    if (!item.value().is_number_integer())
      throw Error(fmt::format("Config: \"{}\" must be an integer, got {}", item.key(), item.value().dump()));
    c.values[item.key()] = item.value().get<int64_t>();
  }
  return c;
}

uint64_t Config::hash() const {
  uint64_t h = 0xc0f1;
  for (const auto &[k, v] : values)
    h = hash_combine(hash_combine(h, hash64(k)), static_cast<uint64_t>(v));
  return h;
}

//===----------------------------------------------------------------------===//
// Implementation, config providers
//===----------------------------------------------------------------------===//

Implementation::~Implementation() = default;

bool Implementation::supported_on(const Device &device) const { return supported_on(device.arch()); }

namespace {

using Providers = std::vector<std::pair<uint64_t, ConfigProvider>>;  // oldest first

/// This thread's scopes: no lock, and no other thread's scope applies to its calls.
Providers &threadProviders() {
  thread_local Providers providers;
  return providers;
}

/// A hash of the ids on this thread's stack, kept as it changes: cached eager calls
/// (CallCache.h) resolved under other scopes miss. Ids are never reused, so a scope
/// opened again is a new signature.
thread_local uint64_t providerSignature = 0;

void updateSignature() {
  uint64_t h = 0;
  for (const auto &[id, provider] : threadProviders())
    h = hash_combine(h, id);
  providerSignature = h;
}

struct ProcessProviders {
  std::shared_mutex mutex;
  std::vector<ConfigProvider> providers;  // asked in order, after the thread's
};

ProcessProviders &processProviders() {
  static ProcessProviders *p = new ProcessProviders;  // leaked: calls may run during exit
  return *p;
}

std::atomic<uint64_t> nextProviderId{1};

} // namespace

uint64_t push_config_provider(ConfigProvider provider) {
  if (!provider)
    throw Error("push_config_provider: the provider is empty");
  uint64_t id = nextProviderId.fetch_add(1);
  threadProviders().emplace_back(id, std::move(provider));
  updateSignature();
  return id;
}

void pop_config_provider(uint64_t id) {
  Providers &s = threadProviders();
  auto it = std::find_if(s.begin(), s.end(), [&](const auto &p) { return p.first == id; });
  if (it != s.end())
    s.erase(it);
  updateSignature();
}

void add_process_config_provider(ConfigProvider provider) {
  if (!provider)
    throw Error("add_process_config_provider: the provider is empty");
  ProcessProviders &p = processProviders();
  {
    std::unique_lock lock(p.mutex);
    p.providers.push_back(std::move(provider));
  }
  notify_config_change();
}

uint64_t ops_detail::thread_config_signature() { return providerSignature; }

//===----------------------------------------------------------------------===//
// Op
//===----------------------------------------------------------------------===//

Op::Op(std::string name, std::vector<std::string> argNames, size_t numInputs,
       std::vector<std::shared_ptr<const Implementation>> implementations)
    : name_(std::move(name)), arg_names_(std::move(argNames)), num_inputs_(numInputs),
      impls_(std::move(implementations)) {
  if (impls_.empty() || impls_.back()->name() != "reference")
    throw Error(fmt::format("op {}: the last implementation must be \"reference\"", name_));
  if (num_inputs_ > arg_names_.size())
    throw Error(fmt::format("op {}: {} inputs but {} arguments", name_, num_inputs_, arg_names_.size()));
}

Op::~Op() = default;

const Implementation &Op::implementation(const std::string &name) const {
  std::vector<std::string> names;
  for (const auto &impl : impls_) {
    if (impl->name() == name)
      return *impl;
    names.push_back(impl->name());
  }
  throw Error(fmt::format("{}: unknown implementation \"{}\" (known: {})", name_, name, fmt::join(names, ", ")));
}

const Implementation &Op::select(const BoundArgs &args, const std::optional<std::string> &implementation,
                                 const std::string &arch) const {
  if (args.op != name_)
    throw Error(fmt::format("{}: the arguments are bound for op \"{}\"", name_, args.op));
  if (implementation) {
    const Implementation &impl = this->implementation(*implementation);
    if (!impl.supported_on(arch))
      throw NotSupported(fmt::format("{}: implementation \"{}\" does not run on {}", name_, impl.name(), arch));
    if (auto reason = impl.why_not(args))
      throw NotSupported(fmt::format("{}: implementation \"{}\" cannot serve this call: {}", name_, impl.name(), *reason));
    return impl;
  }
  std::vector<std::string> reasons;
  for (const auto &impl : impls_) {
    if (!impl->supported_on(arch)) {
      reasons.push_back(fmt::format("{}: does not run on {}", impl->name(), arch));
      continue;
    }
    auto reason = impl->why_not(args);
    if (!reason)
      return *impl;
    reasons.push_back(fmt::format("{}: {}", impl->name(), *reason));
  }
  throw NotSupported(fmt::format("{}: no implementation can serve this call ({})", name_, fmt::join(reasons, "; ")));
}

Config Op::resolve_config(const Implementation &impl, const BoundArgs &args,
                          const std::optional<Config> &explicitConfig) const {
  if (explicitConfig) {
    if (auto problem = impl.check_config(args, *explicitConfig))
      throw Error(fmt::format("{}: config {} is not valid for implementation \"{}\": {}", name_,
                              explicitConfig->to_json(), impl.name(), *problem));
    return *explicitConfig;
  }
  const std::string implName = impl.name();
  // A stale or foreign config (say from an old autotuning file) is skipped.
  auto usable = [&](const std::optional<Config> &c) { return c && !impl.check_config(args, *c); };
  const Providers &mine = threadProviders();
  for (auto it = mine.rbegin(); it != mine.rend(); ++it)
    if (std::optional<Config> c = it->second(args, implName); usable(c))
      return *c;
  ProcessProviders &p = processProviders();
  {
    std::shared_lock lock(p.mutex);
    for (const ConfigProvider &provider : p.providers)
      if (std::optional<Config> c = provider(args, implName); usable(c))
        return *c;
  }
  return impl.heuristic(args);
}

void Op::run(const BoundArgs &args, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
             Stream &stream, const std::optional<std::string> &implementation,
             const std::optional<Config> &config) const {
  validate(args);
  // Current before the config is resolved: the per-device autotuning cache answers for it.
  const detail::DeviceScope scope(ops_detail::call_device(name_, arg_names_, inputs, outputs, stream));
  const Implementation &impl = select(args, implementation, scope.device().arch());
  impl.run(args, resolve_config(impl, args, config), inputs, outputs, stream);
}

void Op::check_host_values(const BoundArgs &, std::span<const TensorView>) const {}

void Op::interpret(const BoundArgs &args, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   const std::optional<std::string> &implementation, const std::optional<Config> &config,
                   const std::string &arch) const {
  validate(args);
  check_host_values(args, inputs);
  const Implementation &impl = select(args, implementation, arch);
  impl.interpret(args, resolve_config(impl, args, config), inputs, outputs);
}

//===----------------------------------------------------------------------===//
// Registry, host views
//===----------------------------------------------------------------------===//

namespace {
struct OpRegistry {
  std::mutex mutex;
  std::map<std::string, const Op *> ops;
};
OpRegistry &opRegistry() {
  static OpRegistry registry;
  return registry;
}
} // namespace

void register_op(const Op &op) {
  OpRegistry &r = opRegistry();
  std::lock_guard lock(r.mutex);
  auto [it, inserted] = r.ops.emplace(op.name(), &op);
  if (!inserted && it->second != &op)
    throw Error(fmt::format("register_op: an op named \"{}\" is already registered", op.name()));
}

namespace ops_detail {

namespace {
struct ArgsAddedTable {
  std::mutex mutex;
  std::map<std::pair<std::string, size_t>, std::vector<size_t>> added;  // by (op, old count)
};
ArgsAddedTable &argsAddedTable() {
  static ArgsAddedTable table;
  return table;
}
} // namespace

void register_args_added(const std::string &op, size_t old_count, std::vector<size_t> added) {
  ArgsAddedTable &t = argsAddedTable();
  std::lock_guard lock(t.mutex);
  t.added[{op, old_count}] = std::move(added);
}

std::vector<size_t> args_added(const std::string &op, size_t count) {
  ArgsAddedTable &t = argsAddedTable();
  std::lock_guard lock(t.mutex);
  auto it = t.added.find({op, count});
  return it == t.added.end() ? std::vector<size_t>{} : it->second;
}

} // namespace ops_detail

const Op *find_op(const std::string &name) {
  OpRegistry &r = opRegistry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second;
}

std::vector<const Op *> registered_ops() {
  OpRegistry &r = opRegistry();
  std::lock_guard lock(r.mutex);
  std::vector<const Op *> out;
  for (const auto &[name, op] : r.ops)
    out.push_back(op);
  return out;
}

uint64_t stream_workspace(Device &device, const Stream &stream, size_t bytes) {
  // A caller's own buffer (Workspace.h): no allocation of ours.
  if (const CallerWorkspaceScope *caller = current_caller_workspace())
    return caller_workspace(*caller, bytes);
  struct Slot {
    DeviceBuffer current;
    std::vector<DeviceBuffer> retired;  // may still be in use by queued work
  };
  static std::mutex mutex;
  static std::map<std::pair<int, CUstream>, Slot> slots;
  bytes = std::max<size_t>(bytes, 256);
  std::lock_guard lock(mutex);
  Slot &slot = slots[{device.ordinal(), stream.handle()}];
  if (slot.current.size() < bytes) {
    size_t size = std::max(bytes, slot.current.size() * 2);
    if (slot.current.size())
      slot.retired.push_back(std::move(slot.current));
    slot.current = DeviceBuffer(size, device);
  }
  return slot.current.ptr();
}

TensorView host_view(const void *data, DType dtype, std::span<const int64_t> shape) {
  return TensorView(reinterpret_cast<uint64_t>(data), dtype, shape);
}

} // namespace tokamax
