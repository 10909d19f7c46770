#!/usr/bin/env bash
# compare.sh: on the GPU machine, prove that NCCL runs over ferry and compare
# ferry with NCCL's own Socket transport, for each NCCL build.
#
#   bench/nccl/compare.sh [--quick] [--nccl system|torch|both] [--reps N]
#                         [--budget S] [--sizes LIST] [--no-proof] [--ib]
#                         [--gdr [--gdr-nccl-ib] [--flush-time]] [--step-time]
#                         [--pc-sample HZ] [--multirail] [--iters N] [--iter-bytes B]
#                         [--variant LABEL:VAR=V[,VAR=V...]]... [OUTDIR]
#
# Two ranks on GPU 0, each its own NCCL_HOSTID, under MPS, NCCL_SOCKET_IFNAME=lo,
# NCCL_NVLS_ENABLE=0. NCCL builds: system (default library path) and torch
# (PyTorch's libnccl.so.2 via LD_LIBRARY_PATH); --quick: system only, 1 rep.
#  (a) proof, every build first: all five collectives, 4 KiB..256 MiB, with
#      NCCL_NET=ferry and NCCL_DEBUG=INFO; the log must show "Loaded net plugin
#      ferry (v11)" and every "Channel ... via" line must say NET/ferry; every
#      element right.
#  (b) comparison, per build: ferry / Socket default / Socket 2x2 (threads x
#      sockets), interleaved, each repetition's order from a Williams design
#      (fnb_rotate: every configuration in every position and right after
#      every other equally often; absolute numbers drift between runs and
#      machines; only ratios inside one run mean something), all_reduce
#      over --sizes. At least 3 and at most 5 repetitions (--reps N: exactly
#      N); after the 3rd, one more starts only while the build's --budget
#      (default 100 s) allows it. A configuration that fails is not retried.
# --ib compares ferry's ib backend with NCCL's own IB transport, both over
# tests/fakeibv (built here standalone; host buffers): configurations ferry-ib
# and nccl-ib, the proof run with NCCL_FERRY_BACKEND=ib. fakeibv then offers no
# DMA-BUF (FAKEIBV_DMABUF=0), as a host without GPUDirect: otherwise both
# plugins advertise it, NCCL still stages through host memory here (the NIC is
# not near the GPU), and ferry's tuner stands down for a GPUDirect device.
# --gdr (implies --ib) puts NCCL's buffers in GPU memory: every run gets
# FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS NCCL_NET_FORCE_FLUSH=1 (Hopper skips
# the flush unless forced) and ferry NCCL_FERRY_IB_GDR=1 (fakeibv has no
# peer-memory module to find). Proof runs, one per flush method
# (NCCL_FERRY_IB_FLUSH=auto, the default, =read and =cuda): all five
# collectives right, every "Channel ... via" line NET/ferry/<dev>/GDRDMA,
# ferry's "GPUDirect RDMA on" init line. Comparison: ferry-ib-gdr (ferry's
# defaults: the flush method each comm chooses), ferry-ib-gdr-read,
# ferry-ib-gdr-cuda, ferry-ib-host (ferry's ib backend staging through host memory,
# NCCL_NET_GDR_LEVEL=LOC); --gdr-nccl-ib adds nccl-ib-gdr (NCCL's own IB with
# GDR on the same fakeibv), off by default.
# --flush-time (implies --gdr --gdr-nccl-ib) times the GDR flush as NCCL's proxy
# sees it, for both: ferry-ib-gdr and nccl-ib-gdr run with the profiler plugin
# libferry-flush-prof.so (NCCL_PROFILER_PLUGIN; NCCL_FERRY_PROFILER=0 so ferry
# adds no net events), which times each receive step from RecvFlushWait (iflush
# is called) to RecvGPUWait (its test() completed). Its lines go to
# logs/flush-prof.txt; summary.md gets a table per size: median us per flush
# for each and ferry / NCCL (flush_table.py), then the step table below.
# --step-time (implies --ib) loads the same profiler into ferry-ib and nccl-ib
# (with --gdr: ferry-ib-gdr and nccl-ib-gdr; --gdr-nccl-ib implied), which
# also times every phase of every proxy step (SendGPUWait, SendPeerWait,
# SendWait; RecvWait, RecvFlushWait, RecvGPUWait: each from its state's record
# to the step's next state or end). summary.md gets a table per build and size:
# median us per phase for each and ferry / NCCL (step_table.py).
# --pc-sample HZ (implies --step-time) also samples NCCL's proxy thread's program
# counter HZ times per CPU second in the configurations that load the profiler
# (FERRY_PROF_SAMPLE_HZ; bench/nccl/pc_sampler.h): pc_table.py appends to
# summary.md the proxy's CPU per step-state record by shared object and
# function, ferry against NCCL (one size per run says most: --sizes 16K).
# --multirail (implies --ib): a dual-port NIC, fakeibv with FAKEIBV_NPORTS=2, whose
# ports NCCL merges into one device (NCCL_NET_MERGE_LEVEL's default PORT level;
# ferry's makeVDevice). Proof: the five collectives right, ferry's "device N =
# fakeib0:1+fakeib0:2" line, every channel via NET/ferry/N. Comparison:
# ferry-ib (one port), ferry-ib-2port (merged), nccl-ib-2port (NCCL's own IB on
# the same two ports, merged by NCCL).
# --iter-bytes B caps a comparison run's iterations at max(5, B/size) (default
# 256M; more gives large sizes more iterations and steadier medians).
# --iters N: at most N iterations per size (default 1000; 1000 all_reduces of
# 4-16 KiB last only 40-60 ms, so small-size comparisons want 20000).
# --variant adds a ferry configuration with extra variables (e.g.
# ferry-s8:NCCL_FERRY_STREAMS=8) to the interleaved rotation; the summary lists
# each variant's ratio to ferry's defaults. --no-proof skips (a).
# Output in OUTDIR (default $OUT, else bench/results/<date>-gpu): raw-<build>.csv,
# runs.tsv, proof-<build>.txt, summary.md/.csv, env.txt, logs/ (--flush-time,
# --step-time: logs/flush-prof.txt). Exit 0 only if everything passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0
NCCL_SEL=
REPS_MIN=3
REPS_MAX=5
BUDGET=100
SIZES=4K,64K,512K,1M,4M,16M,64M,256M
OUTDIR_ARG=

