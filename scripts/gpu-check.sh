#!/usr/bin/env bash
# On a GPU machine: unpack the package, run the GPU tests, the unit tests, the examples
# and the benchmarks; logs go to $OUT (or ./gpu-logs).
#   scripts/gpu-check.sh [PACKAGE] [PART...]
# PACKAGE defaults to .gpu/tokamax.tar.xz. With no PART every part runs (about half an
# hour); each part below fits a 10-minute window:
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
#               "Built without a GPU, waiting for one"): glu-fused, norm-chunks
#   norm-chunks (named only) the norm VJP in row chunks ("chunk_rows": each chunk's
#               coefficient and dx kernels back to back, the second read of x and dy from
#               L2): the variants' device test against float64, then 4096x16384 at the
#               heuristic and in chunks of 128, 256 and 512 rows, twice (about 2 minutes)
#   ragged-stores (named only) ragged_dot's rows kernels with whole tiles stored by TMA
#               ("tma_store": 1): the device test, then the bench shape against the
#               heuristic, alternating, twice, beside torch's grouped mm (about 4 minutes)
#   profiles    (named only) ncu --set full of the hopper forward at S1 and the paged
#               decode's split and combine kernels at batch 1, 4096 keys (about 4 minutes)
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
parts=${parts/next/glu-fused norm-chunks}  # what waits for a GPU, in one call
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
run() { local name=$1; shift; echo "== $name"; "$@" > "$out/$name.log" 2>&1; local rc=$?; last_rc=$rc; tail -n "${TAIL:-15}" "$out/$name.log"; echo "== $name rc=$rc"; [ $rc -eq 0 ] || status=1; }
has_torch() { python3 -c "import torch" 2> /dev/null; }
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

if wants pending; then
  t=(timeout -k 10)
  TAIL=12 run pending-xent "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[cross_entropy]" --durations yes
  TAIL=12 run pending-xent-tma "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[tma_ring][cross_entropy]" \
    --durations yes
  xent_tma_rc=$last_rc
  # Its timings at X1 beside torch's matmul + cross_entropy: tile, and hopper if its
  # TMA-ring numerics passed.
  xent_peers=()
  if has_torch; then
    TAIL=10 run pending-xent-peers "${t[@]}" 120 python3 "$here/../bench/peers/cross_entropy.py" --json "$out/xent-peers.json"
    xent_peers=(--peers "$out/xent-peers.json")
  fi
  xent_impls=tile
  [ $xent_tma_rc -eq 0 ] && xent_impls=tile,hopper
  TAIL=10 run pending-xent-bench "${t[@]}" 240 "$bin/tokamax-cross-entropy-bench" \
    --impl "$xent_impls" "${xent_peers[@]}"
fi
if wants pending3; then
  t=(timeout -k 10)
  # ragged_dot's numerics took more than 100 s for the tma config and hopper's heuristic
  # alone (their float64 references at 1554 x 1024 x 2048, 64 groups, are the host's).
  TAIL=12 run pending-ragged "${t[@]}" 360 "$bin/tokamax-gpu-tests" "[ragged_dot]" --durations yes
  pending_peers=()
  if has_torch; then
    TAIL=10 run pending-ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" --json "$out/ragged-peers.json"
    pending_peers=(--peers "$out/ragged-peers.json")
  fi
  TAIL=14 run pending-ragged-bench "${t[@]}" 120 "$bin/tokamax-ragged-dot-bench" --impl hopper,tile "${pending_peers[@]}"
  TAIL=10 run pending-ragged-bench-6slots "${t[@]}" 90 "$bin/tokamax-ragged-dot-bench" --impl hopper \
    --config '{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"stages":6}' "${pending_peers[@]}"
fi
if wants house; then
  t=(timeout -k 10)
  # The two sets side by side: one after the other they ran past 540 s on a fresh
  # machine (cold kernel cache; the float64 references are the host's, on other cores).
  ( TAIL=12 run house-gpu-tests "${t[@]}" 420 "$bin/tokamax-gpu-tests" "[attention],[matmul],[norm]" --durations yes
    exit $status ) > "$out/house-gpu-tests.console" 2>&1 &
  house_a=$!
  ( TAIL=12 run house-gpu-tests-products "${t[@]}" 420 "$bin/tokamax-gpu-tests" \
      "[glu],[ragged_dot],[cross_entropy],[softmax_cross_entropy]" --durations yes
    exit $status ) > "$out/house-gpu-tests-products.console" 2>&1 &
  house_b=$!
  wait $house_a || status=1
  wait $house_b || status=1
  cat "$out/house-gpu-tests.console" "$out/house-gpu-tests-products.console"
  rm -f "$out/house-gpu-tests.console" "$out/house-gpu-tests-products.console"
  TAIL=8 run house-dispatch-tests "${t[@]}" 60 "$bin/tokamax-dispatch-tests"
  TAIL=12 run house-dispatch "${t[@]}" 60 "$bin/tokamax-bench" --dispatch
  house_peers=()
  if has_torch; then
    TAIL=12 run house-attention-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 \
      --json "$out/house-attention-peers.json"
    house_peers=(--peers "$out/house-attention-peers.json")
  fi
  TAIL=24 run house-attention-bench "${t[@]}" 150 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
    "${house_peers[@]}"
