#!/usr/bin/env bash
# census.sh: N ranks through ferry on the GPUs present (every channel over the
# network plugin), then what a stuck job would show: the thread census of each
# rank (ps -T: names, CPU, final CPU masks) and ferry's counter dump, taken
# while an all_reduce loop runs. Finally ferry vs NCCL Socket (default, 1x1, 2x2)
# with N ranks, interleaved, --reps times.
#
#   bench/nccl/census.sh [-N ranks] [--reps N] [OUTDIR]     (default 4 ranks, 3 reps)
#
# With one GPU the ranks share it (NCCL_HOSTID per rank, MPS); with N GPUs,
# rank r uses GPU r and NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 force the network.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NRANKS=4
REPS=3
OUTDIR_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    -N) NRANKS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    -*) sed -n '2,12p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
unset NCCL_NET NCCL_NET_PLUGIN NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD

# The census: ranks run a long all_reduce loop; we look at them from outside.
census() {
  local out=$OUTDIR/census.txt pids p
  NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry NCCL_FERRY_DUMP_SIGNAL=USR1 \
    "$FNB_BENCH" -N "$NRANKS" -o all_reduce -l 64M -n 4000 -w 5 -T 150 \
    >"$OUTDIR/logs/census-run.log" 2>&1 &
  local bench=$!
  sleep 10
  pids=$(pgrep -P "$bench" | tr '\n' ' ')
  {
    echo "# $(date -Is) $NRANKS ranks, $(nproc) CPUs, ranks: $pids"
    for p in $pids; do
      echo "## rank pid $p: threads (tid, name, last CPU, allowed CPUs)"
      for t in /proc/"$p"/task/*; do
        printf '%s %s cpu=%s allowed=%s\n' "${t##*/}" "$(cat "$t/comm")" \
          "$(awk '{print $39}' "$t/stat")" "$(grep Cpus_allowed_list "$t/status" | cut -f2)"
      done | sort -k2
      echo "## rank pid $p: ferry threads: $(grep -l '^ferry-' /proc/"$p"/task/*/comm | wc -l)"
      kill -USR1 "$p"
    done
  } >"$out" 2>&1
  wait "$bench"
  echo "## census run exit $?" >>"$out"
  # Per comm: its line, lane 0, the helper threads' wake-ups per chunk, a request or two.
  grep -h 'NET/ferry :' "$OUTDIR/logs/census-run.log" \
    | grep -E 'dump of|comm 0x|lane 0:|thread 0 \(|helper wake-ups|req seq' | head -120 >>"$out"
  fnb_log "census: $(grep -c 'ferry-' "$out") ferry thread lines, $(grep -c 'dump of' "$out") dumps"
}

compare_n() {
  local rep cfg env
  for rep in $(seq "$REPS"); do
    for cfg in ferry socket-default socket-1x1 socket-2x2; do
      env=$(fnb_config_env "$cfg")
      # shellcheck disable=SC2086 # NAME=value words
      env $env "$FNB_BENCH" -N "$NRANKS" -o all_reduce -l 4K,512K,64M,256M -n 200 -w 5 \
        --iter-bytes 256M -T 120 --label "$cfg" --csv "$OUTDIR/raw-n$NRANKS.csv" \
        >"$OUTDIR/logs/n$NRANKS-rep$rep-$cfg.log" 2>&1
      fnb_log "N=$NRANKS rep $rep $cfg: exit $?"
    done
  done
}

main() {
  trap fnb_mps_stop EXIT
  fnb_build_ferry "$OUTDIR/logs/build-ferry.log" || return 2
  fnb_build_bench "$OUTDIR/logs/build-bench.log" || return 2
  fnb_mps_start || return 2
  census
  compare_n
  mv "$OUTDIR/raw-n$NRANKS.csv" "$OUTDIR/raw-n$NRANKS-ranks.csv"
  ln -sf "raw-n$NRANKS-ranks.csv" "$OUTDIR/raw-system.csv"
  python3 "$FNB_DIR/summarize.py" "$OUTDIR"
  rm -f "$OUTDIR/raw-system.csv"
}
main 2>&1 | tee -a "$OUTDIR/census.log"