# The header comment: from line 2 to the first line that is not a comment.
usage() { sed -n '2,/^[^#]/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
PROOF=1
IB=0
GDR=0
GDR_NCCL_IB=0
FLUSH_TIME=0
STEP_TIME=0
PC_HZ=0
MULTIRAIL=0
ITER_BYTES=256M
ITERS=1000
VARIANTS=()

while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --nccl) NCCL_SEL=$2; shift ;;
    --reps) REPS_MIN=$2; REPS_MAX=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --no-proof) PROOF=0 ;;
    --ib) IB=1 ;;
    --gdr) IB=1; GDR=1 ;;
    --gdr-nccl-ib) GDR_NCCL_IB=1 ;;
    --flush-time) IB=1; GDR=1; GDR_NCCL_IB=1; FLUSH_TIME=1 ;;
    --step-time) IB=1; STEP_TIME=1 ;;
    --pc-sample) IB=1; STEP_TIME=1; PC_HZ=$2; shift ;;
    --multirail) IB=1; MULTIRAIL=1 ;;
    --iter-bytes) ITER_BYTES=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --variant) VARIANTS+=("${2%%:*}"); FNB_VARIANT_ENV[${2%%:*}]=${2#*:}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
# With --gdr the step table compares ferry-ib-gdr with nccl-ib-gdr: NCCL's side must run.
[ "$STEP_TIME" = 1 ] && [ "$GDR" = 1 ] && GDR_NCCL_IB=1

# FNB_PROOF_TIMEOUT_S / FNB_CMP_TIMEOUT_S: what one proof / comparison run may take.
PROOF_OPTS=(-b 4K -e 256M -f 4 -n 10 -w 2 --iter-bytes 256M -T "${FNB_PROOF_TIMEOUT_S:-150}")
CMP_OPTS=(-n "$ITERS" -w 10 --iter-bytes "$ITER_BYTES" -T "${FNB_CMP_TIMEOUT_S:-90}")
if [ "$QUICK" = 1 ]; then
  NCCL_SEL=${NCCL_SEL:-system}
  REPS_MIN=1; REPS_MAX=1
  SIZES=4K,512K,64M
  PROOF_OPTS=(-b 4K -e 64M -f 8 -n 5 -w 1 --iter-bytes 64M -T 120)
fi
case ${NCCL_SEL:=both} in
  system) BUILDS=(system) ;;
  torch) BUILDS=(torch) ;;
  both) BUILDS=(system torch) ;;
  *) usage >&2; exit 2 ;;
