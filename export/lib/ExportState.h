//===- ExportState.h - An ExportedFunction's parsed file and devices -*- C++ -*-===//
#pragma once

#include "export/lib/ExportFile.h"
#include "export/lib/ExportPlan.h"

#include <tokamax/compiler/Jit.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Tensor.h>

#include <map>
#include <memory>
#include <mutex>

namespace tokamax {

struct ExportedFunction::State {
  std::vector<uint8_t> file;  ///< the whole file; `sections` view into it
  uint32_t version = 0;
  std::vector<export_detail::SectionView> sections;
  export_detail::Manifest manifest;
  std::string function_json;
  export_detail::Plan plan;

  /// What a run on one device keeps: loaded kernels, intermediates, scratch.
  struct OnDevice {
    std::vector<std::unique_ptr<LoadedKernel>> kernels;
    std::map<int, Tensor> values;
    DeviceBuffer scratch;
  };
  std::mutex mutex;
  std::map<int, OnDevice> devices;

  /// Parses and validates `bytes` (the file).
  static std::unique_ptr<State> parse(std::vector<uint8_t> bytes);
};

namespace export_detail {

/// Checks the views against the plan's inputs and outputs (count, dtype, shape,
/// contiguity, data) and returns each value's bound address (0: not bound).
std::vector<uint64_t> bind_views(const Plan &plan, std::span<const TensorView> inputs,
                                 std::span<const TensorView> outputs, const char *what);

} // namespace export_detail
} // namespace tokamax