fi
if wants pending2; then
  t=(timeout -k 10)
  # The staged norm VJP: numerics, then every config of the search space timed at the
  # shape it is for (the looping VJP made 55 % of copy there).
  TAIL=8 run pending-norm-staged "${t[@]}" 120 "$bin/tokamax-gpu-tests" "norm implementations and variants on the device"
  TOKAMAX_NORM_SEARCH_SHAPES=4096x16384 TAIL=8 run pending-norm-search "${t[@]}" 180 "$bin/tokamax-gpu-tests" "[gpu-bench]"
  TAIL=10 run pending-glu-persistent "${t[@]}" 150 "$bin/tokamax-gpu-tests" "[glu][persistent]" --durations yes
  if [ $last_rc -eq 0 ]; then
    glu_peers=()
    if has_torch; then
      TAIL=10 run pending-glu-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py" --json "$out/glu-peers.json"
      glu_peers=(--peers "$out/glu-peers.json")
    fi
    TAIL=10 run pending-glu-bench "${t[@]}" 90 "$bin/tokamax-glu-bench" --impl hopper "${glu_peers[@]}"
    TAIL=10 run pending-glu-bench-6slots "${t[@]}" 90 "$bin/tokamax-glu-bench" --impl hopper \
      --config '{"block_m":128,"block_n":128,"block_k":32,"group_m":8,"num_warps":8,"stages":6}' "${glu_peers[@]}"
    for programs in -1 264; do
      TAIL=10 run "pending-glu-bench-programs$programs" "${t[@]}" 90 "$bin/tokamax-glu-bench" --impl hopper \
        --config "{\"block_m\":128,\"block_n\":128,\"block_k\":64,\"group_m\":8,\"num_warps\":8,\"stages\":4,\"programs\":$programs}" \
        "${glu_peers[@]}"
    done
  fi
fi
if wants accuracy; then
  # tokamax-headline-grad writes the inputs and gradients, seed_accuracy.py compares them
  # with float64 (torch) and runs JAX's chain on the same inputs.
  t=(timeout -k 10)
  for regime in seed:1 soft:0.25; do
    name=${regime%:*}
    TAIL=12 run "accuracy-grad-$name" "${t[@]}" 240 "$bin/tokamax-headline-grad" --shape 4,2048,16,64 \
      --scale-factor "${regime#*:}" --out "$out/$name"
    [ $last_rc -eq 0 ] && TAIL=16 run "accuracy-$name" "${t[@]}" 420 python3 "$here/../bench/peers/seed_accuracy.py" \
      "$out/$name" --json "$out/$name-accuracy.json"
    rm -rf "${out:?}/$name"  # about 250 MB of .npy
  done
fi
if wants ahead; then
  t=(timeout -k 10)
  ahead='{"block_q":64,"block_kv":128,"num_warps":8,"stages":2,"stats_ahead":1}'
  ahead_peers=()
  if has_torch; then
    TAIL=8 run ahead-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 --backends cudnn \
      --json "$out/ahead-peers.json"
    ahead_peers=(--peers "$out/ahead-peers.json")
  fi
  for r in 1 2; do
    TAIL=10 run "ahead-heuristic-$r" "${t[@]}" 80 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 "${ahead_peers[@]}"
    TAIL=10 run "ahead-stats-$r" "${t[@]}" 80 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
      --vjp-config "$ahead" "${ahead_peers[@]}"
  done
  TAIL=6 run ahead-headline "${t[@]}" 170 "$bin/tokamax-example-attention"
  TAIL=6 run ahead-headline-jax "${t[@]}" 120 python3 "$here/../bench/peers/headline.py" --json "$out/headline-jax.json"
fi
if wants ragged; then
  t=(timeout -k 10)
  TAIL=6 run tma-window-probe "${t[@]}" 30 python3 "$here/tma-window-probe.py"
  TAIL=12 run ragged-tests "${t[@]}" 300 "$bin/tokamax-gpu-tests" "[persistent][ragged_dot],[tma_ring][ragged_dot]" \
    --durations yes
  ragged_peers=()
  if has_torch; then
    TAIL=6 run ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" --json "$out/ragged-peers.json"
    ragged_peers=(--peers "$out/ragged-peers.json")
  fi
  TAIL=8 run ragged-bench "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper "${ragged_peers[@]}"
  TAIL=8 run ragged-bench-persistent "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper \
    --config '{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"stages":4,"programs":-1}' "${ragged_peers[@]}"
fi
if wants varlen; then
  t=(timeout -k 10)
  TAIL=8 run varlen-tests "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[varlen]" --durations yes
  # Packed beside dense at equal total tokens (B sequences of T), hopper, S1 and S2; cuDNN
  # from the same run.
  varlen_peers=()
  if has_torch; then
    TAIL=6 run varlen-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 \
      --backends cudnn --json "$out/varlen-peers.json"
    varlen_peers=(--peers "$out/varlen-peers.json")
  fi
  TAIL=10 run varlen-dense-bench "${t[@]}" 100 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
    "${varlen_peers[@]}"
  TAIL=10 run varlen-packed-bench "${t[@]}" 100 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 --varlen \
    "${varlen_peers[@]}"
  TAIL=10 run varlen-lengths-bench "${t[@]}" 100 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
    --lengths "${varlen_peers[@]}"
  # The dense heuristic's overlap (Q K^T issued before the previous step's P V) on the
  # packed and length-masked forwards, whose heuristic leaves it out (no pair hidden is
  # its condition): if these beat the rows above, the heuristic takes it for them.
  overlap='{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"overlap":1,"pingpong":1}'
  TAIL=10 run varlen-packed-overlap "${t[@]}" 100 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
    --varlen --config "$overlap" --vjp-config heuristic "${varlen_peers[@]}"
  TAIL=10 run varlen-lengths-overlap "${t[@]}" 100 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2 \
    --lengths --config "$overlap" --vjp-config heuristic "${varlen_peers[@]}"
fi
if wants heuristics2; then
  t=(timeout -k 10)
  # The configs of 2026-12-07's third round A/Bs: the hopper VJP's stats_ahead at head
  # dim 64 ([stats_ahead], bitwise reruns), the packed and length-masked forwards with
  # overlap and the packed VJP with stats_ahead ([varlen]: packed rows bitwise the padded
  # call's, both against float64), the heuristic configs (as they stand), the
  # cross-entropy's [128, 256] logit tiles (its hopper test).
  TAIL=4 run heuristics2-ahead "${t[@]}" 120 "$bin/tokamax-gpu-tests" "[stats_ahead]" --durations yes
  TAIL=4 run heuristics2-attention "${t[@]}" 120 "$bin/tokamax-gpu-tests" "attention hopper's heuristic configs*" \
    --durations yes
  TAIL=4 run heuristics2-varlen "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[varlen]" --durations yes
  [ -n "${TOKAMAX_QUICK:-}" ] || TAIL=4 run heuristics2-xent "${t[@]}" 150 "$bin/tokamax-gpu-tests" \
    "cross_entropy on the device: hopper*" --durations yes
