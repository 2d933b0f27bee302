// autotune() end to end on the host side: enumerate, compile into the kernel cache, prune,
// make inputs, time in successive-halving rounds, choose, and report each phase. Under
// the null driver every candidate times the same, so the checks are on the schedule and
// the bookkeeping, not on the choice.
#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Device.h>

#include <catch2/catch.hpp>

#include <numeric>

using namespace tokamax;

TEST_CASE("autotune runs every phase and records each candidate's rounds", "[autotune]") {
  const BoundArgs args = bind_layer_norm(ArgSpec{{256, 512}, DType::BF16}, ArgSpec{{512}, DType::F32}, std::nullopt,
                                         ArgSpec{{256, 512}, DType::BF16}, std::nullopt, std::nullopt, -1, 1e-5);
  AutotuneOptions options;
  options.update_cache = false;
  options.progress = false;
  options.iterations = 6;
  options.first_round_iterations = 1;
  options.keep_fraction = 0.5;
  options.finalists = 2;
  AutotuningResult result = autotune(layer_norm_op(), args, options);

  const AutotuneStats& stats = result.stats();
  CHECK(stats.calls == 1);
  REQUIRE_FALSE(stats.timed_per_round.empty());
  const TuningEntry* entry = result.find(args);
  REQUIRE(entry);
  size_t timed = 0, finalists = 0, pruned = 0;
  for (const TuningRecord& r : entry->candidates) {
    timed += !r.rounds.empty();
    finalists += r.finalist;
    pruned += r.pruned();
    if (r.finalist) {
      CHECK(r.iterations == 6);
      CHECK(r.rounds.back().iterations == 6);
    } else if (!r.rounds.empty()) {
      CHECK(r.rounds.front().iterations < 6);  // eliminated after a brief round
    }
  }
  CHECK(pruned == stats.pruned);
  CHECK(stats.timed_per_round.front() == timed);
  CHECK(stats.timed_per_round.back() == finalists);
  CHECK(stats.compiled == stats.candidates - stats.invalid - stats.compile_failed);
  CHECK(stats.timed_per_round.front() == stats.compiled - stats.pruned);
  // Rounds of 1, 2, 4 and 6 iterations at most, each keeping half.
  CHECK(stats.timed_per_round.size() <= 4);
  for (size_t i = 1; i < stats.timed_per_round.size(); ++i)
    CHECK(stats.timed_per_round[i] == std::max<size_t>(2, (stats.timed_per_round[i - 1] + 1) / 2));
  CHECK(stats.timing_s > 0);
  CHECK(stats.summary().find("rounds") != std::string::npos);

  // What was chosen is a finalist, and the choice survives a JSON round trip.
  const auto chosen = std::find_if(entry->candidates.begin(), entry->candidates.end(), [&](const TuningRecord& r) {
    return r.implementation == entry->implementation && r.config == entry->config;
  });
  REQUIRE(chosen != entry->candidates.end());
  CHECK(chosen->finalist);
  CHECK(AutotuningResult::loads(result.dumps()).find(args)->config == entry->config);
}
