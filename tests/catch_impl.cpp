// Catch2's implementation, compiled once for the test binaries (CMakeLists.txt's
// tokamax-catch); each binary's main() runs it through run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "common/CatchSession.h"

int tokamax_test::run_catch_session(int argc, char **argv) { return Catch::Session().run(argc, argv); }
