//===- CubinInfo.cpp - Registers and stack frames recorded in a cubin -----===//
//
// The assembler records each kernel's register count and stack frame in the cubin's
// .nv.info section (what `ptxas -v` prints as "Used N registers" and "N bytes stack
// frame"), keyed by the kernel's symbol. Reading them from the cubin needs no change to
// the kernel cache (cached entries keep their cubin) and no device.
//
// .nv.info is a sequence of attributes: format (1 byte), attribute (1 byte), then
// either a 16-bit size and that many bytes (EIFMT_SVAL) or a 16-bit inline value. The
// per-kernel attributes used here are SVALs of {symbol index, value} (two u32).
//
//===----------------------------------------------------------------------===//
#include <tokamax/autotune/Search.h>

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cstring>
#include <map>

namespace tokamax {

namespace {

constexpr uint8_t kFormatSval = 0x04;
constexpr uint8_t kAttrFrameSize = 0x11;
constexpr uint8_t kAttrMinStackSize = 0x12;
constexpr uint8_t kAttrRegCount = 0x2f;
constexpr uint32_t kSectionSymtab = 2;
constexpr uint32_t kSectionNvInfo = 0x70000000;

[[noreturn]] void fail(const std::string& what) {
  throw Error("kernel_resources: " + what);
}

class Reader {
public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T at(uint64_t offset) const {
    if (offset > bytes_.size() || bytes_.size() - offset < sizeof(T))
      fail(fmt::format("cubin truncated: {} bytes needed at offset {} of {}", sizeof(T), offset,
                       bytes_.size()));
    T value;
    std::memcpy(&value, bytes_.data() + offset, sizeof(T));  // ELF is little-endian here
    return value;
  }
  std::string cstring(uint64_t offset) const {
    std::string s;
    for (uint64_t o = offset; at<char>(o) != '\0'; ++o)
      s += at<char>(o);
    return s;
  }

private:
  std::span<const uint8_t> bytes_;
};

struct Section {
  uint32_t name, type;
  uint64_t offset, size;
  uint32_t link;
};

} // namespace

std::vector<KernelResources> kernel_resources(std::span<const uint8_t> cubin) {
  const Reader r(cubin);
  if (cubin.size() < 64 || std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0 || cubin[4] != 2)
    fail(fmt::format("not a 64-bit ELF cubin ({} bytes)", cubin.size()));
  const uint64_t shoff = r.at<uint64_t>(0x28);
  const uint16_t shentsize = r.at<uint16_t>(0x3a), shnum = r.at<uint16_t>(0x3c);
  if (shentsize < 64)
    fail(fmt::format("section headers of {} bytes (64 expected)", shentsize));
  std::vector<Section> sections;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t(i) * shentsize;
    sections.push_back(Section{r.at<uint32_t>(h), r.at<uint32_t>(h + 4), r.at<uint64_t>(h + 0x18),
                               r.at<uint64_t>(h + 0x20), r.at<uint32_t>(h + 0x28)});
  }

  // symbol index -> kernel; a kernel is a symbol the assembler gave a register count.
  std::map<uint32_t, KernelResources> kernels;
  const Section* symtab = nullptr;
  for (const Section& s : sections) {
    if (s.type == kSectionSymtab)
      symtab = &s;
    if (s.type != kSectionNvInfo)
      continue;
    for (uint64_t p = s.offset, end = s.offset + s.size; p + 4 <= end;) {
      const uint8_t format = r.at<uint8_t>(p), attr = r.at<uint8_t>(p + 1);
      const uint16_t size = format == kFormatSval ? r.at<uint16_t>(p + 2) : 0;
      if (format == kFormatSval && size == 8 &&
          (attr == kAttrRegCount || attr == kAttrFrameSize || attr == kAttrMinStackSize)) {
        const uint32_t symbol = r.at<uint32_t>(p + 4), value = r.at<uint32_t>(p + 8);
        KernelResources& k = kernels[symbol];
        if (attr == kAttrRegCount)
          k.registers = value;
        else
          k.local_bytes = std::max(k.local_bytes, value);
      }
      p += 4 + size;
    }
  }
  std::vector<KernelResources> out;
  for (auto& [symbol, k] : kernels) {
    if (k.registers == 0)
      continue;  // a frame without a register count: not a kernel's record
    if (symtab && symtab->link < sections.size()) {
      const uint64_t entry = symtab->offset + uint64_t(symbol) * 24;
      if (entry + 24 <= symtab->offset + symtab->size)
        k.name = r.cstring(sections[symtab->link].offset + r.at<uint32_t>(entry));
    }
    out.push_back(std::move(k));
  }
  return out;
}

} // namespace tokamax
