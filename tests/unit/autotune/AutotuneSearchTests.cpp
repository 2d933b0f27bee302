// Tests for the decisions of autotuning (Search.h): the successive-halving schedule
// driven by a fake timer, pruning from fake kernel records, reading registers and stack
// frames from real cubins, the optional JSON fields of halving, and the compile phase
// (cold, then warm disk cache) with no GPU.

#include <tokamax/autotune/Search.h>
#include <tokamax/compiler/Compiler.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/ScopedState.h"
#include "common/TempDir.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace tokamax;

namespace {

std::vector<TuningRecord> records_of(size_t n) {
  std::vector<TuningRecord> records(n);
  for (size_t i = 0; i < n; ++i) {
    records[i].implementation = "tile";
    records[i].config = {{"block", int64_t(i)}};
  }
  return records;
}

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

// Times candidate i as `truth[i]`, scaled by `first_round_skew[i]` in round 0 (a brief,
// noisy measurement), and remembers the iterations of every call.
struct FakeTimer {
  std::vector<double> truth;
  std::map<size_t, double> first_round_skew;
  std::map<size_t, int> throws_in_round;  // candidate -> round in which it fails
  std::map<size_t, std::vector<int>> calls;

  BenchmarkData operator()(size_t i, int round, int iterations) {
    calls[i].push_back(iterations);
    if (auto it = throws_in_round.find(i); it != throws_in_round.end() && it->second == round)
      throw std::runtime_error("illegal memory access");
    double ms = truth.at(i);
    if (round == 0 && first_round_skew.count(i))
      ms *= first_round_skew[i];
    return summarize(std::vector<double>(size_t(iterations), ms), TimingMethod::CudaEvents);
  }
  CandidateTimer fn() {
    return [this](size_t i, int round, int iterations) { return (*this)(i, round, iterations); };
  }
};

HalvingSchedule schedule(int iterations = 20, int first = 3, double keep = 1.0 / 3, int finalists = 3) {
  return HalvingSchedule{iterations, first, keep, finalists};
}

} // namespace

TEST_CASE("successive halving: brief rounds, the best third, the final few in full", "[autotune][halving]") {
  // 12 candidates, candidate 7 the fastest but measured third-fastest in the brief round.
  FakeTimer timer;
  timer.truth = {1.0, 0.9, 0.8, 0.7, 0.6, 0.55, 0.5, 0.3, 0.45, 0.4, 0.35, 2.0};
  timer.first_round_skew[7] = 0.4 / 0.3 + 0.01;  // 0.403: behind 10 (0.35) and 9 (0.4)
  std::vector<TuningRecord> records = records_of(12);
  std::vector<size_t> per_round;
  std::optional<size_t> best = successive_halving(records, all(12), schedule(), timer.fn(), &per_round);

  REQUIRE(best == 7u);
  // Round 0: 12 x 3 iterations; keep max(3, 4) = 4: {10, 9, 7, 8}; round 1: 4 x 9; keep
  // max(3, 2) = 3 <= finalists: the final round, 3 x 20.
  CHECK(per_round == std::vector<size_t>{12, 4, 3});
  CHECK(timer.calls[7] == std::vector<int>{3, 9, 20});
  CHECK(timer.calls[10] == std::vector<int>{3, 9, 20});
  CHECK(timer.calls[9] == std::vector<int>{3, 9, 20});
  CHECK(timer.calls[8] == std::vector<int>{3, 9});
  for (size_t i : {0, 1, 2, 3, 4, 5, 6, 11})
    CHECK(timer.calls[i] == std::vector<int>{3});

  CHECK(records[7].finalist);
  CHECK(records[7].iterations == 20);
  CHECK(records[7].timing.median == Approx(0.3));
  REQUIRE(records[7].rounds.size() == 3);
  CHECK(records[7].rounds[0].iterations == 3);
  CHECK(records[7].rounds[0].median_ms == Approx(0.403));
  CHECK(records[8].rounds.size() == 2);
  CHECK_FALSE(records[8].finalist);
  CHECK_FALSE(records[0].finalist);
  CHECK(records[0].rounds.size() == 1);
  CHECK(records[0].timing.median == Approx(1.0));  // the brief timing is kept
  for (const TuningRecord& r : records)
    CHECK(r.ok());
}