esac
CONFIGS=(ferry socket-default socket-2x2 "${VARIANTS[@]}")
PROOF_ENV=()
WRAP=()
if [ "$IB" = 1 ]; then
  # NCCL reads /sys/class/infiniband by hand (pciPath, GID types): as root the
  # ranks see fakeibv's sysfs tree there, in a private mount namespace.
  WRAP=("$FNB_REPO/tests/fakeibv/test/with_sysfs.sh")
  CONFIGS=(ferry-ib nccl-ib "${VARIANTS[@]}")
  PROOF_ENV=(NCCL_FERRY_BACKEND=ib)
  export FAKEIBV_DMABUF=0   # host buffers (--gdr turns it back on below)
  export FNB_SUMMARY_CONFIGS=ferry-ib,nccl-ib
fi
PROOF_TAGS=("")
if [ "$GDR" = 1 ]; then
  # GPU buffers for every run; ferry-ib-host opts out again with NCCL_NET_GDR_LEVEL=LOC.
  export FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS NCCL_NET_FORCE_FLUSH=1
  FNB_VARIANT_ENV[ferry-ib-gdr]=NCCL_FERRY_BACKEND=ib,NCCL_FERRY_IB_GDR=1
  FNB_VARIANT_ENV[ferry-ib-gdr-read]=NCCL_FERRY_BACKEND=ib,NCCL_FERRY_IB_GDR=1,NCCL_FERRY_IB_FLUSH=read
  FNB_VARIANT_ENV[ferry-ib-gdr-cuda]=NCCL_FERRY_BACKEND=ib,NCCL_FERRY_IB_GDR=1,NCCL_FERRY_IB_FLUSH=cuda
  FNB_VARIANT_ENV[ferry-ib-host]=NCCL_FERRY_BACKEND=ib,NCCL_NET_GDR_LEVEL=LOC
  # A variant naming NCCL_NET_PLUGIN gets NCCL_NET=ferry first; the later NCCL_NET=IB wins in env.
  # NCCL_GIN_TYPE=2 as for nccl-ib: NCCL 2.28.9's GIN probe crashes without an mlx5 device.
  FNB_VARIANT_ENV[nccl-ib-gdr]=NCCL_NET_PLUGIN=none,NCCL_NET=IB,NCCL_GIN_TYPE=2
  CONFIGS=(ferry-ib-gdr ferry-ib-gdr-read ferry-ib-gdr-cuda ferry-ib-host "${VARIANTS[@]}")
  [ "$GDR_NCCL_IB" = 1 ] && CONFIGS+=(nccl-ib-gdr)
  FNB_SUMMARY_CONFIGS=ferry-ib-gdr,ferry-ib-gdr-read,ferry-ib-gdr-cuda,ferry-ib-host
  [ "$GDR_NCCL_IB" = 1 ] && FNB_SUMMARY_CONFIGS+=,nccl-ib-gdr
  export FNB_SUMMARY_CONFIGS
  PROOF_ENV=(NCCL_FERRY_BACKEND=ib NCCL_FERRY_IB_GDR=1)
  PROOF_TAGS=(gdr-auto gdr-read gdr-cuda)
fi

if [ "$MULTIRAIL" = 1 ]; then
  FNB_VARIANT_ENV[ferry-ib-2port]=NCCL_FERRY_BACKEND=ib,FAKEIBV_NPORTS=2
  FNB_VARIANT_ENV[nccl-ib-2port]=NCCL_NET_PLUGIN=none,NCCL_NET=IB,NCCL_GIN_TYPE=2,FAKEIBV_NPORTS=2
  CONFIGS=(ferry-ib ferry-ib-2port nccl-ib-2port "${VARIANTS[@]}")
  export FNB_SUMMARY_CONFIGS=ferry-ib,ferry-ib-2port,nccl-ib-2port
  PROOF_ENV=(NCCL_FERRY_BACKEND=ib FAKEIBV_NPORTS=2)
  PROOF_TAGS=(multirail)
