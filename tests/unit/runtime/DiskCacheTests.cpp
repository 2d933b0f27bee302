// Tests for the on-disk kernel cache (DiskCache, CacheKey) and the hashes.

#include <tokamax/jit/Jit.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <catch2/catch.hpp>

#include "common/ScopedState.h"
#include "common/TempDir.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tokamax;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tokamax-diskcache") {}
};

using test::EnvGuard;
using test::WarningCapture;

CacheKey make_key(const std::string& name = "matmul_128x128") {
  std::string ir = "tile.func @" + name + "(%a: !tile<128xf16>) {\n  tile.return\n}\n";
  return {name, ir, "sm_90a", "8.0", "opt=3;ftz=0", "0.1.0", "22.0.0", "nvJitLink 13.0"};
}

// A cubin with many zero bytes inside.
CacheEntry make_entry(const std::string& name = "matmul_128x128", size_t cubin_bytes = 4096,
                      uint8_t salt = 0) {
  CacheEntry e{name, ".version 8.0\n.target sm_90a\n.entry " + name + "() { ret; }\n", {},
               R"({"grid":[8,8,1],"block":[128,1,1],"shared_bytes":49152})"};
  for (size_t i = 0; i < cubin_bytes; ++i)
    e.cubin.push_back(static_cast<uint8_t>((i * 131 + salt) % 7 == 0 ? 0 : (i * 31 + salt)));
  return e;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

size_t count_temp_files(const fs::path& root) {
  size_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(root))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

void set_age(const fs::path& p, std::chrono::hours age) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - age);
}

} // namespace

TEST_CASE("sha256 and hash64", "[cache][hash]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const uint8_t abc[] = {'a', 'b', 'c'};
  CHECK(hex_encode(sha256(abc)) == sha256_hex("abc"));

  CHECK(hash64("hello") == hash64("hello"));
  CHECK(hash64("hello") != hash64("hello", 1));
  std::set<uint64_t> seen;
  std::string zeros, text = "x";
  for (int len = 0; len <= 80; ++len, zeros.push_back('\0'), text.push_back(char('a' + len % 26)))
    seen.insert({hash64(zeros), hash64(text)}); // no collisions across lengths
  CHECK(seen.size() == 162);
  CHECK(hash_combine(1, 2) != hash_combine(2, 1));
  CHECK(hash_combine(0, 0) != hash_combine(0, 1));
}

TEST_CASE("CacheKey text is canonical and reversible", "[cache]") {
  CacheKey key = make_key();
  std::string text = key.to_string();
  CHECK(text.starts_with("format=tokamax-cache-key/1\nkernel_name=matmul_128x128\n"
                         "target_arch=sm_90a\nptx_isa=8.0\n"));
  CHECK(text.ends_with("\nassembler=nvJitLink 13.0\ncanonical_ir=" + key.canonical_ir));
  CHECK(key.digest() == sha256_hex(text));
  REQUIRE(CacheKey::from_string(text) == key);

  // A field cannot forge another line.
  CacheKey tricky = key;
  tricky.kernel_name = "a\\n\ntarget_arch=sm_80";
  REQUIRE(CacheKey::from_string(tricky.to_string()) == tricky);
  CHECK(tricky.to_string().find("\ntarget_arch=sm_80") == std::string::npos);
  CHECK_FALSE(CacheKey::from_string("format=other/1\n"));
}

TEST_CASE("store then load round trip, absent keys miss", "[cache]") {
  TempDir dir;
  WarningCapture warnings;
  DiskCache cache(dir.path);
  CacheKey key = make_key();
  CacheEntry entry = make_entry();
  REQUIRE(std::count(entry.cubin.begin(), entry.cubin.end(), 0) > 0);
  CHECK_FALSE(cache.load(key));
  CHECK_FALSE(DiskCache(dir.path / "does" / "not" / "exist").load(key));

  cache.store(key, entry);
  fs::path p = cache.entry_path(key);
  CHECK(p == dir.path / "v1" / key.digest().substr(0, 2) / (key.digest() + ".tkc"));
  CHECK(fs::is_regular_file(p));
  CHECK(count_temp_files(dir.path) == 0);
  CHECK(cache.load(key) == entry);
  CHECK_FALSE(cache.load(make_key("absent")));

  // Storing again replaces the entry.
  CacheEntry other = make_entry("matmul_128x128", 101, 7);
  cache.store(key, other);
  CHECK(cache.load(key) == other);
  CHECK(cache.total_bytes() == fs::file_size(p));
  cache.store(make_key("empty"), CacheEntry{});
  CHECK(cache.load(make_key("empty")) == CacheEntry{});
  CHECK(warnings.count() == 0);
}

