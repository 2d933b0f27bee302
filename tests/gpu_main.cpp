// GPU tests: skipped, visibly and with the reason, when no GPU is present.
#include "common/CatchSession.h"

#include <tokamax/runtime/Device.h>

#include <cstdio>
#include <exception>

int main(int argc, char **argv) {
  try {
    if (tokamax::Device::count() == 0) {
      std::fprintf(stderr, "SKIPPED: GPU tests need a CUDA device; the driver reports none\n");
      return 77;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "SKIPPED: GPU tests need a CUDA device: %s\n", e.what());
    return 77;
  }
  return tokamax_test::run_catch_session(argc, argv);
}
