//===- ExportFile.cpp - Writing and validating the section container --------===//
#include "export/lib/ExportFile.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>

#include <fmt/format.h>

#include <cstring>

namespace tokamax::export_detail {

namespace {

constexpr char kMagic[8] = {'T', 'K', 'M', 'X', 'E', 'X', 'P', 'T'};

void put(std::vector<uint8_t> &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get(std::span<const uint8_t> in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(in[at + i]) << (8 * i);
  return v;
}

} // namespace

const char *section_kind_name(SectionKind kind) {
  switch (kind) {
  case SectionKind::Manifest: return "manifest";
  case SectionKind::Function: return "function";
  case SectionKind::Plan: return "plan";
  case SectionKind::Cubin: return "cubin";
  case SectionKind::Ptx: return "ptx";
  case SectionKind::TileIr: return "tile-ir";
  }
  return "unknown";
}

std::vector<uint8_t> write_container(uint32_t version, const std::vector<Section> &sections) {
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  const uint64_t payloadStart = kHeaderBytes + kTableEntryBytes * sections.size() + kChecksumBytes;
  uint64_t total = payloadStart;
  for (const Section &s : sections)
    total += s.payload.size();
  put(out, version, 4);
  put(out, sections.size(), 4);
  put(out, total, 8);
  put(out, 0, 8);
  uint64_t offset = payloadStart;
  for (const Section &s : sections) {
    put(out, static_cast<uint32_t>(s.kind), 4);
    put(out, 0, 4);
    put(out, offset, 8);
    put(out, s.payload.size(), 8);
    auto digest = sha256(s.payload);
    out.insert(out.end(), digest.begin(), digest.end());
    offset += s.payload.size();
  }
  auto headerDigest = sha256(out);
  out.insert(out.end(), headerDigest.begin(), headerDigest.end());
  out.reserve(total);
  for (const Section &s : sections)
    out.insert(out.end(), s.payload.begin(), s.payload.end());
  return out;
}

Container read_container(std::span<const uint8_t> bytes, uint32_t newest_version) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw Error("export file: not a tokamax export (the magic \"TKMXEXPT\" is missing)");
  if (bytes.size() < kHeaderBytes)
    throw Error(fmt::format("export file: {} bytes is shorter than the {}-byte header", bytes.size(), kHeaderBytes));
  Container c;
  c.version = static_cast<uint32_t>(get(bytes, 8, 4));
  if (c.version == 0)
    throw Error("export file: format version 0 is not a format version (versions start at 1)");
  if (c.version > newest_version)
    throw Error(fmt::format("export file: format version {} was written by a newer tokamax; this library reads "
                            "versions 1 to {} (upgrade the library that loads it)",
                            c.version, newest_version));
  const uint64_t count = get(bytes, 12, 4), fileSize = get(bytes, 16, 8), reserved = get(bytes, 24, 8);
  if (fileSize != bytes.size())
    throw Error(fmt::format("export file: the header gives a file size of {} bytes but there are {} (truncated or "
                            "extended)",
                            fileSize, bytes.size()));
  if (reserved != 0)
    throw Error(fmt::format("export file: the header's reserved field is {}, expected 0", reserved));
  if (count == 0 || count > kMaxSections)
    throw Error(fmt::format("export file: section count {} is out of range (1 to {})", count, kMaxSections));
  const uint64_t tableEnd = kHeaderBytes + kTableEntryBytes * count;
  if (tableEnd + kChecksumBytes > bytes.size())
    throw Error(fmt::format("export file: the table of {} sections needs {} bytes; the file has {}", count,
                            tableEnd + kChecksumBytes, bytes.size()));
  auto headerDigest = sha256(bytes.subspan(0, tableEnd));
  if (std::memcmp(headerDigest.data(), bytes.data() + tableEnd, kChecksumBytes) != 0)
    throw Error("export file: the header and section table fail their checksum (corrupt file)");
  uint64_t expectedOffset = tableEnd + kChecksumBytes;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = kHeaderBytes + kTableEntryBytes * i;
    const uint64_t kind = get(bytes, at, 4), flags = get(bytes, at + 4, 4), offset = get(bytes, at + 8, 8),
                   size = get(bytes, at + 16, 8);
    if (kind == 0 || kind > kMaxSectionKind)
      throw Error(fmt::format("export file: section {} has kind {}, expected 1 to {}", i, kind, kMaxSectionKind));
    if (flags != 0)
      throw Error(fmt::format("export file: section {} has reserved field {}, expected 0", i, flags));
    if (offset != expectedOffset)
      throw Error(fmt::format("export file: section {} starts at offset {}, expected {} (sections are back to back)",
                              i, offset, expectedOffset));
    if (size > bytes.size() - offset)
      throw Error(fmt::format("export file: section {} ({} bytes at offset {}) runs past the end of the {}-byte file",
                              i, size, offset, bytes.size()));
    std::span<const uint8_t> payload = bytes.subspan(offset, size);
    auto digest = sha256(payload);
    if (std::memcmp(digest.data(), bytes.data() + at + 24, kChecksumBytes) != 0)
      throw Error(fmt::format("export file: section {} ({}) fails its checksum (corrupt file)", i,
                              section_kind_name(SectionKind(kind))));
    c.sections.push_back({SectionKind(kind), payload, digest});
    expectedOffset = offset + size;
  }
  if (expectedOffset != bytes.size())
    throw Error(fmt::format("export file: {} bytes follow the last section", bytes.size() - expectedOffset));
  return c;
}

} // namespace tokamax::export_detail
