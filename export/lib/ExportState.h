//===- ExportState.h - An ExportedFunction's parsed file and devices -*- C++ -*-===//
#pragma once

#include "export/lib/ExportFile.h"
#include "export/lib/ExportPlan.h"

#include <tokamax/runtime/LoadedKernel.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Tensor.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tokamax {

struct ExportedFunction::State {
  std::vector<uint8_t> file;  ///< the whole file; `sections` view into it
  uint32_t version = 0;
  std::vector<export_detail::SectionView> sections;
  export_detail::Manifest manifest;
  std::string function_json;
  export_detail::Plan plan;

  /// What runs on one device keep: the loaded kernels, and one allocation holding every
  /// intermediate and the scratch buffer. The vectors below are reused by every run
  /// (under the mutex), so a run after the first allocates nothing.
  struct OnDevice {
    bool prepared = false;
    std::vector<std::unique_ptr<LoadedKernel>> kernels;
    DeviceBuffer buffers;
    std::vector<uint64_t> intermediates;  ///< per value: its address in `buffers` (0: the caller's)
    uint64_t scratch = 0;
    std::vector<uint64_t> bound;  ///< per value: the address this run uses
    /// Per step, its launch words as LoadedKernel::pack() wrote them (scalars final,
    /// tensors at placeholder addresses that each run replaces): a run launches them
    /// with launch_packed, checking only the addresses' alignment.
    std::vector<std::array<uint64_t, LoadedKernel::kMaxParams>> words;
  };
  std::mutex mutex;
  std::map<int, OnDevice> devices;

  /// Parses and validates `bytes` (the file).
  static std::unique_ptr<State> parse(std::vector<uint8_t> bytes);
};

namespace export_detail {

/// What libtokamax's side of export (the interpreter's replay) reads of a loaded file
/// (null for an empty ExportedFunction).
struct StateAccess {
  static const ExportedFunction::State *of(const ExportedFunction &e) { return e.state_.get(); }
};

/// Checks the views against the plan's inputs and outputs (count, dtype, shape,
/// contiguity, data) and sets `bound` to each value's bound address (0: not bound).
TOKAMAX_API void bind_views(const Plan &plan, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                            const char *what, std::vector<uint64_t> &bound);

} // namespace export_detail
} // namespace tokamax
