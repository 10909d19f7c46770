#!/usr/bin/env bash
# version_matrix.sh: run nccl-tests through ferry on each NCCL release given,
# on a GPU machine, and write the tested-versions matrix (docs/install.md
# prints it).
#
#   bench/nccl/version_matrix.sh --nccl-tests SRC --nccl DIR[,DIR...]
#                                [--np N] [--out DIR] [--commit ID]
#
# Each DIR is an NCCL build made by bench/nccl/build_nccl.sh (DIR/lib,
# DIR/include, DIR/version.txt). SRC is an nccl-tests source tree; it is built
# against each release in turn into DIR/nccl-tests (its binaries call what the
# release they were compiled against declares). ferry is built from this
# checkout, fakeibv too. Per release and backend (socket over lo; ib on the
# emulated verbs device, host buffers), all_reduce_perf and alltoall_perf run
# with N ranks (default 8) on GPU 0 under MPS, each rank its own NCCL_HOSTID,
# 8 B to 16 MiB, with nccl-tests' data check (-c 1).
#
# A row passes when the run exits 0, no element is wrong, NCCL says it loaded
# ferry and with which ABI version, and every channel NCCL printed goes through
# NET/ferry. Output (DIR, default $OUT, else bench/results/<date>-versions):
# matrix.md (NCCL, ABI, CUDA, driver, OS, backend, result), matrix.tsv,
# logs.tar.xz. Exit 0 only when every row passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NT_SRC=
NCCL_DIRS=
NP=8
OUT_ARG=
COMMIT=

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --nccl-tests) NT_SRC=${2:-}; shift ;;
    --nccl) NCCL_DIRS=${2:-}; shift ;;
    --np) NP=${2:-}; shift ;;
    --out) OUT_ARG=${2:-}; shift ;;
    --commit) COMMIT=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "version_matrix.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die_usage() { echo "version_matrix.sh: $*" >&2; exit 2; }
[ -n "$NT_SRC" ] || die_usage "--nccl-tests SRC is required (an nccl-tests source tree)"
[ -f "$NT_SRC/src/Makefile" ] || die_usage "--nccl-tests: no src/Makefile under '$NT_SRC'"
[ -n "$NCCL_DIRS" ] || die_usage "--nccl DIR[,DIR...] is required (builds of bench/nccl/build_nccl.sh)"
case $NP in ''|*[!0-9]*|0|1) die_usage "--np needs a whole number >= 2" ;; esac
IFS=, read -r -a NCCL_LIST <<<"$NCCL_DIRS"
for d in "${NCCL_LIST[@]}"; do
  { [ -f "$d/version.txt" ] && [ -e "$d/lib/libnccl.so" ]; } ||
    die_usage "--nccl: '$d' is not a build of build_nccl.sh (no version.txt or lib/libnccl.so)"
done
command -v mpirun >/dev/null || die_usage "mpirun not found (Open MPI)"

