#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: every part's command lines printed (its dry run) from
# a stand-in package. Fails where the driver or a part file does not parse, a run fails,
# a part the driver's usage names has no `wants` in gpu-check.d/ (or the reverse), or
# `next` or `next2` names a part that does not exist.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pkg/tokamax/bin"
tar -C "$work/pkg" -cJf "$work/tokamax.tar.xz" tokamax
for f in "$root/scripts/gpu-check.sh" "$root"/scripts/gpu-check.d/*.sh; do
  bash -n "$f" || { echo "does not parse: $f"; exit 1; }
done
defined=$(cat "$root"/scripts/gpu-check.d/*.sh | grep -o "wants [a-z0-9-]*" | awk '{print $2}' | sort -u)
# The usage's part names: "#   NAME  text" lines of the driver's header.
named=$(sed -n '/^#   [a-z0-9][a-z0-9-]* /p' "$root/scripts/gpu-check.sh" | awk '{print $2}' | grep -v '^next2\?$' | sort -u)
missing=$(comm -23 <(echo "$named") <(echo "$defined"))
undocumented=$(comm -13 <(echo "$named") <(echo "$defined"))
[ -z "$missing" ] || { echo "named in the usage, defined nowhere: $missing"; exit 1; }
[ -z "$undocumented" ] || { echo "defined, not in the usage: $undocumented"; exit 1; }
next=$(grep -o 'parts=${parts/next2\?/[^}]*}' "$root/scripts/gpu-check.sh" | sed 's/.*next2\?\///; s/}$//')
for p in $next; do
  grep -qx "$p" <<< "$defined" || { echo "next names an unknown part: $p"; exit 1; }
done
OUT="$work/out" TOKAMAX_GPU_CHECK_DRY=1 TOKAMAX_OLD_PACKAGE="$work/tokamax.tar.xz" \
  bash "$root/scripts/gpu-check.sh" "$work/tokamax.tar.xz" $defined > "$work/dry.txt" 2>&1
rc=$?
commands=$(grep -c '^== [a-z0-9-]*: ' "$work/dry.txt")
echo "gpu-check dry run: rc $rc, $commands commands over $(echo "$defined" | wc -l) parts; next = $next"
[ $rc -eq 0 ] && [ "$commands" -gt 100 ]
