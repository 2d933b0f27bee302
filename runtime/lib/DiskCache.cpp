//===- DiskCache.cpp - Persistent cache of compiled kernels ---------------===//
//
// Correctness under concurrency rests on two rules: entries only appear by
// rename() of a fully written and fsync'ed temp file, and a reader trusts
// nothing it has not checksummed. No locks are needed.
//
//===----------------------------------------------------------------------===//

#include <tokamax/runtime/DiskCache.h>

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/PrivateFiles.h>

#include "CacheFile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace tokamax {

namespace {

// A temp file this old belongs to a writer that died.
constexpr auto kStaleTempAge = std::chrono::hours(1);
// Hits refresh the mtime only if it is older than this, to spare metadata writes.
constexpr time_t kTouchGranularitySeconds = 60;

bool env_truthy(const char* name) {
  const char* v = std::getenv(name);
  if (!v)
    return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

const char* env_nonempty(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// ---- Warnings: one per path until that path is stored again ----------------

struct WarningState {
  std::mutex mutex;
  std::function<void(const std::string&)> handler;
  std::set<std::string> reported;
};

WarningState& warnings() {
  static auto* state = new WarningState; // leaked: usable during static destruction
  return *state;
}

// `what` is usually a path (implicitly its string).
void warn_once(const std::string& what, const std::string& message) {
  std::function<void(const std::string&)> handler;
  {
    auto& w = warnings();
    std::lock_guard lock(w.mutex);
    if (!w.reported.insert(what).second)
      return;
    handler = w.handler;
  }
  // Called outside the lock so a handler may use the cache itself.
  if (handler)
    handler(message);
  else
    std::fprintf(stderr, "tokamax: warning: %s\n", message.c_str());
}

void forget_reported(const std::string& what) {
  auto& w = warnings();
  std::lock_guard lock(w.mutex);
  w.reported.erase(what);
}

// ---- POSIX helpers ----------------------------------------------------------

int write_all(int fd, const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}

bool is_miss_errno(int err) {
  return err == ENOENT || err == ENOTDIR || err == EBUSY || err == ESTALE;
}

uint64_t random_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t r = 0;
  if (::getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
    r = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return hash_combine(r, counter.fetch_add(1));
}

// ---- Scanning -----------------------------------------------------------------

enum class FileKind { Entry, Temp };

struct ScannedFile {
  fs::path path;
  FileKind kind;
  uint64_t bytes;
  fs::file_time_type mtime;
};

// Entry and temp files under <root>/v1/*/, sorted by path. Files vanish while
// other processes prune, so every error just skips the file.
std::vector<ScannedFile> scan(const fs::path& root) {
  std::vector<ScannedFile> files;
  std::error_code ec;
  for (fs::directory_iterator shard(root / "v1", ec), end; !ec && shard != end;
       shard.increment(ec)) {
    if (!shard->is_directory(ec))
      continue;
    std::error_code ec2;
    for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      std::string name = it->path().filename().string();
      FileKind kind;
      if (name.find(cache_file::kTempMarker) != std::string::npos)
        kind = FileKind::Temp;
      else if (name.ends_with(cache_file::kExtension))
        kind = FileKind::Entry;
      else
        continue;
      std::error_code ec3;
      if (!it->is_regular_file(ec3))
        continue;
      uint64_t bytes = it->file_size(ec3);
      if (ec3)
        continue;
      auto mtime = it->last_write_time(ec3);
      if (ec3)
        continue;
      files.push_back({it->path(), kind, bytes, mtime});
    }
  }
  std::sort(files.begin(), files.end(),
            [](const ScannedFile& a, const ScannedFile& b) { return a.path < b.path; });
  return files;
}

} // namespace

// ---- Environment ------------------------------------------------------------------

fs::path DiskCache::default_directory() {
  if (const char* dir = env_nonempty("TOKAMAX_CACHE_DIR"))
    return fs::path(dir);
  if (const char* xdg = env_nonempty("XDG_CACHE_HOME"); xdg && xdg[0] == '/')
    return fs::path(xdg) / "tokamax";
  if (const char* home = env_nonempty("HOME"))
    return fs::path(home) / ".cache" / "tokamax";
  // /tmp/tokamax-<uid> is a name anyone can take first: used only while it is missing
  // (then made 0700) or this user's private directory; else a fresh mkdtemp directory,
  // one per process.
  fs::path shared = fmt::format("/tmp/tokamax-{}", ::geteuid());
  std::error_code ec;
  if (!fs::exists(shared, ec) || private_files::why_untrusted(shared).empty())
    return shared;
  static const fs::path fallback = private_files::make_private_temp_directory(
      fmt::format("tokamax-{}-", ::geteuid()));
  return fallback.empty() ? shared : fallback;  // (refused on use, with the reason)
}

bool DiskCache::disabled_by_environment() { return env_truthy("TOKAMAX_CACHE_DISABLE"); }

bool DiskCache::must_hit_by_environment() { return env_truthy("TOKAMAX_CACHE_MUST_HIT"); }

void DiskCache::set_warning_handler(std::function<void(const std::string&)> handler) {
  auto& w = warnings();
  std::lock_guard lock(w.mutex);
  w.handler = std::move(handler);
}

// ---- Entries ----------------------------------------------------------------------

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {}

bool DiskCache::usable() const {
  int trust = trust_.load(std::memory_order_acquire);
  if (trust != 0)
    return trust > 0;
  std::error_code ec;
  if (!fs::exists(root_, ec))
    return true;  // nothing to read; store() creates it private
  std::string why = private_files::why_untrusted(root_);
  trust_.store(why.empty() ? 1 : -1, std::memory_order_release);
  if (!why.empty())
    warn_once(root_, fmt::format("not using the kernel cache {}: {}; running without a disk cache",
                                 root_.string(), why));
  return why.empty();
}

fs::path DiskCache::entry_path(const CacheKey& key) const {
  return entry_path_for_digest(key.digest());
}

fs::path DiskCache::entry_path_for_digest(std::string_view digest) const {
  std::string file(digest);
  file += cache_file::kExtension;
  return root_ / "v1" / std::string(digest.substr(0, 2)) / file;
}

std::optional<CacheEntry> DiskCache::load(const CacheKey& key) {
  if (!usable())
    return std::nullopt;
  std::string key_text = key.to_string();
  std::string digest = sha256_hex(key_text);
  fs::path path = entry_path_for_digest(digest);

  // A regular file of this user's, reached without a symbolic link (else refused).
  std::string refused;
  cache_file::Fd fd(private_files::open_private_file(path, refused));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    int err = errno;
    if (!refused.empty())
      warn_once(path, fmt::format("not loading cache entry {}: {}", path.string(), refused));
    else if (!is_miss_errno(err))
      warn_once(path, fmt::format("cannot read cache entry {}: {}", path.string(),
                                  std::strerror(err)));
    return std::nullopt;
  }
  auto discard = [&](const std::string& reason) -> std::optional<CacheEntry> {
    warn_once(path,
              fmt::format("discarding corrupt cache entry {}: {}", path.string(), reason));
    cache_file::unlink_if_same(path, st);
    return std::nullopt;
  };
  if (static_cast<uint64_t>(st.st_size) > cache_file::kMaxEntryBytes)
    return discard(fmt::format("implausibly large ({} bytes)", st.st_size));

