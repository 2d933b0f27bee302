// Helpers of the export tests: the small gradient they export, host buffers for it, and
// a reader / writer of the export container that lets a test edit one section and seal
// the file again (checksums recomputed), so that the checks behind the checksums are
// reached.
#pragma once

#include "common/HeadlineGrad.h"

#include <tokamax/autotune/Autotune.h>
#include <tokamax/export/ExportFunction.h>
#include <tokamax/ops/Function.h>
#include <tokamax/runtime/Hash.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <fstream>
#include <random>
#include <cstdlib>
#include <string>
#include <vector>

namespace export_test {

using namespace tokamax;

/// d/dx, d/dscale of sum(layer_norm(layer_norm(x, scale), scale)) as f32, x [5, 33] bf16:
/// forward, casts, sum, fill, two layer-norm VJPs and the add of the scale's fan-out.
inline Function small_grad() {
  const int64_t rows = 5, cols = 33;
  Function f = Function::trace({ArgSpec{{rows, cols}, DType::BF16}, ArgSpec{{cols}, DType::F32}},
                               [](Tracer &t, std::span<const Sym> in) {
                                 Sym y = t.layer_norm(in[0], in[1]);
                                 return std::vector<Sym>{t.sum(t.cast(t.layer_norm(y, in[1]), DType::F32))};
                               });
  return grad(f, {0, 1});
}

/// The headline gradient at a small shape (x [2, 64, 4, 64] bf16, scale [64] f32).
using test::headline_grad;

/// The first call of `g` to the op named `op` (null when there is none).
inline const Function::Call *first_call(const Function &g, const std::string &op) {
  for (const Function::Call &c : g.calls())
    if (c.op->name() == op)
      return &c;
  return nullptr;
}

inline ExportTarget h200() { return ExportTarget::parse("sm_90a", "NVIDIA H200:9.0"); }

/// The small gradient's export for an H200 (compiled once per process).
inline const std::vector<uint8_t> &small_export_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    ExportOptions options;
    options.target = h200();
    return export_function(small_grad(), options).bytes();
  }();
  return bytes;
}

inline std::vector<uint8_t> read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The committed format-version-1 fixture (tests/data/README.md says how it was made).
/// tests/data of the source tree, or $TOKAMAX_TEST_DATA (packaged tests run elsewhere).
inline std::string test_data_dir() {
  const char *dir = std::getenv("TOKAMAX_TEST_DATA");
  return dir && *dir ? dir : TOKAMAX_TEST_DATA;
}
inline std::string fixture_path() { return test_data_dir() + "/export-v1.tkx"; }
inline std::string fixture_function_path() { return test_data_dir() + "/layer-norm-grad-function.json"; }

/// Host buffers for a function's inputs (random, never zero) and outputs.
struct HostBuffers {
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<TensorView> inViews, outViews;

  HostBuffers(const std::vector<ArgSpec> &inputs, const std::vector<ArgSpec> &outputs, uint32_t seed,
              uint8_t outFill = 0) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(0.25f, 2.0f);
    for (const ArgSpec &s : inputs) {
      in.emplace_back(s.numel() * dtype_size(s.dtype));
      for (int64_t e = 0; e < s.numel(); ++e)
        store_from_double(s.dtype, in.back().data() + e * dtype_size(s.dtype), dist(rng));
    }
    for (const ArgSpec &s : outputs)
      out.emplace_back(s.numel() * dtype_size(s.dtype), outFill);
    for (size_t i = 0; i < in.size(); ++i)
      inViews.push_back(host_view(in[i].data(), inputs[i].dtype, inputs[i].shape));
    for (size_t i = 0; i < out.size(); ++i)
      outViews.push_back(host_view(out[i].data(), outputs[i].dtype, outputs[i].shape));
  }
};