TEST_CASE("successive halving: one round when it is off or the field is small", "[autotune][halving]") {
  FakeTimer timer;
  timer.truth = {0.5, 0.2, 0.4, 0.3};
  SECTION("first_round_iterations 0") {
    std::vector<TuningRecord> records = records_of(4);
    std::vector<size_t> per_round;
    CHECK(successive_halving(records, all(4), schedule(20, 0), timer.fn(), &per_round) == 1u);
    CHECK(per_round == std::vector<size_t>{4});
    for (size_t i = 0; i < 4; ++i) {
      CHECK(timer.calls[i] == std::vector<int>{20});
      CHECK(records[i].finalist);
    }
  }
  SECTION("no more candidates than finalists") {
    std::vector<TuningRecord> records = records_of(4);
    CHECK(successive_halving(records, all(4), schedule(20, 3, 1.0 / 3, 4), timer.fn()) == 1u);
    for (size_t i = 0; i < 4; ++i)
      CHECK(timer.calls[i] == std::vector<int>{20});
  }
  SECTION("the first round already has the full iterations") {
    std::vector<TuningRecord> records = records_of(4);
    CHECK(successive_halving(records, all(4), schedule(5, 5, 1.0 / 3, 1), timer.fn()) == 1u);
    for (size_t i = 0; i < 4; ++i)
      CHECK(timer.calls[i] == std::vector<int>{5});
  }
}

TEST_CASE("successive halving: ties go to the earlier candidate", "[autotune][halving]") {
  FakeTimer timer;
  // 3 and 4 tie for the last place kept after round 0 (keep 3 of 7); 1 and 2 tie for best.
  timer.truth = {0.9, 0.2, 0.2, 0.5, 0.5, 0.8, 0.7};
  std::vector<TuningRecord> records = records_of(7);
  std::vector<size_t> per_round;
  CHECK(successive_halving(records, all(7), schedule(20, 2, 0.4, 3), timer.fn(), &per_round) == 1u);
  CHECK(per_round == std::vector<size_t>{7, 3});
  CHECK(timer.calls[3].size() == 2);
  CHECK(timer.calls[4].size() == 1);
  CHECK(records[1].finalist);
  CHECK(records[2].finalist);
}

TEST_CASE("successive halving: a candidate that fails is recorded and dropped", "[autotune][halving]") {
  FakeTimer timer;
  timer.truth = {0.5, 0.1, 0.4, 0.3, 0.6, 0.7};
  timer.throws_in_round[1] = 1;  // the fastest fails in the second (final) round
  timer.throws_in_round[4] = 0;
  std::vector<TuningRecord> records = records_of(6);
  records[5].error = "compile: no";  // not timed at all
  std::vector<size_t> per_round;
  std::optional<size_t> best = successive_halving(records, all(6), schedule(20, 2, 0.5, 2), timer.fn(), &per_round);

  // Round 0: 5 timed, 4 succeed, keep max(2, 2): {1, 3}, which are the finalists.
  CHECK(per_round == std::vector<size_t>{5, 2});
  CHECK(timer.calls.count(5) == 0);
  CHECK(records[5].error == "compile: no");
  CHECK(records[4].error == "run: illegal memory access");
  CHECK(records[4].rounds.empty());
  CHECK(timer.calls[4].size() == 1);
  CHECK(records[1].error == "run: illegal memory access");
  CHECK(records[1].rounds.size() == 1);  // its brief timing stays
  CHECK(timer.calls[1].size() == 2);
  CHECK(best == 3u);
  CHECK(records[3].finalist);
  CHECK(timer.calls[3] == std::vector<int>{2, 20});
}

TEST_CASE("successive halving: when every finalist fails, the one that got furthest wins", "[autotune][halving]") {
  FakeTimer timer;
  timer.truth = {0.5, 0.1, 0.4, 0.3};
  timer.throws_in_round[1] = 1;  // the final round: 1 is the only finalist
  std::vector<TuningRecord> records = records_of(4);
  std::optional<size_t> best = successive_halving(records, all(4), schedule(20, 2, 0.25, 1), timer.fn());
  CHECK(best == 3u);  // second fastest in round 0, like 0 and 2 it was timed once
  CHECK_FALSE(records[1].ok());
  CHECK_FALSE(records[3].finalist);

  FakeTimer none;
  none.truth = {0.1, 0.2};
  none.throws_in_round = {{0, 0}, {1, 0}};
  std::vector<TuningRecord> failing = records_of(2);
  CHECK_FALSE(successive_halving(failing, all(2), schedule(), none.fn()).has_value());
}

