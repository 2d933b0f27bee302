// Faults the kernel cache must survive: a full disk and a read-only directory during a
// store (the JIT's store still succeeds, warns once, leaves no partial entry), and writers
// killed with SIGKILL at random points (whatever loads afterwards is one whole payload;
// their leftover temp files are never read as entries). Faults that change process state
// (a file size limit) or kill writers run in forked children; children never run Catch2
// assertions, they report through their exit code, a pipe or marker files.
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/ScopedState.h"
#include "common/TempDir.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tokamax;
namespace fs = std::filesystem;
using Catch::Contains;
using test::WarningCapture;

namespace {

// How the cache names a writer's temp file (CacheFile.h): "<digest>.tkc.tmp.<pid>.<random>".
constexpr std::string_view kTempMarker = ".tkc.tmp.";

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tokamax-faults") {}
};

/// An owned file descriptor.
class Fd {
public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_;
};

/// A forked child running `body` (exit code: its result; 101 if it threw). The destructor
/// kills and reaps a child still running, so a failed REQUIRE leaves no process behind.
class Child {
public:
  explicit Child(const std::function<int()> &body) {
    std::fflush(nullptr);  // else the child's exit could write buffered output twice
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      int code = 101;
      try {
        code = body();
      } catch (...) {
      }
      ::_exit(code);  // no atexit handlers, no Catch2 reporting
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill();
      (void)wait();
    }
  }
  Child(const Child &) = delete;
  Child &operator=(const Child &) = delete;

  void kill() const { ::kill(pid_, SIGKILL); }
  /// Reaps the child: its exit code, or 128 + the signal that ended it.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

private:
  pid_t pid_ = -1;
};

/// A child that reports text through a pipe (not a file: a file size limit must not cut
/// the report short).
struct Reporting {
  std::string report;
  int exit_code = -1;
  explicit Reporting(const std::function<int(FILE *)> &body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    Fd in(fds[0]), out(fds[1]);
    Child child([&] {
      in.reset();
      FILE *f = ::fdopen(out.get(), "w");
      int code = f ? body(f) : 102;
      if (f)
        std::fclose(f);
      return code;
    });
    out.reset();  // our copy: reading ends when the child's closes
    char buffer[4096];
    for (ssize_t n; (n = ::read(in.get(), buffer, sizeof buffer)) != 0;)
      if (n > 0)
        report.append(buffer, size_t(n));
      else if (errno != EINTR)
        break;
    exit_code = child.wait();
  }
};

CacheKey faultKey(int k) {
  return {fmt::format("fault_{}", k), fmt::format("tile.func @fault_{}() {{\n}}\n", k), "sm_90a", "8.0", "opt=3",
          "0.1.0",                     "22.0.0",                                         "nvJitLink 13.0"};
}

/// The payload writer `writer` stores for key `k` at its step `seq`: 8-64 KiB of bytes
/// determined by (k, writer, seq), which the PTX text names, so a loaded entry can be
/// checked to be exactly one written payload, not a mix of two.
CacheEntry payload(int k, uint64_t writer, uint64_t seq) {
  std::mt19937_64 rng((uint64_t(k) << 56) ^ (writer << 32) ^ seq);
  std::vector<uint8_t> cubin(8192 + rng() % (56 * 1024));
  for (uint8_t &b : cubin)
    b = static_cast<uint8_t>(rng());
  return {fmt::format("fault_{}", k), fmt::format("// key {} writer {} seq {}\n", k, writer, seq), std::move(cubin),
          fmt::format(R"({{"writer":{}}})", writer)};
}

bool isPayload(int k, const CacheEntry &e) {
  int key = -1;
  uint64_t writer = 0, seq = 0;
  return std::sscanf(e.ptx.c_str(), "// key %d writer %" SCNu64 " seq %" SCNu64, &key, &writer, &seq) == 3 &&
         key == k && e == payload(k, writer, seq);
}