OUTDIR=$(fnb_outdir "${OUT_ARG:-${OUT:-$FNB_REPO/bench/results/$(date +%Y-%m-%d)-versions}}") || exit 2
LOGS=$OUTDIR/logs
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
COMMIT=${COMMIT:-$(git -C "$FNB_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)}


fnb_build_ferry "$LOGS/build-ferry.log" || { fnb_log "ferry build failed"; exit 1; }
fnb_build_fakeibv "$LOGS/build-fakeibv.log" || { fnb_log "fakeibv build failed"; exit 1; }
fnb_mps_start || exit 1
trap fnb_mps_stop EXIT

CUDA_V=$("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
OS=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
WRAP=$LOGS/rank.sh
# shellcheck disable=SC2016 # the rank script expands these
{
  echo '#!/bin/bash'
  echo 'export NCCL_HOSTID=host$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0'
  echo 'if [ "${MATRIX_IB:-0}" = 1 ]; then exec '"$FNB_REPO"'/tests/fakeibv/test/with_sysfs.sh "$@"; fi'
  echo 'exec "$@"'
} >"$WRAP"
chmod +x "$WRAP"

# row_check LOG: "abi result detail" for one run's log.
row_check() {
  local log=$1 abi wrong chans ours
  abi=$(grep -m1 -oE 'Loaded (net|network) plugin ferry \(v[0-9]+\)' "$log" | grep -oE 'v[0-9]+')
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { w += $9 + $13 } END { print w + 0 }' "$log")
  chans=$(grep -cE 'Channel .* via ' "$log")
  ours=$(grep -cE 'Channel .* via NET/ferry/' "$log")
  if [ -z "$abi" ]; then
    echo "- FAIL ferry-not-loaded"
  elif [ "$wrong" != 0 ]; then
    echo "$abi FAIL $wrong-wrong-elements"
  elif [ "$chans" = 0 ] || [ "$ours" != "$chans" ]; then
    echo "$abi FAIL channels-$ours-of-$chans-via-ferry"
  else
    echo "$abi pass $chans-channels-via-ferry"
  fi
}

printf 'nccl\tabi\tcuda\tdriver\tos\tbackend\top\tranks\tresult\tdetail\n' >"$OUTDIR/matrix.tsv"
FAILS=0
for d in "${NCCL_LIST[@]}"; do
  d=$(cd "$d" && pwd)
  ver=$(sed -n 's/^nccl //p' "$d/version.txt")
  nt=$d/nccl-tests
  fnb_log "NCCL $ver: building nccl-tests against $d"
  if ! make -C "$NT_SRC/src" -j "$(nproc)" MPI=1 MPI_HOME="$(fnb_mpi_home || echo /usr)" NCCL_HOME="$d" \
       NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt" \
       "$nt/all_reduce_perf" "$nt/alltoall_perf" >"$LOGS/build-nccl-tests-$ver.log" 2>&1; then
    for b in socket ib; do
      printf '%s\t-\t%s\t%s\t%s\t%s\t-\t%s\tFAIL\tnccl-tests-build\n' "$ver" "$CUDA_V" "$DRIVER" \
        "$OS" "$b" "$NP" >>"$OUTDIR/matrix.tsv"
    done
    FAILS=$((FAILS + 1))
    continue
  fi
  for b in socket ib; do
    for op in all_reduce alltoall; do
      log=$LOGS/run-$ver-$b-$op.log
      # shellcheck disable=SC2054 # NCCL_DEBUG_SUBSYS takes a comma-separated list
      xs=(-x "NCCL_NET_PLUGIN=$FNB_PLUGIN" -x NCCL_NET=ferry -x "NCCL_FERRY_BACKEND=$b"
          -x NCCL_SOCKET_IFNAME=lo -x NCCL_NVLS_ENABLE=0 -x NCCL_DEBUG=INFO
          -x NCCL_DEBUG_SUBSYS=INIT,NET -x "CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY"
          -x "LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
      if [ "$b" = ib ]; then
        xs+=(-x MATRIX_IB=1 -x FAKEIBV_DMABUF=0
             -x "LD_LIBRARY_PATH=$FNB_FAKEIBV_DIR:$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
      fi
      timeout 240 mpirun --allow-run-as-root --oversubscribe -np "$NP" --bind-to none "${xs[@]}" \
        "$WRAP" "$nt/${op}_perf" -g 1 -c 1 -b 8 -e 16M -f 8 -w 2 -n 10 </dev/null >"$log" 2>&1
      rc=$?
      read -r abi result detail < <(row_check "$log")
      [ "$rc" = 0 ] || { result=FAIL; detail="exit-$rc;$detail"; }
      [ "$result" = pass ] || FAILS=$((FAILS + 1))
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ver" "$abi" "$CUDA_V" "$DRIVER" "$OS" \
        "$b" "$op" "$NP" "$result" "$detail" >>"$OUTDIR/matrix.tsv"
      fnb_log "NCCL $ver $b $op: $result ($detail)"
    done
  done
done

{
  echo "# NCCL versions tested through ferry"
  echo
  echo "Commit $COMMIT, $(date -u +%Y-%m-%d), $(hostname), $NP ranks on one GPU under MPS."
  echo "Command: bench/nccl/version_matrix.sh --nccl-tests SRC --nccl $NCCL_DIRS --np $NP"
  echo
  echo "| NCCL | ABI | CUDA | driver | OS | backend | test | result |"
  echo "|---|---|---|---|---|---|---|---|"
  tail -n +2 "$OUTDIR/matrix.tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s (%s) |\n", $1, $2, $3, $4, $5, $6, $7, $9, $10 }'
} >"$OUTDIR/matrix.md"
tar -C "$OUTDIR" -cJf "$OUTDIR/logs.tar.xz" logs && rm -rf "$LOGS"
cat "$OUTDIR/matrix.md"
[ "$FAILS" = 0 ]