TEST_CASE("successive halving refuses schedules that cannot work, naming the field", "[autotune][halving]") {
  FakeTimer timer;
  timer.truth = {0.1};
  std::vector<TuningRecord> records = records_of(1);
  CHECK_THROWS_WITH(successive_halving(records, all(1), schedule(0), timer.fn()),
                    Catch::Contains("iterations must be >= 1 (got 0)"));
  CHECK_THROWS_WITH(successive_halving(records, all(1), schedule(20, -1), timer.fn()),
                    Catch::Contains("first_round_iterations must be >= 0 (got -1)"));
  CHECK_THROWS_WITH(successive_halving(records, all(1), schedule(20, 3, 1.0), timer.fn()),
                    Catch::Contains("keep_fraction must be in (0, 1) (got 1)"));
  CHECK_THROWS_WITH(successive_halving(records, all(1), schedule(20, 3, 0.5, 0), timer.fn()),
                    Catch::Contains("finalists must be >= 1 (got 0)"));
  CHECK_THROWS_WITH(successive_halving(records, std::vector<size_t>{3}, schedule(), timer.fn()),
                    Catch::Contains("index 3 is past the 1 records"));
  CHECK(timer.calls.empty());
}

namespace {

KernelResources kernel(std::string name, uint32_t registers, uint32_t local, uint32_t shared = 0,
                       uint32_t threads = 256) {
  return KernelResources{std::move(name), registers, local, shared, threads};
}

PruneInput input(std::string impl, int64_t block, std::optional<std::vector<KernelResources>> kernels) {
  return PruneInput{std::move(impl), Config{{"block", block}}, std::move(kernels)};
}

} // namespace

TEST_CASE("pruning: spills only where the implementation has a spill-free candidate", "[autotune][prune]") {
  const AutotuneTarget h200 = AutotuneTarget::for_arch("sm_90a");
  std::vector<PruneInput> inputs = {
      input("tile", 1, std::vector{kernel("fwd", 96, 0), kernel("bwd", 128, 280)}),
      input("tile", 2, std::vector{kernel("fwd", 80, 0), kernel("bwd", 120, 0)}),
      input("tile", 3, std::nullopt),  // unknown: kept
      input("reference", 1, std::vector{kernel("ref", 255, 64)}),  // every reference candidate spills
      input("reference", 2, std::vector{kernel("ref", 255, 16)}),
      input("chunked", 1, std::vector{kernel("c", 255, 32)}),
      input("chunked", 2, std::nullopt),  // unknown is no example of spill-free
  };
  std::vector<std::optional<std::string>> reasons = prune_reasons(inputs, h200);
  REQUIRE(reasons.size() == inputs.size());
  REQUIRE(reasons[0]);
  CHECK(*reasons[0] ==
        "spills: kernel bwd has a 280-byte stack frame (local memory) while tile {\"block\":2} has none");
  for (size_t i = 1; i < inputs.size(); ++i)
    CHECK_FALSE(reasons[i]);
}

TEST_CASE("pruning: kernels that cannot launch on the device", "[autotune][prune]") {
  AutotuneTarget a100 = AutotuneTarget::for_arch("sm_80");
  CHECK(a100.max_shared_bytes == 163 * 1024);
  std::vector<PruneInput> inputs = {
      input("tile", 1, std::vector{kernel("k", 64, 0, 200 * 1024)}),         // shared memory
      input("tile", 2, std::vector{kernel("k", 255, 8, 1024, 512)}),         // registers x threads
      input("tile", 3, std::vector{kernel("k", 32, 0, 0, 2048)}),            // threads
      input("tile", 4, std::vector{kernel("k", 128, 8, 160 * 1024, 512)}),  // fits; spills
  };
  std::vector<std::optional<std::string>> reasons = prune_reasons(inputs, a100);
  CHECK(reasons[0] == "kernel k needs 204800 bytes of shared memory per block, the device allows 166912");
  CHECK(reasons[1] == "kernel k needs 255 registers x 512 threads per block, the device has 65536");
  CHECK(reasons[2] == "kernel k needs 2048 threads per block, the device allows 1024");
  // The only spill-free candidates cannot launch: spilling is the best there is.
  CHECK_FALSE(reasons[3]);

  AutotuneTarget h200 = AutotuneTarget::for_arch("sm_90a");
  CHECK(h200.max_shared_bytes == 227 * 1024);
  CHECK_FALSE(prune_reasons(std::vector{inputs[0]}, h200)[0]);
  CHECK(AutotuneTarget::for_arch("sm_75").max_shared_bytes == 64 * 1024);
  AutotuneTarget unknown = AutotuneTarget::for_arch("sm_61");  // not in Arch's table
  CHECK(unknown.max_shared_bytes == 0);  // not checked
  CHECK_THROWS_WITH(AutotuneTarget::for_arch("hopper"), Catch::Contains("got 'hopper'"));
}

