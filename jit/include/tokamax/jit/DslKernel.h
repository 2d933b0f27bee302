//===- DslKernel.h - Compile, interpret and run DSL kernels -------*- C++ -*-===//
//
// The entries that take a dsl::Kernel. The compiler, the interpreter and the JIT take
// tile IR text; the DSL builds a kernel on the compiler's tile dialect and prints it as
// tile IR. These entries sit above both, so the compiler never depends on the DSL.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/compiler/Compiler.h>
#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>

#include <span>
#include <string>

namespace tokamax {

class Device;

/// Runs the whole pipeline on the kernel's tile IR (compile_ir).
TOKAMAX_API CompiledKernel compile(const dsl::Kernel &kernel, const CompileOptions &options = {});

/// The shared memory one block of the kernel takes, as the compiler plans it
/// (planned_shared_bytes of its tile IR).
TOKAMAX_API int64_t planned_shared_bytes(const dsl::Kernel &kernel);
/// The same with the blocks of the kernel meant to share an SM (planned_shared).
TOKAMAX_API SharedPlan planned_shared(const dsl::Kernel &kernel);

/// Runs every program instance of the kernel's grid on the host (interpret_ir).
TOKAMAX_API void interpret(const dsl::Kernel &kernel, std::span<HostArg> args);

/// Runs `kernel` once on `device` with host buffers (tensors copied in, outputs copied
/// back), through the JIT and its caches: the device counterpart of interpret().
TOKAMAX_API void run_on_device(const dsl::Kernel &kernel, std::span<HostArg> args, Device &device);

/// Compiles (or reads from `cache_dir`'s disk cache) a kernel without a GPU: the work of
/// `tokamax-compile precompile` (precompile_ir of the kernel's name and IR).
TOKAMAX_API PrecompileResult precompile(const dsl::Kernel &kernel, const CompileOptions &options,
                                        const std::string &cache_dir);

} // namespace tokamax
