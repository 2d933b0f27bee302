// Tests for autotuning results (JSON, merge, lookup), scopes as config providers, and
// the per-device autotuning cache file. No GPU needed.

#include <tokamax/autotune/Autotune.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/ScopedState.h"
#include "common/TempDir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <atomic>

#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tokamax;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tokamax-autotune") {}
};

using test::EnvGuard;

BoundArgs make_args(int64_t rows, int64_t cols, DType dtype = DType::BF16) {
  BoundArgs a;
  a.op = "autotune_test_op";
  a.args = {ArgSpec{{rows, cols}, dtype}, std::nullopt, ArgSpec{{rows, cols}, dtype}};
  a.attributes = {{"axis", "1"}, {"epsilon", "1e-05"}};
  return a;
}

TuningRecord timed(std::string impl, Config config, double median) {
  TuningRecord r;
  r.implementation = std::move(impl);
  r.config = std::move(config);
  r.timing = summarize({median * 0.9, median, median * 1.25}, TimingMethod::Cupti);
  r.iterations = 3;
  return r;
}

TuningRecord failed(std::string impl, Config config, std::string error) {
  TuningRecord r;
  r.implementation = std::move(impl);
  r.config = std::move(config);
  r.error = std::move(error);
  return r;
}

DeviceInfo test_device() { return DeviceInfo{"Test GPU (fake) 141GB", "sm_90a", 9, 0, 132}; }

AutotuningResult sample_result() {
  AutotuningResult r(test_device());
  TuningEntry e1;
  e1.args = make_args(128, 1024);
  e1.implementation = "tile";
  e1.config = {{"block_rows", 4}, {"num_warps", 8}};
  e1.candidates = {timed("tile", {{"block_rows", 1}, {"num_warps", 4}}, 0.031),
                   timed("tile", {{"block_rows", 4}, {"num_warps", 8}}, 0.0125),
                   failed("tile", {{"block_rows", 64}, {"num_warps", 8}},
                          "compile: too many registers\nsecond line \"quoted\""),
                   timed("reference", {{"block", 256}}, 0.09),
                   timed("reference", {{"block", 1024}}, 0.07)};
  r.add(e1);
  TuningEntry e2;
  e2.args = make_args(7, 33, DType::F32);
  e2.implementation = "reference";
  e2.config = {{"block", 128}};
  r.add(e2);  // no candidates (written by hand)
  return r;
}

// A small op with one tunable implementation, for config resolution.
class TestImpl : public Implementation {
public:
  std::string name() const override { return "reference"; }
  std::optional<std::string> why_not(const BoundArgs&) const override { return std::nullopt; }
  std::optional<std::string> check_config(const BoundArgs&, const Config& c) const override {
    if (!c.has("block_rows") || c.get("block_rows") <= 0)
      return std::string("block_rows must be positive");
    return std::nullopt;
  }
  Config heuristic(const BoundArgs&) const override { return {{"block_rows", 1}}; }
  std::vector<dsl::Kernel> kernels(const BoundArgs&, const Config&) const override { return {}; }
  void run(const BoundArgs&, const Config&, std::span<const TensorView>, std::span<const TensorView>,
           Stream&) const override {}
  void interpret(const BoundArgs&, const Config&, std::span<const TensorView>,
                 std::span<const TensorView>) const override {}
};

class TestOp : public Op {
public:
  TestOp()
      : Op("autotune_test_op", {"x", "scale", "y"}, 2, {std::make_shared<TestImpl>()}) {}
  void validate(const BoundArgs&) const override {}
};

const TestOp& test_op() {
  static TestOp op;
  return op;
}

int64_t resolved_rows(const BoundArgs& args, std::optional<Config> explicit_config = std::nullopt) {
  const Op& op = test_op();
  return op.resolve_config(op.implementation("reference"), args, explicit_config).get("block_rows");
}

AutotuningResult rows_result(const BoundArgs& args, int64_t rows) {
  AutotuningResult r;
  TuningEntry e;
  e.args = args;
  e.implementation = "reference";
  e.config = {{"block_rows", rows}};
  r.add(e);
  return r;
}

} // namespace

TEST_CASE("DeviceInfo keys are file-name safe", "[autotune]") {
  CHECK(test_device().key() == "Test_GPU__fake__141GB-cc9.0-132sm");
  CHECK(DeviceInfo{"NVIDIA H200", "sm_90a", 9, 0, 132}.key() == "NVIDIA_H200-cc9.0-132sm");
  CHECK(DeviceInfo{}.key() == "unknown-cc0.0-0sm");
  CHECK(DeviceInfo{"../x/y", "sm_80", 8, 0, 108}.key().find('/') == std::string::npos);
}

