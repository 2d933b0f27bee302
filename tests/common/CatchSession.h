// Runs Catch2's session: its implementation is compiled once (tests/catch_impl.cpp) for
// the test binaries, whose main() functions call this.
#pragma once

namespace tokamax_test {
int run_catch_session(int argc, char **argv);
}
