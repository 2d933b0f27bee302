// Seeded mutation fuzzing of every parser of outside input: kernel-cache entry files,
// cache keys, AutotuningResult::loads (and the autotuning cache file through its reader),
// BoundArgs / Config / ArgSpec::from_json. Valid seeds are mutated (bit flips, byte
// changes, insertions, deletions, truncation, repeated spans, digits grown huge, tokens
// swapped); every input must parse or be refused with tokamax::Error (never another
// exception, a crash, or a hang), and what parses must print back to something that
// parses to the same value. The sequences are fixed by the seed, so a failure names the
// iteration that reproduces it. With TOKAMAX_FUZZ_ITERATIONS the loops run longer.
#include <tokamax/autotune/Autotune.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/Mutate.h"
#include "common/TempDir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace tokamax;
namespace fs = std::filesystem;

namespace {

using test::iterations;
using test::mutate;

/// Feeds mutations of `seeds` to `parse`, which returns the input's canonical reprint
/// when it parses (checked to parse to the same reprint) and throws Error when it is
/// refused. Returns how many inputs parsed.
int fuzz(const char *what, const std::vector<std::string> &seeds, int count,
         const std::function<std::string(const std::string &)> &parse) {
  std::mt19937 rng(20261203);
  int parsed = 0;
  for (int i = 0; i < count; ++i) {
    std::string input = mutate(seeds[i % seeds.size()], rng);
    try {
      std::string printed = parse(input);
      ++parsed;
      std::string again = parse(printed);
      if (again != printed)
        FAIL(what << " iteration " << i << ": reprint does not round-trip: " << printed << " -> " << again);
    } catch (const Error &) {
      // refused with a clear error: fine
    } catch (const std::exception &e) {
      FAIL(what << " iteration " << i << " threw " << typeid(e).name() << " (not tokamax::Error): " << e.what());
    }
  }
  return parsed;
}

} // namespace

TEST_CASE("fuzz: BoundArgs, Config and ArgSpec JSON are parsed or refused with Error", "[fuzz][op]") {
  BoundArgs args{"layer_norm",
                 {ArgSpec{{32, 2048, 16, 64}, DType::BF16}, ArgSpec{{64}, DType::F32}, std::nullopt,
                  ArgSpec{{32, 2048, 16, 64}, DType::BF16}},
                 {{"axis", "-1"}, {"epsilon", "1e-06"}}};
  Config config{{"block_q", 128}, {"block_kv", 64}, {"num_warps", 4}, {"prefetch", 1}};
  const int n = iterations(4000);
  fuzz("BoundArgs", {args.to_json()}, n, [](const std::string &s) { return BoundArgs::from_json(s).to_json(); });
  fuzz("Config", {config.to_json(), "{}"}, n, [](const std::string &s) { return Config::from_json(s).to_json(); });
  fuzz("ArgSpec", {ArgSpec{{3, 0, 7}, DType::F8E4M3}.to_json(), ArgSpec{{}, DType::I32}.to_json()}, n,
       [](const std::string &s) { return ArgSpec::from_json(s).to_json(); });
}

TEST_CASE("fuzz: Function JSON is parsed or refused with Error", "[fuzz][function]") {
  // A layer_norm -> attention -> sum function and its gradient: every op kind, glue ops,
  // pinned implementations and absent arguments appear in the seeds.
  const ArgSpec x{{2, 8, 2, 16}, DType::BF16}, scale{{16}, DType::F32};
  Function f = Function::trace({x, scale}, [](Tracer &t, std::span<const Sym> in) {
    Sym y = t.layer_norm(in[0], in[1]);
    AttentionOptions o;
    o.is_causal = true;
    o.implementation = "chunked";
    return std::vector<Sym>{t.sum(t.cast(t.dot_product_attention(y, y, y, o), DType::F32))};
  });
  const int n = iterations(2000);
  int parsed = fuzz("Function", {f.to_json(), grad(f, {0, 1}).to_json()}, n,
                    [](const std::string &s) { return Function::from_json(s).to_json(); });
  CHECK(parsed > 0);  // some mutations (e.g. whitespace) keep a valid function
}

