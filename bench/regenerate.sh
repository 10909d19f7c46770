#!/usr/bin/env bash
# regenerate.sh: the one command that regenerates the README's result rows, on
# a GPU machine (one GPU is enough: the ranks share it under MPS, each its own
# NCCL_HOSTID, so every channel goes through the network plugin).
#
#   bench/regenerate.sh --nccl-tests SRC [--topics T[,T...]] [--reps N]
#                       [--min-time S] [--sizes 4K:256M] [--out DIR] [--commit ID]
#                       [--cores-per-rank N] [--budget SECONDS]
#                       [--variant LABEL=NAME=value[,NAME=value...]]...
#                       [--ops all_reduce|alltoall[,...]] [--env NAME=value]...
#                       [--step-time] [--threads SECONDS]
#
# SRC is an nccl-tests source tree (its top folder, holding src/Makefile); it
# is built here, with MPI, for the GPU's own architecture only, into
# bench/nccl/build/nccl-tests (ignored by git). ferry is built from this
# checkout, fakeibv too for the ib topics. --commit names the commit the tree
# is, where it runs as a copy whose .git does not know it.
#
# Topics (default socket2,ib2):
#   socket2  2 ranks, all_reduce: ferry's socket backend against NCCL's Socket
#            transport, default and 2 threads x 2 sockets (the better of them
#            per size is the baseline)
#   ib2      2 ranks, all_reduce, host buffers: ferry's ib backend against
#            NCCL's own IB, both on the emulated verbs device (tests/fakeibv)
#   gdr2     the same with GPU buffers (GPUDirect on the emulated device)
#   socket8  8 ranks, all_reduce and alltoall, as socket2
#   ib8      8 ranks, all_reduce and alltoall, as ib2
#   ibnull2  as ib2 on fakeibv's null-payload device (FAKEIBV_NULL_PAYLOAD=1:
#            completions without the payload bytes), 4K..64K whatever --sizes
#            says, data unchecked (-c 0), NCCL_PROTO=Simple (LL/LL128 flags
#            live in the payload): each plugin's own CPU cost per message; at
#            one size, the busbw ratio is the message-rate ratio
#   ibspin2  as ibnull2 with the emulated device's engines polling
#            (FAKEIBV_SPIN_US=200), as a NIC's do: a work request is taken
#            without a thread wake-up, so the emulator's own wake-ups, which
#            both plugins pay alike, leave the message time
# --ops limits the 8-rank topics to the operations named (default both), so
# that one operation gets a whole GPU call's budget.
# Every topic runs unbound (--bind-to none), or with --cores-per-rank N bound
# to N cores per rank (mpirun --map-by slot:PE=N --bind-to core).
#
# --variant LABEL=NAME=value,... (repeatable) adds ferry-LABEL to every
# topic: ferry's configuration of the topic with those variables on top (e.g.
# --variant t1=NCCL_FERRY_THREADS=1). It runs in the same rotation as the
# others and gets rows of its own against the same NCCL baselines; the
# README's result rows stay those of ferry's defaults.
#
# --env NAME=value (repeatable) sets a variable for every measured run of
# every configuration, baselines included, for diagnosis (e.g.
# FAKEIBV_STATS=1: each rank's fakeibv counters at exit, in logs.tar.xz). A
# run with --env says so in its README's command line; its rows are not the
# README's (the variable may cost time on both sides).
#
# --step-time loads NCCL's profiler plugin libferry-flush-prof.so
# (bench/nccl/flush_profiler.c, built here) into every measured run of every
# configuration, baselines included, and appends to the README, per topic,
# operation and size, the median microseconds each configuration's proxy
# steps spend in each state (SendGPUWait, SendWait, RecvWait, RecvGPUWait,
# ...; bench/nccl/step_table.py). A gap then shows whether it lies in the
# transport's part of a step or in NCCL's and the GPU's. The rows of such a
# run carry the profiler's cost (a lock and a clock read per step state) on
# both sides, and its command line says --step-time. The ranks' lines are
# kept in step-prof.txt.xz.
#
# --threads SECONDS: that many seconds into every measured run, each rank's
# threads' CPU over 2 s (bench/nccl/thread_cpu.py: CPU seconds per second,
# the kernel's part, switches, and the whole host's busy and idle CPUs),
# every run with NCCL_SET_THREAD_NAME=1 so that NCCL's threads carry their
# names; threads.md (per topic, operation, configuration and nccl-tests call,
# medians over repetitions) is appended to the README. Give --sizes one size
# and --min-time long enough that the window falls inside the timed loop
# (8 ranks take a few seconds to start). It shows whose thread each rank's
# CPUs go to, and whether a configuration is held by one thread's core.
#
# --budget SECONDS bounds the whole call (one GPU call runs at most 10
# minutes): the time left is shared among the topic/operation pairs still to
# run, and a pair starts no further repetition that would overrun its share
# (at least 2 run). The table then gives each row's repetition count, and a
# row from fewer than 5 says so.
#
# Method. A calibration run of ferry's configuration times every size; each
# size then gets iterations enough to run --min-time seconds (default 0.25),
# sizes with similar counts sharing one nccl-tests call. Each of --reps
# repetitions (default 5) runs every configuration once, in an order from a
# Williams design (lib.sh, fnb_rotate), so each configuration follows every
# other equally often. Per size, ferry's busbw is paired with each baseline's
# of the same repetition, as the inverse ratio of the times nccl-tests prints
# (its busbw's two decimals are too coarse at small sizes); the row gives the
# median of those ratios and a 95 % bootstrap interval, against the baseline
# ferry fares worst against. An
# interval that contains 1.0 reads "level". Every run is checked by nccl-tests
# (-c 1; ibnull2, whose data is wrong by design, -c 0): a wrong element fails
# the command. A proof run per topic shows that NCCL loaded ferry and sent
# every channel through it.
#
# Output (DIR, default $OUT, else bench/results/<date>-regen): README.md (the
# rows in the README's form, the per-size tables, the method, versions,
# commit and date), summary.csv, raw.csv.xz (every run's rows), runs.tsv,
# proofs.txt, env.txt, topics.txt, logs.tar.xz (build and run logs). Exit 0
# only when every run passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/nccl/lib.sh"

