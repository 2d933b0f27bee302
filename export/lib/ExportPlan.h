//===- ExportPlan.h - What an export replays, and its JSON sections -*- C++ -*-===//
//
// The plan is the recorded execution of a Function for one target: the values (specs),
// which are inputs and outputs, the calls (op, arguments, chosen implementation and
// config), the kernels (launch metadata and the sections of their cubin, PTX and tile
// IR), and the steps in order: a kernel launch whose tensor parameters each name a
// value or the scratch buffer plus a byte offset, or a zero fill of a byte range.
// plan_from_json checks every index, enum, size and offset against what it refers to,
// so a plan that parses can be replayed without another bounds check.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "export/lib/ExportFile.h"

#include <tokamax/export/ExportedFunction.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tokamax::export_detail {

struct TOKAMAX_API ValueSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  uint64_t bytes() const;  ///< checked: the plan's reader refuses specs whose bytes overflow
  std::string text() const;  ///< "bf16 [5, 33]"
};

/// A byte range's base: a value of the function, or the scratch buffer (value = -1).
struct BufferRef {
  int value = -1;
  uint64_t offset = 0;
};

struct StepArg {
  bool is_scalar = false;
  double scalar = 0;
  BufferRef buffer;  ///< tensors: dtype and shape are the kernel parameter's
};

struct Step {
  int call = 0;
  int kernel = -1;  ///< -1: a zero fill of `zero_bytes` at `buffer`
  std::vector<StepArg> args;
  BufferRef buffer;
  uint64_t zero_bytes = 0;
};

struct KernelEntry {
  LaunchInfo launch;
  int cubin = -1, ptx = -1, ir = -1;  ///< section indices (-1: absent)
};

struct Plan {
  std::vector<ValueSpec> values;
  std::vector<int> inputs, outputs;
  std::vector<ExportedCall> calls;
  std::vector<KernelEntry> kernels;
  std::vector<Step> steps;
  uint64_t scratch_bytes = 0;

  /// The bytes of the buffer `ref` points into.
  uint64_t buffer_bytes(const BufferRef &ref) const {
    return ref.value < 0 ? scratch_bytes : values[ref.value].bytes();
  }
};

struct Manifest {
  std::string producer;  ///< "tokamax 0.1.0"
  ExportTarget target;
  int opt_level = 3;
  std::string ptx_isa, llvm, assembler;
};

// The writers are exported from libtokamax_runtime for export_function (libtokamax).
TOKAMAX_API std::string manifest_to_json(const Manifest &m);
Manifest manifest_from_json(std::string_view text);

TOKAMAX_API std::string plan_to_json(const Plan &plan);
/// `sections`: the file's section kinds, which kernels' section indices must match
/// (each blob section used once).
Plan plan_from_json(std::string_view text, const std::vector<SectionKind> &sections);

/// Checks a kernel's launch metadata beyond its JSON shape (grid, block, cluster,
/// parameters, tensor maps); `where` names it in errors.
void check_launch_info(const LaunchInfo &info, const std::string &where);

} // namespace tokamax::export_detail
