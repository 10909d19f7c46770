#!/usr/bin/env bash
# mpirun_ab.sh: nccl-tests under mpirun (which binds each rank to one core by
# default) through ferry and NCCL's Socket, interleaved, medians and ratios.
#
#   bench/nccl/mpirun_ab.sh --tests PATH/all_reduce_perf [--reps N]
#                           [--configs ferry,socket-default,socket-2x2]
#                           [--variant LABEL:VAR=V[,VAR=V...]]... [--bind core|none]
#                           [--mpirun-args "mpirun options"] [--args "nccl-tests options"]
#                           [--threads S] [--rank-quota CPUS] [OUTDIR]
#
# nccl-tests is not part of ferry: build it yourself (bench/nccl/README.md,
# "nccl-tests through ferry") and pass its all_reduce_perf. Two ranks on GPU 0,
# each its own NCCL_HOSTID (so every channel goes through the network
# transport), under MPS, NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0. Each
# repetition runs every configuration once, in an order from a Williams
# design (lib.sh, fnb_rotate); --variant adds a
# ferry configuration with extra variables. --bind core (default) keeps
# mpirun's own binding, one core per rank; none lets the ranks run anywhere.
# --mpirun-args adds mapping options (e.g. "--map-by slot:PE=2": two cores per
# rank).
# --rank-quota CPUS: each rank in a cgroup of its own with a limit of CPUS
# (e.g. 2, 1.5) CPUs of time, as a container with a CPU limit runs it; give
# --bind none with it for a container's unbound mask (root; cgroup v1's cpu
# hierarchy or v2 with cpu).
# --threads S: S seconds into every run, each rank's threads' CPU over 2 s
# (thread_cpu.py: logs/threads-rep<R>-<config>.tsv, threads.md per
# configuration; give --args one size and enough iterations to be mid-run).
# First a proof run (NCCL_DEBUG=INFO) that ferry carried every channel.
# Output in OUTDIR (default $OUT, else bench/results/<date>-gpu): raw-mpirun.csv
# (compare.sh's columns), runs.tsv, proof-mpirun.txt, bindings.txt,
# summary.md/.csv (summarize.py), logs/. Exit 0 only if every run passed with
# no wrong element.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=bench/cgroup_quota.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cgroup_quota.sh"

TESTS=
REPS=3
CONFIGS=ferry,socket-default,socket-2x2
BIND=core
MPIRUN_ARGS=
ARGS="-b 4K -e 256M -f 4 -g 1 -w 5 -n 20"
THREADS=
RANK_QUOTA=
OUTDIR_ARG=
VARIANTS=()

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --tests) TESTS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    --variant) VARIANTS+=("${2%%:*}"); FNB_VARIANT_ENV[${2%%:*}]=${2#*:}; shift ;;
    --bind) BIND=$2; shift ;;
    --mpirun-args) MPIRUN_ARGS=$2; shift ;;
    --args) ARGS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --rank-quota) RANK_QUOTA=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done

[ -x "$TESTS" ] || { echo "mpirun_ab.sh: --tests must name a built all_reduce_perf (got '$TESTS')" >&2; exit 2; }
case $REPS in ''|*[!0-9]*) echo "mpirun_ab.sh: --reps needs a number" >&2; exit 2 ;; esac
case $THREADS in *[!0-9]*) echo "mpirun_ab.sh: --threads needs whole seconds" >&2; exit 2 ;; esac
case $BIND in core|none) ;; *) echo "mpirun_ab.sh: --bind is core or none" >&2; exit 2 ;; esac
case $RANK_QUOTA in ''|[0-9]*) ;; *) echo "mpirun_ab.sh: --rank-quota needs a CPU count (2, 1.5)" >&2; exit 2 ;; esac
command -v mpirun >/dev/null || { echo "mpirun_ab.sh: mpirun not found" >&2; exit 2; }

OUTDIR=$(fnb_outdir "$OUTDIR_ARG")
IFS=, read -r -a CFG_LIST <<<"$CONFIGS"
CFG_LIST+=("${VARIANTS[@]}")
fnb_build_ferry "$OUTDIR/logs/build-ferry.log" || exit 1

# --rank-quota: a cgroup per rank, named <prefix><rank>, each with the limit.
RANK_CG=
RANK_CGS=()
if [ -n "$RANK_QUOTA" ]; then
  for r in 0 1; do
    d=$(cgq_make "ferry-rank-$$-$r") || { echo "mpirun_ab.sh: --rank-quota: cannot make a cgroup (root, and cgroup v1's cpu or v2 with cpu)" >&2; exit 2; }
    RANK_CGS+=("$d")
    cgq_set "$d" "$RANK_QUOTA" || { echo "mpirun_ab.sh: cannot set a $RANK_QUOTA-CPU limit on $d" >&2; exit 2; }
  done
  RANK_CG=${RANK_CGS[0]%0}
fi
# shellcheck disable=SC2317 # called by the EXIT trap
mpirun_ab_cleanup() {
  local d
  fnb_mps_stop
  for d in "${RANK_CGS[@]}"; do rmdir "$d" 2>/dev/null; done
}
fnb_mps_start || exit 1
trap mpirun_ab_cleanup EXIT

