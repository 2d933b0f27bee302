// autotune() end to end on the host side: enumerate, compile into the kernel cache, prune,
// make inputs, time in successive-halving rounds, choose, and report each phase. Under
// the null driver every candidate times the same, so the checks are on the schedule and
// the bookkeeping, not on the choice.
#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

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
  CHECK(stats.timed_per_round.front() == stats.compiled - stats.pruned - stats.mismatched);
  CHECK(stats.mismatched == 0);  // the null driver runs no kernel: every output stays as filled
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

namespace {

// y = a byte pattern written by memset (which the null driver does run): configs that
// write the same bytes agree; one that writes zeros, another pattern or all-ones (NaNs,
// as if it wrote nothing) does not.
class FillImpl : public Implementation {
public:
  explicit FillImpl(std::vector<Config> space) : space_(std::move(space)) {}
  std::string name() const override { return "reference"; }
  std::optional<std::string> why_not(const BoundArgs&) const override { return std::nullopt; }
  Config heuristic(const BoundArgs&) const override { return space_.front(); }
  std::vector<Config> search_space(const BoundArgs&) const override { return space_; }
  std::vector<dsl::Kernel> kernels(const BoundArgs&, const Config&) const override { return {}; }
  void run(const BoundArgs&, const Config& c, std::span<const TensorView>, std::span<const TensorView> out,
           Stream& stream) const override {
    memset_d8(out[0].data(), uint8_t(c.get("byte")), out[0].nbytes(), stream.handle());
  }
  void interpret(const BoundArgs&, const Config&, std::span<const TensorView>,
                 std::span<const TensorView>) const override {}

private:
  std::vector<Config> space_;
};

class FillOp : public Op {
public:
  explicit FillOp(std::vector<Config> space)
      : Op("autotune_agreement_fill", {"x", "y"}, 1, {std::make_shared<FillImpl>(std::move(space))}) {}
  void validate(const BoundArgs&) const override {}
};

AutotuningResult tuneFill(const std::vector<Config>& space, bool check) {
  FillOp op(space);
  const ArgSpec spec{{1000}, DType::F32};
  AutotuneOptions options;
  options.update_cache = false;
  options.progress = false;
  options.iterations = 2;
  options.check_agreement = check;
  return autotune(op, BoundArgs{op.name(), {spec, spec}, {}}, options);
}

std::string errorOf(const AutotuningResult& result, int64_t byte, int64_t tag = 0) {
  for (const TuningRecord& r : result.entries().front()->candidates)
    if (r.config.get("byte") == byte && r.config.get_or("tag", 0) == tag)
      return r.error;
  FAIL("no candidate writes byte " << byte);
  return {};
}

} // namespace

TEST_CASE("autotune drops candidates whose outputs disagree with the others'", "[autotune]") {
  using Catch::Contains;
  using Catch::StartsWith;
  // 0x3F3F3F3F is 0.747f, 0x40404040 3.0f, all-ones a NaN.
  const std::vector<Config> space{{{"byte", 0x3F}, {"tag", 1}}, {{"byte", 0x3F}, {"tag", 2}}, {{"byte", 0}},
                                  {{"byte", 0x40}}, {{"byte", 0xFF}}};
  AutotuningResult result = tuneFill(space, true);
  CHECK(result.stats().mismatched == 3);
  CHECK(errorOf(result, 0x3F, 1).empty());
  CHECK(errorOf(result, 0x3F, 2).empty());
  CHECK_THAT(errorOf(result, 0), StartsWith("mismatch: output 'y' differs from the baseline's by 1") &&
                                     Contains("baseline reference {\"byte\":63,\"tag\":1}"));
  CHECK_THAT(errorOf(result, 0x40), StartsWith("mismatch: output 'y' differs"));
  CHECK_THAT(errorOf(result, 0xFF), StartsWith("mismatch: output 'y' has 1000 non-finite values"));
  CHECK(result.entries().front()->config.get("byte") == 0x3F);
  CHECK(result.stats().summary().find("3 dropped") != std::string::npos);

  // A first candidate the others disagree with is not the baseline: the majority is.
  AutotuningResult majority = tuneFill({{{"byte", 0}}, {{"byte", 0x3F}, {"tag", 1}}, {{"byte", 0x3F}, {"tag", 2}}}, true);
  CHECK_THAT(errorOf(majority, 0), StartsWith("mismatch: ") && Contains("\"tag\":1"));
  CHECK(errorOf(majority, 0x3F, 1).empty());
  CHECK(errorOf(majority, 0x3F, 2).empty());

  // Without the check every candidate is timed.
  AutotuningResult unchecked = tuneFill(space, false);
  CHECK(unchecked.stats().mismatched == 0);
  for (const TuningRecord& r : unchecked.entries().front()->candidates)
    CHECK(r.ok());
}