TEST_CASE("every key field is part of the digest", "[cache]") {
  TempDir dir;
  DiskCache cache(dir.path);
  CacheKey base = make_key();
  cache.store(base, make_entry());
#define FIELD(f) std::pair{#f, &CacheKey::f}
  std::vector fields = {FIELD(kernel_name),     FIELD(canonical_ir),    FIELD(target_arch),
                        FIELD(ptx_isa),         FIELD(compile_options), FIELD(tokamax_version),
                        FIELD(llvm_version),    FIELD(assembler)};
#undef FIELD
  std::set<std::string> digests = {base.digest()};
  for (auto& [name, member] : fields) {
    INFO("field " << name);
    CacheKey changed = base;
    changed.*member += "x";
    CHECK(changed.digest() != base.digest());
    digests.insert(changed.digest());
    CHECK_FALSE(cache.load(changed));
  }
  CHECK(digests.size() == fields.size() + 1);
  CHECK(cache.load(base));
}

TEST_CASE("corrupt entries are discarded and rebuilt", "[cache]") {
  TempDir dir;
  DiskCache cache(dir.path);
  CacheKey key = make_key();
  CacheEntry entry = make_entry();
  fs::path p = cache.entry_path(key);

  // Applies `damage` to a fresh entry, then checks discard, report and rebuild.
  auto expect_discarded = [&](const std::string& what,
                              const std::function<void(std::vector<uint8_t>&)>& damage) {
    INFO("damage: " << what);
    cache.store(key, entry);
    auto bytes = read_bytes(p);
    damage(bytes);
    write_bytes(p, bytes);
    WarningCapture warnings;
    CHECK_FALSE(cache.load(key));
    REQUIRE(warnings.count() == 1);
    CHECK(warnings.messages[0].starts_with("discarding corrupt cache entry " + p.string() + ": "));
    CHECK_FALSE(fs::exists(p));
    CHECK_FALSE(cache.load(key)); // now a plain miss, no second report
    cache.store(key, entry);
    CHECK(cache.load(key) == entry);
    CHECK(warnings.count() == 1);
  };

  size_t size = read_bytes((cache.store(key, entry), p)).size();
  expect_discarded("payload byte flipped", [](auto& b) { b[b.size() - 40] ^= 0x01; });
  expect_discarded("key text byte flipped", [](auto& b) { b[130] ^= 0x20; });
  expect_discarded("checksum byte flipped", [](auto& b) { b.back() ^= 0x80; });
  expect_discarded("magic overwritten", [](auto& b) { std::memcpy(b.data(), "NOTMAGIC", 8); });
  expect_discarded("wrong version", [](auto& b) { b[8] = 2; });
  expect_discarded("huge length", [](auto& b) { b[103] = 0xff; });
  expect_discarded("trailing garbage", [](auto& b) { b.push_back(0); });
  for (size_t len : {size_t(0), size_t(7), size_t(12), size_t(100), size_t(119), size_t(120),
                     size_t(152), size / 2, size - 33, size - 32, size - 1})
    expect_discarded("truncated to " + std::to_string(len), [len](auto& b) { b.resize(len); });

  // A valid entry of another key copied under this key's name.
  CacheKey other = make_key("other_kernel");
  cache.store(other, make_entry("other_kernel"));
  auto foreign = read_bytes(cache.entry_path(other));
  expect_discarded("foreign entry", [&](auto& b) { b = foreign; });
  CHECK(cache.load(other) == make_entry("other_kernel"));
}

TEST_CASE("default_directory precedence and switches", "[cache]") {
  EnvGuard a("TOKAMAX_CACHE_DIR", "/custom/cache"), b("XDG_CACHE_HOME", "/xdg"),
      c("HOME", "/home/someone");
  fs::path tmp = "/tmp/tokamax-" + std::to_string(::getuid());
  CHECK(DiskCache::default_directory() == "/custom/cache");
  {
    EnvGuard unset("TOKAMAX_CACHE_DIR", nullptr);
    CHECK(DiskCache::default_directory() == "/xdg/tokamax");
    {
      EnvGuard relative("XDG_CACHE_HOME", "relative/dir"); // ignored, as XDG says
      CHECK(DiskCache::default_directory() == "/home/someone/.cache/tokamax");
    }
    EnvGuard unset_xdg("XDG_CACHE_HOME", nullptr);
    CHECK(DiskCache::default_directory() == "/home/someone/.cache/tokamax");
    EnvGuard unset_home("HOME", nullptr);
    CHECK(DiskCache::default_directory() == tmp);
    EnvGuard empty("TOKAMAX_CACHE_DIR", "");
    CHECK(DiskCache::default_directory() == tmp);
  }
  CHECK(DiskCache::default_directory() == "/custom/cache");

  {
    EnvGuard d("TOKAMAX_CACHE_DISABLE", nullptr), m("TOKAMAX_CACHE_MUST_HIT", "0");
    CHECK_FALSE(DiskCache::disabled_by_environment());
    CHECK_FALSE(DiskCache::must_hit_by_environment());
  }
  EnvGuard d("TOKAMAX_CACHE_DISABLE", "1"), m("TOKAMAX_CACHE_MUST_HIT", "1");
  CHECK(DiskCache::disabled_by_environment());
  CHECK(DiskCache::must_hit_by_environment());
}