# Each rank its own host identity; every rank on GPU 0; with --rank-quota, its own cgroup.
WRAP=$OUTDIR/logs/rank.sh
# shellcheck disable=SC2016 # the rank script expands these, not this one
{
  echo '#!/bin/bash'
  echo 'export NCCL_HOSTID=host$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0'
  if [ -n "$RANK_CG" ]; then
    echo "cg=$RANK_CG\$OMPI_COMM_WORLD_RANK"
    echo 'echo $$ >"$cg/cgroup.procs" || { echo "rank $OMPI_COMM_WORLD_RANK: cannot join $cg" >&2; exit 97; }'
    echo "echo \"# rank \$OMPI_COMM_WORLD_RANK in cgroup \$cg, limit $RANK_QUOTA CPUs\" >&2"
  fi
  echo 'exec "$@"'
} >"$WRAP"
chmod +x "$WRAP"

# mpirun_ab_run CONFIG LOG [extra NAME=value...]: one nccl-tests run, bounded in time.
mpirun_ab_run() {
  local config=$1 log=$2 kv xs=() bind=()
  shift 2
  # shellcheck disable=SC2046 # fnb_config_env prints NAME=value words
  for kv in $(fnb_config_env "$config") NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 \
            CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" "$@"; do
    xs+=(-x "$kv")
  done
  [ "$BIND" = none ] && bind=(--bind-to none)
  # shellcheck disable=SC2086 # ARGS and MPIRUN_ARGS are lists of options
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --report-bindings "${bind[@]}" \
    $MPIRUN_ARGS "${xs[@]}" "$WRAP" "$TESTS" $ARGS >"$log" 2>&1
}

# nccl-tests rows (out-of-place columns) to compare.sh's CSV columns.
mpirun_ab_rows() {
  local log=$1 label=$2 version net
  version=$(sed -n 's/.*nccl-library=\([0-9]*\).*/\1/p' "$log" | head -1)
  [ -n "$version" ] && version="$((version / 10000)).$((version / 100 % 100)).$((version % 100))"
  # The network the configuration asks NCCL for (a variant may name Socket).
  net=$(fnb_config_env "$label" | tr ' ' '\n' | sed -n 's/^NCCL_NET=//p' | tail -1)
  awk -v label="$label" -v ver="${version:-?}" -v net="$net" '
    $1 ~ /^[0-9]+$/ && NF >= 13 && $3 ~ /^(float|half|double|int|int32|bfloat16)$/ {
      printf "all_reduce,%s,%s,%s,%s,%s,%s,%s,0,2,%s,%s,%s\n", $1, $2, $3, $6, $7, $8, $9, ver, net, label
    }' "$log"
}

fnb_log "proof: ferry, NCCL_DEBUG=INFO"
proof_log=$OUTDIR/logs/proof.log
mpirun_ab_run ferry "$proof_log" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING
proof_rc=$?
{
  echo "# proof run exit $proof_rc"
  if fnb_proof_check "$proof_log"; then echo "proof passed"; else echo "proof FAILED"; proof_rc=1; fi
  fnb_proof_excerpt "$proof_log"
} >"$OUTDIR/proof-mpirun.txt"
grep -E 'bound to|not bound|in cgroup' "$proof_log" >"$OUTDIR/bindings.txt"
cat "$OUTDIR/proof-mpirun.txt" >&2

echo "op,size_bytes,count,type,time_us,algbw_gbps,busbw_gbps,wrong,iters,nranks,nccl_version,nccl_net,label" \
  >"$OUTDIR/raw-mpirun.csv"
printf 'build\trep\tconfig\texit\tseconds\n' >"$OUTDIR/runs.tsv"
failed=$proof_rc
for rep in $(seq "$REPS"); do
  for config in $(fnb_rotate "$rep" "${CFG_LIST[@]}"); do
    log=$OUTDIR/logs/mpirun-rep$rep-$config.log
    start=$SECONDS
    if [ -n "$THREADS" ]; then
      mpirun_ab_run "$config" "$log" &
      run_pid=$!
      sleep "$THREADS"
      # shellcheck disable=SC2046 # one PID per rank
      python3 "$FNB_DIR/thread_cpu.py" --window 2 $(fnb_rank_pids "$TESTS") \
        >"$OUTDIR/logs/threads-rep$rep-$config.tsv" 2>&1
      wait "$run_pid"
    else
      mpirun_ab_run "$config" "$log"
    fi
    rc=$?
    rows=$(mpirun_ab_rows "$log" "$config")
    [ -n "$rows" ] || { [ $rc -ne 0 ] || rc=99; }
    # Any wrong element (either column) fails the run; N/A is -c 0 (not checked).
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 && (($9 ~ /^[0-9]+$/ && $9 != 0) || ($13 ~ /^[0-9]+$/ && $13 != 0)) {
        bad = 1 } END { exit bad }' "$log" || rc=98
    [ -n "$rows" ] && echo "$rows" >>"$OUTDIR/raw-mpirun.csv"
    printf 'mpirun\t%s\t%s\t%s\t%s\n' "$rep" "$config" "$rc" "$((SECONDS - start))" >>"$OUTDIR/runs.tsv"
    fnb_log "rep $rep $config: exit $rc, $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed=1
  done
done
python3 "$FNB_DIR/summarize.py" "$OUTDIR" >/dev/null || failed=1
[ -z "$THREADS" ] || python3 "$FNB_DIR/thread_cpu.py" --table "$OUTDIR" >/dev/null || failed=1
sed -n '1,200p' "$OUTDIR/summary.md"
exit $failed
