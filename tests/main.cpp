// Unit tests: Catch2's session as it comes (its implementation is catch_impl.cpp).
#include "common/CatchSession.h"

int main(int argc, char **argv) { return tokamax_test::run_catch_session(argc, argv); }