fi
if wants xent-chunks; then
  t=(timeout -k 10)
  # The cross-entropy VJP's V chunk (chunk_v: dlogits [B, chunk] and w's [D, chunk] panel
  # in scratch, 8192 columns at X1 by the 128 MiB budget): larger chunks give the dx and
  # dw products longer K / N and fewer launches, tails and f32 dx round trips, for more
  # memory (32768: about 0.9 GiB, within the target's 10 % of torch's 12 GiB). X1 at
  # each in turn, the first again last, beside torch.
  xc_peers=()
  if has_torch; then
    TAIL=4 run xent-chunks-peers "${t[@]}" 100 python3 "$here/../bench/peers/cross_entropy.py" \
      --json "$out/xent-chunks-peers.json"
    xc_peers=(--peers "$out/xent-chunks-peers.json")
  fi
  round=0
  for chunk in 8192 16384 32768 8192; do  # the first again last: the machine's drift
    round=$((round + 1))
    TAIL=4 run "xent-chunk-$round-$chunk" "${t[@]}" 90 "$bin/tokamax-cross-entropy-bench" --impl hopper --config \
      "{\"block_b\":128,\"block_k\":64,\"block_v\":256,\"num_warps\":8,\"split_v\":2,\"stages\":4,\"chunk_v\":$chunk}" \
      "${xc_peers[@]}"
  done
fi
if wants ahead128; then
  t=(timeout -k 10)
  # stats_ahead at head dim 128 fits the registers only with 32-query dk/dv steps
  # ((H + Hv) / 2 + 2 block_q <= 192): S2 / S3 with them against the heuristic's 64-query
  # steps without and 32-query steps without, alternating, twice, cuDNN from the same
  # call (ptxas for sm_90a: 168 registers, no spills either way; with stats_ahead one
  # injected warpgroup.wait, C7517, unmasked, as at head dim 64 where it won all the same).
  a128_peers=()
  if has_torch; then
    TAIL=4 run ahead128-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" --shapes S2,S3 \
      --backends cudnn --json "$out/ahead128-peers.json"
    a128_peers=(--peers "$out/ahead128-peers.json")
  fi
  for r in 1 2; do
    TAIL=10 run "ahead128-heuristic-$r" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S2,S3 \
      "${a128_peers[@]}"
    TAIL=10 run "ahead128-32-$r" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S2,S3 \
      --vjp-config '{"block_q":32,"block_kv":128,"num_warps":8,"stages":2,"stats_ahead":1}' "${a128_peers[@]}"
    TAIL=10 run "ahead128-32-plain-$r" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S2,S3 \
      --vjp-config '{"block_q":32,"block_kv":128,"num_warps":8,"stages":2}' "${a128_peers[@]}"
  done
fi
if wants rotation; then
  t=(timeout -k 10)
  # f32 TMA stores with their pairs rotated by row (LowerTmaStore.cpp): the reduce-add
  # primitive, the fused-dq VJP (both orders) and the hopper matmul's f32 outputs against
  # float64; then the fused dq at S1 (its H 64) timed against the package before the rotation
  # ($TOKAMAX_OLD_PACKAGE, alternating, twice), adds unordered and ordered.
  TAIL=6 run rotation-tests "${t[@]}" 240 "$bin/tokamax-gpu-tests" \
    "TMA reduce-adds of dot results*,[fused_dq],hopper matmul on the device: configs*" --durations yes
  if old_package; then
    fused='{"block_q":64,"block_kv":128,"num_warps":4,"stages":2,"fused_dq":1}'
    for r in 1 2; do
      for which in old new; do
        b=$bin; [ $which = old ] && b=$old_bin
        TAIL=8 TOKAMAX_CACHE_DIR=$work/cache-$which run "rotation-$which-$r" "${t[@]}" 90 "$b/tokamax-attention-bench" \
          --impl hopper --shapes S1 --vjp-config "$fused" --nondeterministic
      done
    done
    TAIL=8 TOKAMAX_CACHE_DIR=$work/cache-old run rotation-old-ordered "${t[@]}" 90 "$old_bin/tokamax-attention-bench" \
      --impl hopper --shapes S1 --vjp-config "$fused"
    TAIL=8 TOKAMAX_CACHE_DIR=$work/cache-new run rotation-new-ordered "${t[@]}" 90 "$bin/tokamax-attention-bench" \
      --impl hopper --shapes S1 --vjp-config "$fused"
  fi
fi
if wants heuristics; then
  t=(timeout -k 10)
  TAIL=4 run heuristics-attention-tests "${t[@]}" 90 "$bin/tokamax-gpu-tests" "attention hopper's heuristic configs*" \
    --durations yes
  heur_peers=()
  if has_torch; then
    TAIL=6 run heuristics-attention-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1 \
      --backends cudnn --json "$out/heuristics-attention-peers.json"
    heur_peers=(--peers "$out/heuristics-attention-peers.json")
  fi
  TAIL=6 run heuristics-attention-bench "${t[@]}" 40 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
    "${heur_peers[@]}"
  TAIL=12 run heuristics-glu-tests "${t[@]}" 200 "$bin/tokamax-gpu-tests" "[glu]" --durations yes
  glu_peers=()
  if has_torch; then
    TAIL=6 run heuristics-glu-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py" --json "$out/heuristics-glu-peers.json"
    glu_peers=(--peers "$out/heuristics-glu-peers.json")
  fi
  TAIL=6 run heuristics-glu-bench "${t[@]}" 60 "$bin/tokamax-glu-bench" "${glu_peers[@]}"
  ragged_peers=()
  if has_torch; then
    TAIL=6 run heuristics-ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" \
      --json "$out/heuristics-ragged-peers.json"
    ragged_peers=(--peers "$out/heuristics-ragged-peers.json")
  fi
  TAIL=6 run heuristics-ragged-bench "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" "${ragged_peers[@]}"
