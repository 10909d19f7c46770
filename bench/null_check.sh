#!/usr/bin/env bash
# null_check.sh: libnccl-net-ferry-null.so (FERRY_SOCK_NULL_PAYLOAD) carries no
# payload and nothing else changes: ferry-bench through it fails its data check
# ("wrong contents"), and with shared unchecked slots it runs and reports GB/s.
#
#   bench/null_check.sh FERRY_BENCH NULL_PLUGIN
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bench=$1 plugin=$2
export NCCL_SOCKET_IFNAME=lo
out=$(mktemp)
trap 'rm -f "$out"' EXIT
common=(--plugin "$plugin" --mode ferry --min 1M --max 1M --conns 1 --reps 1 --time 0.2 --timeout 60)
if "$bench" "${common[@]}" >"$out" 2>&1; then
  echo "null_check: FAIL: checked data passed through the null plugin (it moved the payload?)"
  exit 1
fi
grep -q 'wrong contents' "$out" ||
  { echo "null_check: FAIL: the checked run failed without 'wrong contents':"; tail -5 "$out"; exit 1; }
"$bench" "${common[@]}" --slots 1 >"$out" 2>&1 ||
  { echo "null_check: FAIL: the unchecked run failed:"; tail -5 "$out"; exit 1; }
grep -Eq '^ +1 +1M +[0-9.]+ ' "$out" ||
  { echo "null_check: FAIL: no 1M row in the unchecked run:"; tail -5 "$out"; exit 1; }
echo "null_check: the null plugin moves headers only (checked run: wrong contents; unchecked: $(awk '$2 == "1M" { print $3 " GB/s" }' "$out"))"