TEST_CASE("an autotuning result round-trips through JSON", "[autotune]") {
  const AutotuningResult r = sample_result();
  const std::string text = r.dumps();
  CHECK(text.find("\"format\": \"tokamax-autotuning\"") != std::string::npos);
  CHECK(text.find("\"version\": 1") != std::string::npos);
  CHECK(text.find("\"key\": \"Test_GPU__fake__141GB-cc9.0-132sm\"") != std::string::npos);

  const AutotuningResult back = AutotuningResult::loads(text);
  CHECK(back.dumps() == text);
  CHECK(back.device() == r.device());
  REQUIRE(back.size() == 2);
  const TuningEntry* e = back.find(make_args(128, 1024));
  REQUIRE(e != nullptr);
  CHECK(e->implementation == "tile");
  CHECK(e->config == Config{{"block_rows", 4}, {"num_warps", 8}});
  REQUIRE(e->candidates.size() == 5);
  const TuningRecord& best = e->candidates[1];
  CHECK(best.ok());
  CHECK(best.timing.method == TimingMethod::Cupti);
  CHECK(best.timing.median == 0.0125);  // doubles print to round-trip exactly
  CHECK(best.timing.max == 0.0125 * 1.25);
  CHECK(best.timing.stddev == r.find(make_args(128, 1024))->candidates[1].timing.stddev);
  CHECK(best.iterations == 3);
  CHECK(!e->candidates[2].ok());
  CHECK(e->candidates[2].error == "compile: too many registers\nsecond line \"quoted\"");

  // Without a device, "device" is null and stays empty.
  AutotuningResult anonymous = rows_result(make_args(1, 2), 3);
  CHECK(AutotuningResult::loads(anonymous.dumps()).device().empty());
}

TEST_CASE("loading rejects bad JSON, other formats and unknown versions", "[autotune]") {
  CHECK_THROWS_WITH(AutotuningResult::loads("{\"format\": "), Catch::Contains("invalid JSON"));
  CHECK_THROWS_WITH(AutotuningResult::loads("[1, 2]"), Catch::Contains("expected a JSON object"));
  CHECK_THROWS_WITH(AutotuningResult::loads(R"({"format": "something-else", "version": 1})"),
                    Catch::Contains("not a tokamax autotuning result"));
  CHECK_THROWS_WITH(
      AutotuningResult::loads(
          R"({"format": "tokamax-autotuning", "version": 2, "device": null, "entries": []})"),
      Catch::Contains("unsupported version 2") && Catch::Contains("reads version 1"));
  CHECK_THROWS_WITH(
      AutotuningResult::loads(
          R"({"format": "tokamax-autotuning", "version": "1", "device": null, "entries": []})"),
      Catch::Contains("\"version\" must be an integer"));
  // A malformed entry is named.
  std::string text = sample_result().dumps();
  const std::string needle = "\"implementation\": \"reference\"";
  text.replace(text.rfind(needle), needle.size(), "\"implementation\": 7");
  CHECK_THROWS_WITH(AutotuningResult::loads(text), Catch::Contains("entries[") &&
                                                       Catch::Contains("\"implementation\""));
  CHECK_THROWS_AS(AutotuningResult::loads(
                      R"({"format": "tokamax-autotuning", "version": 1, "device": null,
                          "entries": [{"args": {"op": "x"}, "implementation": "tile",
                                       "config": {}, "candidates": []}]})"),
                  Error);
  // Empty but valid.
  CHECK(AutotuningResult::loads(
            R"({"format": "tokamax-autotuning", "version": 1, "device": null, "entries": []})")
            .empty());
}

TEST_CASE("lookup returns the choice, or an implementation's best candidate", "[autotune]") {
  const AutotuningResult r = sample_result();
  CHECK(r.lookup(make_args(128, 1024), "tile") == Config{{"block_rows", 4}, {"num_warps", 8}});
  CHECK(r.lookup(make_args(128, 1024), "reference") == Config{{"block", 1024}});
  CHECK(!r.lookup(make_args(128, 1024), "hopper"));
  CHECK(!r.lookup(make_args(128, 1025), "tile"));
  CHECK(r.lookup(make_args(7, 33, DType::F32), "reference") == Config{{"block", 128}});
  CHECK(!r.lookup(make_args(7, 33, DType::BF16), "reference"));  // dtype is part of the key
}

