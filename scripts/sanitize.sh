#!/usr/bin/env bash
# Builds the library and unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (the host code that takes users' input and holds resources: runtime, caches, parsers,
# autotuning, exports, the JIT, the op framework, Functions and the ops' validation; the
# interpreter with UBSan only; see CMakeLists.txt) and runs the unit tests of the runtime,
# caches, parsers (with the seeded fuzz loops), autotuning, the interpreter, fault
# injection, bad input at every entry point and Functions (JSON) under them. Any report
# fails the run. What is built as in build/ (the compiler, the kernel builders, the tests)
# comes from ccache after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOKAMAX_SANITIZE=ON \
  -DTOKAMAX_BUILD_EXAMPLES=OFF > /dev/null
cmake --build build-asan --target tokamax-unit-tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TOKAMAX_FUZZ_ITERATIONS=${TOKAMAX_FUZZ_ITERATIONS:-20000}
build-asan/tests/tokamax-unit-tests \
  "[runtime],[cache],[privacy],[hash],[dtype],[tensor],[driver],[maintenance],[concurrency],[fuzz],[autotune],[op],[interpreter],[faults],[bad-input],[function],[kernel-cases],[export]"
