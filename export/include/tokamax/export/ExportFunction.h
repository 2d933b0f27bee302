//===- ExportFunction.h - Making exports, replaying them on the CPU -*- C++ -*-===//
//
// export_function() compiles every kernel a Function's calls launch for one target and
// records the launches (see <tokamax/export/ExportedFunction.h>, which loads and runs the
// result with the runtime alone). Both entries here need the compiler, so they live in
// libtokamax (CMake target tokamax::tokamax), not in libtokamax_runtime.
//
//   ExportOptions options;
//   options.target = ExportTarget::parse("sm_90a", "NVIDIA H200:9.0");
//   ExportedFunction e = export_function(grad(loss, {0, 1}), options);  // no GPU needed
//   e.save("loss-grad.tkx");
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/compiler/Compiler.h>
#include <tokamax/export/ExportedFunction.h>

#include <functional>
#include <memory>
#include <span>
#include <string>

namespace tokamax {

class AutotuningResult;
class Function;

/// Reported while export_function compiles (the CLI prints it as a progress line).
struct TOKAMAX_API ExportProgress {
  size_t done = 0, total = 0;  ///< kernels compiled, kernels to compile
  std::string kernel;          ///< the kernel being compiled
};

struct TOKAMAX_API ExportOptions {
  ExportTarget target;
  /// Its configs are used for the calls it has (the others take their heuristic).
  std::shared_ptr<const AutotuningResult> autotuning;
  /// opt_level and dump_dir are used; arch comes from the target; assemble is always on.
  CompileOptions compile;
  bool include_ptx = true;  ///< keep each kernel's PTX beside its cubin
  bool include_ir = true;   ///< keep each kernel's tile IR (interpret() needs it)
  std::function<void(const ExportProgress &)> progress;
};

/// Compiles and records `function` for `options.target` with no GPU (see the file
/// comment). The result has been read back through the loader, so it validates. Throws
/// Error when a call's op cannot be exported or a kernel fails to compile (naming it).
TOKAMAX_API ExportedFunction export_function(const Function &function, const ExportOptions &options);

/// The implementation and config `exported` recorded for each call, as an
/// AutotuningResult: under a scope of it, the Function the export was made from resolves
/// the same configs (how a direct run is compared with the export's).
TOKAMAX_API std::shared_ptr<AutotuningResult> recorded_configs(const ExportedFunction &exported);

/// Replays `exported`'s launches on the CPU interpreter (host views), from each kernel's
/// tile IR: a check of the recorded plan that needs no GPU. Throws Error when the export
/// was made without tile IR (ExportOptions::include_ir).
TOKAMAX_API void interpret(const ExportedFunction &exported, std::span<const TensorView> inputs,
                           std::span<const TensorView> outputs);

} // namespace tokamax