/// The regular files under a cache root: published entries and writers' temp files.
struct CacheFiles {
  std::vector<fs::path> entries, temps, others;
  uint64_t entry_bytes = 0;
  explicit CacheFiles(const fs::path &root) {
    std::error_code ec;
    for (const auto &f : fs::recursive_directory_iterator(root, ec)) {
      if (!f.is_regular_file())
        continue;
      std::string name = f.path().filename().string();
      if (name.find(kTempMarker) != std::string::npos) {
        temps.push_back(f.path());
      } else if (name.ends_with(".tkc")) {
        entries.push_back(f.path());
        entry_bytes += f.file_size();
      } else {
        others.push_back(f.path());
      }
    }
  }
  size_t total() const { return entries.size() + temps.size() + others.size(); }
};

void touch(const fs::path &p) { Fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)); }

} // namespace

TEST_CASE("a full disk during a store: the JIT's store succeeds, warns once, leaves nothing", "[faults]") {
  TempDir dir;
  const fs::path root = dir.path / "cache";
  constexpr rlim_t kFileLimit = 4096;  // smaller than any payload (8 KiB or more): every store fails
  // The limit binds the whole process (root too), hence a child. SIGXFSZ ignored: the
  // write fails with EFBIG ("File too large") instead of killing the writer.
  Reporting child([&](FILE *out) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{kFileLimit, kFileLimit};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0)
      return 103;
    WarningCapture warnings;
    DiskCache cache(root);
    const bool first = cache.try_store(faultKey(0), payload(0, 0, 0));
    const bool second = cache.try_store(faultKey(1), payload(1, 0, 0));
    std::fprintf(out, "published %d %d\nwarnings %zu\n", first, second, warnings.count());
    for (const std::string &m : warnings.messages)
      std::fprintf(out, "warning: %s\n", m.c_str());
    try {
      cache.store(faultKey(2), payload(2, 0, 0));
      std::fprintf(out, "store did not throw\n");
    } catch (const Error &e) {
      std::fprintf(out, "store threw: %s\n", e.what());
    }
    return 0;
  });
  INFO(child.report);
  REQUIRE(child.exit_code == 0);
  CHECK_THAT(child.report, Contains("published 0 0\nwarnings 1\n"));
  CHECK_THAT(child.report, Contains("warning: not caching compiled kernels in " + root.string()));
  CHECK_THAT(child.report, Contains("File too large"));
  CHECK_THAT(child.report, Contains("store threw: cannot write cache file"));

  // Not a byte of the three failed stores is left, not even a temp file.
  CacheFiles files(root);
  CHECK(files.total() == 0);
  DiskCache cache(root);
  for (int k = 0; k < 3; ++k)
    CHECK_FALSE(cache.load(faultKey(k)));
  // Space again (no limit here): stores work.
  CHECK(cache.try_store(faultKey(0), payload(0, 0, 1)));
  CHECK(cache.load(faultKey(0)) == payload(0, 0, 1));
}

TEST_CASE("a read-only cache directory: stores warn once and write nothing, hits still load", "[faults]") {
  TempDir dir;
  const fs::path root = dir.path / "cache";
  DiskCache cache(root);
  cache.store(faultKey(0), payload(0, 0, 0));

  // Every directory of the cache 0500 for the scope, 0700 again after (so TempDir can
  // remove it).
  struct ReadOnlyTree {
    std::vector<fs::path> dirs;
    explicit ReadOnlyTree(const fs::path &top) : dirs{top} {
      for (const auto &e : fs::recursive_directory_iterator(top))
        if (e.is_directory())
          dirs.push_back(e.path());
      for (const fs::path &d : dirs)
        REQUIRE(::chmod(d.c_str(), 0500) == 0);
    }
    ~ReadOnlyTree() {
      for (const fs::path &d : dirs)
        ::chmod(d.c_str(), 0700);
    }
  } readOnly(root);
  if (::access(root.c_str(), W_OK) == 0) {
    WARN("permission checks are bypassed (euid " << ::geteuid()
                                                 << ", e.g. root): a 0500 directory stays writable; "
                                                    "read-only cache part skipped");
    return;
  }

  WarningCapture warnings;
  // Key 0's shard exists (the temp file cannot be created) and key 1's likely not (the
  // shard cannot be made): both fail the same way, reported once.
  CHECK_FALSE(cache.try_store(faultKey(0), payload(0, 0, 1)));
  CHECK_FALSE(cache.try_store(faultKey(1), payload(1, 0, 0)));
  CHECK(warnings.count() == 1);
  CHECK(warnings.any("Permission denied"));
  CHECK_THROWS_WITH(cache.store(faultKey(1), payload(1, 0, 0)), Contains("Permission denied"));

  CHECK(cache.load(faultKey(0)) == payload(0, 0, 0));  // a read-only cache still serves hits
  CHECK_FALSE(cache.load(faultKey(1)));
  CacheFiles files(root);
  CHECK(files.entries.size() == 1);
  CHECK(files.total() == 1);
  CHECK(cache.verify().empty());
}