TEST_CASE("merge adds entries and the other result wins on conflicts", "[autotune]") {
  AutotuningResult a = rows_result(make_args(1, 64), 2);
  a.merge(rows_result(make_args(2, 64), 4));
  CHECK(a.size() == 2);
  CHECK(a.device().empty());

  AutotuningResult b(test_device());
  TuningEntry e;
  e.args = make_args(1, 64);
  e.implementation = "reference";
  e.config = {{"block_rows", 16}};
  b.add(e);
  a.merge(b);
  CHECK(a.size() == 2);
  CHECK(a.lookup(make_args(1, 64), "reference") == Config{{"block_rows", 16}});
  CHECK(a.lookup(make_args(2, 64), "reference") == Config{{"block_rows", 4}});
  CHECK(a.device() == test_device());  // taken over when this result had none

  AutotuningResult c(DeviceInfo{"Other", "sm_80", 8, 0, 108});
  c.merge(b);
  CHECK(c.device().name == "Other");  // kept when set
  CHECK(c.size() == 1);

  // add() replaces, and the replaced entry stays findable through the hash index.
  a.add(*b.entries().front());
  CHECK(a.size() == 2);
  CHECK(a.find(make_args(1, 64))->config == Config{{"block_rows", 16}});
}

TEST_CASE("autotuning scopes nest: the inner wins, leaving restores", "[autotune]") {
  const BoundArgs small = make_args(8, 64), large = make_args(4096, 64);
  CHECK(resolved_rows(small) == 1);  // heuristic
  {
    AutotuningResult outer = rows_result(small, 2);
    outer.merge(rows_result(large, 32));
    AutotuningScope outer_scope(outer);
    CHECK(resolved_rows(small) == 2);
    CHECK(resolved_rows(large) == 32);
    {
      AutotuningScope inner_scope(rows_result(small, 4));
      CHECK(resolved_rows(small) == 4);     // inner wins
      CHECK(resolved_rows(large) == 32);    // inner has nothing: the outer answers
      CHECK(resolved_rows(small, Config{{"block_rows", 8}}) == 8);  // explicit beats scopes
      {
        // A config the implementation rejects is skipped, not used.
        AutotuningScope invalid(rows_result(small, -1));
        CHECK(resolved_rows(small) == 4);
      }
      CHECK(resolved_rows(small) == 4);
    }
    CHECK(resolved_rows(small) == 2);  // restored
  }
  CHECK(resolved_rows(small) == 1);
  CHECK(resolved_rows(large) == 1);

  // Scopes may end out of order (e.g. held by shared owners).
  auto first = std::make_unique<AutotuningScope>(rows_result(small, 2));
  auto second = std::make_unique<AutotuningScope>(rows_result(small, 4));
  first.reset();
  CHECK(resolved_rows(small) == 4);
  second.reset();
  CHECK(resolved_rows(small) == 1);
  CHECK_THROWS_AS(AutotuningScope(std::shared_ptr<const AutotuningResult>()), Error);
}

TEST_CASE("the per-device autotuning cache file round-trips and merges", "[autotune]") {
  TempDir dir;
  EnvGuard cache_dir("TOKAMAX_CACHE_DIR", dir.path.c_str());
  EnvGuard enabled("TOKAMAX_CACHE_DISABLE", nullptr);
  reset_autotuning_cache();
  const DeviceInfo device = test_device();
  const fs::path path = autotuning_cache_path(device);
  CHECK(path == dir.path / "autotune" / "Test_GPU__fake__141GB-cc9.0-132sm.json");
  CHECK(autotuning_cache(device)->empty());  // no file yet

  update_autotuning_cache(sample_result());
  REQUIRE(fs::exists(path));
  for (const auto& f : fs::directory_iterator(path.parent_path()))
    CHECK(f.path().filename().string().find(".tmp.") == std::string::npos);  // no temp left
  reset_autotuning_cache();
  auto loaded = autotuning_cache(device);
  CHECK(loaded->dumps() == sample_result().dumps());

  // A second update merges into the file; its entries win.
  AutotuningResult more(device);
  TuningEntry e;
  e.args = make_args(128, 1024);
  e.implementation = "reference";
  e.config = {{"block", 64}};
  more.add(e);
  more.merge(rows_result(make_args(3, 3), 5));
  update_autotuning_cache(more);
  CHECK(autotuning_cache(device)->size() == 3);  // the in-memory copy is refreshed
  reset_autotuning_cache();
  auto merged = autotuning_cache(device);
  CHECK(merged->size() == 3);
  CHECK(merged->lookup(make_args(128, 1024), "reference") == Config{{"block", 64}});
  CHECK(merged->lookup(make_args(7, 33, DType::F32), "reference") == Config{{"block", 128}});
  CHECK(merged->device() == device);

  // Without a device, nothing can be stored.
  CHECK_THROWS_AS(update_autotuning_cache(rows_result(make_args(1, 1), 1)), Error);
}