  std::vector<uint8_t> bytes;
  if (int err = cache_file::read_at(fd.get(), 0, static_cast<uint64_t>(st.st_size), bytes)) {
    // An I/O error says nothing about the content: report, keep the file.
    if (!is_miss_errno(err))
      warn_once(path, fmt::format("cannot read cache entry {}: {}", path.string(),
                                  std::strerror(err)));
    return std::nullopt;
  }
  cache_file::Decoded decoded;
  if (auto problem = cache_file::decode(bytes, decoded); !problem.empty())
    return discard(problem);
  if (decoded.header.digest != digest)
    return discard(fmt::format("foreign entry: stored for key {}", decoded.header.digest));
  if (decoded.key_text != key_text)
    return discard("stored key differs from the requested key (digest collision)");

  // LRU bookkeeping for prune(); best effort (read-only caches stay usable).
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - st.st_mtim.tv_sec >= kTouchGranularitySeconds)
    ::futimens(fd.get(), nullptr);
  return std::move(decoded.entry);
}

void DiskCache::store(const CacheKey& key, const CacheEntry& entry) {
  std::string key_text = key.to_string();
  std::string digest = sha256_hex(key_text);
  std::vector<uint8_t> bytes = cache_file::encode(digest, key_text, entry);
  fs::path final_path = entry_path_for_digest(digest);
  fs::path dir = final_path.parent_path();

  if (!usable())
    return;
  std::string why = private_files::make_private_directory(dir);
  if (!usable())  // the root exists now: refused if another user made it first
    return;
  if (!why.empty())
    throw Error(fmt::format("cannot use cache directory {}: {}", dir.string(), why));

  // Unique per process and call, so concurrent writers never share a temp file.
  fs::path tmp;
  cache_file::Fd fd(-1);
  int err = 0;
  for (int attempt = 0; attempt < 8 && !fd; ++attempt) {
    tmp = dir / fmt::format("{}{}{}.{:016x}", digest, cache_file::kTempMarker, ::getpid(),
                            random_suffix());
    fd = cache_file::Fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    err = fd ? 0 : errno;
    if (err != EEXIST)
      break;
  }
  if (!fd)
    throw Error(fmt::format("cannot create cache file {}: {}", tmp.string(), std::strerror(err)));

  auto fail = [&](const char* what, int error) {
    fd.reset();
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot {} cache file {}: {}", what, tmp.string(),
                            std::strerror(error)));
  };
  if (int e = write_all(fd.get(), bytes))
    fail("write", e);
  // Data must be durable before the rename makes it visible, or a crash could
  // publish an entry whose blocks never reached the disk.
  if (::fsync(fd.get()) != 0)
    fail("fsync", errno);
  if (int e = fd.reset())
    fail("close", e);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot rename cache file {} to {}: {}", tmp.string(),
                            final_path.string(), std::strerror(e)));
  }
  forget_reported(final_path);
  // Persist the rename; best effort: the entry is already published and valid.
  if (cache_file::Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); dir_fd)
    ::fsync(dir_fd.get());
}

