#!/usr/bin/env bash
# On a GPU machine: runs GPU test cases under compute-sanitizer's tools and fails when a
# tool reports an error or any test assertion fails under any tool (a result that changes
# under a tool's slower memory operations is a synchronisation bug).
#   scripts/gpu-sanitize.sh <tokamax-gpu-tests> "<tools>" "<catch test spec>" [timeout s]
# e.g. scripts/gpu-sanitize.sh bin/tokamax-gpu-tests "memcheck racecheck synccheck initcheck" \
#        "dot results feed*,norm implementations*"
# Logs go to $OUT (or ./gpu-logs); one summary line per tool.
set -uo pipefail
tests=$1 tools=$2 spec=$3 limit=${4:-300}
out=${OUT:-$PWD/gpu-logs}
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
if [ -z "$sanitizer" ]; then
  echo "compute-sanitizer not found" >&2
  exit 2
fi
status=0
for tool in $tools; do
  log="$out/sanitize-$tool.log"
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  timeout "$limit" "$sanitizer" --tool "$tool" "${extra[@]}" --print-limit 20 --error-exitcode 99 \
    "$tests" "$spec" > "$log" 2>&1
  rc=$?
  errors=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$log" | tail -1 | grep -Eo "[0-9]+" || echo "?")
  hazards=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazard" "$log" | tail -1 | grep -Eo "[0-9]+" || true)
  result=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1)
  echo "$tool: rc=$rc errors=$errors${hazards:+ hazards=$hazards} tests: ${result:-none ran}"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
