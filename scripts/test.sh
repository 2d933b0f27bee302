#!/usr/bin/env bash
# Builds everything and runs the tests (unit, IR FileCheck, and GPU tests, which report
# "Skipped" with the reason when no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
ctest --test-dir build --output-on-failure -j2