fi

OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
FAILED=0

# The LD_LIBRARY_PATH that selects one NCCL build (the bench links only the soname).
build_ldpath() {
  case $1 in
    system) echo "${BASE_LDPATH}" ;;
    torch) echo "$FNB_TORCH_NCCL_DIR${BASE_LDPATH:+:$BASE_LDPATH}" ;;
  esac
}

record_env() {
  {
    echo "date: $(date -Is)"
    echo "host: $(uname -nr) cpus=$(nproc)"
    echo "git: $(git -C "$FNB_REPO" rev-parse HEAD 2>/dev/null) dirty-files=$(git -C "$FNB_REPO" status --porcelain 2>/dev/null | wc -l)"
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    echo "plugin: $FNB_PLUGIN"
    env | grep -E '^(NCCL_|FERRY_|CUDA_MPS_)' | sort
  } >"$OUTDIR/env.txt"
}

# gdr_check LOG: every channel of the run went GPUDirect (NET/ferry/<dev>/GDRDMA),
# and ferry's init line says GPUDirect RDMA is on. Prints the counts.
gdr_check() {
  local log=$1 all gdr on
  all=$(grep -cE 'Channel .* via ' "$log")
  gdr=$(grep -cE 'Channel .* via NET/ferry/[0-9]+/GDRDMA' "$log")
  on=$(grep -c 'ib backend GPU memory: GPUDirect RDMA on' "$log")
  printf 'channels=%s via-NET/ferry/GDRDMA=%s ferry-gdr-init-lines=%s\n' "$all" "$gdr" "$on"
  [ "$gdr" -gt 0 ] && [ "$gdr" -eq "$all" ] && [ "$on" -gt 0 ]
}

# merged_check LOG: ferry merged the two ports into device N and every channel
# used it (NET/ferry/N). Prints the counts.
merged_check() {
  local log=$1 line dev all ours
  line=$(grep -m1 -oE 'ib backend: device [0-9]+ = fakeib0:1\+fakeib0:2' "$log")
  dev=${line#ib backend: device }
  dev=${dev%% *}
  all=$(grep -cE 'Channel .* via ' "$log")
  ours=$(grep -cE "Channel .* via NET/ferry/${dev:-x}(/|\b)" "$log")
  printf 'merged-device=%s channels=%s via-NET/ferry/%s=%s\n' "${dev:-none}" "$all" "${dev:-?}" "$ours"
  [ -n "$dev" ] && [ "$ours" -gt 0 ] && [ "$ours" -eq "$all" ]
}

# proof BUILD [TAG]: the run that shows NCCL really used ferry, and got every
# element right. TAG gdr-auto / gdr-read / gdr-cuda: with GPU buffers and that flush method.
proof() {
  local b=$1 tag=${2:-} rc counts verdict=PASS name extra=()
  name=$b${tag:+-$tag}
  local log=$OUTDIR/logs/proof-$name.log
  case $tag in
    gdr-read) extra=(NCCL_FERRY_IB_FLUSH=read) ;;
    gdr-cuda) extra=(NCCL_FERRY_IB_FLUSH=cuda) ;;
  esac
  fnb_log "proof run, NCCL build '$b'${tag:+ ($tag)}"
  env LD_LIBRARY_PATH="$(build_ldpath "$b")" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV \
      NCCL_NET_PLUGIN="$FNB_PLUGIN" NCCL_NET=ferry "${PROOF_ENV[@]}" "${extra[@]}" \
      "${WRAP[@]}" "$FNB_BENCH" -N 2 -o all "${PROOF_OPTS[@]}" --label "proof-$name" \
      --csv "$OUTDIR/proof-$name.csv" >"$log" 2>&1
  rc=$?
  counts=$(fnb_proof_check "$log" ferry)
  if [ $rc -ne 0 ] || ! fnb_proof_check "$log" ferry >/dev/null; then verdict=FAIL; FAILED=1; fi
  if [ "$tag" = multirail ]; then
    counts="$counts; $(merged_check "$log")"
    merged_check "$log" >/dev/null || { verdict=FAIL; FAILED=1; }
  elif [ -n "$tag" ]; then
    counts="$counts; $(gdr_check "$log")"
    gdr_check "$log" >/dev/null || { verdict=FAIL; FAILED=1; }
  fi
  {
    echo "proof $name: $verdict (bench exit $rc; $counts)"
    grep -E '^# (NCCL|ferry_nccl_bench|wrong)' "$log"
    fnb_proof_excerpt "$log" | cut -c1-240 | sed 's/^/    /'
  } >"$OUTDIR/logs/proof-$name.txt"
  cat "$OUTDIR/logs/proof-$name.txt" >&2
  # One proof-<build>.txt per build (summarize.py's section): the flush methods one after the other.
  if [ "$tag" = "${PROOF_TAGS[0]}" ]; then
    cp "$OUTDIR/logs/proof-$name.txt" "$OUTDIR/proof-$b.txt"
  else
    cat "$OUTDIR/logs/proof-$name.txt" >>"$OUTDIR/proof-$b.txt"
  fi
}