fi
if wants twoblocks; then
  t=(timeout -k 10)
  TAIL=6 run twoblocks-tests "${t[@]}" 120 "$bin/tokamax-gpu-tests" "[blocks_per_sm]" --durations yes
  two_peers=()
  if has_torch; then
    TAIL=6 run twoblocks-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" --json "$out/twoblocks-peers.json"
    two_peers=(--peers "$out/twoblocks-peers.json")
  fi
  two_vjp='{"block_q":64,"block_kv":128,"num_warps":8,"stages":2}'
  two() { echo "{\"block_q\":64,\"block_kv\":$1,\"num_warps\":4,\"stages\":2,\"blocks_per_sm\":2,\"overlap\":$2}"; }
  TAIL=14 run twoblocks-heuristic "${t[@]}" 120 "$bin/tokamax-attention-bench" --impl hopper "${two_peers[@]}"
  # Overlap under a causal mask at head dim 128 (S3 causal forward ran at 1.09x cuDNN so).
  TAIL=10 run twoblocks-s3-overlap "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S2,S3 \
    --config '{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"pingpong":1,"overlap":1}' \
    --vjp-config "$two_vjp" "${two_peers[@]}"
  for ov in 1 0; do
    TAIL=6 run "twoblocks-s1-overlap$ov" "${t[@]}" 60 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
      --config "$(two 128 $ov)" --vjp-config "$two_vjp" "${two_peers[@]}"
    TAIL=10 run "twoblocks-h128-overlap$ov" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S2,S3 \
      --config "$(two 64 $ov)" --vjp-config "$two_vjp" "${two_peers[@]}"
  done
fi
if wants ragged-sweep; then
  # R1 at configs around the heuristic (persistent [128, 256], 3 stages): which way the
  # remaining gap to torch's grouped mm closes. A config the check refuses prints why.
  t=(timeout -k 10)
  for c in '{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"stages":4,"programs":-1}' \
           '{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"stages":3}' \
           '{"block_m":128,"block_n":256,"block_k":32,"num_warps":8,"stages":6,"programs":-1}' \
           '{"block_m":256,"block_n":128,"block_k":64,"num_warps":8,"stages":3,"programs":-1}' \
           '{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"stages":3,"programs":264}'; do
    TAIL=4 run "ragged-sweep-$(echo "$c" | tr -dc '0-9' | cut -c1-16)" "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" \
      --impl hopper --config "$c"
  done
fi
if wants ragged-stores; then
  t=(timeout -k 10)
  # ragged_dot's rows kernels with tma_store (whole tiles by TMA stores, a group's partial
  # tile by masked stores): the device test against float64, then the bench shape at the
  # heuristic and with tma_store, alternating, twice, beside torch's grouped mm. If it
  # wins, the heuristic takes it.
  TAIL=4 run ragged-stores-tests "${t[@]}" 200 "$bin/tokamax-gpu-tests" "[tma_store]" --durations yes
  rs_peers=()
  if has_torch; then
    TAIL=4 run ragged-stores-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" \
      --json "$out/ragged-stores-peers.json"
    rs_peers=(--peers "$out/ragged-stores-peers.json")
  fi
  heur='{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"stages":3,"programs":-1'
  for r in 1 2; do
    TAIL=4 run "ragged-stores-heuristic-$r" "${t[@]}" 90 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur}" "${rs_peers[@]}"
    TAIL=4 run "ragged-stores-tma-$r" "${t[@]}" 90 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur,\"tma_store\":1}" "${rs_peers[@]}"
  done
fi
if wants norm-chunks; then
  t=(timeout -k 10)
  TAIL=4 run norm-chunks-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "norm implementations and variants on the device" \
    --durations yes
  TAIL=20 run norm-chunks-timed "${t[@]}" 90 "$bin/tokamax-gpu-tests" "[chunk_rows]"
fi
if wants glu-fused; then
  t=(timeout -k 10)
  TAIL=4 run glu-fused-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "[glu][persistent]" --durations yes
  gf_peers=()
  if has_torch; then
    TAIL=4 run glu-fused-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py" --json "$out/glu-fused-peers.json"
    gf_peers=(--peers "$out/glu-fused-peers.json")
  fi
  # The gate kernel's configs carry the forward's keys (the VJP refuses tma_store: its
  # fwd+bwd rows say so and time nothing).
  gate='{"block_m":128,"block_n":128,"block_k":64,"group_m":8,"num_warps":8'
  gf() {  # gf NAME CONFIG: G1 at a gate-kernel config
    TAIL=6 run "glu-fused-$1" "${t[@]}" 40 "$bin/tokamax-glu-bench" --impl hopper --config "$gate,$2}" "${gf_peers[@]}"
  }
  for r in 1 2; do  # (TOKAMAX_QUICK: one round, the heuristic against the first config)
    TAIL=6 run "glu-fused-heuristic-$r" "${t[@]}" 60 "$bin/tokamax-glu-bench" --impl hopper "${gf_peers[@]}"
    gf "s4-persistent-tma-$r" '"stages":4,"programs":-1,"tma_store":1'
    [ -n "${TOKAMAX_QUICK:-}" ] && break
  done
  if [ -z "${TOKAMAX_QUICK:-}" ]; then
    gf s4-persistent '"stages":4,"programs":-1'
    gf s4-tma '"stages":4,"tma_store":1'
    gf s3-persistent-tma '"stages":3,"programs":-1,"tma_store":1'
  fi
