//===- Autotune.cpp - The C ABI: autotuning, config scopes, resolution -----===//
#include "c/lib/CApi.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

using namespace tokamax;
using tokamax::capi::guard;
using tokamax::capi::require_pointer;

namespace {

/// The calling thread's open scopes by id (AutotuningScope applies to the thread that
/// opened it, so a scope lives and dies on its thread).
thread_local std::map<uint64_t, std::unique_ptr<AutotuningScope>> openScopes;
std::atomic<uint64_t> nextScopeId{1};

/// A copy of `text` the caller frees with tkx_free_string.
char *handOver(const std::string &text) {
  char *s = static_cast<char *>(std::malloc(text.size() + 1));
  if (!s)
    throw std::bad_alloc();
  std::memcpy(s, text.c_str(), text.size() + 1);
  return s;
}

} // namespace

extern "C" {

tkx_status tkx_autotune(const tkx_call *const *calls, int32_t num_calls, void *stream, char **result_json) {
  if (result_json)
    *result_json = nullptr;
  return guard("tkx_autotune", [&] {
    require_pointer(result_json, "result_json");
    if (num_calls <= 0)
      throw Error(fmt::format("num_calls is {}: autotune at least one call", num_calls));
    require_pointer(calls, "calls");
    std::vector<BoundArgs> bound;
    for (int32_t i = 0; i < num_calls; ++i) {
      require_pointer(calls[i], fmt::format("calls[{}]", i));
      bound.push_back(calls[i]->args);
    }
    // Tuning times candidates on streams and inputs of its own, on the stream's device
    // (device 0 for the default stream).
    AutotuneOptions options;
    options.device = std::max(detail::stream_device(static_cast<CUstream>(stream)), 0);
    options.progress = false;
    *result_json = handOver(autotune(bound, options).dumps());
  });
}

void tkx_free_string(char *s) { std::free(s); }

tkx_status tkx_config_scope_push(const char *result_json, uint64_t *id) {
  return guard("tkx_config_scope_push", [&] {
    require_pointer(result_json, "result_json");
    require_pointer(id, "id");
    auto scope = std::make_unique<AutotuningScope>(AutotuningResult::loads(result_json));
    const uint64_t made = nextScopeId++;
    openScopes.emplace(made, std::move(scope));
    *id = made;
  });
}

tkx_status tkx_config_scope_pop(uint64_t id) {
  return guard("tkx_config_scope_pop", [&] {
    auto it = openScopes.find(id);
    if (it == openScopes.end())
      throw Error(fmt::format("id {} is no config scope open on this thread", id));
    openScopes.erase(it);
  });
}

tkx_status tkx_call_resolve(const tkx_call *call, const char *arch, char **json) {
  if (json)
    *json = nullptr;
  return guard("tkx_call_resolve", [&] {
    require_pointer(call, "call");
    require_pointer(json, "json");
    std::string target;
    if (arch) {
      Arch::parse(arch, "arch");
      target = arch;
    } else {
      target = Device::get(0).arch();
    }
    // The path a run takes: select, then explicit config -> this thread's providers ->
    // the process's -> the heuristic.
    const Implementation &impl = call->op->select(call->args, call->implementation, target);
    const Config config = call->op->resolve_config(impl, call->args, call->config);
    nlohmann::json resolved = {{"implementation", impl.name()}, {"config", nlohmann::json::object()}};
    for (const auto &[key, value] : config.values)
      resolved["config"][key] = value;
    *json = handOver(resolved.dump());
  });
}

} // extern "C"
