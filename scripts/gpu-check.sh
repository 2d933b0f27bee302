#!/usr/bin/env bash
# On a GPU machine: unpack the package, run the GPU tests, the unit tests, the examples
# and the benchmarks; logs go to $OUT (or ./gpu-logs).
#   scripts/gpu-check.sh .gpu/tokamax.tar.xz
set -uo pipefail
pkg=${1:-.gpu/tokamax.tar.xz}
out=${OUT:-$PWD/gpu-logs}
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xJf "$pkg"
bin=$work/tokamax/bin
export TOKAMAX_CACHE_DIR=$work/cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
status=0
run() { local name=$1; shift; echo "== $name"; "$@" > "$out/$name.log" 2>&1; local rc=$?; tail -n "${TAIL:-15}" "$out/$name.log"; echo "== $name rc=$rc"; [ $rc -eq 0 ] || status=1; }
run gpu-tests "$bin/tokamax-gpu-tests" "~[load]" --durations yes
TOKAMAX_LOAD_SECONDS=60 TAIL=8 run load "$bin/tokamax-gpu-tests" "[load]"
TAIL=4 run unit-tests "$bin/tokamax-unit-tests"
for e in vector_add softmax gelu layer_norm matmul attention; do TAIL=4 run "example-$e" "$bin/tokamax-example-$e"; done
TAIL=30 run bench "$bin/tokamax-bench" --json "$out/bench.json"
# Exports: the fixture through the runtime library alone, then load + first run in fresh
# processes and the per-call overhead against the Function (tokamax-export-bench).
data=$(dirname "$0")/../tests/data
TAIL=8 run export-run "$bin/tokamax-export-run" "$data/export-v1.tkx" --runs 200
TAIL=20 run export-bench "$bin/tokamax-export-bench" --json "$out/export.json"
TAIL=20 run matmul-bench "$bin/tokamax-matmul-bench" --json "$out/matmul.json"
# Attention beside torch's SDPA (flash and cuDNN backends) where torch is installed.
peers=()
if python3 -c "import torch" 2> /dev/null; then
  TAIL=20 run attention-peers python3 "$(dirname "$0")/../bench/peers/attention.py" --json "$out/attention-peers.json"
  peers=(--peers "$out/attention-peers.json")
fi
TAIL=40 run attention-bench "$bin/tokamax-attention-bench" --impl tile,chunked --json "$out/attention.json" "${peers[@]}"
# gated_linear_unit beside cuBLAS's GEMMs + torch's elementwise kernels, where torch is installed.
glu_peers=()
if python3 -c "import torch" 2> /dev/null; then
  TAIL=10 run glu-peers python3 "$(dirname "$0")/../bench/peers/glu.py" --json "$out/glu-peers.json"
  glu_peers=(--peers "$out/glu-peers.json")
fi
TAIL=10 run glu-bench "$bin/tokamax-glu-bench" --json "$out/glu.json" "${glu_peers[@]}"
# linear_softmax_cross_entropy_loss beside torch's matmul + cross_entropy, where torch is installed.
xent_peers=()
if python3 -c "import torch" 2> /dev/null; then
  TAIL=10 run cross-entropy-peers python3 "$(dirname "$0")/../bench/peers/cross_entropy.py" --json "$out/cross-entropy-peers.json"
  xent_peers=(--peers "$out/cross-entropy-peers.json")
fi
TAIL=10 run cross-entropy-bench "$bin/tokamax-cross-entropy-bench" --json "$out/cross-entropy.json" "${xent_peers[@]}"
# Kernels under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) where it is
# installed: the cases below are small enough for the slow tools; a failed assertion
# under any tool fails the check as a tool error does.
if command -v compute-sanitizer > /dev/null || ls /usr/local/cuda*/bin/compute-sanitizer > /dev/null 2>&1; then
  echo "== sanitize"
  OUT=$out bash "$(dirname "$0")/gpu-sanitize.sh" "$bin/tokamax-gpu-tests" "memcheck racecheck synccheck initcheck" \
    "[sanitize],double-buffered*,dot results feed*,reductions over each axis*,norm implementations and variants*,kernel keys whose*" 900 || status=1
  OUT=$out bash "$(dirname "$0")/gpu-sanitize.sh" "$bin/tokamax-gpu-tests" memcheck \
    "hopper matmul with A in registers in order at block_k 16*" 600 || status=1
fi
exit $status