TEST_CASE("a corrupt or foreign autotuning cache file is ignored, then replaced",
          "[autotune]") {
  TempDir dir;
  EnvGuard cache_dir("TOKAMAX_CACHE_DIR", dir.path.c_str());
  EnvGuard enabled("TOKAMAX_CACHE_DISABLE", nullptr);
  reset_autotuning_cache();
  const DeviceInfo device = test_device();
  const fs::path path = autotuning_cache_path(device);
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "{ not json";
  CHECK(autotuning_cache(device)->empty());

  // A file holding another device's results under this device's name.
  reset_autotuning_cache();
  AutotuningResult foreign = sample_result();
  foreign.set_device(DeviceInfo{"Other", "sm_80", 8, 0, 108});
  std::ofstream(path, std::ios::trunc) << foreign.dumps();
  CHECK(autotuning_cache(device)->empty());

  update_autotuning_cache(sample_result());  // replaces the foreign file
  reset_autotuning_cache();
  CHECK(autotuning_cache(device)->size() == 2);
}

TEST_CASE("TOKAMAX_CACHE_DISABLE turns the autotuning cache off", "[autotune]") {
  TempDir dir;
  EnvGuard cache_dir("TOKAMAX_CACHE_DIR", dir.path.c_str());
  EnvGuard disabled("TOKAMAX_CACHE_DISABLE", "1");
  reset_autotuning_cache();
  update_autotuning_cache(sample_result());
  CHECK(!fs::exists(autotuning_cache_path(test_device())));
  CHECK(autotuning_cache(test_device())->empty());
  reset_autotuning_cache();
}

TEST_CASE("the autotuning cache is private: 0700 / 0600, no symlinks, no shared directories", "[autotune][privacy]") {
  TempDir dir;
  EnvGuard cache_dir("TOKAMAX_CACHE_DIR", (dir.path / "cache").c_str());
  EnvGuard enabled("TOKAMAX_CACHE_DISABLE", nullptr);
  const DeviceInfo device = test_device();
  reset_autotuning_cache();
  update_autotuning_cache(sample_result());
  const fs::path path = autotuning_cache_path(device);
  auto mode = [](const fs::path &p) {
    struct stat st;
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
  };
  CHECK(mode(path.parent_path()) == 0700);
  CHECK(mode(path) == 0600);
  reset_autotuning_cache();
  CHECK(autotuning_cache(device)->size() == 2);
  // A cache file reached through a symbolic link is not read.
  const fs::path real = dir.path / "real.json";
  fs::rename(path, real);
  fs::create_symlink(real, path);
  reset_autotuning_cache();
  CHECK(autotuning_cache(device)->empty());
  fs::remove(path);
  fs::rename(real, path);
  // Nor one in a directory others may write to; writing there is refused (a warning).
  REQUIRE(::chmod(path.parent_path().c_str(), 0777) == 0);
  reset_autotuning_cache();
  CHECK(autotuning_cache(device)->empty());
  CHECK_NOTHROW(update_autotuning_cache(sample_result()));
  REQUIRE(::chmod(path.parent_path().c_str(), 0700) == 0);
  reset_autotuning_cache();
  CHECK(autotuning_cache(device)->size() == 2);
  reset_autotuning_cache();
}

TEST_CASE("autotuning scopes are per thread: concurrent threads get their own configs", "[autotune][concurrency]") {
  const BoundArgs args = make_args(8, 64);
  // Four threads with four different scopes (one handed a result opened elsewhere) and
  // one thread without a scope, all resolving the same call at once, many times.
  auto shared = std::make_shared<const AutotuningResult>(rows_result(args, 16));
  AutotuningScope mainScope(rows_result(args, 32));  // this thread's only
  std::atomic<int> wrong{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int64_t rows : {0, 2, 4, 8, 16}) {
    threads.emplace_back([&, rows] {
      std::optional<AutotuningScope> scope;
      if (rows == 16)
        scope.emplace(shared);  // handed the result: opens its own scope with it
      else if (rows > 0)
        scope.emplace(rows_result(args, rows));
      while (!go)
        std::this_thread::yield();
      const int64_t expected = rows == 0 ? 1 : rows;  // no scope: the heuristic
      for (int i = 0; i < 20000; ++i)
        if (resolved_rows(args) != expected)
          ++wrong;
    });
  }
  go = true;
  for (std::thread &t : threads)
    t.join();
  CHECK(wrong == 0);
  CHECK(resolved_rows(args) == 32);  // the main thread's scope, untouched by the others
}
