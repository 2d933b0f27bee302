//===- SemaphoreTests.cpp - tile.semaphore_wait / tile.semaphore_signal ----===//
//
// TensorArg::semaphore_wait / semaphore_signal: programs that append to one log in the
// order the semaphore gives (program p waits for p) on the interpreter, in either
// TOKAMAX_INTERPRETER_ORDER (kernels that wait run in grid order); a wait nobody
// signals is reported as a deadlock; the PTX polls with ld.acquire.gpu, barriers and
// signals with red.release.gpu, and assembles for sm_90a and sm_80; the DSL refuses
// what the ops cannot count in.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include "common/PtxasUtil.h"
#include "common/ScopedState.h"
#include "common/SemaphoreKernel.h"

#include <cstdint>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

/// Runs the log kernel on the interpreter from zeroed counters and log; returns {sem, log}.
std::pair<std::vector<int32_t>, std::vector<int32_t>> runLog(const dsl::Kernel &k, int64_t programs) {
  std::vector<int32_t> sem(6, 0), log(static_cast<size_t>(programs + 1), 0);
  std::vector<HostArg> args{HostArg::tensor(sem.data(), sem.size() * 4), HostArg::tensor(log.data(), log.size() * 4)};
  interpret(k, args);
  return {sem, log};
}

} // namespace

TEST_CASE("semaphore: programs append to a log in the semaphore's order on the interpreter",
          "[semaphore][interpreter]") {
  for (bool reverse : {false, true}) {
    INFO("TOKAMAX_INTERPRETER_ORDER " << (reverse ? "reverse" : "unset"));
    test::EnvGuard order("TOKAMAX_INTERPRETER_ORDER", reverse ? "reverse" : nullptr);
    for (int64_t programs : {int64_t(1), int64_t(5), int64_t(16)}) {
      INFO(programs << " programs");
      auto [sem, log] = runLog(test::semaphore_log_kernel(programs), programs);
      CHECK(log == test::semaphore_log_expected(programs));
      // Only counter (1, 2) counts, once per program.
      CHECK(sem == std::vector<int32_t>{0, 0, 0, 0, 0, static_cast<int32_t>(programs)});
    }
  }
}

TEST_CASE("semaphore: a wait that no earlier program signalled is a deadlock on the interpreter",
          "[semaphore][interpreter]") {
  dsl::Kernel k("semaphore_deadlock");
  auto sem = k.output("sem", DType::I32, {2, 3});
  k.grid(3);
  sem.semaphore_wait({1, 2}, k.program_id(0) + 1); // program 0 waits for 1: nobody signals first
  sem.semaphore_signal({1, 2});
  std::vector<int32_t> counters(6, 0);
  std::vector<HostArg> args{HostArg::tensor(counters.data(), counters.size() * 4)};
  CHECK_THROWS_WITH(interpret(k, args), Contains("tile.semaphore_wait on counter [1, 2] waits for 1 but it holds 0 "
                                                 "in program instance (0, 0, 0): a deadlock"));
  // Counters start where the caller left them: from 1, the same kernel runs through.
  counters.assign(6, 0);
  counters[5] = 1;
  interpret(k, args);
  CHECK(counters[5] == 4);
}

TEST_CASE("semaphore: PTX polls with an acquire load, signals with a release add, and assembles",
          "[semaphore][ptx]") {
  for (const char *arch : {"sm_90a", "sm_80"}) {
    INFO(arch);
    CompileOptions options;
    options.arch = arch;
    options.assemble = false;
    CompiledKernel compiled = compile(test::semaphore_log_kernel(8), options);
    const std::string &ptx = compiled.ptx;
    CHECK(test::count(ptx, "ld.acquire.gpu.global.b32") == 1);
    CHECK(test::count(ptx, "red.release.gpu.global.add.s32") == 1);
    CHECK(test::contains(ptx, "bar.sync"));
    // No TMA stores: the signal waits for no bulk group.
    CHECK_FALSE(test::contains(ptx, "cp.async.bulk.wait_group"));
    // The poll comes before the log's load, the release add after its stores.
    const size_t poll = ptx.find("ld.acquire.gpu.global.b32"), add = ptx.find("red.release.gpu.global.add.s32");
    CHECK(poll < add);
    const std::string ptxas = test::ptxas_path();
    if (ptxas.empty())
      WARN("ptxas not found: the PTX is checked textually only");
    else
      test::check_assembles_without_spills(ptxas, ptx, arch);
  }
}

TEST_CASE("semaphore misuse in the DSL is reported with the problem", "[semaphore][dsl]") {
  dsl::Kernel k("bad_semaphore");
  auto f = k.output("f", DType::F32, {4});
  auto c = k.output("c", DType::I32, {4, 2});
  k.grid(1);
  dsl::Value zero = k.constant(0, DType::I32);
  CHECK_THROWS_WITH(f.semaphore_wait({zero}, 1), Contains("semaphore_wait f: counts in an i32 tensor, got f32"));
  CHECK_THROWS_WITH(f.semaphore_signal({zero}), Contains("semaphore_signal f: counts in an i32 tensor, got f32"));
  CHECK_THROWS_WITH(c.semaphore_wait({zero}, 1), Contains("semaphore_wait c: needs 2 offsets (one per dimension), got 1"));
  CHECK_THROWS_WITH(c.semaphore_signal({zero, zero}, k.constant(1.5, DType::F32)),
                    Contains("semaphore_signal: expected an i32 scalar, got f32"));
}
