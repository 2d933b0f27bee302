//===- AutotuneCache.cpp - The per-device autotuning cache ----------------===//
//
// One JSON file per device kind, <kernel cache dir>/autotune/<device key>.json, in the
// AutotuningResult format. Writers take an flock on a sibling .lock file, re-read the
// file, merge their entries in and publish the result by rename of a fsync'ed temp
// file, so readers see the old or the new file, never a partial one, and concurrent
// writers lose nothing. Readers keep one parsed copy per device for the process.
//
// The config provider that consults it is a process-wide one, added when libtokamax
// loads, beneath every thread's scopes: resolution is explicit config -> the calling
// thread's scopes -> this cache -> heuristic. It tunes for the device whose primary
// context is current on the calling thread, and answers nothing when there is none
// (e.g. interpreter calls on a machine without a GPU).
//
//===----------------------------------------------------------------------===//
#include <tokamax/autotune/Autotune.h>

#include <tokamax/ops/CallCache.h>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/PrivateFiles.h>
#include <tokamax/runtime/detail/DriverApi.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace tokamax {

namespace fs = std::filesystem;

namespace {

struct CacheState {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const AutotuningResult>> by_device;  // by key
  std::mutex reported_mutex;  // guards `reported` (warnings come with or without `mutex`)
  std::set<std::string> reported;  // files already warned about
  std::map<CUcontext, std::optional<DeviceInfo>> contexts;
  std::atomic<uint64_t> generation{1};
};

CacheState& state() {
  static CacheState* s = new CacheState;  // leaked: providers may run during exit
  return *s;
}

void warn_once(const std::string& path, const std::string& message) {
  CacheState& s = state();
  std::lock_guard lock(s.reported_mutex);
  if (!s.reported.insert(path).second)
    return;
  std::fprintf(stderr, "tokamax: warning: %s\n", message.c_str());
}

// The directories a cache file lives in, each of which must be private: the kernel
// cache's root and its autotune/ folder.
std::array<fs::path, 2> cacheDirectories(const fs::path& path) {
  return {path.parent_path().parent_path(), path.parent_path()};
}

// The cache file's text, read only from a private directory (PrivateFiles.h), never
// through a symbolic link and only when this user owns it; nullopt on a miss or a
// refusal (warned once).
std::optional<std::string> read_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path.parent_path(), ec))
    return std::nullopt;
  for (const fs::path& dir : cacheDirectories(path))
    if (std::string why = private_files::why_untrusted(dir); !why.empty()) {
      warn_once(path.string(), fmt::format("ignoring the autotuning cache {}: {}", path.string(), why));
      return std::nullopt;
    }
  std::string why;
  int fd = private_files::open_private_file(path, why);
  if (fd < 0) {
    if (!why.empty())
      warn_once(path.string(), fmt::format("ignoring the autotuning cache {}: {}", path.string(), why));
    return std::nullopt;
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

// Parses a cache file; nullopt (with a reason) when it is unusable for `device`.
std::optional<AutotuningResult> parse_cache_file(const std::string& text, const DeviceInfo& device,
                                                 std::string& problem) {
  try {
    AutotuningResult r = AutotuningResult::loads(text);
    if (r.device().key() != device.key()) {
      problem = fmt::format("it holds results for device {}", r.device().key());
      return std::nullopt;
    }
    return r;
  } catch (const Error& e) {
    problem = e.what();
    return std::nullopt;
  }
}

void write_atomically(const fs::path& path, const std::string& text) {
  std::random_device rd;
  const fs::path tmp = path.parent_path() /
                       fmt::format("{}.tmp.{}.{:08x}", path.filename().string(), ::getpid(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw Error(fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno)));
  auto fail = [&](const char* what) {
    const int e = errno;
    if (fd >= 0)
      ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot {} {}: {}", what, tmp.string(), std::strerror(e)));
  };
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("write");
    done += size_t(n);
  }
  if (::fsync(fd) != 0)
    fail("fsync");
  if (::close(fd) != 0) {
    fd = -1;
    fail("close");
  }
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    fail("rename");
}