namespace {

// A kernel with a 64-byte local array (a stack frame without spills, as ptxas reports
// it) and one with none.
const char* kTwoKernelsPtx = R"(.version 8.0
.target sm_90a
.address_size 64

.visible .entry with_local(.param .u64 out, .param .u32 i)
{
  .local .align 4 .b8 buf[64];
  .reg .b64 %rd<6>;
  .reg .b32 %r<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [i];
  and.b32 %r2, %r1, 15;
  mul.wide.u32 %rd2, %r2, 4;
  mov.u64 %rd3, buf;
  add.u64 %rd4, %rd3, %rd2;
  st.local.u32 [%rd4], %r1;
  ld.local.u32 %r3, [buf];
  cvta.to.global.u64 %rd5, %rd1;
  st.global.u32 [%rd5], %r3;
  ret;
}

.visible .entry plain(.param .u64 out)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  st.global.u32 [%rd2], %r1;
  ret;
}
)";

} // namespace

TEST_CASE("kernel_resources reads registers and stack frames from a cubin", "[autotune][prune][ptx]") {
  if (assembler_identity() == "none") {
    WARN("no PTX assembler (nvJitLink or ptxas): skipped");
    return;
  }
  std::vector<uint8_t> cubin = assemble_ptx(kTwoKernelsPtx, "sm_90a");
  std::vector<KernelResources> found = kernel_resources(cubin);
  REQUIRE(found.size() == 2);
  std::map<std::string, KernelResources> by_name;
  for (const KernelResources& k : found)
    by_name[k.name] = k;
  REQUIRE(by_name.count("with_local"));
  REQUIRE(by_name.count("plain"));
  CHECK(by_name["with_local"].local_bytes == 64);
  CHECK(by_name["plain"].local_bytes == 0);
  CHECK(by_name["plain"].registers > 0);
  CHECK(by_name["plain"].registers <= 32);

  CHECK_THROWS_WITH(kernel_resources(std::vector<uint8_t>(100, 0)), Catch::Contains("not a 64-bit ELF"));
  std::vector<uint8_t> truncated(cubin.begin(), cubin.begin() + 80);
  CHECK_THROWS_WITH(kernel_resources(truncated), Catch::Contains("cubin truncated"));
}

TEST_CASE("halving rounds and pruning reasons round-trip through JSON", "[autotune][halving]") {
  AutotuningResult result(DeviceInfo{"Test GPU", "sm_90a", 9, 0, 132});
  TuningEntry e;
  e.args = BoundArgs{"some_op", {ArgSpec{{4, 8}, DType::F32}}, {}};
  e.implementation = "tile";
  e.config = {{"block", 2}};
  TuningRecord finalist;
  finalist.implementation = "tile";
  finalist.config = {{"block", 2}};
  finalist.timing = summarize({0.2, 0.21, 0.19});
  finalist.iterations = 3;
  finalist.rounds = {{3, 0.25}, {9, 0.22}, {20, 0.2}};
  finalist.finalist = true;
  TuningRecord brief = finalist;
  brief.config = {{"block", 1}};
  brief.rounds = {{3, 0.5}};
  brief.finalist = false;
  TuningRecord pruned;
  pruned.implementation = "tile";
  pruned.config = {{"block", 3}};
  pruned.error = "pruned: spills: kernel k has a 8-byte stack frame (local memory) while tile {\"block\":2} has none";
  e.candidates = {brief, finalist, pruned};
  result.add(e);

  AutotuningResult loaded = AutotuningResult::loads(result.dumps());
  const TuningEntry* back = loaded.find(e.args);
  REQUIRE(back);
  REQUIRE(back->candidates.size() == 3);
  CHECK(back->candidates[0].rounds == brief.rounds);
  CHECK_FALSE(back->candidates[0].finalist);
  CHECK(back->candidates[1].rounds == finalist.rounds);
  CHECK(back->candidates[1].finalist);
  CHECK(back->candidates[2].pruned());
  CHECK(back->candidates[2].error == pruned.error);
  CHECK(loaded.dumps() == result.dumps());
  // The brief candidate is faster in its one round, but the finalist went further.
  brief.timing = summarize({0.1});
  e.candidates = {brief, finalist};
  e.implementation = "reference";
  result.add(e);
  CHECK(result.lookup(e.args, "tile") == Config{{"block", 2}});

  CHECK_THROWS_WITH(AutotuningResult::loads(R"({"format": "tokamax-autotuning", "version": 1, "device": null,
      "entries": [{"args": {"op": "x", "args": [], "attributes": {}}, "implementation": "tile", "config": {},
        "candidates": [{"implementation": "tile", "config": {}, "error": null, "rounds": 3,
          "timing": {"method": "cupti", "median_ms": 1, "min_ms": 1, "max_ms": 1, "mean_ms": 1,
                     "stddev_ms": 0, "iterations": 3}}]}]})"),
                    Catch::Contains("entries[0].candidates[0]: \"rounds\" must be an array, got 3"));
}