TEST_CASE("fuzz: AutotuningResult::loads parses or refuses with Error", "[fuzz][autotune]") {
  AutotuningResult r(DeviceInfo{"NVIDIA H200", "sm_90a", 9, 0, 132});
  TuningEntry e;
  e.args = BoundArgs{"softmax", {ArgSpec{{128, 4096}, DType::BF16}, ArgSpec{{128, 4096}, DType::BF16}}, {}};
  e.implementation = "tile";
  e.config = {{"block_rows", 4}, {"num_warps", 8}};
  TuningRecord ok;
  ok.implementation = "tile";
  ok.config = e.config;
  ok.timing = summarize({0.011, 0.012, 0.015}, TimingMethod::CudaEvents);
  ok.iterations = 3;
  TuningRecord bad;
  bad.implementation = "tile";
  bad.config = {{"block_rows", 64}};
  bad.error = "compile: too many registers";
  e.candidates = {ok, bad};
  r.add(e);
  fuzz("AutotuningResult", {r.dumps()}, iterations(3000),
       [](const std::string &s) { return AutotuningResult::loads(s).dumps(); });
}

TEST_CASE("fuzz: kernel-cache entries and keys are verified or discarded, never trusted", "[fuzz][cache]") {
  test::TempDir dir("tokamax-fuzz");
  DiskCache::set_warning_handler([](const std::string &) {});  // thousands of discards
  CacheKey key{"fuzz", "tile.func @fuzz() {\n}\n", "sm_90a", "8.0", "opt=3", "0.1.0", "22.0.0", "nvJitLink 13.0"};
  CacheEntry entry{"fuzz", ".version 8.0\n", std::vector<uint8_t>(300, 7), R"({"grid":[1,1,1]})"};
  DiskCache cache(dir.path);
  cache.store(key, entry);
  const fs::path path = cache.entry_path(key);
  std::string seed;
  {
    std::ifstream in(path, std::ios::binary);
    seed.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937 rng(7);
  int loaded = 0;
  const int n = iterations(1500);
  for (int i = 0; i < n; ++i) {
    std::string bytes = mutate(seed, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
    std::optional<CacheEntry> got;
    REQUIRE_NOTHROW(got = cache.load(key));
    if (got) {  // only an unchanged payload may verify
      ++loaded;
      CHECK(*got == entry);
    }
  }
  DiskCache::set_warning_handler(nullptr);
  CHECK(loaded < n);  // the mutations do change what is stored
  // The key text the entries carry.
  fuzz("CacheKey", {key.to_string()}, iterations(3000), [](const std::string &s) -> std::string {
    std::optional<CacheKey> k = CacheKey::from_string(s);
    if (!k)
      throw Error("not a key");
    return k->to_string();
  });
}

TEST_CASE("fuzz: the autotuning cache file is read or ignored, never fatal", "[fuzz][autotune]") {
  test::TempDir dir("tokamax-fuzz");
  const char *saved = std::getenv("TOKAMAX_CACHE_DIR");
  std::string savedValue = saved ? saved : "";
  ::setenv("TOKAMAX_CACHE_DIR", dir.path.c_str(), 1);
  const DeviceInfo device{"NVIDIA H200", "sm_90a", 9, 0, 132};
  AutotuningResult r(device);
  TuningEntry e;
  e.args = BoundArgs{"gelu", {ArgSpec{{1000}, DType::F32}, ArgSpec{{1000}, DType::F32}}, {}};
  e.implementation = "tile";
  e.config = {{"block", 1024}};
  r.add(e);
  reset_autotuning_cache();
  update_autotuning_cache(r);
  const fs::path path = autotuning_cache_path(device);
  std::string seed;
  {
    std::ifstream in(path, std::ios::binary);
    seed.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937 rng(11);
  for (int i = 0, n = iterations(150); i < n; ++i) {
    std::string text = mutate(seed, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(text.data(), std::streamsize(text.size()));
    reset_autotuning_cache();
    REQUIRE_NOTHROW(autotuning_cache(device));
  }
  reset_autotuning_cache();
  saved ? ::setenv("TOKAMAX_CACHE_DIR", savedValue.c_str(), 1) : ::unsetenv("TOKAMAX_CACHE_DIR");
}