NT_SRC=
TOPICS=socket2,ib2
REPS=5
MIN_TIME=0.25
SIZES=4K:256M
OUT_ARG=
COMMIT=
CORES=
BUDGET=
VARIANTS=()
OPS_ARG=
ALL_ENV=()
STEP_TIME=0
THREADS=
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --nccl-tests) NT_SRC=${2:-}; shift ;;
    --topics) TOPICS=${2:-}; shift ;;
    --reps) REPS=${2:-}; shift ;;
    --min-time) MIN_TIME=${2:-}; shift ;;
    --sizes) SIZES=${2:-}; shift ;;
    --out) OUT_ARG=${2:-}; shift ;;
    --commit) COMMIT=${2:-}; shift ;;
    --cores-per-rank) CORES=${2:-}; shift ;;
    --budget) BUDGET=${2:-}; shift ;;
    --variant) VARIANTS+=("${2:-}"); shift ;;
    --ops) OPS_ARG=${2:-}; shift ;;
    --env) ALL_ENV+=("${2:-}"); shift ;;
    --step-time) STEP_TIME=1 ;;
    --threads) THREADS=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "regenerate.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die_usage() { echo "regenerate.sh: $*" >&2; exit 2; }
[ -n "$NT_SRC" ] || die_usage "--nccl-tests SRC is required (an nccl-tests source tree)"
[ -f "$NT_SRC/src/Makefile" ] || die_usage "--nccl-tests: no src/Makefile under '$NT_SRC'"
case $REPS in ''|*[!0-9]*|0) die_usage "--reps needs a whole number >= 1" ;; esac
case $MIN_TIME in ''|*[!0-9.]*) die_usage "--min-time needs seconds (e.g. 0.25)" ;; esac
case $SIZES in *:*) ;; *) die_usage "--sizes is FIRST:LAST (e.g. 4K:256M)" ;; esac
case $CORES in ''|[1-9]|[1-9][0-9]) ;; *) die_usage "--cores-per-rank needs a whole number 1-99" ;; esac
case $THREADS in ''|[1-9]|[1-9][0-9]) ;; *) die_usage "--threads needs whole seconds, 1-99" ;; esac
case $BUDGET in ''|[1-9][0-9]|[1-9][0-9][0-9]|[1-9][0-9][0-9][0-9]) ;;
  *) die_usage "--budget needs whole seconds, 10-9999" ;; esac
