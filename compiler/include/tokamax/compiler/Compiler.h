//===- Compiler.h - Tile IR -> PTX -> cubin -----------------------*- C++ -*-===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/LaunchInfo.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tokamax {

/// Knobs that change generated code; all of them are part of the kernel cache key.
struct TOKAMAX_API CompileOptions {
  std::string arch = "sm_90a";  ///< sm_80 or sm_90a (or another sm_XY[a], as Arch::parse reads it)
  int opt_level = 3;            ///< LLVM optimisation level
  bool assemble = true;         ///< produce a cubin, not only PTX
  std::string dump_dir;         ///< when set: every stage written under <dump_dir>/<kernel>/

  /// Printable form for cache keys, e.g. "opt=3".
  std::string key() const;
};

struct TOKAMAX_API StageTime {
  std::string stage;
  double ms = 0;
};

struct TOKAMAX_API CompiledKernel {
  std::string canonical_ir;  ///< the tile IR the kernel was compiled from
  std::string arch;
  std::string ptx;
  std::vector<uint8_t> cubin;  ///< empty when not assembled
  LaunchInfo launch;
  std::vector<StageTime> stages;
};

/// PTX ISA version every kernel is emitted for (pinned so that cached PTX and cubins
/// do not depend on LLVM's default).
TOKAMAX_API const char *ptx_isa_version();
/// "LLVM 22.1.8".
TOKAMAX_API std::string llvm_version();

/// Runs the whole pipeline on tile IR text (as dsl::Kernel::ir() prints it): tile IR ->
/// layouts -> LLVM/NVVM -> PTX -> cubin. Throws tokamax::Error with the compiler's
/// diagnostics when a stage fails. compile() of a dsl::Kernel: <tokamax/jit/DslKernel.h>.
TOKAMAX_API CompiledKernel compile_ir(const std::string &ir, const CompileOptions &options = {});

/// The bytes of shared memory one block of the kernel takes, as compile_ir plans them
/// (its launch.shared_bytes on every target: shared memory is planned before the IR is
/// lowered to one), without lowering the kernel: the figure configs are checked against.
/// Throws tokamax::Error with the compiler's diagnostics when a stage fails.
TOKAMAX_API int64_t planned_shared_bytes(const std::string &ir);

/// planned_shared_bytes, and the blocks of the kernel meant to share an SM
/// (KernelOptions::blocks_per_sm, the IR's tile.blocks_per_sm; 1 where unset): each
/// such block gets its share of the SM's shared memory.
struct SharedPlan {
  int64_t bytes = 0;
  int blocks_per_sm = 1;
};
TOKAMAX_API SharedPlan planned_shared(const std::string &ir);

/// The stages of the pipeline, in order, as one line each (for documentation and tools).
TOKAMAX_API std::vector<std::string> pipeline_stages();

/// The assembler used for PTX -> cubin: "nvJitLink <version>", "ptxas <version>" or "none".
TOKAMAX_API std::string assembler_identity();
/// The assembler generation that goes into cache keys ("cuda-13"): any CUDA 13 assembler
/// turns the pinned PTX into equivalent cubins, and it needs no toolkit to compute.
TOKAMAX_API std::string assembler_key();
/// Assembles PTX for `arch` into a cubin (nvJitLink in process, else a ptxas process).
TOKAMAX_API std::vector<uint8_t> assemble_ptx(const std::string &ptx, const std::string &arch);

/// Runs mlir-opt-like command-line processing with the tile dialect and passes registered
/// (the body of tokamax-opt).
TOKAMAX_API int run_opt_main(int argc, char **argv);

} // namespace tokamax
