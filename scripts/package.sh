#!/usr/bin/env bash
# Builds the relocatable package (tools, examples, test binaries included) as a tar.xz:
#   scripts/package.sh [build-dir] [output-dir]
# Its python/ holds tokamax_cpp (PYTHONPATH=tokamax/python finds tokamax/lib/libtokamax.so)
# and, where setuptools and wheel are installed, the package's pure-Python wheel
# (pip install tokamax/python/tokamax_cpp-*.whl; then TOKAMAX_CPP_LIBRARY=tokamax/lib/libtokamax.so).
set -euo pipefail
build=${1:-build}
out=${2:-.gpu}
here=$(cd "$(dirname "$0")" && pwd)
root=$(mktemp -d)
cmake --install "$build" --prefix "$root/tokamax" --strip > /dev/null
rc=0
python3 "$here/build_wheel.py" "$root/tokamax/python" > /dev/null || rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || exit $rc  # 77: no wheel tools (the reason is printed); the tree is there
mkdir -p "$out"
tar -C "$root" -cJf "$out/tokamax.tar.xz" tokamax
rm -rf "$root"
ls -la "$out/tokamax.tar.xz"