for v in "${VARIANTS[@]}"; do
  [[ $v =~ ^[a-z0-9]{1,12}=[A-Z_][A-Z0-9_]*=[^,[:space:]]*(,[A-Z_][A-Z0-9_]*=[^,[:space:]]*)*$ ]] ||
    die_usage "--variant '$v': LABEL=NAME=value[,NAME=value...] (LABEL: 1-12 of a-z0-9, no spaces)"
done
for v in "${ALL_ENV[@]}"; do
  [[ $v =~ ^[A-Z_][A-Z0-9_]*=[^[:space:]]*$ ]] || die_usage "--env '$v': NAME=value (no spaces)"
done
case ,$OPS_ARG, in
  ,,|,all_reduce,|,alltoall,|,all_reduce,alltoall,|,alltoall,all_reduce,) ;;
  *) die_usage "--ops takes all_reduce, alltoall or both, comma-separated ('$OPS_ARG')" ;;
esac
IFS=, read -r -a TOPIC_LIST <<<"$TOPICS"
for t in "${TOPIC_LIST[@]}"; do
  case $t in socket2|ib2|gdr2|socket8|ib8|ibnull2|ibspin2) ;; *) die_usage "unknown topic '$t'" ;; esac
done
command -v mpirun >/dev/null || die_usage "mpirun not found (Open MPI)"
command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
  die_usage "nvcc not found (the CUDA toolkit builds nccl-tests)"

OUTDIR=$(fnb_outdir "${OUT_ARG:-${OUT:-$FNB_REPO/bench/results/$(date +%Y-%m-%d)-regen}}") || exit 2
LOGS=$OUTDIR/logs
NT_BUILD=${REGEN_NT_BUILD:-$FNB_DIR/build/nccl-tests}
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
if [ -n "$CORES" ]; then
  BIND=(--map-by "slot:PE=$CORES" --bind-to core)
  PLACE="$CORES core$([ "$CORES" = 1 ] || echo s) per rank (bound)"
else
  BIND=(--bind-to none)
  PLACE=unbound
fi

# ---- builds ------------------------------------------------------------------

gpu_arch() { # sm number of GPU 0, e.g. 90
  timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. '
}

build_nccl_tests() {
  local mpi arch nccl_home=${NCCL_HOME:-/usr}
  mpi=$(fnb_mpi_home) || { mpi=${MPI_HOME:-/usr}; fnb_log "no mpi.h found (set MPI_HOME); trying $mpi"; }
  arch=$(gpu_arch)
  [ -n "$arch" ] || arch=90
  fnb_log "building nccl-tests from $NT_SRC (sm_$arch, MPI in $mpi) into $NT_BUILD"
  make -C "$NT_SRC/src" -j "$(nproc)" MPI=1 MPI_HOME="$mpi" NCCL_HOME="$nccl_home" \
    NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" BUILDDIR="$NT_BUILD" \
    "$NT_BUILD/all_reduce_perf" "$NT_BUILD/alltoall_perf" >"$LOGS/build-nccl-tests.log" 2>&1 ||
    { tail -n 30 "$LOGS/build-nccl-tests.log" >&2; return 1; }
  [ -x "$NT_BUILD/all_reduce_perf" ] && [ -x "$NT_BUILD/alltoall_perf" ]
}

