//===- AutotuningResult.cpp - Tuning results: lookup, JSON, merge, scopes -===//
#include <tokamax/autotune/Autotune.h>

#include <tokamax/ops/CallCache.h>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>

namespace tokamax {

// ordered_json: files read top-down ("format" and "version" first).
using json = nlohmann::ordered_json;

//===----------------------------------------------------------------------===//
// DeviceInfo
//===----------------------------------------------------------------------===//

DeviceInfo DeviceInfo::of(const Device& device) {
  return DeviceInfo{device.name(), device.arch(), device.cc_major(), device.cc_minor(),
                    device.sm_count()};
}

std::string DeviceInfo::key() const {
  std::string key = fmt::format("{}-cc{}.{}-{}sm", name.empty() ? "unknown" : name, cc_major,
                                cc_minor, sm_count);
  for (char& c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return key;
}

//===----------------------------------------------------------------------===//
// AutotuningResult: entries and lookup
//===----------------------------------------------------------------------===//

namespace {

/// Adds or replaces `entry` in a result's maps (by its JSON, and by hash for lookups).
template <class Entries, class ByHash> void insertEntry(Entries& entries, ByHash& byHash, TuningEntry entry) {
  std::string key = entry.args.to_json();
  const uint64_t hash = entry.args.hash();
  auto [it, inserted] = entries.insert_or_assign(key, std::move(entry));
  if (inserted)
    byHash.emplace(hash, std::move(key));
}

} // namespace

void AutotuningResult::add(TuningEntry entry) {
  insertEntry(entries_, by_hash_, std::move(entry));
  notify_config_change();  // a scope may hold this result: cached calls resolve again
}

const TuningEntry* AutotuningResult::find(const BoundArgs& args) const {
  // The in-memory hash narrows the search without printing JSON: this runs on every
  // op call inside a scope.
  auto [first, last] = by_hash_.equal_range(args.hash());
  for (auto it = first; it != last; ++it) {
    auto entry = entries_.find(it->second);
    if (entry != entries_.end() && entry->second.args == args)
      return &entry->second;
  }
  return nullptr;
}

std::optional<Config> AutotuningResult::lookup(const BoundArgs& args,
                                               const std::string& implementation) const {
  const TuningEntry* entry = find(args);
  if (!entry)
    return std::nullopt;
  if (entry->implementation == implementation)
    return entry->config;
  // A candidate eliminated in a brief round lost to others: prefer those that went
  // further, then the faster.
  auto further = [](const TuningRecord& a, const TuningRecord& b) {
    if (a.finalist != b.finalist)
      return a.finalist;
    if (a.rounds.size() != b.rounds.size())
      return a.rounds.size() > b.rounds.size();
    return a.timing.median < b.timing.median;
  };
  const TuningRecord* best = nullptr;
  for (const TuningRecord& r : entry->candidates)
    if (r.ok() && r.implementation == implementation && (!best || further(r, *best)))
      best = &r;
  if (best)
    return best->config;
  return std::nullopt;
}

std::vector<const TuningEntry*> AutotuningResult::entries() const {
  std::vector<const TuningEntry*> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_)
    out.push_back(&entry);
  return out;
}

void AutotuningResult::merge(const AutotuningResult& other) {
  if (device_.empty())
    device_ = other.device_;
  for (const auto& [key, entry] : other.entries_)
    add(entry);
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error("AutotuningResult::loads: " + what);
}

const json& field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end())
    fail(fmt::format("{}: missing \"{}\"", where, key));
  return *it;
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_string())
    fail(fmt::format("{}: \"{}\" must be a string, got {}", where, key, v.dump()));
  return v.get<std::string>();
}

int64_t int_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_number_integer())
    fail(fmt::format("{}: \"{}\" must be an integer, got {}", where, key, v.dump()));
  return v.get<int64_t>();
}

double number_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_number())
    fail(fmt::format("{}: \"{}\" must be a number, got {}", where, key, v.dump()));
  return v.get<double>();
}

