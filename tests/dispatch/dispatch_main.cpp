// Host-side dispatch tests: the eager call cache and Function plans and graphs, checked
// by what they resolve, cache and capture, not by numbers. ctest runs them under the
// null driver (tests/nulldriver) on machines with no GPU; they hold on a GPU too.
#include "common/CatchSession.h"

#include <tokamax/runtime/Device.h>

#include <cstdio>
#include <exception>

int main(int argc, char **argv) {
  try {
    if (tokamax::Device::count() == 0) {
      std::fprintf(stderr, "SKIPPED: dispatch tests need a CUDA driver (or the null driver: "
                           "TOKAMAX_CUDA_DRIVER=libtokamax-null-cuda.so); it reports no device\n");
      return 77;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "SKIPPED: dispatch tests need a CUDA driver (or the null driver): %s\n", e.what());
    return 77;
  }
  return tokamax_test::run_catch_session(argc, argv);
}
