# Parts of scripts/gpu-check.sh, sourced by it in file-name order (the order the parts
# run in): ncu profiles, the cross-entropy's TMA-ring parts, paged decode, the fresh-process
# first call.
# Uses the driver's run, wants, has_torch, old_package, $bin, $out, $here, $work.

if wants xent-profile; then
  # Where the cross-entropy VJP's time goes at X1 (hopper, the heuristic): every kernel of
  # one forward + backward under ncu (its duration only), summed per kernel name
  # (xent-profile-new.txt; -old.txt for $TOKAMAX_OLD_PACKAGE where given).
  for which in new old; do
    b=$bin
    if [ $which = old ]; then  # (not with TOKAMAX_QUICK)
      [ -z "${TOKAMAX_QUICK:-}" ] && old_package || continue
      b=$old_bin
    fi
    TOKAMAX_CACHE_DIR=$work/cache-$which kernel_times "xent-profile-$which" 200 \
      "$b/tokamax-cross-entropy-bench" --impl hopper --iters 1
  done
fi
if wants profiles; then
  # ncu --set full of the kernels behind the open misses, the first launch of each: the
  # hopper forward at S1 (0.92x cuDNN) and the paged decode at batch 1, 4096 keys (split
  # and combine: 35 % of copy); details as CSV, the reports tarred.
  t=(timeout -k 10)
  # (The attention bench's rows run in-process only with --row: under ncu its child
  # processes showed no kernels, in the seventh round of 2026-12-07.)
  TAIL=4 run profile-forward-s1 "${t[@]}" 150 ncu --set full --kernel-name "regex:attention_flash_forward_hopper" \
    --launch-count 1 -f -o "$out/profile-forward-s1" "$bin/tokamax-attention-bench" --row S1 0 fwd hopper 1
  TAIL=4 run profile-decode-b1 "${t[@]}" 150 ncu --set full --kernel-name "regex:paged_attention_(split|combine)" \
    --launch-count 2 -f -o "$out/profile-decode-b1" "$bin/tokamax-paged-attention-bench" --quick --iters 1
  # The layer_norm VJP at 4096x16384 (55 % of copy): its coefficient and dx kernels at
  # the heuristic, the first of the [chunk_rows] timing test's calls.
  TAIL=4 run profile-norm-vjp "${t[@]}" 150 ncu --set full --kernel-name "regex:layer_norm_vjp_(coef|dx)" \
    --launch-count 2 -f -o "$out/profile-norm-vjp" "$bin/tokamax-gpu-tests" "[chunk_rows]"
  for r in profile-forward-s1 profile-decode-b1 profile-norm-vjp; do
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
    packed=()  # (--varlen's variable: the bench's rows run in-process only with --row)
    [ "$mode" = packed ] && packed=(TOKAMAX_ATTENTION_BENCH_VARLEN=1)
    for kern in dkdv dq; do
      TAIL=4 run "profile-$mode-$kern" "${t[@]}" 120 env "${packed[@]}" ncu --set full \
        --kernel-name "regex:attention_flash_${kern}_hopper" --launch-count 1 -f -o "$out/profile-$mode-$kern" \
        "$bin/tokamax-attention-bench" --row S1 0 fwd+bwd hopper 1
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
  TAIL=6 peers xent_peers xent-peers xent-hopper-peers "${t[@]}" 120 python3 "$here/../bench/peers/cross_entropy.py"
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
