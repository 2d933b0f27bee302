// Autotuning a traced Function's op calls as the examples show it: tune, dump to JSON,
// load it back, and say what was chosen.
#pragma once

#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Function.h>

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <vector>

namespace example {

/// The bound arguments of each op call of `f` (what autotuning takes).
inline std::vector<tokamax::BoundArgs> call_args(const tokamax::Function &f) {
  std::vector<tokamax::BoundArgs> calls;
  for (const auto &c : f.calls())
    calls.push_back(c.args);
  return calls;
}

/// Autotunes every op call of `f` (on the current device), dumps the result to JSON and
/// returns it loaded back from that text, after printing the time taken, the search's
/// statistics and each call's choice.
inline tokamax::AutotuningResult autotune_dump_load(const tokamax::Function &f) {
  const auto start = std::chrono::steady_clock::now();
  tokamax::AutotuneOptions options;
  tokamax::AutotuningResult tuned = tokamax::autotune(call_args(f), options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = tuned.dumps();
  tokamax::AutotuningResult loaded = tokamax::AutotuningResult::loads(text);
  fmt::print("autotuned {} op calls in {:.1f} s ({} bytes of JSON)\n", loaded.entries().size(), seconds, text.size());
  fmt::print("  {}\n", tuned.stats().summary());
  for (const tokamax::TuningEntry *e : loaded.entries())
    fmt::print("  {:<16} -> {} {}\n", e->args.op, e->implementation, e->config.to_json());
  return loaded;
}

} // namespace example