/// Whether two sets of outputs of `specs` agree within `tolerance` relative to their
/// magnitude (a fixture's frozen kernels against today's, which may round differently).
inline bool outputs_close(const std::vector<std::vector<uint8_t>> &a, const std::vector<std::vector<uint8_t>> &b,
                          const std::vector<ArgSpec> &specs, double tolerance) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const size_t size = dtype_size(specs[i].dtype);
    for (int64_t e = 0; e < specs[i].numel(); ++e) {
      const double x = load_as_double(specs[i].dtype, a[i].data() + e * size);
      const double y = load_as_double(specs[i].dtype, b[i].data() + e * size);
      if (!(std::abs(x - y) <= tolerance * std::max(1.0, std::abs(x))))
        return false;
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The container, as the format describes it (export/lib/ExportFile.h)
//===----------------------------------------------------------------------===//

struct RawSection {
  uint32_t kind = 0;
  std::string payload;
};

/// Bytes of the header, and where section i's table entry starts (56 bytes each).
constexpr size_t kHeader = 32;
inline size_t table_entry(size_t i) { return kHeader + 56 * i; }
/// Where the header + table checksum starts (and the table ends).
inline size_t table_end(size_t sections) { return table_entry(sections); }

inline uint64_t get_le(const std::vector<uint8_t> &b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= uint64_t(b[at + i]) << (8 * i);
  return v;
}

inline void set_le(std::vector<uint8_t> &b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

/// The sections of a well-formed file.
inline std::vector<RawSection> sections_of(const std::vector<uint8_t> &file) {
  std::vector<RawSection> out;
  const uint64_t count = get_le(file, 12, 4);
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = table_entry(i);
    const uint64_t offset = get_le(file, at + 8, 8), size = get_le(file, at + 16, 8);
    out.push_back({static_cast<uint32_t>(get_le(file, at, 4)),
                   std::string(reinterpret_cast<const char *>(file.data()) + offset, size)});
  }
  return out;
}

/// Recomputes the header + table checksum after the header or table was edited (not
/// when the section count puts the table past the end of the file).
inline void reseal_header(std::vector<uint8_t> &file) {
  const size_t tableEnd = table_end(get_le(file, 12, 4));
  if (tableEnd + 32 > file.size())
    return;
  auto digest = sha256(std::span<const uint8_t>(file.data(), tableEnd));
  std::memcpy(file.data() + tableEnd, digest.data(), digest.size());
}

/// A valid container of `sections` (every checksum right).
inline std::vector<uint8_t> build_file(const std::vector<RawSection> &sections, uint32_t version = 1) {
  std::vector<uint8_t> file(table_end(sections.size()) + 32, 0);
  std::memcpy(file.data(), "TKMXEXPT", 8);
  uint64_t offset = file.size();
  set_le(file, 8, version, 4);
  set_le(file, 12, sections.size(), 4);
  for (size_t i = 0; i < sections.size(); ++i) {
    const size_t at = table_entry(i);
    set_le(file, at, sections[i].kind, 4);
    set_le(file, at + 8, offset, 8);
    set_le(file, at + 16, sections[i].payload.size(), 8);
    auto digest = sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(sections[i].payload.data()),
                                                  sections[i].payload.size()));
    std::memcpy(file.data() + at + 24, digest.data(), digest.size());
    offset += sections[i].payload.size();
  }
  set_le(file, 16, offset, 8);
  reseal_header(file);
  for (const RawSection &s : sections)
    file.insert(file.end(), s.payload.begin(), s.payload.end());
  return file;
}

/// Section kinds (export/lib/ExportFile.h).
enum Kind : uint32_t { Manifest = 1, FunctionJson = 2, Plan = 3, Cubin = 4, Ptx = 5, TileIr = 6 };

inline size_t find_section(const std::vector<RawSection> &sections, uint32_t kind) {
  for (size_t i = 0; i < sections.size(); ++i)
    if (sections[i].kind == kind)
      return i;
  return sections.size();
}

} // namespace export_test