TEST_CASE("writers killed at random points never leave a readable partial entry", "[faults]") {
  constexpr int kKeys = 6, kWriters = 8, kRounds = 8;
  TempDir dir, markers;
  const fs::path root = dir.path / "cache";
  std::mt19937 rng(0x5eed);  // seeded: a failing schedule replays
  auto sleepMs = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };

  // Stores random keys and checks random loads until killed. A torn or foreign entry
  // (which load() would report through a warning and delete) leaves a marker file.
  auto writer = [&](uint64_t id, uint64_t seed) {
    DiskCache::set_warning_handler([&](const std::string &) { touch(markers.path / fmt::format("warned-{}", id)); });
    DiskCache cache(root);
    std::mt19937_64 choose(seed);
    for (uint64_t seq = 0;; ++seq) {
      int k = int(choose() % kKeys);
      cache.store(faultKey(k), payload(k, id, seq));
      int r = int(choose() % kKeys);
      if (auto got = cache.load(faultKey(r)); got && !isPayload(r, *got))
        touch(markers.path / fmt::format("torn-{}", id));
    }
    return 0;
  };

  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Child>> writers;
    for (int w = 0; w < kWriters; ++w) {
      uint64_t id = uint64_t(round * kWriters + w), seed = rng();
      writers.push_back(std::make_unique<Child>([&, id, seed] { return writer(id, seed); }));
    }
    // The first entry published before the first kill, so the checks below are never vacuous.
    for (int waited = 0; round == 0 && CacheFiles(root).entries.empty() && waited < 5000; ++waited)
      sleepMs(1);
    sleepMs(2 + int(rng() % 30));
    std::shuffle(writers.begin(), writers.end(), rng);
    for (auto &w : writers) {
      w->kill();
      sleepMs(int(rng() % 3));
    }
    for (auto &w : writers)
      CHECK(w->wait() == 128 + SIGKILL);  // anything else: a store threw (exit 101)
  }

  CacheFiles files(root);
  INFO(files.entries.size() << " entries and " << files.temps.size() << " temp files left behind");
  CHECK(fs::is_empty(markers.path));  // no writer ever loaded a torn entry or saw a warning
  CHECK(files.others.empty());
  REQUIRE_FALSE(files.entries.empty());

  WarningCapture warnings;
  DiskCache cache(root);
  for (const DiskCache::EntryInfo &bad : cache.verify())
    FAIL_CHECK("bad entry " << bad.path << ": " << bad.problem);
  // Temp files are not entries: not listed, not counted, never loaded.
  CHECK(cache.list().size() == files.entries.size());
  CHECK(cache.total_bytes() == files.entry_bytes);
  int hits = 0;
  for (int k = 0; k < kKeys; ++k)
    if (auto got = cache.load(faultKey(k))) {
      ++hits;
      CHECK(isPayload(k, *got));
    }
  CHECK(hits == int(files.entries.size()));
  // What a writer killed between its fsync and its rename leaves: a complete, valid temp
  // file. For a key without an entry it must still be a miss.
  {
    TempDir other;
    DiskCache elsewhere(other.path);
    elsewhere.store(faultKey(kKeys), payload(kKeys, 0, 0));
    fs::path planted = cache.entry_path(faultKey(kKeys));
    planted += ".tmp.1.0000000000000001";
    fs::create_directories(planted.parent_path());
    fs::copy_file(elsewhere.entry_path(faultKey(kKeys)), planted);
    CHECK_FALSE(cache.load(faultKey(kKeys)));
    CHECK(cache.list().size() == files.entries.size());
  }
  CHECK(warnings.count() == 0);

  // The cache works on: every key stores and loads.
  for (int k = 0; k <= kKeys; ++k) {
    cache.store(faultKey(k), payload(k, 999, 0));
    CHECK(cache.load(faultKey(k)) == payload(k, 999, 0));
  }
  CHECK(cache.verify().empty());
}