// Holds an exclusive flock on <path>.lock for the scope (best effort: a file system
// without locks still gets atomic, if possibly lossy, updates).
struct FileLock {
  int fd = -1;
  explicit FileLock(const fs::path& path) {
    fd = ::open((path.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0)
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~FileLock() {
    if (fd >= 0)
      ::close(fd);  // releases the lock
  }
};

// The device whose primary context is current on this thread, if any.
std::optional<DeviceInfo> current_device_info() {
  if (!driver_available())
    return std::nullopt;
  const detail::DriverApi& api = detail::driver();
  CUcontext current = nullptr;
  if (api.cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current)
    return std::nullopt;
  CacheState& s = state();
  {
    std::lock_guard lock(s.mutex);
    if (auto it = s.contexts.find(current); it != s.contexts.end())
      return it->second;
  }
  std::optional<DeviceInfo> found;
  try {
    for (int i = 0, n = Device::count(); i < n && !found; ++i)
      if (Device& d = Device::get(i); d.context() == current)
        found = DeviceInfo::of(d);
  } catch (const Error&) {
  }
  api.cuCtxSetCurrent(current);  // Device::get of a new device makes its context current
  std::lock_guard lock(s.mutex);
  s.contexts[current] = found;
  return found;
}

std::optional<Config> cache_provider(const BoundArgs& args, const std::string& implementation) {
  // Per thread: the last context's cached result, refreshed when the cache changes.
  thread_local CUcontext last_context = nullptr;
  thread_local uint64_t last_generation = 0;
  thread_local std::shared_ptr<const AutotuningResult> last;
  try {
    if (!driver_available())
      return std::nullopt;
    CUcontext current = nullptr;
    if (detail::driver().cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current)
      return std::nullopt;
    const uint64_t generation = state().generation.load(std::memory_order_acquire);
    if (current != last_context || generation != last_generation || !last) {
      std::optional<DeviceInfo> device = current_device_info();
      if (!device)
        return std::nullopt;
      last = autotuning_cache(*device);
      last_context = current;
      last_generation = generation;
    }
    return last->lookup(args, implementation);
  } catch (...) {
    return std::nullopt;  // a cache problem never breaks a call: the heuristic serves it
  }
}

// Beneath every thread's scopes: added while libtokamax loads.
[[maybe_unused]] const bool kCacheProviderAdded = (add_process_config_provider(cache_provider), true);

} // namespace

fs::path autotuning_cache_path(const DeviceInfo& device) {
  return DiskCache::default_directory() / "autotune" / (device.key() + ".json");
}

std::shared_ptr<const AutotuningResult> autotuning_cache(const DeviceInfo& device) {
  CacheState& s = state();
  const std::string key = device.key();
  std::lock_guard lock(s.mutex);
  if (auto it = s.by_device.find(key); it != s.by_device.end())
    return it->second;
  auto result = std::make_shared<AutotuningResult>(device);
  if (!DiskCache::disabled_by_environment()) {
    const fs::path path = autotuning_cache_path(device);
    if (std::optional<std::string> text = read_file(path)) {
      std::string problem;
      if (auto parsed = parse_cache_file(*text, device, problem))
        *result = std::move(*parsed);
      else
        warn_once(path.string(), fmt::format("ignoring the autotuning cache {}: {}",
                                             path.string(), problem));
    }
  }
  s.by_device[key] = result;
  return result;
}

void update_autotuning_cache(const AutotuningResult& result) {
  if (result.device().empty())
    throw Error("update_autotuning_cache: the result names no device");
  if (DiskCache::disabled_by_environment())
    return;
  const fs::path path = autotuning_cache_path(result.device());
  // Private directories only: another user's (or a world-writable) one is refused.
  for (const fs::path& dir : cacheDirectories(path))
    if (std::string why = private_files::make_private_directory(dir); !why.empty()) {
      warn_once(path.string(), fmt::format("not writing the autotuning cache {}: {}", path.string(), why));
      return;
    }

  auto merged = std::make_shared<AutotuningResult>(result.device());
  {
    FileLock lock(path);
    if (std::optional<std::string> text = read_file(path)) {
      std::string problem;
      if (auto existing = parse_cache_file(*text, result.device(), problem))
        merged->merge(*existing);
      else
        std::fprintf(stderr, "tokamax: warning: replacing the autotuning cache %s: %s\n",
                     path.c_str(), problem.c_str());
    }
    merged->merge(result);
    write_atomically(path, merged->dumps());
  }
  CacheState& s = state();
  std::lock_guard lock(s.mutex);
  s.by_device[result.device().key()] = merged;
  {
    std::lock_guard reported(s.reported_mutex);
    s.reported.erase(path.string());
  }
  s.generation.fetch_add(1, std::memory_order_release);
  notify_config_change();
}

void reset_autotuning_cache() {
  CacheState& s = state();
  std::lock_guard lock(s.mutex);
  s.by_device.clear();
  {
    std::lock_guard reported(s.reported_mutex);
    s.reported.clear();
  }
  s.generation.fetch_add(1, std::memory_order_release);
  notify_config_change();
}

} // namespace tokamax