build_nccl_tests || { fnb_log "nccl-tests build failed"; exit 1; }
fnb_build_ferry "$LOGS/build-ferry.log" || { fnb_log "ferry build failed"; exit 1; }
NEED_IB=0
for t in "${TOPIC_LIST[@]}"; do case $t in ib*|gdr*) NEED_IB=1 ;; esac; done
if [ "$NEED_IB" = 1 ]; then
  fnb_build_fakeibv "$LOGS/build-fakeibv.log" || { fnb_log "fakeibv build failed"; exit 1; }
fi
if [ "$STEP_TIME" = 1 ]; then
  fnb_build_flush_prof "$LOGS/build-flush-prof.log" || { fnb_log "profiler build failed"; exit 1; }
fi

# ---- topics ------------------------------------------------------------------
# topic_setup T: NP, OPS, CONFIGS (ferry's first), TOPIC_ENV (NAME=value for
# every run of the topic), IB (1: ranks on fakeibv), SETUP (the README's words).
FNB_VARIANT_ENV[ferry-ib-gdr]=NCCL_FERRY_BACKEND=ib,NCCL_FERRY_IB_GDR=1
FNB_VARIANT_ENV[nccl-ib-gdr]=NCCL_NET_PLUGIN=none,NCCL_NET=IB,NCCL_GIN_TYPE=2
topic_setup() {
  IB=0
  TOPIC_ENV=()
  CHECK=1
  TOPIC_SIZES=$SIZES
  case $1 in
    socket2|socket8) CONFIGS=(ferry socket-default socket-2x2) ;;
    ib2|ib8) CONFIGS=(ferry-ib nccl-ib); IB=1; TOPIC_ENV=(FAKEIBV_DMABUF=0) ;;
    ibnull2|ibspin2) CONFIGS=(ferry-ib nccl-ib); IB=1; CHECK=0; TOPIC_SIZES=4K:64K
             TOPIC_ENV=(FAKEIBV_DMABUF=0 FAKEIBV_NULL_PAYLOAD=1 NCCL_PROTO=Simple)
             [ "$1" = ibspin2 ] && TOPIC_ENV+=(FAKEIBV_SPIN_US=200) ;;
    gdr2) CONFIGS=(ferry-ib-gdr nccl-ib-gdr); IB=1
          TOPIC_ENV=(FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS NCCL_NET_FORCE_FLUSH=1) ;;
  esac
  # Each --variant: the topic's ferry configuration with its variables on top.
  local v base vs=()
  for v in "${VARIANTS[@]}"; do
    case ${CONFIGS[0]} in
      ferry) base= ;;
      *) base=$(fnb_config_env "${CONFIGS[0]}" | tr ' ' '\n' | grep -v '^NCCL_NET_PLUGIN=\|^NCCL_NET=' | paste -sd,) ;;
    esac
    FNB_VARIANT_ENV[ferry-${v%%=*}]=${base:+$base,}${v#*=}
    vs+=("ferry-${v%%=*}")
  done
  CONFIGS=("${CONFIGS[0]}" "${vs[@]}" "${CONFIGS[@]:1}")
  case $1 in
    *8) NP=8; OPS=(all_reduce alltoall)
        [ -n "$OPS_ARG" ] && IFS=, read -r -a OPS <<<"$OPS_ARG" ;;
    *) NP=2; OPS=(all_reduce) ;;
  esac
  case $1 in
    socket*) SETUP="socket, $NP ranks on one GPU, $PLACE" ;;
    ibspin*) SETUP="ib on the emulated verbs device moving no payload, its engines polling (FAKEIBV_NULL_PAYLOAD=1, FAKEIBV_SPIN_US=200), host buffers, data unchecked, NCCL_PROTO=Simple, $NP ranks on one GPU, $PLACE" ;;
    ibnull*) SETUP="ib on the emulated verbs device moving no payload (FAKEIBV_NULL_PAYLOAD=1), host buffers, data unchecked, NCCL_PROTO=Simple, $NP ranks on one GPU, $PLACE" ;;
    ib*) SETUP="ib on the emulated verbs device, host buffers, $NP ranks on one GPU, $PLACE" ;;
    gdr*) SETUP="ib on the emulated verbs device, GPU buffers (GPUDirect), $NP ranks on one GPU, $PLACE" ;;
  esac
  if [ "$IB" = 1 ]; then
    TOPIC_ENV+=("LD_LIBRARY_PATH=$FNB_FAKEIBV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
}