TEST_CASE("concurrent processes never see a torn entry", "[cache][concurrency]") {
  TempDir dir;
  CacheKey key = make_key("shared");
  CacheEntry entry = make_entry("shared", 256 * 1024, 3);
  fs::path done = dir.path / "writers-done";

  // Children report through exit codes only (Catch2 must not run in them):
  // 1 wrong entry, 2 exception, 3 a warning (which a torn read would cause).
  auto spawn = [&](const std::function<bool(DiskCache&)>& body) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        static bool warned = false;
        DiskCache::set_warning_handler([](const std::string&) { warned = true; });
        DiskCache cache(dir.path);
        ::_exit(!body(cache) ? 1 : warned ? 3 : 0);
      } catch (...) {
        ::_exit(2);
      }
    }
    return pid;
  };
  std::vector<pid_t> readers, writers;
  for (int i = 0; i < 4; ++i)
    readers.push_back(spawn([&](DiskCache& cache) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (!fs::exists(done) && std::chrono::steady_clock::now() < deadline)
        if (auto got = cache.load(key); got && !(*got == entry))
          return false;
      return cache.load(key) == entry; // all writers are done: must hit
    }));
  for (int i = 0; i < 8; ++i)
    writers.push_back(spawn([&](DiskCache& cache) {
      for (int n = 0; n < 50; ++n)
        cache.store(key, entry);
      return true;
    }));
  auto exit_code = [](pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  for (pid_t pid : writers)
    CHECK(exit_code(pid) == 0);
  std::ofstream(done).put('x');
  for (pid_t pid : readers)
    CHECK(exit_code(pid) == 0);
  CHECK(count_temp_files(dir.path) == 0);
  CHECK(DiskCache(dir.path).load(key) == entry);
}

TEST_CASE("concurrent threads share one cache", "[cache][concurrency]") {
  TempDir dir;
  WarningCapture warnings;
  DiskCache cache(dir.path);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::string name = "k" + std::to_string((t + i) % 5);
        cache.store(make_key(name), make_entry(name, 2048));
        failures += cache.load(make_key(name)) != make_entry(name, 2048);
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(warnings.count() == 0);
  CHECK(cache.list().size() == 5);
}

TEST_CASE("list and verify", "[cache][maintenance]") {
  TempDir dir;
  DiskCache cache(dir.path);
  for (const char* name : {"alpha", "beta", "gamma"})
    cache.store(make_key(name), make_entry(name));
  std::set<std::string> names;
  for (auto& e : cache.list()) {
    CHECK((e.valid && e.problem.empty() && e.target_arch == "sm_90a"));
    CHECK(e.bytes == fs::file_size(e.path));
    CHECK(e.path == cache.entry_path_for_digest(e.digest));
    names.insert(e.kernel_name);
  }
  CHECK(names == std::set<std::string>{"alpha", "beta", "gamma"});
  CHECK(cache.verify().empty());

  fs::path bad = cache.entry_path(make_key("beta"));
  auto bytes = read_bytes(bad);
  bytes[bytes.size() - 100] ^= 0xff; // payload damage: only the checksum sees it
  write_bytes(bad, bytes);
  CHECK(cache.list().size() == 3);
  auto report = cache.verify();
  REQUIRE(report.size() == 1);
  CHECK((report[0].path == bad && !report[0].valid && report[0].problem == "checksum mismatch"));
  CHECK(fs::exists(bad)); // not removed unless asked
  CHECK(cache.verify(/*remove_bad=*/true).size() == 1);
  CHECK_FALSE(fs::exists(bad));
  CHECK(cache.verify().empty());
  CHECK(cache.list().size() == 2);

  // A foreign copy is caught by list() from the header alone.
  fs::copy_file(cache.entry_path(make_key("alpha")), bad);
  auto listed = cache.list();
  auto it = std::find_if(listed.begin(), listed.end(), [&](auto& e) { return e.path == bad; });
  REQUIRE(it != listed.end());
  CHECK_FALSE(it->valid);
  CHECK_THAT(it->problem, Catch::Contains("foreign"));
}

