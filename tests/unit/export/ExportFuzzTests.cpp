// Seeded mutation fuzzing of the export loader from the committed fixture: every
// mutated file must load (and then print and re-serialise) or be refused with
// tokamax::Error: never another exception, a crash or an out-of-bounds read (CI runs it
// under AddressSanitizer + UndefinedBehaviorSanitizer: scripts/sanitize.sh). Four kinds
// of mutation take turns, so that the checks behind the checksums are reached too:
//   0. the file's bytes (mostly stopped by a size or a checksum);
//   1. one JSON section's text (manifest, function, plan), the file sealed again;
//   2. one value of the plan or manifest JSON replaced by a hostile one (or a key
//      dropped), sealed again;
//   3. a byte of the header or section table, the header checksum recomputed.
// 100 000 files by default (about 20 s in a release build); TOKAMAX_FUZZ_ITERATIONS
// sets the count.
#include "unit/export/ExportTestUtil.h"

#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/Mutate.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

using namespace tokamax;
using namespace export_test;
using json = nlohmann::json;

namespace {

std::string text(const std::vector<uint8_t> &b) { return {b.begin(), b.end()}; }
std::vector<uint8_t> bytes(const std::string &s) { return {s.begin(), s.end()}; }

void leaves(json &j, std::vector<json *> &out) {
  if (j.is_object() || j.is_array()) {
    out.push_back(&j);  // containers too: their keys can be dropped
    for (json &child : j)
      leaves(child, out);
    return;
  }
  out.push_back(&j);
}

/// One value of `j` replaced by a hostile one, or one key / element dropped.
void mutateJson(json &j, std::mt19937 &rng) {
  static const json hostile[] = {-1,
                                 0,
                                 1,
                                 2,
                                 31,
                                 int64_t(1) << 31,
                                 int64_t(1) << 32,
                                 int64_t(1) << 40,
                                 int64_t(1) << 62,
                                 std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<uint64_t>::max(),
                                 1e308,
                                 -0.5,
                                 "",
                                 "bf16",
                                 "sm_90a",
                                 nullptr,
                                 true,
                                 json::array(),
                                 json::object()};
  std::vector<json *> all;
  leaves(j, all);
  json &target = *all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)];
  if ((target.is_object() || target.is_array()) && !target.empty() && rng() % 2) {
    auto it = target.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, target.size() - 1)(rng));
    target.erase(it);
    return;
  }
  target = hostile[std::uniform_int_distribution<size_t>(0, std::size(hostile) - 1)(rng)];
}

/// Loads `file`: true when it loads (then it must print and re-serialise to itself),
/// false when refused with Error; anything else fails the test.
bool loadOrRefuse(const std::vector<uint8_t> &file, int iteration) {
  try {
    ExportedFunction e = ExportedFunction::load(file);
    if (e.bytes() != file)
      FAIL("iteration " << iteration << ": a loaded file does not re-serialise to its bytes");
    (void)e.describe();
    (void)e.kernels();
    return true;
  } catch (const Error &) {
    return false;
  } catch (const std::exception &ex) {
    FAIL("iteration " << iteration << " threw " << typeid(ex).name() << " (not tokamax::Error): " << ex.what());
  }
  return false;
}

} // namespace

TEST_CASE("mutated export files are loaded or refused with Error, never worse", "[fuzz][export]") {
  const std::vector<uint8_t> seed = read_bytes(fixture_path());
  REQUIRE(seed.size() > 256);
  REQUIRE_NOTHROW(ExportedFunction::load(seed));
  const std::vector<RawSection> sections = sections_of(seed);
  const size_t tableEnd = table_end(sections.size());
  const int n = test::iterations(100000);
  std::mt19937 rng(20261204);
  int loaded = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> file;
    switch (i % 4) {
    case 0:
      file = bytes(test::mutate(text(seed), rng));
      break;
    case 1: {
      std::vector<RawSection> edited = sections;
      const uint32_t kinds[] = {Manifest, FunctionJson, Plan, Plan};
      RawSection &s = edited[find_section(edited, kinds[rng() % 4])];
      s.payload = test::mutate(s.payload, rng);
      file = build_file(edited);
      break;
    }
    case 2: {
      std::vector<RawSection> edited = sections;
      RawSection &s = edited[find_section(edited, rng() % 4 ? Plan : Manifest)];
      json j = json::parse(s.payload);
      mutateJson(j, rng);
      s.payload = j.dump();
      file = build_file(edited);
      break;
    }
    default:
      file = seed;
      file[std::uniform_int_distribution<size_t>(8, tableEnd - 1)(rng)] = static_cast<uint8_t>(rng());
      reseal_header(file);
    }
    loaded += loadOrRefuse(file, i);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("export fuzz: %d mutated files, %d loaded, %d refused, %.1f s\n", n, loaded, n - loaded, seconds);
  CHECK(loaded < n);
}

TEST_CASE("every truncation of an export file is refused", "[fuzz][export]") {
  const std::vector<uint8_t> seed = read_bytes(fixture_path());
  REQUIRE(!seed.empty());
  for (size_t length = 0; length < seed.size(); length += length < 2048 ? 1 : 509) {
    std::vector<uint8_t> file(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(length));
    if (loadOrRefuse(file, static_cast<int>(length)))
      FAIL("a file truncated to " << length << " bytes loaded");
  }
}