# The rank wrapper: each rank its own host identity, every rank on GPU 0; on
# fakeibv each rank also sees the emulated device's sysfs tree (with_sysfs.sh).
WRAP=$LOGS/rank.sh
# shellcheck disable=SC2016 # the rank script expands these
{
  echo '#!/bin/bash'
  echo 'export NCCL_HOSTID=host$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0'
  echo 'if [ "${REGEN_IB:-0}" = 1 ]; then exec '"$FNB_REPO"'/tests/fakeibv/test/with_sysfs.sh "$@"; fi'
  echo 'exec "$@"'
} >"$WRAP"
chmod +x "$WRAP"

# run_nt CONFIG OP LOG nccl-tests-args...: one nccl-tests call, bounded in time.
run_nt() {
  local config=$1 op=$2 log=$3 kv xs=()
  shift 3
  # shellcheck disable=SC2046 # fnb_config_env prints NAME=value words
  for kv in $(fnb_config_env "$config") NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 \
            CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" REGEN_IB="$IB" "${TOPIC_ENV[@]}" \
            ${RUN_EXTRA:-} ${THREADS:+NCCL_SET_THREAD_NAME=1} "${ALL_ENV[@]}"; do
    xs+=(-x "$kv")
  done
  # stdin from /dev/null: mpirun forwards stdin and would eat the band list being read.
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$NP" "${BIND[@]}" "${xs[@]}" \
    "$WRAP" "$NT_BUILD/${op}_perf" -g 1 -c "$CHECK" "$@" </dev/null >"$log" 2>&1
}

# run_measured CONFIG OP LOG THREADS_TSV nccl-tests-args...: run_nt, and with
# --threads the ranks' threads sampled into THREADS_TSV while it runs.
run_measured() {
  local config=$1 op=$2 log=$3 tsv=$4 pid rc
  shift 4
  if [ -z "$THREADS" ]; then
    run_nt "$config" "$op" "$log" "$@"
    return
  fi
  run_nt "$config" "$op" "$log" "$@" &
  pid=$!
  sleep "$THREADS"
  # shellcheck disable=SC2046 # one PID per rank
  python3 "$FNB_DIR/thread_cpu.py" --window 2 $(fnb_rank_pids "$NT_BUILD/${op}_perf") >"$tsv" 2>&1 </dev/null
  wait "$pid"
  rc=$?
  return $rc
}

# step_prof_env: with --step-time, RUN_EXTRA loads the profiler into the next
# run, each rank writing its lines into a file of its own under LOGS/fp.
step_prof_env() {
  [ "$STEP_TIME" = 1 ] || return 0
  mkdir -p "$LOGS/fp"
  RUN_EXTRA="NCCL_PROFILER_PLUGIN=$FNB_FLUSH_PROF NCCL_FERRY_PROFILER=0 FERRY_FLUSH_PROF_OUT=$LOGS/fp/%p.txt"
}

# step_prof_collect BUILD REP CONFIG: the last run's rank lines into
# OUTDIR/step-prof.txt, each prefixed with what ran (step_table.py's keys).
step_prof_collect() {
  [ "$STEP_TIME" = 1 ] || return 0
  fnb_prof_gather "$OUTDIR/step-prof.txt" "build=$1 rep=$2 config=$3 " "$LOGS"/fp/*.txt
}

# nt_rows LOG: "size time_us busbw wrong" per data line (out-of-place columns).
# Only lines whose third field is the data type and whose time and busbw are
# numbers are rows: with 8 ranks NCCL's INFO lines interleave and can start
# with digits, and with NCCL_DEBUG=INFO (--env) one can cut a row in two.
nt_rows() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 && $3 ~ /^(float|half|double|int|int32|bfloat16)$/ &&
       $6 ~ /^[0-9]+([.][0-9]+)?$/ && $8 ~ /^[0-9]+([.][0-9]+)?$/ {
         print $1, $6, $8, $9 }' "$1"
}

nt_version() {
  local v
  v=$(sed -n 's/.*nccl-library=\([0-9]*\).*/\1/p;s/.*NCCL version \([0-9.]*\).*/\1/p' "$1" | head -1)
  case $v in *.*) echo "$v" ;; '') echo "?" ;; *) echo "$((v / 10000)).$((v / 100 % 100)).$((v % 100))" ;; esac
}