TEST_CASE("prune removes least recently used first", "[cache][maintenance]") {
  TempDir dir;
  DiskCache cache(dir.path);
  std::vector<fs::path> paths;
  for (int i = 0; i < 5; ++i) {
    std::string name = "kernel" + std::to_string(i);
    cache.store(make_key(name), make_entry(name, 1000));
    paths.push_back(cache.entry_path(make_key(name)));
    set_age(paths.back(), std::chrono::hours(10 - i)); // kernel0 oldest
  }
  auto existing = [&] {
    std::string s;
    for (auto& p : paths)
      s += fs::exists(p) ? '1' : '0';
    return s;
  };
  uint64_t size = fs::file_size(paths[0]);
  for (auto& p : paths)
    REQUIRE(fs::file_size(p) == size);
  REQUIRE(cache.total_bytes() == 5 * size);

  // A hit refreshes kernel0, so kernel1 and kernel2 become the oldest.
  REQUIRE(cache.load(make_key("kernel0")));
  CHECK(fs::last_write_time(paths[0]) > fs::file_time_type::clock::now() - std::chrono::minutes(1));

  auto r = cache.prune(5 * size);
  CHECK((r.removed == 0 && r.bytes_kept == 5 * size));
  r = cache.prune(3 * size + size / 2);
  CHECK((r.removed == 2 && r.bytes_freed == 2 * size && r.bytes_kept == 3 * size));
  CHECK(existing() == "10011");
  CHECK(cache.total_bytes() == 3 * size);
  r = cache.prune(size);
  CHECK((r.removed == 2 && r.bytes_kept == size));
  CHECK(existing() == "10000"); // the refreshed one is the newest
  r = cache.prune(0);
  CHECK((r.removed == 1 && r.bytes_kept == 0 && cache.total_bytes() == 0));
}

TEST_CASE("prune removes stale temp files", "[cache][maintenance]") {
  TempDir dir;
  DiskCache cache(dir.path);
  CacheKey key = make_key();
  cache.store(key, make_entry());
  fs::path entry = cache.entry_path(key);
  fs::path stale = entry.parent_path() / (key.digest() + ".tkc.tmp.4242.00000000deadbeef");
  fs::path fresh = entry.parent_path() / (key.digest() + ".tkc.tmp.4243.00000000cafef00d");
  write_bytes(stale, std::vector<uint8_t>(500, 1));
  write_bytes(fresh, std::vector<uint8_t>(300, 1));
  set_age(stale, std::chrono::hours(2));
  CHECK(cache.list().size() == 1); // temp files are not entries
  CHECK(cache.total_bytes() == fs::file_size(entry));

  auto r = cache.prune(uint64_t(1) << 40);
  CHECK((r.removed == 1 && r.bytes_freed == 500));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh)); // may belong to a writer still running
  CHECK(cache.load(key) == make_entry());
}

TEST_CASE("a failed store throws and leaves no entry", "[cache]") {
  TempDir dir;
  fs::path not_a_dir = dir.path / "v1";  // where the entries' directories must go
  write_bytes(not_a_dir, {1, 2, 3});
  DiskCache cache(dir.path);
  CHECK_THROWS_AS(cache.store(make_key(), make_entry()), Error);
  CHECK_THROWS_WITH(cache.store(make_key(), make_entry()), Catch::Contains(not_a_dir.string()));
  CHECK_FALSE(cache.load(make_key()));
}

TEST_CASE("a cache root that is not a directory is refused: no store, no load, one warning", "[cache]") {
  TempDir dir;
  WarningCapture warnings;
  fs::path not_a_dir = dir.path / "file";
  write_bytes(not_a_dir, {1, 2, 3});
  DiskCache cache(not_a_dir);
  CHECK_FALSE(cache.usable());
  CHECK_NOTHROW(cache.store(make_key(), make_entry()));
  CHECK_FALSE(cache.load(make_key()));
  REQUIRE(warnings.count() == 1);
  CHECK_THAT(warnings.messages[0], Catch::Contains("not a directory"));
}

TEST_CASE("kernel keys compare whole: op, every field and its order", "[runtime]") {
  KernelKey a("op", {1, 2, 3}), b("op", {1, 2, 3});
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK_FALSE(a == KernelKey("op", {1, 3, 2}));
  CHECK_FALSE(a == KernelKey("op2", {1, 2, 3}));
  CHECK_FALSE(a == KernelKey("op", {1, 2}));
  // A forced hash collision still tells the keys apart.
  KernelKey c = KernelKey("op", {1, 2, 4}).with_hash(a.hash());
  CHECK(c.hash() == a.hash());
  CHECK_FALSE(c == a);
  // Doubles go in by their bit pattern: -0.0 and 0.0 are different specialisations.
  CHECK_FALSE(KernelKey("x").add(0.0) == KernelKey("x").add(-0.0));
  CHECK(KernelKey("x").add(int64_t(5)).fields().size() == 1);
}