bool DiskCache::try_store(const CacheKey& key, const CacheEntry& entry) {
  if (!usable())
    return false;
  try {
    store(key, entry);
    return true;
  } catch (const Error& e) {
    // A full or read-only disk fails every store alike: one warning per root, not one
    // per kernel.
    warn_once("store failed: " + root_.string(),
              fmt::format("not caching compiled kernels in {} (further failures are not "
                          "reported): {}",
                          root_.string(), e.what()));
    return false;
  }
}

// ---- Maintenance ------------------------------------------------------------------

std::vector<DiskCache::EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  for (const ScannedFile& file : scan(root_))
    if (file.kind == FileKind::Entry)
      out.push_back(cache_file::inspect(file.path, file.bytes, file.mtime, /*full=*/false, nullptr));
  return out;
}

std::vector<DiskCache::EntryInfo> DiskCache::verify(bool remove_bad) {
  std::vector<EntryInfo> bad;
  for (const ScannedFile& file : scan(root_)) {
    if (file.kind != FileKind::Entry)
      continue;
    struct stat examined {};
    EntryInfo info = cache_file::inspect(file.path, file.bytes, file.mtime, /*full=*/true, &examined);
    if (info.valid)
      continue;
    if (remove_bad && examined.st_ino != 0)
      cache_file::unlink_if_same(file.path, examined);
    bad.push_back(std::move(info));
  }
  return bad;
}

DiskCache::PruneResult DiskCache::prune(uint64_t max_total_bytes) {
  PruneResult result;
  auto now = fs::file_time_type::clock::now();
  std::vector<ScannedFile> entries;
  for (ScannedFile& file : scan(root_)) {
    if (file.kind == FileKind::Entry) {
      entries.push_back(std::move(file));
    } else if (now - file.mtime > kStaleTempAge && ::unlink(file.path.c_str()) == 0) {
      ++result.removed;
      result.bytes_freed += file.bytes;
    }
  }
  // Oldest first; ties broken by path so the order is deterministic.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ScannedFile& a, const ScannedFile& b) { return a.mtime < b.mtime; });
  uint64_t total = 0;
  for (const ScannedFile& e : entries)
    total += e.bytes;
  for (const ScannedFile& e : entries) {
    if (total <= max_total_bytes)
      break;
    if (::unlink(e.path.c_str()) == 0) {
      ++result.removed;
      result.bytes_freed += e.bytes;
      total -= e.bytes;
    } else if (errno == ENOENT) {
      total -= e.bytes; // someone else pruned it
    }
  }
  result.bytes_kept = total;
  return result;
}

uint64_t DiskCache::total_bytes() const {
  uint64_t total = 0;
  for (const ScannedFile& file : scan(root_))
    if (file.kind == FileKind::Entry)
      total += file.bytes;
  return total;
}

} // namespace tokamax