# bands SIZES_FILE: from "size time_us" lines, "first last iters warmup" per
# nccl-tests call: iterations for MIN_TIME seconds per size, consecutive sizes
# whose counts are within 8x of each other sharing a call at their largest
# count (so every size runs at least MIN_TIME).
bands() {
  awk -v t="$MIN_TIME" '
    function emit() { print first, last, hi, (hi / 10 > 2 ? int(hi / 10) : 2) }
    { n = int(t * 1e6 / ($2 > 1 ? $2 : 1)) + 1; if (n < 5) n = 5; if (n > 20000) n = 20000
      if (cnt > 0 && (n > hi ? n : hi) <= 8 * (n < lo ? n : lo)) {
        if (n > hi) hi = n; if (n < lo) lo = n
      } else {
        if (cnt) emit()
        first = $1; lo = n; hi = n
      }
      last = $1; cnt++ }
    END { if (cnt) emit() }' "$1"
}

# The nccl-tests version of SRC: its own git description when SRC is the top of
# a repository, else the version its sources declare.
nt_src_version() {
  local top v
  top=$(git -C "$NT_SRC" rev-parse --show-toplevel 2>/dev/null)
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$NT_SRC" && pwd -P)" ]; then
    git -C "$NT_SRC" describe --always --tags 2>/dev/null && return
  fi
  v=$(grep -rhoE 'NCCL_TESTS_VERSION[ "]*[0-9][0-9.]*' "$NT_SRC/src" 2>/dev/null | grep -oE '[0-9][0-9.]*$' | head -1)
  echo "${v:-unknown}"
}

# host_cpu: the CPU model, sockets, cores and threads, NUMA nodes, as lscpu
# or /proc/cpuinfo give them.
host_cpu() {
  if command -v lscpu >/dev/null; then
    LC_ALL=C lscpu | awk -F: '
      { gsub(/^[ \t]+/, "", $2) }
      $1 == "Model name" { m = $2 } $1 == "Socket(s)" { s = $2 }
      $1 == "Core(s) per socket" { c = $2 } $1 == "Thread(s) per core" { t = $2 }
      $1 == "NUMA node(s)" { n = $2 } $1 == "Hypervisor vendor" { h = $2 }
      END { printf "%s, %s socket(s) x %s core(s) x %s thread(s), %s NUMA node(s)%s\n",
                   m, s, c, t, n, (h != "" ? ", under " h : "") }'
  else
    sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1
  fi
}

record_env() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [ -n "$COMMIT" ]; then
      echo "commit: $COMMIT (given: the tree ran as a copy)"
      echo "dirty-files: ?"
    else
      echo "commit: $(git -C "$FNB_REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
      echo "dirty-files: $(git -C "$FNB_REPO" status --porcelain 2>/dev/null | grep -vc '^??')"
    fi
    echo "host: $(uname -r), $(nproc) CPUs"
    # Hosts lent for runs differ: what ran says so itself.
    echo "cpu: $(host_cpu)"
    echo "memory: $(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "gpu: $(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
    echo "cuda: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "nccl-tests: $(nt_src_version)"
    echo "command: bench/regenerate.sh --nccl-tests SRC --topics $TOPICS --reps $REPS --min-time $MIN_TIME --sizes $SIZES${CORES:+ --cores-per-rank $CORES}${BUDGET:+ --budget $BUDGET}${OPS_ARG:+ --ops $OPS_ARG}$(printf ' --variant %s' "${VARIANTS[@]}" | sed 's/^ --variant $//')$(printf ' --env %s' "${ALL_ENV[@]}" | sed 's/^ --env $//')$([ "$STEP_TIME" = 1 ] && echo ' --step-time')${THREADS:+ --threads $THREADS}"
    for v in "${VARIANTS[@]}"; do echo "variant: ferry-${v%%=*} = ferry's configuration + ${v#*=}"; done
  } >"$OUTDIR/env.txt"
}