fi
if wants xent-reduce; then
  t=(timeout -k 10)
  # The cross-entropy VJP's dx sum by TMA reduce-adds (the hopper matmul's accumulating
  # epilogue: [128, 256] tiles through 4 slots instead of [128, 128] holding c's tile):
  # the hopper device test against float64, then X1 fwd+bwd against $TOKAMAX_OLD_PACKAGE
  # (the package before, alternating, twice) beside torch, then larger V chunks.
  TAIL=4 run xent-reduce-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "cross_entropy on the device: hopper*" \
    --durations yes
  xr_peers=()
  if has_torch; then
    TAIL=4 run xent-reduce-peers "${t[@]}" 100 python3 "$here/../bench/peers/cross_entropy.py" \
      --json "$out/xent-reduce-peers.json"
    xr_peers=(--peers "$out/xent-reduce-peers.json")
  fi
  if old_package; then
    rounds="1 2"; [ -n "${TOKAMAX_QUICK:-}" ] && rounds=1
    for r in $rounds; do
      for which in old new; do
        b=$bin; [ $which = old ] && b=$old_bin
        TAIL=4 TOKAMAX_CACHE_DIR=$work/cache-$which run "xent-reduce-$which-$r" "${t[@]}" 90 \
          "$b/tokamax-cross-entropy-bench" --impl hopper "${xr_peers[@]}"
      done
    done
  fi
  for chunk in 16384 32768; do
    TAIL=4 run "xent-reduce-chunk-$chunk" "${t[@]}" 90 "$bin/tokamax-cross-entropy-bench" --impl hopper --config \
      "{\"block_b\":128,\"block_k\":64,\"block_v\":256,\"num_warps\":8,\"split_v\":2,\"stages\":4,\"chunk_v\":$chunk}" \
      "${xr_peers[@]}"
  done
fi
if wants xent-profile; then
  # Where the cross-entropy VJP's time goes at X1 (hopper, the heuristic): every kernel of
  # one forward + backward under ncu (its duration only), summed per kernel name
  # (xent-profile-new.txt; -old.txt for $TOKAMAX_OLD_PACKAGE where given).
  t=(timeout -k 10)
  for which in new old; do
    b=$bin
    if [ $which = old ]; then  # (not with TOKAMAX_QUICK)
      [ -z "${TOKAMAX_QUICK:-}" ] && old_package || continue
      b=$old_bin
    fi
    TAIL=4 TOKAMAX_CACHE_DIR=$work/cache-$which run "xent-profile-ncu-$which" "${t[@]}" 200 ncu --metrics \
      gpu__time_duration.sum --csv --print-units base -f --log-file "$out/xent-profile-$which.csv" \
      "$b/tokamax-cross-entropy-bench" --impl hopper --iters 1
    python3 - "$out/xent-profile-$which.csv" > "$out/xent-profile-$which.txt" 2>&1 <<'PY'
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
    echo "== xent-profile-$which"; head -20 "$out/xent-profile-$which.txt"
  done
fi
if wants profiles; then
  # ncu --set full of the kernels behind the open misses, the first launch of each: the
  # hopper forward at S1 (0.92x cuDNN) and the paged decode at batch 1, 4096 keys (split
  # and combine: 35 % of copy); details as CSV, the reports tarred.
  t=(timeout -k 10)
  TAIL=4 run profile-forward-s1 "${t[@]}" 150 ncu --set full --kernel-name "regex:attention_flash_forward_hopper" \
    --launch-count 1 -f -o "$out/profile-forward-s1" "$bin/tokamax-attention-bench" --impl hopper --shapes S1 --iters 1
  TAIL=4 run profile-decode-b1 "${t[@]}" 150 ncu --set full --kernel-name "regex:paged_attention_(split|combine)" \
    --launch-count 2 -f -o "$out/profile-decode-b1" "$bin/tokamax-paged-attention-bench" --quick --iters 1
  for r in profile-forward-s1 profile-decode-b1; do
    [ -f "$out/$r.ncu-rep" ] && ncu --import "$out/$r.ncu-rep" --page details --csv > "$out/$r.csv" 2>&1
  done
  (cd "$out" && tar czf profiles-misses.tgz profile-*.ncu-rep profile-*.csv 2> /dev/null && rm -f profile-*.ncu-rep)
fi
if wants varlen-profile; then
  # ncu of the hopper VJP's dk/dv and dq kernels at S1, dense and packed (the same
  # tokens): the first launch of each, every section; the reports tarred, their details
  # as CSV beside them.
  t=(timeout -k 10)
  for mode in dense packed; do
    flag=()
    [ "$mode" = packed ] && flag=(--varlen)
    for kern in dkdv dq; do
      TAIL=4 run "profile-$mode-$kern" "${t[@]}" 120 ncu --set full --kernel-name "regex:attention_flash_${kern}_hopper" \
        --launch-count 1 -f -o "$out/profile-$mode-$kern" "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
        --iters 1 "${flag[@]}"
      ncu --import "$out/profile-$mode-$kern.ncu-rep" --page details --csv > "$out/profile-$mode-$kern.csv" 2>&1
    done
  done
  (cd "$out" && tar czf profiles.tgz profile-*.ncu-rep profile-*.csv && rm -f profile-*.ncu-rep)
fi
if wants xent-hopper; then
  t=(timeout -k 10)
  TAIL=12 run xent-hopper-tests "${t[@]}" 330 "$bin/tokamax-gpu-tests" \
    "[tma_ring][cross_entropy]" --durations yes
  xent_impls=tile
  [ $last_rc -eq 0 ] && xent_impls=tile,hopper
  xent_peers=()
  if has_torch; then
    TAIL=6 run xent-hopper-peers "${t[@]}" 120 python3 "$here/../bench/peers/cross_entropy.py" --json "$out/xent-peers.json"
    xent_peers=(--peers "$out/xent-peers.json")
  fi
  TAIL=10 run xent-hopper-bench "${t[@]}" 200 "$bin/tokamax-cross-entropy-bench" \
    --impl "$xent_impls" "${xent_peers[@]}"