# flush_prof_env BUILD REP CONFIG: the variables that load the flush profiler
# (one output file per rank): with --flush-time into ferry-ib-gdr and
# nccl-ib-gdr, with --step-time into those and into ferry-ib and nccl-ib.
flush_prof_env() {
  local load=0
  case $3 in
    ferry-ib-gdr|nccl-ib-gdr) [ "$FLUSH_TIME" = 1 ] || [ "$STEP_TIME" = 1 ] && load=1 ;;
    ferry-ib|nccl-ib) [ "$STEP_TIME" = 1 ] && load=1 ;;
  esac
  [ "$load" = 1 ] || return 0
  echo "NCCL_PROFILER_PLUGIN=$FNB_FLUSH_PROF NCCL_FERRY_PROFILER=0" \
       "FERRY_FLUSH_PROF_OUT=$OUTDIR/logs/fp-$1-rep$2-$3.%p.txt"
  [ "$PC_HZ" = 0 ] || echo "FERRY_PROF_SAMPLE_HZ=$PC_HZ"
}

# prof_configs: the configurations of this run that load the profiler, comma-separated.
prof_configs() {
  local c out=()
  for c in "${CONFIGS[@]}"; do
    [ -n "$(flush_prof_env - - "$c")" ] && out+=("$c")
  done
  local IFS=,
  echo "${out[*]}"
}

# flush_prof_collect BUILD REP CONFIG: the ranks' lines into logs/flush-prof.txt,
# each prefixed with the run it came from; the per-rank files go (few files back).
flush_prof_collect() {
  fnb_prof_gather "$OUTDIR/logs/flush-prof.txt" "build=$1 rep=$2 config=$3 " \
    "$OUTDIR/logs/fp-$1-rep$2-$3".*.txt
}

# run_one BUILD REP CONFIG: one comparison run; its rows go to raw-BUILD.csv.
run_one() {
  local b=$1 rep=$2 cfg=$3 log start rc
  log=$OUTDIR/logs/$b-rep$rep-$cfg.log
  start=$SECONDS
  # shellcheck disable=SC2046 # fnb_config_env returns NAME=value words
  env LD_LIBRARY_PATH="$(build_ldpath "$b")" NCCL_DEBUG=WARN $(fnb_config_env "$cfg") \
      $(flush_prof_env "$b" "$rep" "$cfg") \
      "${WRAP[@]}" "$FNB_BENCH" -N 2 -o all_reduce -l "$SIZES" "${CMP_OPTS[@]}" --label "$cfg" \
      --csv "$OUTDIR/raw-$b.csv" >"$log" 2>&1
  rc=$?
  flush_prof_collect "$b" "$rep" "$cfg"
  printf '%s\t%s\t%s\t%s\t%s\n' "$b" "$rep" "$cfg" "$rc" "$((SECONDS - start))" >>"$OUTDIR/runs.tsv"
  fnb_log "$b rep $rep $cfg: exit $rc, $((SECONDS - start)) s"
  [ $rc -eq 0 ] || { FAILED=1; tail -5 "$log" >&2; }
  return $rc
}

