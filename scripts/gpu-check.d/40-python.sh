# Parts of scripts/gpu-check.sh, sourced by it in file-name order (the order the parts
# run in): The Python package from torch and JAX: checks, pytest, the seed's program.
# Uses the driver's run, wants, has_torch, old_package, $bin, $out, $here, $work.

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
