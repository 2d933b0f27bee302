//===- TypedConfig.h - Typed configs and their string-map form ----*- C++ -*-===//
//
// An implementation's config is a struct with named fields. It becomes the string map
// (tokamax::Config: {"block_q": 128, ...}) only at the boundary: autotuning results,
// caches, export files and --config. The struct lists its keys once:
//
//   struct HopperConfig {
//     int64_t block_kv = 128;
//     bool pingpong = false;
//     static constexpr auto keys = std::tuple{
//         ConfigKey{"block_kv", &HopperConfig::block_kv},                    // required
//         ConfigKey{"pingpong", &HopperConfig::pingpong, KeyUse::Optional}};  // written when set
//   };
//
// from_config<C>(map) reads it (unknown keys, missing required keys and values a bool
// field cannot hold are an Error naming the key); to_config(c) writes it back with the
// same keys, so maps written before the struct existed read and write back unchanged.
//
// A std::optional field is a key whose absence means something (KeyUse::Optional:
// written when it holds a value). A key whose one value sets several fields is a
// ComputedKey. A config may say why it refuses a key another
// implementation takes, instead of "unknown key":
//
//   static std::optional<std::string> refused_key(const std::string &key);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace tokamax::ops_detail {

/// How a key appears in the map:
///   Required:  must be there on reading; always written;
///   Optional:  may be absent (the struct's default) on reading; written where it differs
///              from that default;
///   Defaulted: may be absent on reading; always written.
enum class KeyUse : uint8_t { Required, Optional, Defaulted };

template <class C, class T>
struct ConfigKey {
  const char *name;
  T C::*member;
  KeyUse use = KeyUse::Required;
};
template <class C, class T>
ConfigKey(const char *, T C::*) -> ConfigKey<C, T>;
template <class C, class T>
ConfigKey(const char *, T C::*, KeyUse) -> ConfigKey<C, T>;

/// A key whose one map value is more than one field (e.g. a level that sets two flags):
/// `read` sets the fields from the value (throwing Error for one it refuses), `write`
/// gives the value to write, or nothing. Absent on reading leaves the fields' defaults.
template <class C>
struct ComputedKey {
  const char *name;
  void (*read)(C &, int64_t);
  std::optional<int64_t> (*write)(const C &);
};

namespace config_detail {
template <class K>
constexpr bool is_computed = false;
template <class C>
constexpr bool is_computed<ComputedKey<C>> = true;

template <class C, class F>
void forEachKey(F &&f) {
  std::apply([&](const auto &...key) { (f(key), ...); }, C::keys);
}
template <class T>
struct OptionalField : std::false_type {
  using Value = T;
};
template <class T>
struct OptionalField<std::optional<T>> : std::true_type {
  using Value = T;
};
} // namespace config_detail

/// The keys `C` declares, in order.
template <class C>
std::vector<std::string> config_keys() {
  std::vector<std::string> names;
  config_detail::forEachKey<C>([&](const auto &key) { names.push_back(key.name); });
  return names;
}

/// Reads `map` as a `C`; throws Error naming the first unknown key, missing required key
/// or value a bool field cannot hold ("unknown key ...", "missing ...").
template <class C>
C from_config(const Config &map) {
  for (const auto &[name, value] : map.values) {
    bool known = false;
    config_detail::forEachKey<C>([&](const auto &key) { known = known || name == key.name; });
    if (known)
      continue;
    if constexpr (requires { C::refused_key(name); })
      if (std::optional<std::string> why = C::refused_key(name))
        throw Error(*why);
    throw Error(fmt::format("unknown key \"{}\"", name));
  }
  C c{};
  config_detail::forEachKey<C>([&](const auto &key) {
    if constexpr (config_detail::is_computed<std::remove_cvref_t<decltype(key)>>) {
      if (map.has(key.name))
        key.read(c, map.get(key.name));
      return;
    } else {
      using T = typename config_detail::OptionalField<std::remove_cvref_t<decltype(c.*key.member)>>::Value;
      if (!map.has(key.name)) {
        if (key.use == KeyUse::Required)
          throw Error(fmt::format("missing \"{}\"", key.name));
        return;
      }
      const int64_t v = map.get(key.name);
      if constexpr (std::is_same_v<T, bool>) {
        if (v != 0 && v != 1)
          throw Error(fmt::format("{} must be 0 or 1, got {}", key.name, v));
        c.*key.member = v != 0;
      } else {
        c.*key.member = static_cast<T>(v);
      }
    }
  });
  return c;
}

/// Writes `c` with its keys: optional ones where they differ from a default-constructed
/// C, std::optional ones where they hold a value, the others always.
template <class C>
Config to_config(const C &c) {
  const C defaults{};
  Config map;
  config_detail::forEachKey<C>([&](const auto &key) {
    if constexpr (config_detail::is_computed<std::remove_cvref_t<decltype(key)>>) {
      if (std::optional<int64_t> v = key.write(c))
        map.set(key.name, *v);
    } else {
      const auto &value = c.*key.member;
      if constexpr (config_detail::OptionalField<std::remove_cvref_t<decltype(value)>>::value) {
        if (value)
          map.set(key.name, static_cast<int64_t>(*value));
      } else if (key.use != KeyUse::Optional || value != defaults.*key.member) {
        map.set(key.name, static_cast<int64_t>(value));
      }
    }
  });
  return map;
}

} // namespace tokamax::ops_detail