// Parses a nested object through the op framework's own parsers, rethrowing with where.
template <typename T>
T parse_with(const json& v, const std::string& where) {
  if (!v.is_object())
    fail(fmt::format("{}: expected an object, got {}", where, v.dump()));
  try {
    return T::from_json(v.dump());
  } catch (const Error& e) {
    fail(fmt::format("{}: {}", where, e.what()));
  }
}

json device_to_json(const DeviceInfo& d) {
  return json{{"name", d.name},
              {"arch", d.arch},
              {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
              {"sm_count", d.sm_count},
              {"key", d.key()}};
}

DeviceInfo device_from_json(const json& j) {
  const std::string where = "device";
  if (!j.is_object())
    fail(fmt::format("\"device\" must be an object, got {}", j.dump()));
  DeviceInfo d;
  d.name = string_field(j, "name", where);
  d.arch = string_field(j, "arch", where);
  const std::string cc = string_field(j, "compute_capability", where);
  if (std::sscanf(cc.c_str(), "%d.%d", &d.cc_major, &d.cc_minor) != 2)
    fail(fmt::format("device: \"compute_capability\" must look like \"9.0\", got \"{}\"", cc));
  d.sm_count = int(int_field(j, "sm_count", where));
  return d;
}

json record_to_json(const TuningRecord& r) {
  json j{{"implementation", r.implementation}, {"config", json::parse(r.config.to_json())}};
  if (r.ok()) {
    j["timing"] = json{{"method", std::string(timing_method_name(r.timing.method))},
                       {"median_ms", r.timing.median},
                       {"min_ms", r.timing.min},
                       {"max_ms", r.timing.max},
                       {"mean_ms", r.timing.mean},
                       {"stddev_ms", r.timing.stddev},
                       {"iterations", r.iterations}};
    j["error"] = nullptr;
  } else {
    j["timing"] = nullptr;
    j["error"] = r.error;
  }
  // Optional fields (files without them still load): the successive-halving rounds.
  if (!r.rounds.empty()) {
    json rounds = json::array();
    for (const TuningRecord::Round& round : r.rounds)
      rounds.push_back(json{{"iterations", round.iterations}, {"median_ms", round.median_ms}});
    j["rounds"] = std::move(rounds);
  }
  if (r.ok())
    j["finalist"] = r.finalist;
  return j;
}

void rounds_from_json(const json& j, TuningRecord& r, const std::string& where) {
  if (auto it = j.find("rounds"); it != j.end()) {
    if (!it->is_array())
      fail(fmt::format("{}: \"rounds\" must be an array, got {}", where, it->dump()));
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string rw = fmt::format("{}.rounds[{}]", where, i);
      if (!(*it)[i].is_object())
        fail(fmt::format("{}: expected an object, got {}", rw, (*it)[i].dump()));
      r.rounds.push_back({int(int_field((*it)[i], "iterations", rw)),
                          number_field((*it)[i], "median_ms", rw)});
    }
  }
  // Results written before rounds existed timed every candidate in full.
  r.finalist = r.ok();
  if (auto it = j.find("finalist"); it != j.end()) {
    if (!it->is_boolean())
      fail(fmt::format("{}: \"finalist\" must be a boolean, got {}", where, it->dump()));
    r.finalist = it->get<bool>() && r.ok();
  }
}

TuningRecord record_from_json(const json& j, const std::string& where) {
  if (!j.is_object())
    fail(fmt::format("{}: expected an object, got {}", where, j.dump()));
  TuningRecord r;
  r.implementation = string_field(j, "implementation", where);
  r.config = parse_with<Config>(field(j, "config", where), where + ".config");
  const json& error = field(j, "error", where);
  const json& timing = field(j, "timing", where);
  if (!error.is_null()) {
    if (!error.is_string() || error.get<std::string>().empty())
      fail(fmt::format("{}: \"error\" must be null or a non-empty string", where));
    r.error = error.get<std::string>();
    rounds_from_json(j, r, where);
    return r;
  }
  if (!timing.is_object())
    fail(fmt::format("{}: a candidate without an error needs a \"timing\" object", where));
  const std::string tw = where + ".timing";
  try {
    r.timing.method = parse_timing_method(string_field(timing, "method", tw));
  } catch (const Error& e) {
    fail(fmt::format("{}: {}", tw, e.what()));
  }
  r.timing.median = number_field(timing, "median_ms", tw);
  r.timing.min = number_field(timing, "min_ms", tw);
  r.timing.max = number_field(timing, "max_ms", tw);
  r.timing.mean = number_field(timing, "mean_ms", tw);
  r.timing.stddev = number_field(timing, "stddev_ms", tw);
  r.iterations = int(int_field(timing, "iterations", tw));
  rounds_from_json(j, r, where);
  return r;
}

} // namespace

