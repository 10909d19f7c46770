#!/usr/bin/env bash
# tuning_probe.sh: on the GPU machine, what NCCL decides for each configuration:
# how many channels it opens and, per all_reduce size, which algorithm,
# protocol and channel range it picks (NCCL_DEBUG_SUBSYS=INIT,TUNING).
#
#   bench/nccl/tuning_probe.sh [--sizes LIST] [OUTDIR] LABEL:VAR=V[,VAR=V...] ...
#
# LABEL "socket" selects NCCL's own Socket transport, anything else ferry with
# the given variables. Same setup as compare.sh (2 ranks on GPU 0, HOSTID per
# rank, MPS, NCCL_SOCKET_IFNAME=lo). Writes probe-LABEL.log and probe.md.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=4K,64K,256K,512K,1M,4M,64M,256M
OUTDIR_ARG=
CONFIGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *:*) CONFIGS+=("$1") ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
[ ${#CONFIGS[@]} -gt 0 ] || { echo "tuning_probe.sh: no LABEL:VAR=V configuration given" >&2; exit 2; }

OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
unset NCCL_NET NCCL_NET_PLUGIN NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_HOSTID
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
trap fnb_mps_stop EXIT
fnb_build_ferry "$OUTDIR/build-ferry.log" || { fnb_log "ferry build failed"; exit 2; }
fnb_build_bench "$OUTDIR/build-bench.log" || { fnb_log "bench build failed"; exit 2; }
fnb_mps_start || exit 2

{
  echo "# NCCL's decisions per configuration"
  echo
  echo "sizes: $SIZES; all_reduce; 2 ranks on GPU 0 over the network transport"
} >"$OUTDIR/probe.md"
for c in "${CONFIGS[@]}"; do
  label=${c%%:*} vars=${c#*:}
  log=$OUTDIR/probe-$label.log
  if [ "$label" = socket ]; then
    sel="NCCL_NET_PLUGIN=none NCCL_NET=Socket"
  else
    sel="NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry"
  fi
  # shellcheck disable=SC2086 # NAME=value words
  env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING $sel ${vars//,/ } \
      "$FNB_BENCH" -N 2 -o all_reduce -l "$SIZES" -n 5 -w 1 -T 120 --label "$label" >"$log" 2>&1
  rc=$?
  {
    echo
    echo "## $label ($vars) exit $rc"
    echo
    grep -m1 -o '[0-9]* coll channels.*' "$log" | sed 's/^/    /'
    grep -o 'AllReduce: [0-9]* Bytes -> .*' "$log" | sort -t' ' -k2,2n -u | sed 's/^/    /'
  } >>"$OUTDIR/probe.md"
  fnb_log "$label: exit $rc"
done
cat "$OUTDIR/probe.md"