fi
if wants xent-wide; then
  t=(timeout -k 10)
  TAIL=8 run xent-wide-tests "${t[@]}" 330 "$bin/tokamax-gpu-tests" \
    "cross_entropy on the device: hopper*" --durations yes
  if [ $last_rc -eq 0 ]; then
    for round in 1 2; do
      TAIL=4 run "xent-wide-heuristic-$round" "${t[@]}" 90 "$bin/tokamax-cross-entropy-bench" --impl hopper
      for stages in 3 4; do
        TAIL=4 run "xent-wide-$stages-$round" "${t[@]}" 90 "$bin/tokamax-cross-entropy-bench" --impl hopper --config \
          "{\"block_b\":128,\"block_k\":64,\"block_v\":256,\"num_warps\":8,\"split_v\":2,\"stages\":$stages}"
      done
    done
  fi
fi
if wants paged; then
  t=(timeout -k 10)
  TAIL=8 run paged-tests "${t[@]}" 300 "$bin/tokamax-gpu-tests" "[paged_attention]" --durations yes
  [ $last_rc -eq 0 ] && TAIL=16 run paged-bench "${t[@]}" 200 "$bin/tokamax-paged-attention-bench" \
    --json "$out/paged-bench.json"
fi
if wants fresh; then
  t=(timeout -k 10)
  TAIL=6 run fresh-semaphore "${t[@]}" 60 "$bin/tokamax-gpu-tests" "[semaphore]" --durations yes
  TAIL=8 run fresh-paged "${t[@]}" 120 "$bin/tokamax-gpu-tests" "[paged_attention]" --durations yes
  [ $last_rc -eq 0 ] && TAIL=16 run fresh-paged-bench "${t[@]}" 150 "$bin/tokamax-paged-attention-bench" \
    --json "$out/paged-bench.json"
  TAIL=8 run fresh-sinks "${t[@]}" 120 "$bin/tokamax-gpu-tests" "[sinks]" --durations yes
  TAIL=8 run fresh-ordered-dq "${t[@]}" 150 "$bin/tokamax-gpu-tests" "[fused_dq]" --durations yes
  if [ $last_rc -eq 0 ]; then
    # fused_dq serves H 64 (S1) on one consumer warpgroup.
    fused='{"block_q":64,"block_kv":128,"num_warps":4,"stages":2,"fused_dq":1}'
    TAIL=8 run fresh-fused-ordered "${t[@]}" 80 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
      --vjp-config "$fused"
    TAIL=8 run fresh-fused-unordered "${t[@]}" 80 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
      --vjp-config "$fused" --nondeterministic
    TAIL=8 run fresh-heuristic "${t[@]}" 80 "$bin/tokamax-attention-bench" --impl hopper --shapes S1
  fi
