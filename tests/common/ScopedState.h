// Process state a test changes for its scope only: an environment variable, and the
// disk cache's warning handler (collecting the warnings instead of printing them).
#pragma once

#include <tokamax/runtime/DiskCache.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace test {

/// Sets (or unsets, for nullptr) an environment variable for the scope.
struct EnvGuard {
  std::string name;
  std::optional<std::string> saved;
  EnvGuard(std::string n, const char *value) : name(std::move(n)) {
    if (const char *v = std::getenv(name.c_str()))
      saved = v;
    value ? ::setenv(name.c_str(), value, 1) : ::unsetenv(name.c_str());
  }
  ~EnvGuard() { saved ? ::setenv(name.c_str(), saved->c_str(), 1) : ::unsetenv(name.c_str()); }
  EnvGuard(const EnvGuard &) = delete;
  EnvGuard &operator=(const EnvGuard &) = delete;
};

/// Collects the disk cache's warnings for the scope; restores the default handler after.
struct WarningCapture {
  std::mutex mutex;
  std::vector<std::string> messages;
  WarningCapture() {
    tokamax::DiskCache::set_warning_handler([this](const std::string &m) {
      std::lock_guard lock(mutex);
      messages.push_back(m);
    });
  }
  ~WarningCapture() { tokamax::DiskCache::set_warning_handler(nullptr); }
  size_t count() {
    std::lock_guard lock(mutex);
    return messages.size();
  }
  bool any(const std::string &what) {
    std::lock_guard lock(mutex);
    for (const std::string &m : messages)
      if (m.find(what) != std::string::npos)
        return true;
    return false;
  }
};

} // namespace test
