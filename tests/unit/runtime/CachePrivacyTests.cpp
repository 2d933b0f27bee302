// The kernel and autotuning caches are private: what they create is 0700 (entries 0600),
// a root another user owns or may write to is never read (even when it holds entries with
// valid checksums), entries are not read through symbolic links or when another user owns
// them, and the /tmp fallback is never a directory another user made first (the autotuning
// cache's privacy is tested in AutotuneTests.cpp). Ownership
// tests need root (to hand files to another uid); elsewhere they are skipped with a
// warning.
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/PrivateFiles.h>

#include <catch2/catch.hpp>

#include "common/ScopedState.h"
#include "common/TempDir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using namespace tokamax;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kOtherUid = 4242;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tokamax-privacy") {}
};

using test::EnvGuard;
using test::WarningCapture;

CacheKey key() {
  return {"privacy", "tile.func @privacy() {\n}\n", "sm_90a", "8.0", "opt=3", "0.1.0", "22.0.0", "nvJitLink 13.0"};
}

CacheEntry entry() { return {"privacy", ".version 8.0\n", {1, 2, 3, 4, 5}, R"({"grid":[1,1,1]})"}; }

mode_t modeOf(const fs::path &p) {
  struct stat st;
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// Hands `p` (and everything under it) to another uid; false when this process cannot.
bool giveAway(const fs::path &p) {
  if (::geteuid() != 0)
    return false;
  if (::lchown(p.c_str(), kOtherUid, kOtherUid) != 0)
    return false;
  std::error_code ec;
  if (fs::is_directory(p, ec) && !fs::is_symlink(p, ec))
    for (const auto &e : fs::recursive_directory_iterator(p, ec))
      if (::lchown(e.path().c_str(), kOtherUid, kOtherUid) != 0)
        return false;
  return true;
}

} // namespace

TEST_CASE("cache directories are created 0700 and entries 0600", "[cache][privacy]") {
  TempDir dir;
  ::umask(022);
  fs::path root = dir.path / "a" / "b";
  DiskCache cache(root);
  cache.store(key(), entry());
  fs::path file = cache.entry_path(key());
  for (const fs::path &d : {dir.path / "a", root, root / "v1", file.parent_path()}) {
    INFO(d.string());
    CHECK(modeOf(d) == 0700);
  }
  CHECK(modeOf(file) == 0600);
  CHECK(DiskCache(root).load(key()) == entry());
}

TEST_CASE("a world- or group-writable cache directory is refused and never read", "[cache][privacy]") {
  TempDir dir;
  for (mode_t mode : {0777, 0770, 0720}) {
    INFO("mode " << std::oct << mode);
    fs::path root = dir.path / std::to_string(mode);
    DiskCache(root).store(key(), entry());  // a valid entry, then the directory opens up
    REQUIRE(::chmod(root.c_str(), mode) == 0);
    WarningCapture warnings;
    DiskCache cache(root);
    CHECK_FALSE(cache.usable());
    CHECK_FALSE(cache.load(key()));
    CHECK_NOTHROW(cache.store(key(), entry()));  // nothing written, no error
    CHECK(warnings.any("writable by its group or by others"));
    REQUIRE(::chmod(root.c_str(), 0700) == 0);
    CHECK(DiskCache(root).load(key()) == entry());  // private again: usable
  }
}

TEST_CASE("a symlinked cache entry is not followed", "[cache][privacy]") {
  TempDir planted, dir;
  DiskCache(planted.path).store(key(), entry());
  DiskCache cache(dir.path);
  fs::path path = cache.entry_path(key());
  REQUIRE(private_files::make_private_directory(path.parent_path()).empty());
  fs::create_symlink(DiskCache(planted.path).entry_path(key()), path);
  WarningCapture warnings;
  CHECK_FALSE(cache.load(key()));
  CHECK(warnings.any("symbolic link"));
}

TEST_CASE("a cache another user owns is never read, even with valid entries", "[cache][privacy]") {
  TempDir dir;
  DiskCache(dir.path).store(key(), entry());
  fs::path entryPath = DiskCache(dir.path).entry_path(key());
  SECTION("the entry file alone") {
    if (!giveAway(entryPath)) {
      WARN("not root: cannot hand a file to another uid; skipped");
      return;
    }
    WarningCapture warnings;
    CHECK_FALSE(DiskCache(dir.path).load(key()));
    CHECK(warnings.any("owned by uid 4242"));
  }
  SECTION("the whole directory") {
    if (!giveAway(dir.path)) {
      WARN("not root: cannot hand a directory to another uid; skipped");
      return;
    }
    WarningCapture warnings;
    DiskCache cache(dir.path);
    CHECK_FALSE(cache.usable());
    CHECK_FALSE(cache.load(key()));
    CHECK(warnings.any("owned by uid 4242"));
  }
}

TEST_CASE("the /tmp fallback is never a directory another user made first", "[cache][privacy]") {
  EnvGuard a("TOKAMAX_CACHE_DIR", nullptr), b("XDG_CACHE_HOME", nullptr), c("HOME", nullptr);
  const fs::path shared = "/tmp/tokamax-" + std::to_string(::geteuid());
  std::error_code ec;
  if (fs::exists(shared, ec)) {
    // Someone's (ours, from an earlier run): it is used only when private.
    CHECK((DiskCache::default_directory() == shared) == private_files::why_untrusted(shared).empty());
    return;
  }
  CHECK(DiskCache::default_directory() == shared);  // free: it will be made 0700
  REQUIRE(::mkdir(shared.c_str(), 0755) == 0);
  if (!giveAway(shared)) {
    WARN("not root: cannot plant another uid's /tmp directory; skipped");
    fs::remove(shared, ec);
    return;
  }
  fs::path chosen = DiskCache::default_directory();
  fs::remove(shared, ec);
  CHECK(chosen != shared);
  CHECK(chosen.string().rfind("/tmp/tokamax-", 0) == 0);
  CHECK(private_files::why_untrusted(chosen).empty());
  fs::remove_all(chosen, ec);
}
