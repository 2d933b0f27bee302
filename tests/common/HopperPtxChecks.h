//===- HopperPtxChecks.h - What a kernel on the Hopper primitives compiles to -*- C++ -*-===//
//
// The checks the unit tests make on kernels built from TMA copies, warp roles and wgmma
// products: the PTX's copies, producer warpgroup and products, the launch's tensor maps,
// and, where ptxas is found, that sm_90a assembles it without spills, serialized wgmma
// chains or injected waits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "common/PtxasUtil.h"

#include <catch2/catch.hpp>

#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>

#include <optional>
#include <regex>

namespace test {

struct HopperPtx {
  size_t min_copies = 1;                ///< cp.async.bulk.tensor copies at least
  bool producer = true;                 ///< a producer warpgroup (setmaxnreg.dec once)
  bool no_ldmatrix = true;              ///< every operand from shared memory by descriptor or registers
  size_t tensor_maps = 0;
  std::optional<uint32_t> threads;      ///< the launch's block threads
  bool injected_wait = false;           ///< ptxas may add a warpgroup.wait (C7517) where measured faster anyway
};

inline void check_hopper_ptx(const tokamax::CompiledKernel &compiled, const HopperPtx &want, const std::string &ptxas) {
  const std::string &ptx = compiled.ptx;
  CHECK(count(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global") +
            count(ptx, "cp.async.bulk.tensor.3d.shared::cluster.global") >=
        want.min_copies);
  CHECK(count(ptx, "setmaxnreg.dec.sync.aligned.u32") == (want.producer ? 1u : 0u));
  if (want.no_ldmatrix)
    CHECK(count(ptx, "ldmatrix") == 0);
  CHECK(count(ptx, "mma.sync") == 0);
  CHECK(count(ptx, "wgmma.mma_async.sync.aligned.m64n") > 0);
  CHECK(compiled.launch.tensor_maps.size() == want.tensor_maps);
  // After the roles split (where the warp index is broadcast from lane 0) no barrier of
  // the whole block: the producer would wait there for consumers that never come.
  const size_t split = ptx.find("shfl.sync.idx");
  CHECK(split != std::string::npos);
  CHECK_FALSE(std::regex_search(ptx.substr(split == std::string::npos ? ptx.size() : split),
                                std::regex("bar\\.sync\\s+0;")));
  // Named barriers come from LLVM's convergent intrinsics, never inline asm, which LLVM
  // may copy into both arms of a lane-dependent branch (bar.sync is .aligned: a warp
  // split between two copies hangs).
  CHECK_FALSE(std::regex_search(ptx, std::regex("begin inline asm\\s*\\n\\s*bar\\.(sync|arrive)")));
  if (want.threads)
    CHECK(compiled.launch.block_threads == *want.threads);
  if (ptxas.empty())
    return;
  auto [status, log] = run_ptxas(ptxas, ptx, "sm_90a");
  INFO(log);
  CHECK(status == 0);
  CHECK(count(log, "0 bytes spill stores") == 1);
  CHECK(count(log, "serialized") == 0);
  // No wait added by ptxas (C7517): it comes where a product in flight meets another
  // path, or its registers are shared.
  if (!want.injected_wait)
    CHECK(count(log, "warpgroup.wait is injected") == 0);
}

/// `kernel` lowered to PTX for sm_90a (not assembled).
inline tokamax::CompiledKernel sm90a_ptx(const tokamax::dsl::Kernel &kernel) {
  tokamax::CompileOptions options;
  options.assemble = false;
  options.arch = "sm_90a";
  return tokamax::compile(kernel, options);
}

} // namespace test
