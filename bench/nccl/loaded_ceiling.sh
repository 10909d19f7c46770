#!/usr/bin/env bash
# loaded_ceiling.sh: the loopback TCP ceiling for a host-staged 2-rank job on
# one GPU, with the job's PCIe traffic. A rank that sends R GB/s over the
# network has its GPU write R GB/s into pinned host memory and read back the
# R GB/s it receives; with both ranks on one GPU that is 2R each way over
# PCIe, into the same memory the TCP copies use. So next to ../duplex.sh's
# ceiling (raw TCP both ways at once, NCCL's 1 MiB steps, 4 connections x 4
# streams each way) this measures the same while tools/pcie_load moves
# --rate GB/s each way between host and GPU (default 24: 2 x 12 GB/s, what
# ferry's all_reduce moves per direction on the one-GPU H200 machine).
#
#   bench/nccl/loaded_ceiling.sh [--rate GB/s] [--reps N] [--time S] [OUTDIR]
#
# Each repetition runs duplex.sh (ferry and raw TCP, interleaved) alone and
# then with pcie_load running. Writes loaded_ceiling.md and the runs' folders.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE=24
REPS=3
TIME=2
OUTDIR_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    --rate) RATE=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --time) TIME=$2; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "loaded_ceiling.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2
export NCCL_SOCKET_IFNAME=lo
fnb_build_ferry "$OUTDIR/build-ferry.log" || { fnb_log "ferry build failed"; exit 2; }
if ! cmake --build "$FNB_BUILD" -j "$(nproc)" --target ferry-bench >>"$OUTDIR/build-ferry.log" 2>&1; then
  fnb_log "ferry-bench build failed (needs cmake): see $OUTDIR/build-ferry.log"
  exit 2
fi
PL=$FNB_BUILD/nccl-bench/pcie_load
make -C "$FNB_DIR" BUILD="$FNB_BUILD/nccl-bench" "$PL" >"$OUTDIR/build-pcie.log" 2>&1 ||
  { cat "$OUTDIR/build-pcie.log" >&2; exit 2; }

: >"$OUTDIR/loaded.txt"
for rep in $(seq 1 "$REPS"); do
  for load in idle pcie; do
    dir=$OUTDIR/$load-$rep
    pl_pid=
    if [ "$load" = pcie ]; then
      timeout 300 "$PL" --rate "$RATE" --seconds 240 >"$OUTDIR/pcie_load-$rep.log" 2>&1 &
      pl_pid=$!
      sleep 1   # CUDA context up, copies flowing.
    fi
    bash "$FNB_REPO/bench/duplex.sh" --build "$FNB_BUILD" --reps 1 --time "$TIME" "$dir" \
      >"$dir.log" 2>&1
    [ -n "$pl_pid" ] && { kill -INT "$pl_pid" 2>/dev/null; wait "$pl_pid" 2>/dev/null; }
    for mode in ferry raw; do
      v=$(awk -v m="$mode" '$1 == m && $2 == "rep" { print $(NF - 3) }' "$dir/duplex.txt" 2>/dev/null)
      echo "$load $mode rep $rep: ${v:-?} GB/s per direction" | tee -a "$OUTDIR/loaded.txt"
    done
  done
done

med() { grep "^$1 $2 rep" "$OUTDIR/loaded.txt" | awk '$(NF - 3) != "?" { print $(NF - 3) }' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
{
  echo "# loopback TCP ceiling with the job's PCIe traffic: raw $(med pcie raw) GB/s per direction" \
       "(idle machine: $(med idle raw)); ferry $(med pcie ferry) (idle: $(med idle ferry))"
  echo
  echo "duplex.sh (both ways at once, 1 MiB, depth 4, 4 connections x 4 streams each way), alone"
  echo "and while tools/pcie_load copies $RATE GB/s each way between pinned host memory and"
  echo "the GPU; medians of $REPS:"
  echo
  sed 's/^/    /' "$OUTDIR/loaded.txt"
  echo
  echo "pcie_load, as measured by itself:"
  echo
  cat "$OUTDIR"/pcie_load-*.log 2>/dev/null | sed 's/^/    /'
} >"$OUTDIR/loaded_ceiling.md"
cat "$OUTDIR/loaded_ceiling.md"
[ -n "$(med pcie raw)" ]
