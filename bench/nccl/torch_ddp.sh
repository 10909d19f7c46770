#!/usr/bin/env bash
# torch_ddp.sh: PyTorch DDP (NCCL backend) over ferry, 2 processes on GPU 0.
#
#   bench/nccl/torch_ddp.sh [--ib|--gdr] [OUTDIR]   (default $OUT, else bench/results/<date>-gpu)
#
# --ib: ferry's ib backend over tests/fakeibv (built standalone), host buffers;
# the log must also show ferry saying it uses the ib backend.
# --gdr: the same with GPU buffers (fakeibv in GPU mode with DMA-BUF,
# NCCL_NET_GDR_LEVEL=SYS, NCCL_NET_FORCE_FLUSH=1, NCCL_FERRY_IB_GDR=1); every
# "Channel ... via" line must then say NET/ferry/<dev>/GDRDMA.
#
# Builds the plugin if needed, starts MPS (unless one runs), runs torch_ddp.py
# with PyTorch's python and NCCL_NET=ferry, and passes only when the script
# prints PASS, the log shows "Loaded net plugin ferry (v11)" and every
# "Channel ... via" line says NET/ferry. Writes torch_ddp.log and torch_ddp.txt.
# FNB_DDP_ARGS passes more options to torch_ddp.py, e.g. "--time-steps 50
# --rank-cpus 0,1:2,3" (the step time of a larger model, each rank on two CPUs
# of its own); the step-time line is in torch_ddp.txt.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IB=0
GDR=0
case ${1:-} in
  -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --ib) IB=1; shift ;;
  --gdr) IB=1; GDR=1; shift ;;
esac
OUTDIR=$(fnb_outdir "${1:-}") || exit 2
PY=${FNB_PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=python3
LOG=$OUTDIR/torch_ddp.log
IB_ENV=()
if [ "$IB" = 1 ]; then
  LOG=$OUTDIR/torch_ddp_ib.log
fi
[ "$GDR" = 1 ] && LOG=$OUTDIR/torch_ddp_gdr.log

# FNB_DDP_ARGS is a list of options: split on white space on purpose.
read -r -a DDP_ARGS <<<"${FNB_DDP_ARGS:-}"

main() {
  local rc verdict=PASS counts
  trap fnb_mps_stop EXIT
  trap 'exit 130' INT TERM
  FNB_PLUGIN=$FNB_BUILD/libnccl-net-ferry.so
  if [ ! -f "$FNB_PLUGIN" ]; then
    fnb_build_ferry "$OUTDIR/logs/build-ferry-ddp.log" || { fnb_log "ferry build failed"; return 2; }
  fi
  if [ "$IB" = 1 ]; then
    fnb_build_fakeibv "$OUTDIR/logs/build-fakeibv-ddp.log" || { fnb_log "fakeibv build failed"; return 2; }
    IB_ENV=(NCCL_FERRY_BACKEND=ib "LD_LIBRARY_PATH=$FNB_FAKEIBV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    [ "$GDR" = 1 ] || IB_ENV+=(FAKEIBV_DMABUF=0)   # host buffers: a device without GPUDirect
  fi
  if [ "$GDR" = 1 ]; then
    IB_ENV+=(FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS NCCL_NET_FORCE_FLUSH=1 NCCL_FERRY_IB_GDR=1
             NCCL_DMABUF_ENABLE=1)
  fi
  fnb_mps_start || return 2
  fnb_log "torch_ddp.py with $PY, plugin $FNB_PLUGIN ${IB_ENV[*]}"
  # The timeout covers a hang anywhere, including inside NCCL.
  env -u NCCL_SOCKET_NTHREADS -u NCCL_NSOCKS_PERTHREAD \
      NCCL_NET_PLUGIN="$FNB_PLUGIN" NCCL_NET=ferry NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV "${IB_ENV[@]}" \
      timeout -k 10 150 "$PY" "$FNB_DIR/torch_ddp.py" "${DDP_ARGS[@]}" >"$LOG" 2>&1
  rc=$?
  counts=$(fnb_proof_check "$LOG" ferry)
  if [ $rc -ne 0 ] || ! grep -q '^torch_ddp: PASS' "$LOG" || ! fnb_proof_check "$LOG" ferry >/dev/null; then
    verdict=FAIL
  fi
  if [ "$IB" = 1 ] && ! grep -q 'using the ib backend' "$LOG"; then
    verdict=FAIL
  fi
  if [ "$GDR" = 1 ] && { ! grep -q 'via NET/ferry/[0-9]*/GDRDMA' "$LOG" ||
                          grep 'Channel .* via NET/ferry' "$LOG" | grep -qv GDRDMA; }; then
    verdict=FAIL
  fi
  {
    echo "torch_ddp: $verdict (exit $rc; $counts)"
    grep '^torch_ddp:' "$LOG"
    fnb_proof_excerpt "$LOG" | cut -c1-240 | sed 's/^/    /'
  } >"${LOG%.log}.txt"
  cat "${LOG%.log}.txt"
  [ $verdict = PASS ] || { tail -20 "$LOG"; return 1; }
}

main 2>&1
rc=$?
echo "torch_ddp.sh: $([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (exit $rc)")"
exit "$rc"
