#!/usr/bin/env bash
# cpuload.sh: where the CPUs go during a long steady all_reduce. For each
# configuration (ferry; NCCL Socket 2x2) runs 2 ranks on GPU 0 at one size for
# a few seconds and, mid-run, takes vmstat (whole machine: user/system/idle,
# context switches) and a per-thread top (which threads burn the CPU). Tells
# a CPU-bound run (idle near 0) from one bound elsewhere (GPU, pipeline).
#
#   bench/nccl/cpuload.sh [--size SIZE] [--iters N] [--settle S]
#                         [--variant LABEL:VAR=V[,..]]... [OUTDIR]
#
# --settle: seconds from launch to the samples (default 8: past CUDA and NCCL
# set-up, inside the timed loop; 1000 x 256 MiB lasts 20-40 s on the H200).
#
# Writes OUTDIR/cpuload.md (one section per configuration) and the raw logs.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZE=256M
ITERS=1000
SETTLE=8
OUTDIR_ARG=
CONFIGS=(ferry socket-2x2)
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --settle) SETTLE=$2; shift ;;
    --variant) CONFIGS+=("${2%%:*}"); FNB_VARIANT_ENV[${2%%:*}]=${2#*:}; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cpuload.sh: unknown option $1" >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 NCCL_SET_THREAD_NAME=1
fnb_build_ferry "$OUTDIR/build-ferry.log" || { fnb_log "ferry build failed"; exit 2; }
fnb_build_bench "$OUTDIR/build-bench.log" || { fnb_log "bench build failed"; exit 2; }

# Per thread of the bench's rank processes, over 2 s: context switches
# (voluntary: it slept; involuntary: it was preempted) and where it sleeps
# (wchan, 40 samples), grouped by thread name.
threads_sample() {
  local pids t name t0 secs
  pids=$(pgrep -f ferry_nccl_bench | tr '\n' ' ')
  declare -A v0 n0 name_of wch
  for p in $pids; do
    for t in /proc/"$p"/task/*; do
      tid=${t##*/}
      name_of[$tid]=$(cat "$t/comm" 2>/dev/null)
      v0[$tid]=$(awk '/^voluntary_ctxt/ { print $2 }' "$t/status" 2>/dev/null)
      n0[$tid]=$(awk '/^nonvoluntary_ctxt/ { print $2 }' "$t/status" 2>/dev/null)
    done
  done
  t0=$(date +%s.%N)
  for _ in $(seq 1 40); do
    for tid in "${!name_of[@]}"; do
      for p in $pids; do
        [ -r /proc/"$p"/task/"$tid"/wchan ] || continue
        wch[$tid]+="$(cat /proc/"$p"/task/"$tid"/wchan 2>/dev/null) "
      done
    done
    sleep 0.05
  done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  for p in $pids; do
    for t in /proc/"$p"/task/*; do
      tid=${t##*/}
      [ -n "${v0[$tid]:-}" ] || continue
      name=${name_of[$tid]}
      printf '%s %d %d %s\n' "${name// /_}" \
        $(( $(awk '/^voluntary_ctxt/ { print $2 }' "$t/status" 2>/dev/null || echo 0) - v0[$tid] )) \
        $(( $(awk '/^nonvoluntary_ctxt/ { print $2 }' "$t/status" 2>/dev/null || echo 0) - n0[$tid] )) \
        "$(tr ' ' '\n' <<<"${wch[$tid]:-}" | grep -v '^$' | sort | uniq -c | sort -rn | head -3 | awk '{ printf "%s:%s,", $2, $1 }')"
    done
  done | awk -v secs="$secs" '{ g = $1; sub(/[0-9]+-[0-9]+$/, "N-i", g); sub(/[0-9]+$/, "", g); c[g]++; v[g] += $2; n[g] += $3; w[g] = w[g] " " $4 }
       END { printf "%-24s %7s %12s %12s  %s\n", "threads", "count", "vol cs/s", "invol cs/s", "wchan samples (first thread of each kind)";
             for (g in c) { split(w[g], ws, " "); printf "%-24s %7d %12.0f %12.0f  %s\n", g, c[g], v[g] / secs, n[g] / secs, ws[1] } }'
}

: >"$OUTDIR/cpuload.md"
for cfg in "${CONFIGS[@]}"; do
  log=$OUTDIR/cpuload-$cfg.log
  # shellcheck disable=SC2046 # the configuration's variables are meant to split
  env $(fnb_config_env "$cfg") timeout 300 "$FNB_BENCH" -N 2 -l "$SIZE" -n "$ITERS" -w 5 -o all_reduce \
      --label "$cfg" >"$log" 2>&1 &
  pid=$!
  sleep "$SETTLE"
  vmstat 1 4 >"$OUTDIR/vmstat-$cfg.txt" 2>&1
  top -H -b -n 2 -d 2 -w 200 2>/dev/null | awk "/^top -/ { n++ } n == 2" | head -45 >"$OUTDIR/top-$cfg.txt"
  threads_sample >"$OUTDIR/threads-$cfg.txt" 2>&1
  wait "$pid"
  rc=$?
  {
    echo "## $cfg (exit $rc): all_reduce $SIZE x $ITERS"
    echo
    grep -v '^#' "$log" | grep all_reduce | head -3 | sed 's/^/    /'
    echo
    echo "vmstat (us sy id = user, system, idle %; cs = context switches/s):"
    echo
    sed 's/^/    /' "$OUTDIR/vmstat-$cfg.txt"
    echo
    echo "threads by kind over the sample (context switches per second, where they sleep):"
    echo
    sed 's/^/    /' "$OUTDIR/threads-$cfg.txt"
    echo
    echo "busiest threads:"
    echo
    sed -n '7,30p' "$OUTDIR/top-$cfg.txt" | sed 's/^/    /'
    echo
  } >>"$OUTDIR/cpuload.md"
done
fnb_mps_stop 2>/dev/null || true
cat "$OUTDIR/cpuload.md"