std::string AutotuningResult::dumps(int indent) const {
  json entries = json::array();
  for (const auto& [key, e] : entries_) {
    json candidates = json::array();
    for (const TuningRecord& r : e.candidates)
      candidates.push_back(record_to_json(r));
    entries.push_back(json{{"args", json::parse(key)},
                           {"implementation", e.implementation},
                           {"config", json::parse(e.config.to_json())},
                           {"candidates", std::move(candidates)}});
  }
  json j{{"format", kFormat},
         {"version", kVersion},
         {"device", device_.empty() ? json(nullptr) : device_to_json(device_)},
         {"entries", std::move(entries)}};
  return j.dump(indent) + "\n";
}

AutotuningResult AutotuningResult::loads(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(fmt::format("invalid JSON: {}", e.what()));
  }
  if (!j.is_object())
    fail(fmt::format("expected a JSON object, got {}", j.type_name()));
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat)
    fail(fmt::format("not a tokamax autotuning result (\"format\" must be \"{}\", got {})",
                     kFormat, format == j.end() ? "nothing" : format->dump()));
  const json& version = field(j, "version", "top level");
  if (!version.is_number_integer())
    fail(fmt::format("\"version\" must be an integer, got {}", version.dump()));
  if (version.get<int64_t>() != kVersion)
    fail(fmt::format("unsupported version {} (this build reads version {}); a newer tokamax "
                     "wrote it, or it is corrupt",
                     version.dump(), kVersion));
  AutotuningResult result;
  if (const json& device = field(j, "device", "top level"); !device.is_null())
    result.device_ = device_from_json(device);
  const json& entries = field(j, "entries", "top level");
  if (!entries.is_array())
    fail(fmt::format("\"entries\" must be an array, got {}", entries.type_name()));
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string where = fmt::format("entries[{}]", i);
    if (!e.is_object())
      fail(fmt::format("{}: expected an object, got {}", where, e.dump()));
    TuningEntry entry;
    entry.args = parse_with<BoundArgs>(field(e, "args", where), where + ".args");
    entry.implementation = string_field(e, "implementation", where);
    entry.config = parse_with<Config>(field(e, "config", where), where + ".config");
    const json& candidates = field(e, "candidates", where);
    if (!candidates.is_array())
      fail(fmt::format("{}: \"candidates\" must be an array", where));
    for (size_t c = 0; c < candidates.size(); ++c)
      entry.candidates.push_back(
          record_from_json(candidates[c], fmt::format("{}.candidates[{}]", where, c)));
    // Not add(): no scope holds a result being read, so cached calls stay current (the
    // per-device autotuning cache reads its file during a call's first resolution).
    insertEntry(result.entries_, result.by_hash_, std::move(entry));
  }
  return result;
}

//===----------------------------------------------------------------------===//
// AutotuningScope
//===----------------------------------------------------------------------===//

AutotuningScope::AutotuningScope(AutotuningResult result)
    : AutotuningScope(std::make_shared<const AutotuningResult>(std::move(result))) {}

AutotuningScope::AutotuningScope(std::shared_ptr<const AutotuningResult> result)
    : result_(std::move(result)) {
  if (!result_)
    throw Error("AutotuningScope: no result");
  std::shared_ptr<const AutotuningResult> held = result_;
  id_ = push_config_provider(
      [held](const BoundArgs& args, const std::string& implementation) {
        return held->lookup(args, implementation);
      });
}

AutotuningScope::~AutotuningScope() { pop_config_provider(id_); }

} // namespace tokamax