record_env
fnb_mps_start || exit 1
trap fnb_mps_stop EXIT
FIRST=${SIZES%%:*}
LAST=${SIZES##*:}
echo "topic,op,rep,config,size,time_us,busbw,nccl_version" >"$OUTDIR/raw.csv"
printf 'topic\top\trep\tconfig\tband\texit\tseconds\n' >"$OUTDIR/runs.tsv"
: >"$OUTDIR/topics.txt"
failed=0
# Budget: topic/operation pairs still to run, each given an equal share of the
# time left (less a reserve for the tables and the log archive).
# An 8-rank topic is one pair per operation it runs (--ops), a 2-rank topic one.
OPS8=2
[ -n "$OPS_ARG" ] && OPS8=$(awk -F, '{ print NF }' <<<"$OPS_ARG")
UNITS_LEFT=0
for t in "${TOPIC_LIST[@]}"; do case $t in *8) UNITS_LEFT=$((UNITS_LEFT + OPS8)) ;; *) UNITS_LEFT=$((UNITS_LEFT + 1)) ;; esac; done
BUDGET_RESERVE=40
for topic in "${TOPIC_LIST[@]}"; do
  topic_setup "$topic"
  if [ -n "$BUDGET" ] && [ $((BUDGET - BUDGET_RESERVE - SECONDS)) -le 0 ]; then
    echo "$topic: not run, the budget of ${BUDGET} s was spent" >>"$OUTDIR/budget.txt"
    fnb_log "$topic: not run (budget spent)"
    failed=1
    continue
  fi
  UNIT_START=$SECONDS
  echo "$topic|$SETUP|${CONFIGS[*]}" >>"$OUTDIR/topics.txt"
  FIRST=${TOPIC_SIZES%%:*}
  LAST=${TOPIC_SIZES##*:}
  # Proof: NCCL loaded ferry and every channel went through it.
  plog=$LOGS/proof-$topic.log
  RUN_EXTRA="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
  run_nt "${CONFIGS[0]}" all_reduce "$plog" -b 1M -e 1M -w 1 -n 2
  prc=$?
  RUN_EXTRA=
  {
    if [ $prc -eq 0 ] && fnb_proof_check "$plog" ferry; then echo "proof $topic: PASS"; else echo "proof $topic: FAIL (exit $prc)"; failed=1; fi
    fnb_proof_excerpt "$plog" | cut -c1-200
  } >"$LOGS/proof-$topic.txt" 2>&1
  cat "$LOGS/proof-$topic.txt" >>"$OUTDIR/proofs.txt"
  fnb_log "$(head -2 "$LOGS/proof-$topic.txt" | tr '\n' ' ')"
  for op in "${OPS[@]}"; do
    [ "$op" = "${OPS[0]}" ] || UNIT_START=$SECONDS
    UNIT_SHARE=$(( BUDGET ? (BUDGET - BUDGET_RESERVE - UNIT_START) / UNITS_LEFT : 0 ))
    [ -n "$BUDGET" ] && fnb_log "$topic $op: a share of ${UNIT_SHARE} s of --budget $BUDGET ($UNITS_LEFT pair(s) to run)"
    UNITS_LEFT=$((UNITS_LEFT - 1))
    # Calibration: ferry's configuration, few iterations, every size.
    clog=$LOGS/calib-$topic-$op.log
    run_nt "${CONFIGS[0]}" "$op" "$clog" -b "$FIRST" -e "$LAST" -f 4 -w 20 -n 5 ||
      { fnb_log "$topic $op: calibration run failed"; failed=1; continue; }
    nt_rows "$clog" | awk '{ print $1, $2 }' >"$LOGS/calib-$topic-$op.txt"
    bands "$LOGS/calib-$topic-$op.txt" >"$LOGS/bands-$topic-$op.txt"
    fnb_log "$topic $op bands (first last iters warmup): $(tr '\n' ';' <"$LOGS/bands-$topic-$op.txt")"
    last_rep=0
    for rep in $(seq "$REPS"); do
      rep_start=$SECONDS
      if [ -n "$BUDGET" ] && [ "$rep" -gt 2 ] &&
         [ $((SECONDS - UNIT_START + last_rep)) -gt "$UNIT_SHARE" ]; then
        echo "$topic $op: $((rep - 1)) of $REPS repetitions (its share of --budget $BUDGET was ${UNIT_SHARE} s)" >>"$OUTDIR/budget.txt"
        fnb_log "$topic $op: stopped after $((rep - 1)) repetitions (budget)"
        break
      fi
      for config in $(fnb_rotate "$rep" "${CONFIGS[@]}"); do
        b=0
        while read -r first last iters warm; do
          b=$((b + 1))
          log=$LOGS/$topic-$op-rep$rep-$config-b$b.log
          start=$SECONDS
          step_prof_env
          run_measured "$config" "$op" "$log" "$LOGS/threads-rep$rep-$topic-$op-$config-b$b.tsv" \
            -b "$first" -e "$last" -f 4 -w "$warm" -n "$iters"
          rc=$?
          RUN_EXTRA=
          step_prof_collect "$topic/$op" "$rep" "$config"
          rows=$(nt_rows "$log")
          [ -n "$rows" ] || [ $rc -ne 0 ] || rc=99
          # A wrong element in the checked column fails the run.
          awk '$4 ~ /^[0-9]+$/ && $4 != 0 { bad = 1 } END { exit bad }' <<<"$rows" || rc=98
          ver=$(nt_version "$log")
          awk -v t="$topic" -v o="$op" -v r="$rep" -v c="$config" -v v="$ver" \
            'NF >= 3 { printf "%s,%s,%s,%s,%s,%s,%s,%s\n", t, o, r, c, $1, $2, $3, v }' \
            <<<"$rows" >>"$OUTDIR/raw.csv"
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$topic" "$op" "$rep" "$config" "$b" "$rc" \
            "$((SECONDS - start))" >>"$OUTDIR/runs.tsv"
          [ $rc -eq 0 ] || { failed=1; fnb_log "$topic $op rep $rep $config band $b: exit $rc"; }
        done <"$LOGS/bands-$topic-$op.txt"
      done
      last_rep=$((SECONDS - rep_start))
      fnb_log "$topic $op rep $rep done (${last_rep} s)"
    done
  done
done
python3 "$FNB_DIR/regen_stats.py" "$OUTDIR" || failed=1
if [ "$STEP_TIME" = 1 ]; then
  python3 "$FNB_DIR/step_table.py" --regen "$OUTDIR" >/dev/null || failed=1
  xz -9 -f "$OUTDIR/step-prof.txt" || failed=1
fi
if [ -n "$THREADS" ]; then
  if python3 "$FNB_DIR/thread_cpu.py" --table "$OUTDIR" >/dev/null; then
    { echo; echo "## Threads (--threads $THREADS)"; echo; sed '1,2d; s/^## /### /' "$OUTDIR/threads.md"; } >>"$OUTDIR/README.md"
  else
    failed=1
  fi
fi
xz -9 -f "$OUTDIR/raw.csv" || failed=1
# The logs in one archive: a reader keeps README.md, summary.csv and raw.csv.xz.
tar -cJf "$OUTDIR/logs.tar.xz" -C "$OUTDIR" logs && rm -rf "$LOGS"
sed -n '1,80p' "$OUTDIR/README.md" 2>/dev/null
exit $failed
