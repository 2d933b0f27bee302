#!/usr/bin/env bash
# The main job: build, then run the examples on the GPU; with no GPU, precompile the
# example kernels for sm_90a with tokamax-compile and run the examples on the CPU
# interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
if nvidia-smi -L > /dev/null 2>&1; then
  for e in vector_add softmax gelu layer_norm matmul attention; do ./build/examples/tokamax-example-$e; done
else
  echo "no GPU: precompiling the registered kernels for sm_90a into build/kernel-cache"
  ./build/tools/tokamax-compile precompile --arch sm_90a --cache-dir build/kernel-cache
  ./build/tools/tokamax-compile ls --cache-dir build/kernel-cache
  for e in vector_add softmax gelu layer_norm matmul attention; do ./build/examples/tokamax-example-$e; done
fi
