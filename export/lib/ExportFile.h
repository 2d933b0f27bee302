//===- ExportFile.h - The export file's checksummed section container -*- C++ -*-===//
//
// Layout (all integers little-endian):
//   header   magic "TKMXEXPT", u32 format version, u32 section count, u64 file size,
//            u64 reserved (0)                                               32 bytes
//   table    per section: u32 kind, u32 reserved (0), u64 offset, u64 size,
//            SHA-256 of the payload                                         56 bytes each
//   SHA-256 of header + table                                               32 bytes
//   payloads in table order, back to back, ending at the file size.
// read_container checks the magic, then the version (a newer one is refused before
// anything else is read, since its layout may differ), then every count, offset, size,
// kind and checksum before handing out a payload.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tokamax::export_detail {

enum class SectionKind : uint32_t {
  Manifest = 1,  ///< JSON: producer, target, compile options
  Function = 2,  ///< JSON: Function::to_json
  Plan = 3,      ///< JSON: values, calls, kernels (launch metadata), launches
  Cubin = 4,     ///< one kernel's cubin
  Ptx = 5,       ///< one kernel's PTX
  TileIr = 6,    ///< one kernel's tile IR
};
constexpr uint32_t kMaxSectionKind = 6;
const char *section_kind_name(SectionKind kind);

struct Section {
  SectionKind kind;
  std::vector<uint8_t> payload;
};

struct SectionView {
  SectionKind kind;
  std::span<const uint8_t> payload;
  std::array<uint8_t, 32> checksum;  ///< the payload's SHA-256 (checked by read_container)
  std::string_view text() const { return {reinterpret_cast<const char *>(payload.data()), payload.size()}; }
};

constexpr size_t kHeaderBytes = 32, kTableEntryBytes = 56, kChecksumBytes = 32;
constexpr uint32_t kMaxSections = 1u << 16;

/// Exported from libtokamax_runtime for export_function (libtokamax).
TOKAMAX_API std::vector<uint8_t> write_container(uint32_t version, const std::vector<Section> &sections);

struct Container {
  uint32_t version = 0;
  std::vector<SectionView> sections;  ///< views into the bytes read
};
/// Throws Error naming the field, the value and what was expected.
Container read_container(std::span<const uint8_t> bytes, uint32_t newest_version);

} // namespace tokamax::export_detail