TEST_CASE("a result written before halving loads as fully timed candidates", "[autotune][halving]") {
  // Version 1 as written before "rounds" and "finalist" existed.
  const std::string old = R"({"format": "tokamax-autotuning", "version": 1,
    "device": {"name": "NVIDIA H200", "arch": "sm_90a", "compute_capability": "9.0", "sm_count": 132,
               "key": "NVIDIA_H200-cc9.0-132sm"},
    "entries": [{"args": {"op": "layer_norm", "args": [{"dtype": "bf16", "shape": [8, 64]}], "attributes": {}},
                 "implementation": "reference", "config": {"block": 256},
                 "candidates": [
                   {"implementation": "tile", "config": {"block_rows": 1}, "error": null,
                    "timing": {"method": "cupti", "median_ms": 0.03, "min_ms": 0.029, "max_ms": 0.04,
                               "mean_ms": 0.031, "stddev_ms": 0.001, "iterations": 20}},
                   {"implementation": "tile", "config": {"block_rows": 4}, "error": null,
                    "timing": {"method": "cupti", "median_ms": 0.02, "min_ms": 0.019, "max_ms": 0.03,
                               "mean_ms": 0.021, "stddev_ms": 0.001, "iterations": 20}},
                   {"implementation": "tile", "config": {"block_rows": 64}, "timing": null,
                    "error": "compile: too many registers"}]}]})";
  AutotuningResult r = AutotuningResult::loads(old);
  const TuningEntry* e = r.entries().at(0);
  REQUIRE(e->candidates.size() == 3);
  CHECK(e->candidates[0].finalist);
  CHECK(e->candidates[0].rounds.empty());
  CHECK(e->candidates[0].iterations == 20);
  CHECK_FALSE(e->candidates[2].finalist);
  CHECK(r.lookup(e->args, "tile") == Config{{"block_rows", 4}});
}

TEST_CASE("the compile phase fills the kernel cache, and a rerun finds every kernel there", "[autotune][prune][ptx]") {
  if (assembler_identity() == "none") {
    WARN("no PTX assembler (nvJitLink or ptxas): skipped");
    return;
  }
  test::TempDir dir("tokamax-autotune-compile");
  test::EnvGuard cache("TOKAMAX_CACHE_DIR", dir.path.c_str());
  test::EnvGuard enabled("TOKAMAX_CACHE_DISABLE", nullptr);
  const BoundArgs args = bind_layer_norm(ArgSpec{{64, 256}, DType::BF16}, ArgSpec{{256}, DType::F32}, std::nullopt,
                                         ArgSpec{{64, 256}, DType::BF16}, std::nullopt, std::nullopt, -1, 1e-5);
  AutotuneOptions options;
  options.implementations = {"tile"};
  options.progress = false;
  const AutotuneTarget target = AutotuneTarget::for_arch("sm_90a");

  AutotuneCompileReport cold = autotune_compile({args, args}, target, options);
  REQUIRE(cold.calls.size() == 1);  // repeated calls are tuned once
  CHECK(cold.stats.calls == 1);
  CHECK(cold.stats.candidates == cold.calls[0].candidates.size());
  CHECK(cold.stats.compiled + cold.stats.compile_failed + cold.stats.invalid == cold.stats.candidates);
  CHECK(cold.stats.compiled > 0);
  CHECK(cold.stats.kernels > 0);
  CHECK(cold.stats.kernels_cached == 0);
  for (const TuningRecord& r : cold.calls[0].candidates)
    CHECK((r.ok() || r.pruned() || r.error.starts_with("invalid config: ")));

  AutotuneCompileReport warm = autotune_compile({args}, target, options);
  CHECK(warm.stats.kernels == cold.stats.kernels);
  CHECK(warm.stats.kernels_cached == warm.stats.kernels);
  CHECK(warm.stats.pruned == cold.stats.pruned);  // from the cached cubins alike
  CHECK(warm.stats.compile_s < cold.stats.compile_s);
}
