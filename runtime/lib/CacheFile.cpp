//===- CacheFile.cpp - Cache key text and the .tkc file format ------------===//

#include "CacheFile.h"

#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include <fcntl.h>

namespace fs = std::filesystem;

namespace tokamax {

namespace {

// Field order is part of the format: changing it changes every digest.
constexpr std::string_view kKeyFormatLine = "format=tokamax-cache-key/1";

void append_escaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    default: out += c;
    }
  }
}

std::optional<std::string> unescape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '\\') {
      out += value[i];
      continue;
    }
    if (++i == value.size())
      return std::nullopt;
    switch (value[i]) {
    case '\\': out += '\\'; break;
    case 'n': out += '\n'; break;
    case 'r': out += '\r'; break;
    default: return std::nullopt;
    }
  }
  return out;
}

// The one-line fields in file order; canonical_ir follows them.
template <typename Key, typename Fn> void for_each_line_field(Key& key, Fn&& fn) {
  fn("kernel_name", key.kernel_name);
  fn("target_arch", key.target_arch);
  fn("ptx_isa", key.ptx_isa);
  fn("compile_options", key.compile_options);
  fn("tokamax_version", key.tokamax_version);
  fn("llvm_version", key.llvm_version);
  fn("assembler", key.assembler);
}

} // namespace

std::string CacheKey::to_string() const {
  std::string out;
  out.reserve(canonical_ir.size() + 256);
  out += kKeyFormatLine;
  out += '\n';
  for_each_line_field(*this, [&](std::string_view name, const std::string& value) {
    out += name;
    out += '=';
    append_escaped(out, value);
    out += '\n';
  });
  // Last and unescaped: everything after "canonical_ir=" is the IR, so it reads
  // naturally and still decodes unambiguously.
  out += "canonical_ir=";
  out += canonical_ir;
  return out;
}

std::string CacheKey::digest() const { return sha256_hex(to_string()); }

std::optional<CacheKey> CacheKey::from_string(std::string_view text) {
  auto take_line = [&](std::string_view& line) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos)
      return false;
    line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    return true;
  };
  std::string_view line;
  if (!take_line(line) || line != kKeyFormatLine)
    return std::nullopt;
  CacheKey key;
  bool ok = true;
  for_each_line_field(key, [&](std::string_view name, std::string& value) {
    if (!ok || !take_line(line) || line.size() <= name.size() ||
        line.substr(0, name.size()) != name || line[name.size()] != '=') {
      ok = false;
      return;
    }
    auto unescaped = unescape(line.substr(name.size() + 1));
    if (!unescaped)
      ok = false;
    else
      value = std::move(*unescaped);
  });
  constexpr std::string_view kIr = "canonical_ir=";
  if (!ok || text.substr(0, kIr.size()) != kIr)
    return std::nullopt;
  key.canonical_ir = std::string(text.substr(kIr.size()));
  return key;
}

namespace cache_file {

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_bytes(std::vector<uint8_t>& out, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + size);
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t(p[i]) << (8 * i);
  return v;
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// a + b, or false on overflow (sizes come from untrusted files).
bool add(uint64_t& acc, uint64_t b) { return !__builtin_add_overflow(acc, b, &acc); }

} // namespace

