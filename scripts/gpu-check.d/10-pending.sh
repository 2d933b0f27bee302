# Parts of scripts/gpu-check.sh, sourced by it in file-name order (the order the parts
# run in): The first runs of what was built without a GPU (pending, pending2, pending3), the house
# check after a refactor, the headline gradient's accuracy.
# Uses the driver's run, wants, has_torch, old_package, $bin, $out, $here, $work.

if wants pending; then
  t=(timeout -k 10)
  TAIL=12 run pending-xent "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[cross_entropy]" --durations yes
  TAIL=12 run pending-xent-tma "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[tma_ring][cross_entropy]" \
    --durations yes
  xent_tma_rc=$last_rc
  # Its timings at X1 beside torch's matmul + cross_entropy: tile, and hopper if its
  # TMA-ring numerics passed.
  TAIL=10 peers xent_peers xent-peers pending-xent-peers "${t[@]}" 120 python3 "$here/../bench/peers/cross_entropy.py"
  xent_impls=tile
  [ $xent_tma_rc -eq 0 ] && xent_impls=tile,hopper
  TAIL=10 run pending-xent-bench "${t[@]}" 240 "$bin/tokamax-cross-entropy-bench" \
    --impl "$xent_impls" "${xent_peers[@]}"
fi
if wants fp8; then
  t=(timeout -k 10)
  # attention_fp8 on the device: numerics against float64 (hopper's fp8 wgmma, P moved
  # into fp8 operands by quad shuffles or, with interleave_v, renamed; V transposed
  # first; reference), bitwise reruns; then the forward at S1-S3 beside our bf16 hopper
  # forward and cuDNN's bf16 (the target: 1.5x our bf16 forward at S2 / S3).
  TAIL=12 run fp8-tests "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[fp8]" --durations yes
  if [ $last_rc -eq 0 ]; then
    TAIL=8 peers fp8_peers fp8-peers fp8-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" \
      --shapes S1,S2,S3 --backends cudnn
    TAIL=14 run fp8-bench-bf16 "${t[@]}" 200 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2,S3 \
      "${fp8_peers[@]}"
    # interleave_v (V's keys in the accumulator's column order: no shuffles for P) against
    # the same config without it, alternating, twice; then the heuristic's own rows.
    base='{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"overlap":1,"pingpong":1'
    for r in 1 2; do
      TAIL=8 run "fp8-bench-shuffled-$r" "${t[@]}" 120 "$bin/tokamax-attention-bench" --impl hopper \
        --shapes S1,S2,S3 --fp8 --config "$base}"
      TAIL=8 run "fp8-bench-interleaved-$r" "${t[@]}" 120 "$bin/tokamax-attention-bench" --impl hopper \
        --shapes S1,S2,S3 --fp8 --config "$base,\"interleave_v\":1}"
    done
    TAIL=10 run fp8-bench "${t[@]}" 120 "$bin/tokamax-attention-bench" --impl hopper --shapes S1,S2,S3 --fp8 \
      "${fp8_peers[@]}"
    # Where the interleaved forward's time goes at S2 (V's transpose against the forward):
    # one row in this process (--row; the bench runs each row in a child process otherwise).
    kernel_times fp8-kernel-times 120 env TOKAMAX_ATTENTION_BENCH_FP8=1 \
      TOKAMAX_ATTENTION_BENCH_CONFIG="$base,\"interleave_v\":1}" "$bin/tokamax-attention-bench" --row S2 0 fwd hopper 1
  fi
fi
if wants pending3; then
  t=(timeout -k 10)
  # ragged_dot's numerics took more than 100 s for the tma config and hopper's heuristic
  # alone (their float64 references at 1554 x 1024 x 2048, 64 groups, are the host's).
  TAIL=12 run pending-ragged "${t[@]}" 360 "$bin/tokamax-gpu-tests" "[ragged_dot]" --durations yes
  TAIL=10 peers pending_peers ragged-peers pending-ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py"
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
  TAIL=12 peers house_peers house-attention-peers house-attention-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 \
    
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
    TAIL=10 peers glu_peers glu-peers pending-glu-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py"
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