fi
if wants python || wants python-quick; then
  # The package's tokamax_cpp and library; the JAX handler compiled afresh into $work.
  t=(timeout -k 10)
  py=(env PYTHONPATH="$work/tokamax/python" TOKAMAX_CPP_LIBRARY="$work/tokamax/lib/libtokamax.so"
      XDG_CACHE_HOME="$work/xdg" PYTHONDONTWRITEBYTECODE=1)
  frameworks=()
  rm -f "$out/python-missing.txt"
  for f in torch jax; do
    if python3 -c "import $f" 2> /dev/null; then frameworks+=("$f"); else echo "no $f: its checks skipped" >> "$out/python-missing.txt"; fi
  done
  [ -f "$out/python-missing.txt" ] && cat "$out/python-missing.txt"
  [ ${#frameworks[@]} -gt 0 ] && TAIL=30 run python-gpu-check "${t[@]}" 200 "${py[@]}" python3 \
    "$here/../tests/python/gpu_check.py" "${frameworks[@]}"
  TAIL=12 run python-pytest "${t[@]}" 120 "${py[@]}" python3 -m pytest "$here/../tests/python" -q -rs \
    -p no:cacheprovider
  if wants python-quick && [[ " ${frameworks[*]} " == *" jax "* ]]; then
    # The command-buffer handler as the default would run it: the jax checks and tests.
    TAIL=16 run python-quick-graphs-check "${t[@]}" 120 "${py[@]}" TOKAMAX_CPP_JAX_COMMAND_BUFFERS=1 python3 \
      "$here/../tests/python/gpu_check.py" jax
    TAIL=8 run python-quick-graphs-pytest "${t[@]}" 120 "${py[@]}" TOKAMAX_CPP_JAX_COMMAND_BUFFERS=1 python3 -m pytest \
      "$here/../tests/python/test_jax.py" -q -rs -p no:cacheprovider
  fi
  wants python || frameworks=()  # python-quick: no seed's program
  [[ " ${frameworks[*]} " == *" jax "* ]] && TAIL=16 run python-seed-program "${t[@]}" 240 "${py[@]}" python3 \
    "$here/../tests/python/seed_program.py" --shape 32,2048,16,64 --json "$out/seed-program.json"
  # The opt-in command-buffer handler: its checks, and the seed's step with it (18.67 ms
  # against 18.64 plain on an H100, 2026-12-07).
  if [[ " ${frameworks[*]} " == *" jax "* ]]; then
    TAIL=16 run python-gpu-check-graphs "${t[@]}" 120 "${py[@]}" TOKAMAX_CPP_JAX_COMMAND_BUFFERS=1 python3 \
      "$here/../tests/python/gpu_check.py" jax
    TAIL=16 run python-seed-program-graphs "${t[@]}" 240 "${py[@]}" TOKAMAX_CPP_JAX_COMMAND_BUFFERS=1 python3 \
      "$here/../tests/python/seed_program.py" --shape 32,2048,16,64 --json "$out/seed-program-graphs.json"
  fi
fi
wants tests && run gpu-tests "$bin/tokamax-gpu-tests" "~[load]~[wgmma]~[matmul]~[tma_ring]~[pingpong]" --durations yes
wants matmul && run gpu-matmul "$bin/tokamax-gpu-tests" "[matmul]" --durations yes
wants load && TOKAMAX_LOAD_SECONDS=60 TAIL=8 run load "$bin/tokamax-gpu-tests" "[load]"
if wants unit; then
  TAIL=4 run unit-tests "$bin/tokamax-unit-tests"
  for e in vector_add softmax gelu layer_norm matmul attention; do TAIL=4 run "example-$e" "$bin/tokamax-example-$e"; done
fi
if wants hopper; then
  # These kernels have not run on a device before: each command gets a time limit, so a
  # hang (an mbarrier phase never completing) is reported and the rest still runs. Each
  # op's numerics, then its timings.
  t=(timeout -k 10)
  TAIL=30 run gpu-hopper-attention "${t[@]}" 150 "$bin/tokamax-gpu-tests" "[tma_ring][attention]" --durations yes
  if [ $last_rc -ne 124 ] && [ $last_rc -ne 137 ]; then  # no timings of kernels that hang
    hopper_peers=()
    if has_torch; then
      TAIL=12 run attention-peers-hopper "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --json "$out/attention-peers-hopper.json"
      hopper_peers=(--peers "$out/attention-peers-hopper.json")
    fi
    TAIL=24 run attention-hopper "${t[@]}" 150 "$bin/tokamax-attention-bench" --impl hopper "${hopper_peers[@]}"
    TAIL=24 run attention-hopper-overlap "${t[@]}" 120 "$bin/tokamax-attention-bench" --impl hopper \
      --config '{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"overlap":1}' \
      --vjp-config '{"block_q":64,"block_kv":64,"num_warps":8,"stages":2}' "${hopper_peers[@]}"
  fi
  TAIL=12 run gpu-hopper-matmul "${t[@]}" 60 "$bin/tokamax-gpu-tests" "[tma_ring][matmul]" --durations yes
  TAIL=14 run matmul-ring "${t[@]}" 60 "$bin/tokamax-matmul-bench" --impl hopper,ring,ring-inorder --iters 10
  tma='{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"async_copy":1,"stages":4,"tma":1}'
  TAIL=8 run gpu-hopper-glu "${t[@]}" 40 "$bin/tokamax-gpu-tests" "[tma_ring][glu]" --durations yes
  TAIL=10 run glu-bench-tma-only "${t[@]}" 35 "$bin/tokamax-glu-bench" --impl tile --config "$tma"
  TAIL=8 run gpu-hopper-ragged "${t[@]}" 40 "$bin/tokamax-gpu-tests" "[tma_ring][ragged_dot]" --durations yes
  TAIL=10 run ragged-dot-bench-tma "${t[@]}" 35 "$bin/tokamax-ragged-dot-bench" --impl tile --config "$tma"
fi
if wants sweep; then
  # The VJP with 128-key dq steps (no spills at H 64 and 128) against the heuristic's 64.
  t=(timeout -k 10)
  TAIL=6 run sass "${t[@]}" 60 "$bin/tokamax-unit-tests" "[sass]" --durations yes  # cuobjdump is there
  # 32-query dk/dv steps keep dP^T in flight at H 128 too.
  for vjp in '{"block_q":64,"block_kv":128,"num_warps":8,"stages":2}' '{"block_q":32,"block_kv":64,"num_warps":8,"stages":2}' \
             '{"block_q":32,"block_kv":128,"num_warps":8,"stages":3}'; do
    TAIL=9 run "sweep-vjp-$(echo "$vjp" | tr -dc '0-9')" "${t[@]}" 60 "$bin/tokamax-attention-bench" --impl hopper \
      --shapes S1,S2 --vjp-config "$vjp"
  done
fi
if wants configs; then
  # Opt-in configs: the attention forward's ping-pong numerics (the heuristic's since
  # the H200 timed it) and its overlap variant; the persistent warp-specialized ring
  # matmul; cross-entropy on TMA rings.
  t=(timeout -k 10)
  TAIL=12 run gpu-pingpong "${t[@]}" 90 "$bin/tokamax-gpu-tests" "[pingpong]" --durations yes
  [ $last_rc -eq 124 ] || [ $last_rc -eq 137 ] || for fwd in '{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"overlap":1,"pingpong":1}'; do
    TAIL=14 run "configs-fwd-$(echo "$fwd" | tr -dc '0-9')" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper \
      --config "$fwd" --vjp-config '{"block_q":64,"block_kv":64,"num_warps":8,"stages":2}'
  done
  TAIL=14 run configs-matmul-ring "${t[@]}" 60 "$bin/tokamax-matmul-bench" --impl hopper,ring,ring-inorder --iters 10
  xent_tma='{"block_b":128,"block_v":128,"block_k":64,"num_warps":8,"tma":1,"stages":3,"split_v":5,"block_d":64}'
  TAIL=10 run configs-xent-tma "${t[@]}" 90 "$bin/tokamax-cross-entropy-bench" --config "$xent_tma"
  TAIL=10 run configs-xent-tile "${t[@]}" 60 "$bin/tokamax-cross-entropy-bench"
fi
if wants sweep || wants tma; then
  t=(timeout -k 10)
  TAIL=10 run gpu-hopper-matmul "${t[@]}" 40 "$bin/tokamax-gpu-tests" "[tma_ring][matmul]" --durations yes
  TAIL=10 run gpu-hopper-ragged "${t[@]}" 80 "$bin/tokamax-gpu-tests" "[tma_ring][ragged_dot]" --durations yes
  TAIL=10 run gpu-hopper-glu "${t[@]}" 110 "$bin/tokamax-gpu-tests" "[tma_ring][glu]" --durations yes
  TAIL=10 run gpu-hopper-xent "${t[@]}" 60 "$bin/tokamax-gpu-tests" "[tma_ring][cross_entropy]" --durations yes
fi
if wants tuned; then
  t=(timeout -k 10)
  tuned_peers=()
  if has_torch; then
    TAIL=12 run attention-peers-tuned "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --json "$out/attention-peers-tuned.json"
    tuned_peers=(--peers "$out/attention-peers-tuned.json")
  fi
  TAIL=30 run attention-hopper-tuned "${t[@]}" 420 "$bin/tokamax-attention-bench" --impl hopper --autotune \
    --json "$out/attention-hopper-tuned.json" "${tuned_peers[@]}"
fi
if wants new; then
  # Products on wgmma (attention's "wgmma" configs, the ring kernel's wgmma and async
  # wgmma dots),
  # Function graph replay and the eager call cache, exports (the rewritten
  # run path, prepare), gated_linear_unit; then the dispatch tests on the real driver
  # and the fixture through the runtime library alone.
  TAIL=30 run gpu-new "$bin/tokamax-gpu-tests" "[wgmma],[graph],[cache],[export],[glu],[ragged_dot],[cross_entropy],double-buffered*" --durations yes
  TAIL=8 run dispatch-tests "$bin/tokamax-dispatch-tests"
  TAIL=8 run export-run "$bin/tokamax-export-run" "$data/export-v1.tkx" --runs 200
fi
if wants bench; then
  TAIL=40 run bench "$bin/tokamax-bench" --json "$out/bench.json"
  if has_torch; then
    (cd "$here/../bench/peers" && TAIL=34 run norm-peers python3 norms.py --json "$out/norm-peers.json")
  fi
  # Load + first run in fresh processes and the per-call overhead against the Function.
  TAIL=20 run export-bench "$bin/tokamax-export-bench" --json "$out/export.json"
  TAIL=24 run matmul-bench "$bin/tokamax-matmul-bench" --impl hopper,ring,ring-inorder,tile --json "$out/matmul.json"
fi
if wants attention; then
  peers=()
  if has_torch; then
    TAIL=20 run attention-peers python3 "$here/../bench/peers/attention.py" --json "$out/attention-peers.json"
    peers=(--peers "$out/attention-peers.json")
  fi
  TAIL=40 run attention-bench "$bin/tokamax-attention-bench" --impl tile,hopper,chunked --json "$out/attention.json" "${peers[@]}"
  # The tile kernels with their products on wgmma (opt-in until measured here).
  for config in '{"block_q":128,"block_kv":64,"num_warps":8,"async_copy":1,"wgmma":1}' \
                '{"block_q":64,"block_kv":64,"num_warps":4,"async_copy":1,"wgmma":1}' \
                '{"block_q":128,"block_kv":128,"num_warps":8,"async_copy":1,"wgmma":1}'; do
    TAIL=20 run "attention-wgmma-$(echo "$config" | tr -dc '0-9' | head -c 12)" "$bin/tokamax-attention-bench" \
      --impl tile --config "$config" --vjp-config '{"block_q":64,"block_kv":64,"num_warps":4,"async_copy":1,"wgmma":1}' \
      "${peers[@]}"
  done
  # gated_linear_unit beside cuBLAS's GEMMs + torch's elementwise kernels.
  glu_peers=()
  if has_torch; then
    TAIL=10 run glu-peers python3 "$here/../bench/peers/glu.py" --json "$out/glu-peers.json"
    glu_peers=(--peers "$out/glu-peers.json")
  fi
  TAIL=10 run glu-bench "$bin/tokamax-glu-bench" --json "$out/glu.json" "${glu_peers[@]}"
  # The same on TMA rings with a producer warpgroup (the opt-in tma config).
  TAIL=10 run glu-bench-tma "$bin/tokamax-glu-bench" --impl tile "${glu_peers[@]}" \
    --config '{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"async_copy":1,"stages":4,"tma":1}'
  # ragged_dot beside torch's grouped mm (or a loop of matmuls).
  ragged_peers=()
  if has_torch; then
    TAIL=10 run ragged-dot-peers python3 "$here/../bench/peers/ragged_dot.py" --json "$out/ragged-dot-peers.json"
    ragged_peers=(--peers "$out/ragged-dot-peers.json")
  fi
  TAIL=10 run ragged-dot-bench "$bin/tokamax-ragged-dot-bench" --json "$out/ragged-dot.json" "${ragged_peers[@]}"
  # linear_softmax_cross_entropy_loss beside torch's matmul + cross_entropy.
  xent_peers=()
  if has_torch; then
    TAIL=10 run cross-entropy-peers python3 "$here/../bench/peers/cross_entropy.py" --json "$out/cross-entropy-peers.json"
    xent_peers=(--peers "$out/cross-entropy-peers.json")
  fi
  TAIL=10 run cross-entropy-bench "$bin/tokamax-cross-entropy-bench" --json "$out/cross-entropy.json" "${xent_peers[@]}"
fi
# Kernels under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) where it is
# installed: the cases below are small enough for the slow tools; a failed assertion
# under any tool fails the check as a tool error does.
if wants sanitize && { command -v compute-sanitizer > /dev/null || ls /usr/local/cuda*/bin/compute-sanitizer > /dev/null 2>&1; }; then
  echo "== sanitize"
  OUT=$out bash "$here/gpu-sanitize.sh" "$bin/tokamax-gpu-tests" "memcheck racecheck synccheck initcheck" \
    "[sanitize],double-buffered*,dot results feed*,reductions over each axis*,norm implementations and variants*,kernel keys whose*,ragged_dot on the device: every dtype*" 900 || status=1
  OUT=$out bash "$here/gpu-sanitize.sh" "$bin/tokamax-gpu-tests" memcheck \
    "hopper matmul with A in registers in order at block_k 16*" 600 || status=1
fi
exit $status