bool is_digest(std::string_view s) {
  if (s.size() != kDigestSize)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

std::vector<uint8_t> encode(std::string_view digest, std::string_view key_text,
                            const CacheEntry& entry) {
  std::vector<uint8_t> out;
  out.reserve(kFixedHeaderSize + key_text.size() + entry.kernel_name.size() + entry.ptx.size() +
              entry.cubin.size() + entry.metadata_json.size() + kChecksumSize);
  put_bytes(out, kMagic, sizeof(kMagic));
  put_u32(out, kVersion);
  put_u32(out, kFixedHeaderSize);
  put_bytes(out, digest.data(), digest.size());
  put_u64(out, entry.kernel_name.size());
  put_u64(out, entry.ptx.size());
  put_u64(out, entry.cubin.size());
  put_u64(out, entry.metadata_json.size());
  put_u64(out, key_text.size());
  put_bytes(out, key_text.data(), key_text.size());
  put_bytes(out, entry.kernel_name.data(), entry.kernel_name.size());
  put_bytes(out, entry.ptx.data(), entry.ptx.size());
  put_bytes(out, entry.cubin.data(), entry.cubin.size());
  put_bytes(out, entry.metadata_json.data(), entry.metadata_json.size());
  auto checksum = sha256(out);
  put_bytes(out, checksum.data(), checksum.size());
  return out;
}

std::string parse_header(std::span<const uint8_t> prefix, uint64_t file_size, Header& out) {
  if (file_size < kFixedHeaderSize + kChecksumSize || prefix.size() < kFixedHeaderSize)
    return fmt::format("truncated ({} bytes, smaller than the header)", file_size);
  const uint8_t* p = prefix.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    return "bad magic (not a tokamax cache entry)";
  if (uint32_t version = get_u32(p + 8); version != kVersion)
    return fmt::format("unsupported format version {} (expected {})", version, kVersion);
  if (uint32_t header_size = get_u32(p + 12); header_size != kFixedHeaderSize)
    return fmt::format("bad header size {} (expected {})", header_size, kFixedHeaderSize);
  out.digest.assign(reinterpret_cast<const char*>(p + 16), kDigestSize);
  if (!is_digest(out.digest))
    return "malformed key digest in header";
  out.kernel_name_size = get_u64(p + 80);
  out.ptx_size = get_u64(p + 88);
  out.cubin_size = get_u64(p + 96);
  out.metadata_size = get_u64(p + 104);
  out.key_text_size = get_u64(p + 112);
  uint64_t expected = kFixedHeaderSize + kChecksumSize;
  if (!add(expected, out.key_text_size) || !add(expected, out.kernel_name_size) ||
      !add(expected, out.ptx_size) || !add(expected, out.cubin_size) ||
      !add(expected, out.metadata_size))
    return "bad lengths in header (overflow)";
  if (expected > file_size)
    return fmt::format("truncated (header declares {} bytes, file has {})", expected, file_size);
  if (expected < file_size)
    return fmt::format("bad lengths (header declares {} bytes, file has {})", expected, file_size);
  return {};
}

std::string decode(std::span<const uint8_t> file, Decoded& out) {
  if (auto problem = parse_header(file, file.size(), out.header); !problem.empty())
    return problem;
  size_t body = file.size() - kChecksumSize;
  auto actual = sha256(file.first(body));
  if (std::memcmp(actual.data(), file.data() + body, kChecksumSize) != 0)
    return "checksum mismatch";
  // Sizes are now known to fit inside the file, so plain offsets are safe.
  const char* p = reinterpret_cast<const char*>(file.data()) + kFixedHeaderSize;
  auto take = [&](uint64_t size) {
    std::string_view s(p, size);
    p += size;
    return s;
  };
  const Header& h = out.header;
  out.key_text = take(h.key_text_size);
  out.entry.kernel_name = take(h.kernel_name_size);
  out.entry.ptx = take(h.ptx_size);
  std::string_view cubin = take(h.cubin_size);
  out.entry.cubin.assign(cubin.begin(), cubin.end());
  out.entry.metadata_json = take(h.metadata_size);
  if (sha256_hex(out.key_text) != h.digest)
    return "stored key text does not match the stored digest";
  return {};
}


int read_at(int fd, uint64_t offset, uint64_t size, std::vector<uint8_t>& out) {
  out.resize(size);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    if (n == 0)
      break;
    done += static_cast<uint64_t>(n);
  }
  out.resize(done);
  return 0;
}

void unlink_if_same(const fs::path& path, const struct stat& examined) {
  struct stat now;
  if (::stat(path.c_str(), &now) == 0 && now.st_dev == examined.st_dev &&
      now.st_ino == examined.st_ino)
    ::unlink(path.c_str());
}

DiskCache::EntryInfo inspect(const fs::path& path, uint64_t bytes_hint,
                             fs::file_time_type last_used, bool full, struct stat* examined) {
  DiskCache::EntryInfo info;
  info.path = path;
  info.bytes = bytes_hint;
  info.last_used = last_used;
  std::string name = path.filename().string();
  info.digest = name.substr(0, name.size() - std::min(name.size(), kExtension.size()));
  auto fail = [&](std::string problem) {
    info.problem = std::move(problem);
    return info;
  };

  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0)
    return fail(fmt::format("cannot open: {}", std::strerror(errno)));
  if (examined)
    *examined = st;
  uint64_t size = static_cast<uint64_t>(st.st_size);
  info.bytes = size;
  if (size > kMaxEntryBytes)
    return fail(fmt::format("implausibly large ({} bytes)", size));

  std::vector<uint8_t> bytes;
  Header header;
  std::string problem;
  std::string key_text;
  if (full) {
    if (int err = read_at(fd.get(), 0, size, bytes))
      return fail(fmt::format("read error: {}", std::strerror(err)));
    Decoded decoded;
    problem = decode(bytes, decoded);
    header = decoded.header;
    key_text = std::move(decoded.key_text);
    info.kernel_name = std::move(decoded.entry.kernel_name);
  } else {
    if (int err = read_at(fd.get(), 0, kFixedHeaderSize, bytes))
      return fail(fmt::format("read error: {}", std::strerror(err)));
    problem = parse_header(bytes, size, header);
    if (problem.empty()) {
      uint64_t n = header.key_text_size + header.kernel_name_size; // <= size: checked
      if (int err = read_at(fd.get(), key_text_offset(), n, bytes))
        return fail(fmt::format("read error: {}", std::strerror(err)));
      if (bytes.size() != n)
        return fail("truncated while reading");
      key_text.assign(bytes.begin(), bytes.begin() + header.key_text_size);
      info.kernel_name.assign(bytes.begin() + header.key_text_size, bytes.end());
    }
  }
  if (!problem.empty())
    return fail(problem);
  if (auto key = CacheKey::from_string(key_text))
    info.target_arch = key->target_arch;
  else
    return fail("unparseable key text");
  std::string shard = path.parent_path().filename().string();
  if (!is_digest(info.digest) || shard != info.digest.substr(0, 2))
    return fail("unexpected file name or directory");
  if (header.digest != info.digest)
    return fail(fmt::format("foreign entry: stored for key {}", header.digest));
  info.valid = true;
  return info;
}

} // namespace cache_file
} // namespace tokamax
