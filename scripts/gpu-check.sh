#!/usr/bin/env bash
# On a GPU machine: unpack the package, run the GPU tests, the unit tests, the examples
# and the benchmarks; logs go to $OUT (or ./gpu-logs).
#   scripts/gpu-check.sh [PACKAGE] [PART...]
# PACKAGE defaults to .gpu/tokamax.tar.xz. With no PART every part runs (about half an
# hour); each part below fits a 10-minute window. The parts live in scripts/gpu-check.d/
# (sourced in file-name order, the order they run in); TOKAMAX_GPU_CHECK_DRY=1 prints
# each command instead of running it (no GPU needed):
#   tests       GPU tests except load, wgmma and the slow matmul sweeps
#   matmul      the matmul GPU tests
#   load        the 60 s load test
#   unit        unit tests and the examples
#   new         what runs on wgmma, CUDA graphs, the call cache, exports and the new ops
#   hopper      the kernels on the DSL's Hopper primitives (TMA rings, mbarriers, a
#               producer warpgroup): tma_ring matmul, the tma configs of the gated linear
#               unit and ragged_dot, and the hopper attention forward, numerics then
#               timings beside their peers
#   sweep       the SASS tests, hopper attention VJP configs at S1 and S2 (no peers), then
#               the tma part
#   configs     opt-in configs: the attention forward's ping-pong (the heuristic's) numerics
#               and its overlap variant's timings, the persistent ring matmul,
#               cross-entropy on TMA rings
#   tma         the numerics of the tma configs: matmul, ragged_dot, gated_linear_unit,
#               cross-entropy
#   tuned       the hopper attention rows autotuned first (--autotune), beside the peers
#   bench       tokamax-bench (norms, dispatch, graphs) with the norms' torch / XLA peers,
#               export and matmul benchmarks
#   attention   attention and the other ops' benchmarks beside torch, wgmma configs included
#   sanitize    compute-sanitizer on the small kernels
#   pending     the cross-entropy's numerics (tile, then the TMA-ring kernels) and its
#               timings beside torch (ran on an H100 2026-12-07: the first three cases
#               passed, [cross_entropy]'s tma case ran past 240 s; xent-hopper is the
#               TMA-ring part alone)
#   pending3    ragged_dot's numerics (every dtype, the tma config, hopper's heuristic,
#               odd shapes, rows of the bench shape; about 6 minutes) and its timings
#               beside torch's grouped mm (its timings at R1 ran on an H100: 0.71x fwd)
#   house       after a refactor that must change no kernel: the GPU tests of attention,
#               matmul and the norms, then of the product ops and softmax_cross_entropy
#               (numerics against float64), the dispatch tests on
#               the real driver, the host cost of cached calls, and the hopper attention
#               beside torch's SDPA (cuDNN, flash) at S1 and S2
#   pending2    the rest of it: the staged norm VJP's numerics and its configs timed at
#               4096x16384; gated_linear_unit's hopper on persistent grids and with
#               six-slot rings (numerics, then timings beside cuBLAS)
#   python      tokamax_cpp from the package (PYTHONPATH=tokamax/python, the library
#               tokamax/lib/libtokamax.so): tests/python/gpu_check.py (torch and jax on
#               CUDA against their own ops, opcheck, torch.compile, a CUDA graph, jit /
#               grad / vmap, autotune, export, per-call overheads), pytest over
#               tests/python (the checkout's modules, the package's library), and
#               tests/python/seed_program.py: the README's JAX block at (32, 2048, 16, 64)
#               bf16, its jitted gradient step timed beside JAX's own (cuDNN attention,
#               jnp layer norm) in the same process (seed-program.json). Each of torch
#               and jax where installed (the missing one is named in python-missing.txt)
#   ahead       (named only; run it first next time) the hopper VJP with its row
#               statistics loaded a step ahead ("stats_ahead": 1, opt-in) beside the
#               heuristic at S1 and S2, cuDNN from the same run; the headline gradient
#               step (tokamax-example-attention) beside JAX's chain with cuDNN attention
#               (bench/peers/headline.py)
#   fresh       (named only; ran on an H100: see performance.md) what no GPU
#               had run then: the semaphore primitive's ordering; paged_attention and
#               paged_kv_append numerics against float64, then the decode bench (KV GB/s
#               and % of copy at batch 1 / 8 / 64, context 4k / 32k, pages 16 / 64);
#               attention sinks (tile, hopper) forward and VJP against float64 with
#               bitwise reruns; the fused-dq VJP ordered by semaphores (deterministic)
#               and its timings beside the unordered one and the heuristic at S1 / S2
#   twoblocks   (named only) the hopper forward with two programs an SM
#               ("blocks_per_sm": 2, 4 warps; the causal head-dim-64 heuristic since its
#               H200 run): its numerics against float64 with bitwise reruns, then its
#               timings beside the heuristic at S1 / S2 / S3, overlap or not, cuDNN from
#               the same run; and the 8-warp forward with overlap under a causal mask at
#               S2 / S3
#   paged       (named only) paged_attention's GPU tests against float64 (the decode
#               shapes' case takes about 130 s), then the decode bench,
#               every shape (KV GB/s and % of copy, events and CUPTI; ran on an H100
#               2026-12-07)
#   ragged-sweep (named only) ragged_dot at R1 at five configs around the heuristic
#               (stages, K step, tile shape, grid size), no peers (3-5 minutes)
#   varlen-profile (named only; run it first next time) ncu of the hopper VJP's dk/dv
#               and dq kernels at S1, dense and packed (--varlen): why the packed VJP
#               ran at 0.77x the dense one on an H100 (profiles.tgz: reports and CSV)
#   varlen      (named only) packed variable-length attention on the device: each case's
#               padded call against float64, then its packed call bit for bit equal to it
#               (tile and chunked, forward and VJP); then hopper at S1 / S2 dense and
#               packed (--varlen: the same tokens as B sequences of T) and dense with
#               every length T (--lengths: the length masks alone) beside cuDNN; then
#               both forwards with the dense heuristic's overlap config
#   heuristics  (named only; about 6 minutes, ran on an H100 2026-12-07) attention's
#               heuristic configs against float64, the S1 forward beside cuDNN;
#               gated_linear_unit's GPU tests and G1 beside cuBLAS; ragged_dot's R1
#               beside torch's grouped mm at auto's pick
#   ragged      (named only; ran on an H100 2026-12-07) ragged_dot hopper: numerics
#               against float64 ([persistent] and [tma_ring] of [ragged_dot]), then R1
#               beside torch's grouped mm at the heuristic (persistent [128, 256]) and at
#               persistent [128, 128]; first, whether the driver encodes an overlapping
#               "window" tensor map (scripts/tma-window-probe.py: it does)
#   xent-hopper (named only) the cross-entropy's TMA-ring kernels (tile's tma config and
#               hopper) against float64 (about 4 minutes; passed on an H100 2026-12-07),
#               then X1 timings of tile and hopper beside torch's matmul + cross_entropy
#   xent-wide   (named only; run it first next time) the cross-entropy's hopper with
#               256-column logit tiles (search-space configs, 3 and 4 slots): the hopper
#               device test (wide configs at 300x264x1032 included; about 3.5 minutes),
#               then X1 at the heuristic and at each wide config, alternating, twice
#   python-quick (named only) gpu_check.py (torch and jax) and pytest over tests/python,
#               without the seed's program, then the jax checks and test_jax.py with the
#               command-buffer handler (about 3 minutes)
#   next        (run it first next time) what was built without a GPU (performance.md's
#               "Built without a GPU, waiting for one"): fp8 (about 5 minutes)
#   fp8         (named only) attention_fp8 on the device: its GPU tests against float64
#               (hopper and reference, bitwise reruns), then the fp8 forward at S1-S3
#               beside our bf16 hopper forward and cuDNN (about 5 minutes)
#   varlen-steps (named only) packed sequences at head dim 64 on 256-key steps (the
#               heuristic now): the packed tests against float64, then S1 packed against
#               the 128-key steps with overlap, alternating, twice, beside dense (about 3 minutes)
#   ragged-stages (named only) ragged_dot's forward with four slots against three (the
#               heuristic's), alternating, twice, beside torch's grouped mm (about 3 minutes)
#   norm-chunks (named only) the norm VJP in row chunks ("chunk_rows": each chunk's
#               coefficient and dx kernels back to back, the second read of x and dy from
#               L2): the variants' device test against float64, then 4096x16384 at the
#               heuristic and in chunks of 256, 512 and 768 rows, twice (about 2 minutes)
#   ragged-stores (named only) ragged_dot's rows kernels with whole tiles stored by TMA
#               ("tma_store": 1): the device test, then the bench shape against the
#               heuristic, alternating, twice, beside torch's grouped mm (about 4 minutes)
#   profiles    (named only) ncu --set full of the hopper forward at S1, the paged
#               decode's split and combine kernels at batch 1, 4096 keys, and the
#               layer_norm VJP's kernels at 4096x16384 (about 6 minutes)
#   glu-fused   (named only) gated_linear_unit's gate kernel (both products of a tile,
#               then the gate) with its tiles stored by TMA on a persistent grid: the
#               device test ([glu][persistent]), then G1's forward at the heuristic
#               (unfused) and with the gated tiles stored by TMA on a persistent grid,
#               alternating, twice, then three more gate-kernel configs, beside
#               cuBLAS's two GEMMs + torch's gate (about 3 minutes)
#   heuristics2 (named only) the configs of 2026-12-07's third round A/Bs against
#               float64: the hopper VJP with stats_ahead at head dim 64 ([stats_ahead]),
#               the packed forwards with overlap and VJP with stats_ahead ([varlen]), the
#               heuristic configs, the cross-entropy's [128, 256] logit tiles
#               (TOKAMAX_QUICK=1 leaves the last out; about 5 minutes). If they pass,
#               the heuristics take stats_ahead and overlap (git diff ae48b78
#               ae48b78~1 -- ops tests | git apply)
#   xent-reduce (named only) the cross-entropy VJP's dx sum by TMA reduce-adds: the hopper
#               test, X1 against $TOKAMAX_OLD_PACKAGE alternating, larger chunks (about 6 minutes)
#   xent-profile (named only) ncu durations of every kernel of the cross-entropy's X1
#               forward + backward (hopper), summed per kernel name (about 2 minutes)
#   xent-chunks (named only) the cross-entropy VJP's V chunk (chunk_v 8192, the
#               heuristic's at X1, against 16384 and 32768, then 8192 again) at X1 beside
#               torch (about 3 minutes)
#   ahead128    (named only) the hopper VJP at head dim 128 with 32-query dk/dv steps and
#               stats_ahead (where the registers allow it) against the heuristic at S2 /
#               S3 (and the 32-query steps without it), alternating, twice, beside cuDNN
#               (about 5 minutes; timings only)
#   rotation    (named only) f32 TMA stores with their pairs rotated by row (no bank
#               conflicts): the reduce-add, fused-dq and hopper matmul f32-output tests
#               against float64, then the fused dq at S1 beside
#               $TOKAMAX_OLD_PACKAGE (the package before, alternating)
#   accuracy    (named only) the headline gradient (examples/attention.cpp) at 4x2048x16x64
#               against float64, beside JAX's bf16 chain (cuDNN and XLA attention) and
#               tokamax's variants on reference implementations: at the example's inputs
#               (seed-accuracy.json; both attentions nearly one-hot there) and with a
#               quarter of the scale (soft-accuracy.json; spread-out attention). The
#               .npy files the comparison reads are deleted: the logs and the JSON stay
set -uo pipefail
pkg=.gpu/tokamax.tar.xz
if [ $# -gt 0 ] && [ -f "$1" ]; then pkg=$1; shift; fi
parts=${*:-pending pending2 pending3 hopper sweep configs tuned tests matmul load unit new bench attention python sanitize}
parts=${parts/next/fp8}  # what waits for a GPU
out=${OUT:-$PWD/gpu-logs}
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xJf "$pkg"
bin=$work/tokamax/bin
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../tests/data
export TOKAMAX_CACHE_DIR=$work/cache TOKAMAX_TEST_DATA=$data
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
status=0
last_rc=0
# $TOKAMAX_GPU_CHECK_DRY: print each command instead of running it (checks the parts'
# command lines without a GPU).
run() {
  local name=$1; shift
  if [ -n "${TOKAMAX_GPU_CHECK_DRY:-}" ]; then echo "== $name: $*"; last_rc=0; return; fi
  echo "== $name"; "$@" > "$out/$name.log" 2>&1; local rc=$?; last_rc=$rc
  tail -n "${TAIL:-15}" "$out/$name.log"; echo "== $name rc=$rc"; [ $rc -eq 0 ] || status=1
}
has_torch() { python3 -c "import torch" 2> /dev/null; }
# peers VAR FILE NAME COMMAND...: where torch is installed, runs a bench/peers script as
# `run NAME COMMAND... --json $out/FILE.json` and sets the array VAR to the --peers
# arguments that hand its rows to a tokamax bench; without torch VAR is empty.
peers() {
  local -n peer_args=$1
  local file="$out/$2.json"
  shift 2
  peer_args=()
  has_torch || return 0
  run "$@" --json "$file"
  peer_args=(--peers "$file")
}
# $TOKAMAX_OLD_PACKAGE (the package before a change, for A/Bs) unpacked once, its bin in
# $old_bin; fails where none is given.
old_bin=
old_package() {
  [ -n "${TOKAMAX_OLD_PACKAGE:-}" ] && [ -f "$TOKAMAX_OLD_PACKAGE" ] || return 1
  [ -n "$old_bin" ] && return 0
  local dir
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$TOKAMAX_OLD_PACKAGE" && old_bin=$dir/tokamax/bin
}
wants() { [[ " $parts " == *" $1 "* ]]; }
# kernel_times NAME LIMIT COMMAND...: every kernel launch of COMMAND under ncu (its duration
# only; LIMIT seconds at most), summed per kernel name into $out/NAME.txt (the CSV beside it).
kernel_times() {
  local name=$1 limit=$2; shift 2
  TAIL=4 run "$name-ncu" timeout -k 10 "$limit" ncu --metrics gpu__time_duration.sum --csv --print-units base -f \
    --log-file "$out/$name.csv" "$@"
  [ -n "${TOKAMAX_GPU_CHECK_DRY:-}" ] && return
  python3 - "$out/$name.csv" > "$out/$name.txt" 2>&1 <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try:
        total[r[name][:90]] += float(r[value].replace(",", "")) / 1e6
        count[r[name][:90]] += 1
    except ValueError:
        pass
for k, ms in total.most_common():
    print(f"{ms:10.3f} ms {count[k]:5d}x  {k}")
PY
  echo "== $name"; head -20 "$out/$name.txt"
}

# The parts, in file-name order (scripts/gpu-check.d/); each runs where PARTs name it.
for part_file in "$here"/gpu-check.d/*.sh; do
  # shellcheck source=/dev/null
  source "$part_file"
done
exit $status
