#!/usr/bin/env bash
# Installs the build dependencies from Debian 12 packages (idempotent). The CUDA 13
# toolkit (headers, ptxas, nvJitLink) is expected in /usr/local/cuda.
set -euo pipefail
packages=(
  cmake ninja-build ccache g++
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools lld-22 libzstd-dev
  libfmt-dev catch2 nlohmann-json3-dev libcli11-dev libssl-dev zlib1g-dev
  python3-numpy python3-pytest python3-setuptools python3-wheel
  python3-torch  # CPU torch 1.13: tests/python/test_torch.py (f64 gradcheck on the interpreter: 5 s on 2 idle cores)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi
if [ ! -x /usr/local/cuda/bin/ptxas ] && ! command -v ptxas > /dev/null; then
  echo "warning: the CUDA toolkit (ptxas, nvJitLink) was not found; cubins cannot be assembled" >&2
fi
