#!/usr/bin/env bash
# run_all.sh: the whole issue-5 run on the GPU machine in one command, about
# 6-8 minutes on an H200: build, torch_ddp.sh (short, so its verdict is in
# even if the rest runs long), then compare.sh (proofs, then the comparison).
#
#   bench/nccl/run_all.sh [--out DIR] [compare.sh options: --quick, --nccl ...]
#
# DIR defaults to $OUT, else bench/results/<date>-gpu. MPS is started once
# here and stopped at the end. Exit 0 only when both parts passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ARGS=()
OUTDIR_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --out) OUTDIR_ARG=$2; shift ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
start=$SECONDS

trap fnb_mps_stop EXIT
trap 'exit 130' INT TERM
fnb_log "run_all: output in $OUTDIR"
fnb_build_ferry "$OUTDIR/logs/build-ferry.log" || { fnb_log "ferry build failed"; exit 2; }
fnb_mps_start || exit 2

"$FNB_DIR/torch_ddp.sh" "$OUTDIR"
ddp=$?
"$FNB_DIR/compare.sh" "${ARGS[@]}" "$OUTDIR"
cmp=$?

{
  echo "## PyTorch DDP over ferry (torch_ddp.sh)"
  echo
  sed 's/^/    /' "$OUTDIR/torch_ddp.txt" 2>/dev/null || echo "    (no result)"
  echo
} >>"$OUTDIR/summary.md"
echo "run_all: torch_ddp $([ $ddp -eq 0 ] && echo PASS || echo FAIL), compare $([ $cmp -eq 0 ] && echo PASS || echo FAIL), $((SECONDS - start)) s; $OUTDIR/summary.md"
[ $ddp -eq 0 ] && [ $cmp -eq 0 ]