compare() {
  local b=$1 rep=0 start=$SECONDS rep_start cfg
  local -A broken=()
  while [ $rep -lt "$REPS_MAX" ]; do
    rep=$((rep + 1))
    rep_start=$SECONDS
    for cfg in $(fnb_rotate "$rep" "${CONFIGS[@]}"); do
      # A configuration that failed once is not retried: a hang costs minutes.
      [ -n "${broken[$cfg]:-}" ] && continue
      run_one "$b" "$rep" "$cfg" || broken[$cfg]=1
    done
    if [ $rep -ge "$REPS_MIN" ] && [ $((SECONDS - start + SECONDS - rep_start)) -gt "$BUDGET" ]; then
      fnb_log "$b: $rep repetitions fit the ${BUDGET} s budget"
      break
    fi
  done
}

main() {
  local b
  trap fnb_mps_stop EXIT
  trap 'exit 130' INT TERM
  BASE_LDPATH=${LD_LIBRARY_PATH:-}
  # Runs must see only the settings chosen here (ferry reads these too).
  unset NCCL_NET NCCL_NET_PLUGIN NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_DEBUG \
        NCCL_DEBUG_SUBSYS NCCL_HOSTID
  export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
  fnb_log "output in $OUTDIR"
  fnb_build_ferry "$OUTDIR/logs/build-ferry.log" || { fnb_log "ferry build failed"; return 2; }
  fnb_build_bench "$OUTDIR/logs/build-bench.log" || { fnb_log "bench build failed"; return 2; }
  if [ "$FLUSH_TIME" = 1 ] || [ "$STEP_TIME" = 1 ]; then
    fnb_build_flush_prof "$OUTDIR/logs/build-flush-prof.log" ||
      { fnb_log "flush profiler build failed"; return 2; }
    fnb_log "flush profiler $FNB_FLUSH_PROF ($(prof_configs))"
  fi
  if [ "$IB" = 1 ]; then
    fnb_build_fakeibv "$OUTDIR/logs/build-fakeibv.log" || { fnb_log "fakeibv build failed"; return 2; }
    BASE_LDPATH=$FNB_FAKEIBV_DIR${BASE_LDPATH:+:$BASE_LDPATH}
    fnb_log "fakeibv $FNB_FAKEIBV_DIR (both ferry and NCCL's IB load libibverbs from there)"
  fi
  fnb_log "plugin $FNB_PLUGIN, bench $FNB_BENCH"
  fnb_mps_start || return 2
  record_env
  printf 'build\trep\tconfig\texit\tseconds\n' >"$OUTDIR/runs.tsv"
  if [ ! -f "$FNB_TORCH_NCCL_DIR/libnccl.so.2" ] && [[ " ${BUILDS[*]} " == *" torch "* ]]; then
    fnb_log "no $FNB_TORCH_NCCL_DIR/libnccl.so.2: NCCL build 'torch' skipped"
    BUILDS=("${BUILDS[@]/torch/}")
  fi
  # All proofs first: they are the must-have, the comparison the nice-to-have.
  if [ "$PROOF" = 1 ]; then
    for b in "${BUILDS[@]}"; do
      [ -n "$b" ] || continue
      for t in "${PROOF_TAGS[@]}"; do proof "$b" "$t"; done
    done
  fi
  for b in "${BUILDS[@]}"; do [ -n "$b" ] && compare "$b"; done
  python3 "$FNB_DIR/summarize.py" "$OUTDIR" || FAILED=1
  if [ "$FLUSH_TIME" = 1 ]; then python3 "$FNB_DIR/flush_table.py" "$OUTDIR" || FAILED=1; fi
  if [ "$FLUSH_TIME" = 1 ] || [ "$STEP_TIME" = 1 ]; then
    python3 "$FNB_DIR/step_table.py" "$OUTDIR" || FAILED=1
  fi
  if [ "$PC_HZ" != 0 ]; then python3 "$FNB_DIR/pc_table.py" "$OUTDIR" || FAILED=1; fi
  fnb_log "summary: $OUTDIR/summary.md"
  return $FAILED
}

main 2>&1 | tee -a "$OUTDIR/compare.log"
rc=${PIPESTATUS[0]}
echo "compare.sh: $([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (exit $rc)")"
exit "$rc"
