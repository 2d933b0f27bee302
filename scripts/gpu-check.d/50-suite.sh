# Parts of scripts/gpu-check.sh, sourced by it in file-name order (the order the parts
# run in): The whole suite's parts: tests, matmul, load, unit, hopper, sweep, configs, tma,
# tuned, new, bench, attention, sanitize.
# Uses the driver's run, wants, has_torch, old_package, $bin, $out, $here, $work.

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
    TAIL=12 peers hopper_peers attention-peers-hopper attention-peers-hopper "${t[@]}" 90 python3 "$here/../bench/peers/attention.py"
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
  TAIL=12 peers tuned_peers attention-peers-tuned attention-peers-tuned "${t[@]}" 90 python3 "$here/../bench/peers/attention.py"
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
  TAIL=20 peers peers attention-peers attention-peers python3 "$here/../bench/peers/attention.py"
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
  TAIL=10 peers glu_peers glu-peers glu-peers python3 "$here/../bench/peers/glu.py"
  TAIL=10 run glu-bench "$bin/tokamax-glu-bench" --json "$out/glu.json" "${glu_peers[@]}"
  # The same on TMA rings with a producer warpgroup (the opt-in tma config).
  TAIL=10 run glu-bench-tma "$bin/tokamax-glu-bench" --impl tile "${glu_peers[@]}" \
    --config '{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"async_copy":1,"stages":4,"tma":1}'
  # ragged_dot beside torch's grouped mm (or a loop of matmuls).
  TAIL=10 peers ragged_peers ragged-dot-peers ragged-dot-peers python3 "$here/../bench/peers/ragged_dot.py"
  TAIL=10 run ragged-dot-bench "$bin/tokamax-ragged-dot-bench" --json "$out/ragged-dot.json" "${ragged_peers[@]}"
  # linear_softmax_cross_entropy_loss beside torch's matmul + cross_entropy.
  TAIL=10 peers xent_peers cross-entropy-peers cross-entropy-peers python3 "$here/../bench/peers/cross_entropy.py"
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
