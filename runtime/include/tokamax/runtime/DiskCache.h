//===- DiskCache.h - Persistent cache of compiled kernels ---------*- C++ -*-===//
//
// One file per compiled kernel under <root>/v1/<2 hex>/<digest>.tkc. Entries are
// published by atomic rename, so concurrent threads and processes share the
// cache without locks: a reader sees either no entry or a complete one. Every
// entry carries its full key and a SHA-256 checksum; anything that does not
// verify is discarded and rebuilt, never used.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

/// Everything that determines a compiled kernel's bytes, kept as readable text
/// so that a cache entry can say what it is.
struct TOKAMAX_API CacheKey {
  std::string kernel_name;
  std::string canonical_ir;     ///< the kernel's tile IR text
  std::string target_arch;      ///< e.g. "sm_90a"
  std::string ptx_isa;          ///< e.g. "8.0"
  std::string compile_options;  ///< e.g. "opt=3;ftz=0"
  std::string tokamax_version;
  std::string llvm_version;
  std::string assembler;        ///< e.g. "nvJitLink 13.0"

  /// Canonical text: "format=tokamax-cache-key/1" then one field=value line per
  /// field in fixed order, canonical_ir last. Newlines and backslashes in the
  /// one-line fields are escaped so the text maps back to exactly one key.
  std::string to_string() const;
  /// sha256_hex(to_string()).
  std::string digest() const;
  /// Inverse of to_string(); nullopt if `text` is not a key of this format.
  static std::optional<CacheKey> from_string(std::string_view text);

  bool operator==(const CacheKey&) const = default;
};

/// A compiled kernel. metadata_json is opaque to the cache (launch metadata).
struct TOKAMAX_API CacheEntry {
  std::string kernel_name;
  std::string ptx;
  std::vector<uint8_t> cubin;
  std::string metadata_json;

  bool operator==(const CacheEntry&) const = default;
};

class TOKAMAX_API DiskCache {
public:
  /// One entry file as seen by list()/verify().
  struct EntryInfo {
    std::filesystem::path path;
    std::string digest;       ///< from the file name
    std::string kernel_name;  ///< empty if the header is unreadable
    std::string target_arch;  ///< from the stored key text
    uint64_t bytes = 0;
    std::filesystem::file_time_type last_used{};
    bool valid = false;
    std::string problem;      ///< why it is not valid; empty if valid
  };

  struct PruneResult {
    size_t removed = 0;        ///< entries and stale temp files deleted
    uint64_t bytes_freed = 0;
    uint64_t bytes_kept = 0;   ///< total size of the entries left
  };

  /// $TOKAMAX_CACHE_DIR, else $XDG_CACHE_HOME/tokamax, else $HOME/.cache/tokamax,
  /// else /tmp/tokamax-<uid> when it does not exist yet or is this user's private
  /// directory, else (another user made it first) a fresh private mkdtemp directory.
  /// Empty variables (and a relative XDG_CACHE_HOME, as the XDG spec says) are ignored.
  static std::filesystem::path default_directory();
  /// TOKAMAX_CACHE_DISABLE=1 (also true/yes/on): callers should bypass the cache.
  static bool disabled_by_environment();
  /// TOKAMAX_CACHE_MUST_HIT=1 (also true/yes/on): callers should treat a miss as
  /// an error, e.g. to check that a deployment was fully pre-compiled.
  static bool must_hit_by_environment();
  /// Receives one message per discarded/unreadable entry file (per path, until
  /// that path is stored again). An empty function restores the default, which
  /// prints "tokamax: warning: <message>" to stderr.
  static void set_warning_handler(std::function<void(const std::string&)> handler);

  /// The cache is private (PrivateFiles.h): directories it creates are 0700, and a root
  /// that another user owns or may write to is refused (one warning) and never read
  /// from: load() misses and store() does nothing. Entries are read only when they are
  /// regular files of this user's, never through a symbolic link.
  explicit DiskCache(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  /// Whether the root may be used (it does not exist yet, or it is private); the first
  /// refusal is warned and sticks.
  bool usable() const;
  /// Where the entry for `key` lives (whether or not it exists).
  std::filesystem::path entry_path(const CacheKey& key) const;
  std::filesystem::path entry_path_for_digest(std::string_view digest) const;

  /// The entry stored for `key`, or nullopt on a miss. A corrupt, truncated or
  /// foreign entry is reported, deleted, and treated as a miss. A hit refreshes
  /// the file's mtime (at most once a minute) for LRU pruning.
  std::optional<CacheEntry> load(const CacheKey& key);
  /// Atomically publishes `entry` for `key`, replacing any previous one. Throws
  /// tokamax::Error on I/O failure; a failed store never leaves a partial entry.
  void store(const CacheKey& key, const CacheEntry& entry);
  /// store() for callers that run on without the cache (the JIT): an I/O failure (a
  /// full disk, a read-only directory) is reported once per root through the warning
  /// handler instead of thrown, and leaves no partial entry. True if the entry was
  /// published.
  bool try_store(const CacheKey& key, const CacheEntry& entry);

  /// Every entry file, sorted by path, with header-level checks only.
  std::vector<EntryInfo> list() const;
  /// Full check (header, lengths, checksum, digest) of every entry; returns the
  /// bad ones, deleting them if `remove_bad`.
  std::vector<EntryInfo> verify(bool remove_bad = false);
  /// Deletes temp files older than an hour, then least recently used entries
  /// until the entries total at most `max_total_bytes`.
  PruneResult prune(uint64_t max_total_bytes);
  /// Total size of the entry files (temp files not included).
  uint64_t total_bytes() const;

private:
  std::filesystem::path root_;
  mutable std::atomic<int> trust_{0};  ///< 0 not checked, 1 trusted, -1 refused
};

} // namespace tokamax
