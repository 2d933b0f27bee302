//===- ExportedFunction.h - A traced Function as one versioned file -*- C++ -*-===//
//
// An export is a Function compiled for one target (an arch and, optionally, the exact
// device kind) with its launches recorded: which kernel, which value (or scratch
// offset) each parameter reads and writes, every scalar, every zero fill. Loading and
// running one needs only the runtime (libtokamax_runtime, CMake target
// tokamax::runtime): ExportedFunction::run loads the cubins with the driver and replays
// the launches on a stream, with no MLIR, no JIT and no config resolution. Making one
// (export_function) and replaying one on the CPU interpreter need the compiler:
// <tokamax/export/ExportFunction.h>, in libtokamax. The file (save / bytes / load) is a
// checksummed container of sections; docs/architecture.md describes it.
//
//   ExportedFunction e = ExportedFunction::load("loss-grad.tkx", ExportTarget::of(device));
//   e.run(inputs, outputs, stream);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/LaunchInfo.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tokamax {

class Device;
class Stream;

namespace export_detail {
struct StateAccess;
}

/// What an export runs on: an arch ("sm_90a") and the device kind (the driver's device
/// name and compute capability). An empty device name accepts any device of the arch's
/// compute capability.
struct TOKAMAX_API ExportTarget {
  std::string arch = "sm_90a";
  std::string device_name;  ///< e.g. "NVIDIA H200"; empty: any device of the arch
  int cc_major = 9, cc_minor = 0;

  /// The target of `device` (its arch, name and compute capability).
  static ExportTarget of(const Device &device);
  /// `arch` plus a device kind "NAME:MAJOR.MINOR" (e.g. "NVIDIA H200:9.0"); an empty kind
  /// takes the compute capability from the arch. Throws Error naming the bad part.
  static ExportTarget parse(const std::string &arch, const std::string &device_kind = "");
  /// "NVIDIA H200:9.0", or ":9.0" for any device of that capability.
  std::string device_kind() const;
  /// "sm_90a on NVIDIA H200 (compute capability 9.0)".
  std::string to_string() const;
  /// Whether a file built for this target runs on `device`.
  bool accepts(const ExportTarget &device) const;
  bool operator==(const ExportTarget &) const = default;
};

/// One recorded call: its op, arguments and what export chose for it.
struct TOKAMAX_API ExportedCall {
  std::string op;
  std::string args_json;       ///< BoundArgs::to_json()
  std::string implementation;  ///< the implementation chosen for the target
  std::string config_json;     ///< Config::to_json() of the config used
  std::vector<int> slots;      ///< values bound to the op's arguments (-1: absent)
};

/// One kernel of the export.
struct TOKAMAX_API ExportedKernel {
  LaunchInfo launch;
  size_t cubin_bytes = 0, ptx_bytes = 0, ir_bytes = 0;
  size_t launches = 0;  ///< how many launches of the plan use it
};

class TOKAMAX_API ExportedFunction {
public:
  /// The format version this library writes; it reads versions 1 to this one.
  static constexpr uint32_t kFormatVersion = 1;

  /// Reads and validates a file (every section's checksum, size, offset, count and
  /// enum); throws Error naming what is wrong. Nothing is loaded on a device yet.
  static ExportedFunction load(const std::filesystem::path &path);
  static ExportedFunction load(std::span<const uint8_t> bytes);
  /// The same, then check_device(running_on): a file for another device kind throws.
  static ExportedFunction load(const std::filesystem::path &path, const ExportTarget &running_on);

  /// The file's bytes (what save writes and load reads).
  std::vector<uint8_t> bytes() const;
  /// Writes the file atomically (a temp file beside `path`, fsynced, then renamed).
  void save(const std::filesystem::path &path) const;

  /// Throws Error naming both device kinds unless this export runs on `device`.
  void check_device(const ExportTarget &device) const;
  /// Readies `device` for runs: checks its kind (check_device), loads every kernel and
  /// allocates the intermediates and scratch (one allocation). Done by the first run on
  /// a device when not called before; calling it at start-up takes that work out of the
  /// first run. Again on a ready device: nothing.
  void prepare(Device &device) const;
  /// Replays every launch on `stream` (inputs and outputs as the Function's, on one
  /// device of the export's kind), preparing the device first if needed. Not for
  /// concurrent runs of one ExportedFunction (they serialise on a lock).
  void run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, Stream &stream) const;

  /// Target, versions, inputs and outputs, calls and kernels with their sizes.
  std::string describe() const;

  const ExportTarget &target() const;
  uint32_t format_version() const;
  const std::string &producer() const;  ///< "tokamax 0.1.0"
  /// The Function (Function::to_json) the export was made from.
  const std::string &function_json() const;
  std::vector<std::pair<std::vector<int64_t>, DType>> input_specs() const;
  std::vector<std::pair<std::vector<int64_t>, DType>> output_specs() const;
  const std::vector<ExportedCall> &calls() const;
  std::vector<ExportedKernel> kernels() const;
  size_t launch_count() const;

  ExportedFunction();
  ~ExportedFunction();
  ExportedFunction(ExportedFunction &&) noexcept;
  ExportedFunction &operator=(ExportedFunction &&) noexcept;

  struct State;  ///< the parsed file and the per-device kernels and buffers

private:
  explicit ExportedFunction(std::unique_ptr<State> state);
  friend struct export_detail::StateAccess;  // the interpreter's replay, in libtokamax
  std::unique_ptr<State> state_;
};

} // namespace tokamax
