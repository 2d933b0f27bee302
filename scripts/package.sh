#!/usr/bin/env bash
# Builds the relocatable package (tools, examples, test binaries included) as a tar.xz:
#   scripts/package.sh [build-dir] [output-dir]
set -euo pipefail
build=${1:-build}
out=${2:-.gpu}
root=$(mktemp -d)
cmake --install "$build" --prefix "$root/tokamax" --strip > /dev/null
mkdir -p "$out"
tar -C "$root" -cJf "$out/tokamax.tar.xz" tokamax
rm -rf "$root"
ls -la "$out/tokamax.tar.xz"
