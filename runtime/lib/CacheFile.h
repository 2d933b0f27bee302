//===- CacheFile.h - The .tkc entry file format (internal) --------*- C++ -*-===//
//
// All knowledge of the on-disk byte layout lives here and in CacheFile.cpp.
// Layout, integers little-endian:
//
//   0   magic "TKMXKC01"                         8 bytes
//   8   u32 format version (1)
//   12  u32 fixed header size (120)
//   16  key digest, 64 lowercase hex chars
//   80  u64 sizes: kernel_name, ptx, cubin, metadata, key text
//   120 key text (CacheKey::to_string())
//       kernel_name, ptx, cubin, metadata payloads
//   end SHA-256 of every byte before it          32 bytes
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DiskCache.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace tokamax::cache_file {

inline constexpr char kMagic[8] = {'T', 'K', 'M', 'X', 'K', 'C', '0', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kDigestSize = 64;
inline constexpr size_t kFixedHeaderSize = 120;
inline constexpr size_t kChecksumSize = 32;
inline constexpr std::string_view kExtension = ".tkc";
inline constexpr std::string_view kTempMarker = ".tkc.tmp.";
// Real entries are at most a few MB; a huge file is damage, not a kernel.
inline constexpr uint64_t kMaxEntryBytes = uint64_t(1) << 30;

struct Header {
  std::string digest;
  uint64_t kernel_name_size = 0;
  uint64_t ptx_size = 0;
  uint64_t cubin_size = 0;
  uint64_t metadata_size = 0;
  uint64_t key_text_size = 0;
};

/// The complete file image for an entry.
std::vector<uint8_t> encode(std::string_view digest, std::string_view key_text,
                            const CacheEntry& entry);

/// Checks the fixed header (the first kFixedHeaderSize bytes of `prefix`) of a
/// file of `file_size` bytes, including that the sizes add up to exactly
/// `file_size`. Returns a problem description, empty if fine.
std::string parse_header(std::span<const uint8_t> prefix, uint64_t file_size, Header& out);

struct Decoded {
  Header header;
  std::string key_text;
  CacheEntry entry;
};

/// Fully validates a whole file image: header, sizes, checksum, and that the
/// stored digest is the SHA-256 of the stored key text. Returns a problem
/// description, empty if fine (then `out` is filled).
std::string decode(std::span<const uint8_t> file, Decoded& out);

/// Byte offset of the key text and the kernel name (both follow the header).
inline constexpr uint64_t key_text_offset() { return kFixedHeaderSize; }

/// True for a well-formed digest: 64 lowercase hex characters.
bool is_digest(std::string_view s);

// ---- Reading entry files -------------------------------------------------------

/// Owns a file descriptor.
class Fd {
public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// Closes; returns close()'s errno or 0 (close errors can report lost writes).
  int reset() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0)
      err = errno;
    fd_ = -1;
    return err;
  }

private:
  int fd_;
};

/// Reads up to `size` bytes at `offset` into `out`; returns errno or 0. Stopping
/// short at EOF is not an error: the format checks catch truncation.
int read_at(int fd, uint64_t offset, uint64_t size, std::vector<uint8_t>& out);

/// Deletes `path` only if it is still the file that was examined: a concurrent
/// writer may have just renamed a good entry over the bad one. Best effort.
void unlink_if_same(const std::filesystem::path& path, const struct stat& examined);

/// Checks the entry file at `path` without knowing its key. `full` reads it all
/// and verifies the checksum; otherwise only the header, key text and kernel
/// name are read. `examined`, if given, receives the stat of the file checked.
DiskCache::EntryInfo inspect(const std::filesystem::path& path, uint64_t bytes,
                             std::filesystem::file_time_type last_used, bool full,
                             struct stat* examined);

} // namespace tokamax::cache_file
