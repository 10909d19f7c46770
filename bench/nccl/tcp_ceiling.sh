#!/usr/bin/env bash
# tcp_ceiling.sh: what this machine's loopback TCP moves for a 2-rank job, the
# ceiling NCCL-over-sockets numbers are read against. Two raw-TCP ferry-bench
# runs at once (one per direction of the job), each C connections x 4 streams,
# 64 MiB messages, 8 in flight per connection: plain send/recv loops, no
# plugin. For each C in --conns (default 2,4: 8 and 16 streams each way)
# prints GB/s per direction for every repetition and the median; the ceiling
# is the best median. Writes ceiling.csv (all rows) and ceiling.md in OUTDIR.
#
#   bench/nccl/tcp_ceiling.sh [--reps N] [--size SIZE] [--conns LIST] [OUTDIR]
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPS=3
SIZE=64M
CONNS=2,4
OUTDIR_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    --reps) REPS=$2; shift ;;
    --size) SIZE=$2; shift ;;
    --conns) CONNS=$2; shift ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
export NCCL_SOCKET_IFNAME=lo
unset NCCL_FERRY_STREAMS NCCL_FERRY_THREADS NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD

fnb_build_ferry "$OUTDIR/build-ferry.log" || { fnb_log "ferry build failed"; exit 2; }
if ! cmake --build "$FNB_BUILD" -j "$(nproc)" --target ferry-bench >>"$OUTDIR/build-ferry.log" 2>&1; then
  fnb_log "ferry-bench build failed (needs cmake): see $OUTDIR/build-ferry.log"
  exit 2
fi
FB=$FNB_BUILD/bench/ferry-bench
rm -f "$OUTDIR"/ceiling*.csv "$OUTDIR/ceiling.txt"
best=
for c in ${CONNS//,/ }; do
  for rep in $(seq 1 "$REPS"); do
    for dir in a b; do
      "$FB" --plugin "$FNB_PLUGIN" --mode raw --conns "$c" --depth 8 --min "$SIZE" --max "$SIZE" \
            --reps 1 --time 1 --timeout 120 --csv "$OUTDIR/ceiling-$c-$rep-$dir.csv" \
            >"$OUTDIR/ceiling-$c-$rep-$dir.log" 2>&1 &
    done
    wait
    # The two runs overlap in time, one per direction.
    awk -F, -v rep="$rep" -v c="$c" 'FNR > 1 && $2 == "raw" { s += $11; n++ }
        END { if (n) printf "%d streams each way, rep %s: %.2f GB/s per direction\n", c * 4, rep, s / n }' \
        "$OUTDIR"/ceiling-"$c"-"$rep"-?.csv
  done | tee -a "$OUTDIR/ceiling.txt"
  med=$(grep "^$((c * 4)) streams" "$OUTDIR/ceiling.txt" | awk '{ print $(NF - 3) }' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
  echo "$((c * 4)) streams each way: median $med GB/s per direction" | tee -a "$OUTDIR/ceiling.txt"
  if [ -n "$med" ] && { [ -z "$best" ] || awk -v a="$med" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then
    best=$med
  fi
done
cat "$OUTDIR"/ceiling-*.csv >"$OUTDIR/ceiling.csv"
{
  echo "# loopback TCP ceiling: ${best:-?} GB/s per direction (best median over ${CONNS//,/, } connections x 4 streams)"
  echo
  echo "Two raw-TCP ferry-bench runs at once, one per direction ($SIZE messages, depth 8):"
  echo
  sed 's/^/    /' "$OUTDIR/ceiling.txt"
} >"$OUTDIR/ceiling.md"
cat "$OUTDIR/ceiling.md"
[ -n "$best" ]
