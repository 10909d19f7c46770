#!/usr/bin/env bash
# ib_null_check.sh: ferry's ib backend works end to end on fakeibv's
# null-payload device (FAKEIBV_NULL_PAYLOAD=1, set by the caller with the
# rest of the fakeibv environment): ferry-bench's checked run fails its data
# check ("wrong contents": the payload was not moved, yet every message
# completed), and with shared unchecked slots the stream and ping-pong run
# from 16 B to 1 MiB, while fakeibv's exit lines count the skipped payloads.
#
#   bench/ib_null_check.sh FERRY_BENCH PLUGIN
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bench=$1 plugin=$2
[ "${FAKEIBV_NULL_PAYLOAD:-}" = 1 ] ||
  { echo "ib_null_check: FAIL: run with FAKEIBV_NULL_PAYLOAD=1 (and the fakeibv environment)"; exit 1; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_FERRY_BACKEND=ib FAKEIBV_STATS=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
common=(--plugin "$plugin" --mode ferry --conns 1 --reps 1 --time 0.05 --timeout 60)
if "$bench" "${common[@]}" --min 1M --max 1M >"$out" 2>&1; then
  echo "ib_null_check: FAIL: checked data passed through the null device (it moved the payload?)"
  exit 1
fi
grep -q 'wrong contents' "$out" ||
  { echo "ib_null_check: FAIL: the checked run failed without 'wrong contents':"; tail -5 "$out"; exit 1; }
"$bench" "${common[@]}" --mode ferry,pingpong --min 16 --max 1M --pp-min 16 --pp-max 1M \
  --slots 1 >"$out" 2>&1 ||
  { echo "ib_null_check: FAIL: the unchecked run failed:"; tail -5 "$out"; exit 1; }
grep -Eq '^ +1 +1M +[0-9.]+ ' "$out" ||
  { echo "ib_null_check: FAIL: no 1M stream row in the unchecked run:"; tail -5 "$out"; exit 1; }
grep -Eq '^ +1M +[0-9.]+ ' "$out" ||
  { echo "ib_null_check: FAIL: no 1M ping-pong row in the unchecked run:"; tail -5 "$out"; exit 1; }
# Each process of ferry-bench that exits through exit() prints one line (the
# receiver side may end with _exit and print none): its skipped sends and serves.
sent=$(sed -n 's/.*null payload: \([0-9]*\) requests sent without their \([0-9]*\) bytes, \([0-9]*\) served.*/\1 \2 \3/p' "$out" |
  awk '{ s += $1; b += $2; v += $3 } END { print s + 0, b + 0, v + 0 }')
read -r ops bytes served <<<"$sent"
if [ "$ops" -eq 0 ] || [ "$served" -eq 0 ]; then
  echo "ib_null_check: FAIL: fakeibv counted $ops skipped payloads sent, $served served:"
  grep 'null payload' "$out"
  exit 1
fi
echo "ib_null_check: ferry-ib on the null device: checked run 'wrong contents', unchecked 1M" \
  "stream $(awk '$1 == 1 && $2 == "1M" { print $3 " GB/s, " $6 " msg/s" }' "$out"), 1M ping-pong" \
  "$(awk 'NF >= 3 && $1 == "1M" { print $2 " us" }' "$out"); $ops payloads ($bytes bytes) not moved"
