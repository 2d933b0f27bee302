// Programs appending to one log in a fixed order through a global-memory semaphore
// (TensorArg::semaphore_wait / semaphore_signal), as the deterministic attention VJP
// orders each query block's dq additions: program p waits until counter (1, 2) of
// `sem` [2, 3] holds p, reads the log's cursor log[0], writes p at log[1 + cursor],
// bumps the cursor, then signals the counter. The log ends [programs, 0, 1, ...,
// programs - 1] whatever order the programs start in, and the counter at `programs`.
// The unit tests run it on the interpreter and check the PTX, the GPU tests on the device.
#pragma once

#include <tokamax/dsl/Kernel.h>

#include <cstdint>
#include <vector>

namespace test {

inline tokamax::dsl::Kernel semaphore_log_kernel(int64_t programs, int num_warps = 4) {
  namespace dsl = tokamax::dsl;
  using tokamax::DType;
  dsl::Kernel k("semaphore_log", {.num_warps = num_warps});
  auto sem = k.output("sem", DType::I32, {2, 3});
  auto log = k.output("log", DType::I32, {programs + 1});
  k.grid(programs);
  dsl::Value p = k.program_id(0);
  sem.semaphore_wait({1, 2}, p);
  dsl::Value cursor = log.load({0}, {1});
  log.store({cursor.sum(0) + 1}, k.full({1}, 0.0, DType::I32) + p);
  log.store({0}, cursor + 1);
  sem.semaphore_signal({1, 2});
  return k;
}

/// The log after every program's append.
inline std::vector<int32_t> semaphore_log_expected(int64_t programs) {
  std::vector<int32_t> log{static_cast<int32_t>(programs)};
  for (int64_t p = 0; p < programs; ++p)
    log.push_back(static_cast<int32_t>(p));
  return log;
}

} // namespace test
