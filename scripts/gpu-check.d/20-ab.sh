# Parts of scripts/gpu-check.sh, sourced by it in file-name order (the order the parts
# run in): A/B parts: a change beside the heuristic (or $TOKAMAX_OLD_PACKAGE) in one call, with
# the peers where they decide; each names the figure it settles in docs/performance.md.
# Uses the driver's run, wants, has_torch, old_package, $bin, $out, $here, $work.

if wants ahead; then
  t=(timeout -k 10)
  ahead='{"block_q":64,"block_kv":128,"num_warps":8,"stages":2,"stats_ahead":1}'
  TAIL=8 peers ahead_peers ahead-peers ahead-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 --backends cudnn \
    
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
  TAIL=6 peers ragged_peers ragged-peers ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py"
  TAIL=8 run ragged-bench "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper "${ragged_peers[@]}"
  TAIL=8 run ragged-bench-persistent "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper \
    --config '{"block_m":128,"block_n":128,"block_k":64,"num_warps":8,"stages":4,"programs":-1}' "${ragged_peers[@]}"
fi
if wants varlen; then
  t=(timeout -k 10)
  TAIL=8 run varlen-tests "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[varlen]" --durations yes
  # Packed beside dense at equal total tokens (B sequences of T), hopper, S1 and S2; cuDNN
  # from the same run.
  TAIL=6 peers varlen_peers varlen-peers varlen-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1,S2 \
    --backends cudnn
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
  TAIL=4 peers xc_peers xent-chunks-peers xent-chunks-peers "${t[@]}" 100 python3 "$here/../bench/peers/cross_entropy.py" \
    
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
  TAIL=4 peers a128_peers ahead128-peers ahead128-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py" --shapes S2,S3 \
    --backends cudnn
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
  TAIL=6 peers heur_peers heuristics-attention-peers heuristics-attention-peers "${t[@]}" 90 python3 "$here/../bench/peers/attention.py" --shapes S1 \
    --backends cudnn
  TAIL=6 run heuristics-attention-bench "${t[@]}" 40 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
    "${heur_peers[@]}"
  TAIL=12 run heuristics-glu-tests "${t[@]}" 200 "$bin/tokamax-gpu-tests" "[glu]" --durations yes
  TAIL=6 peers glu_peers heuristics-glu-peers heuristics-glu-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py"
  TAIL=6 run heuristics-glu-bench "${t[@]}" 60 "$bin/tokamax-glu-bench" "${glu_peers[@]}"
  TAIL=6 peers ragged_peers heuristics-ragged-peers heuristics-ragged-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" \
    
  TAIL=6 run heuristics-ragged-bench "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" "${ragged_peers[@]}"
fi
if wants twoblocks; then
  t=(timeout -k 10)
  TAIL=6 run twoblocks-tests "${t[@]}" 120 "$bin/tokamax-gpu-tests" "[blocks_per_sm]" --durations yes
  TAIL=6 peers two_peers twoblocks-peers twoblocks-peers "${t[@]}" 120 python3 "$here/../bench/peers/attention.py"
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
  TAIL=4 peers rs_peers ragged-stores-peers ragged-stores-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" \
    
  heur='{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"stages":3,"programs":-1'
  for r in 1 2; do
    TAIL=4 run "ragged-stores-heuristic-$r" "${t[@]}" 90 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur}" "${rs_peers[@]}"
    TAIL=4 run "ragged-stores-tma-$r" "${t[@]}" 90 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur,\"tma_store\":1}" "${rs_peers[@]}"
  done
fi
if wants glu-fused; then
  t=(timeout -k 10)
  TAIL=4 run glu-fused-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "[glu][persistent]" --durations yes
  TAIL=4 peers gf_peers glu-fused-peers glu-fused-peers "${t[@]}" 90 python3 "$here/../bench/peers/glu.py"
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
if wants norm-chunks; then
  t=(timeout -k 10)
  TAIL=4 run norm-chunks-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "norm implementations and variants on the device" \
    --durations yes
  TAIL=20 run norm-chunks-timed "${t[@]}" 90 "$bin/tokamax-gpu-tests" "[chunk_rows]"
fi
if wants ragged-stages; then
  t=(timeout -k 10)
  # ragged_dot's forward with four slots (229,440 bytes with the store strips, as the
  # matmul's [128, 256] ring; ptxas: no spills) against the heuristic's three, alternating,
  # twice, beside torch's grouped mm and our dense matmul (the target: >= 95 % of it). The
  # VJP refuses four slots (its drhs): those rows say so and time nothing.
  TAIL=4 peers rg_peers ragged-stages-peers ragged-stages-peers "${t[@]}" 150 python3 "$here/../bench/peers/ragged_dot.py" \
    
  heur='{"block_m":128,"block_n":256,"block_k":64,"num_warps":8,"programs":-1,"tma_store":1'
  for r in 1 2; do
    TAIL=6 run "ragged-stages-3-$r" "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur,\"stages\":3}" "${rg_peers[@]}"
    TAIL=6 run "ragged-stages-4-$r" "${t[@]}" 60 "$bin/tokamax-ragged-dot-bench" --impl hopper \
      --config "$heur,\"stages\":4}" "${rg_peers[@]}"
  done
fi
if wants varlen-steps; then
  t=(timeout -k 10)
  # Packed sequences at head dim 64 on 256-key steps without overlap (the heuristic now, as
  # the dense forward's; ptxas: no spills) against the 128-key steps with overlap it took
  # before: the packed tests against float64, then S1 packed, alternating, twice, beside
  # the dense heuristic (the target: within 5 % of it).
  TAIL=4 run varlen-steps-tests "${t[@]}" 240 "$bin/tokamax-gpu-tests" "[varlen]" --durations yes
  before='{"block_q":128,"block_kv":128,"num_warps":8,"stages":2,"overlap":1,"pingpong":1}'
  for r in 1 2; do
    TAIL=4 run "varlen-steps-now-$r" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 --varlen
    TAIL=4 run "varlen-steps-before-$r" "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S1 \
      --varlen --config "$before" --vjp-config heuristic
  done
  TAIL=4 run varlen-steps-dense "${t[@]}" 90 "$bin/tokamax-attention-bench" --impl hopper --shapes S1
fi
if wants xent-reduce; then
  t=(timeout -k 10)
  # The cross-entropy VJP's dx sum by TMA reduce-adds (the hopper matmul's accumulating
  # epilogue: [128, 256] tiles through 4 slots instead of [128, 128] holding c's tile):
  # the hopper device test against float64, then X1 fwd+bwd against $TOKAMAX_OLD_PACKAGE
  # (the package before, alternating, twice) beside torch, then larger V chunks.
  TAIL=4 run xent-reduce-tests "${t[@]}" 150 "$bin/tokamax-gpu-tests" "cross_entropy on the device: hopper*" \
    --durations yes
  TAIL=4 peers xr_peers xent-reduce-peers xent-reduce-peers "${t[@]}" 100 python3 "$here/../bench/peers/cross_entropy.py" \
    
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
