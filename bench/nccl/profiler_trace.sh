#!/usr/bin/env bash
# profiler_trace.sh: NCCL's example profiler plugin (ext-profiler/example,
# which writes a Chrome trace per rank) loaded beside ferry, so the trace
# shows ferry's requests (NCCL net-plugin events) inside NCCL's proxy steps.
# Runs 2 ranks on one GPU (MPS), all_reduce at a few sizes, once with the
# socket backend and (unless --no-ib) once with the ib backend on fakeibv.
#
#   FERRY_PROFILER_LIB=/path/to/libnccl-profiler.so bench/nccl/profiler_trace.sh [--nccl torch|system] [--no-ib] [OUTDIR]
#
# FERRY_PROFILER_LIB: the example profiler, built beforehand from the NCCL
# source of the same release as the NCCL that runs (this script builds no
# NCCL code). --nccl: which NCCL runs (torch = PyTorch's 2.28.9, the
# default; system = /lib's 2.28.3). Writes to OUTDIR (default: $OUT, else
# bench/results/<date>-gpu-profiler):
#   trace-<backend>/*.json   the example profiler's Chrome traces (chrome://tracing, Perfetto)
#   summary.txt              per backend: plugin proof, ferry's profiler INFO line, events
#                            per category, NET events inside a ProxyStep, verdict
#   timeline-<backend>.png   2 ms of one rank's trace (bench/nccl/trace_plot.py, gnuplot)
#   logs/                    build and run logs (NCCL_DEBUG=INFO)
# Exit status 0 when every backend run's verdict is PASS.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NCCL_BUILD=torch
IB=1
OUTDIR_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    --nccl) NCCL_BUILD=$2; shift ;;
    --no-ib) IB=0 ;;
    -*) sed -n '2,21p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done
if [ -z "${FERRY_PROFILER_LIB:-}" ] || [ ! -f "$FERRY_PROFILER_LIB" ]; then
  echo "profiler_trace.sh: set FERRY_PROFILER_LIB to NCCL's example profiler library" \
       "(libnccl-profiler.so built from ext-profiler/example of the running NCCL's release);" \
       "got '${FERRY_PROFILER_LIB:-}'" >&2
  exit 2
fi
case $NCCL_BUILD in
  torch) NCCL_LDPATH=$FNB_TORCH_NCCL_DIR ;;
  system) NCCL_LDPATH= ;;
  *) echo "profiler_trace.sh: --nccl torch|system" >&2; exit 2 ;;
esac
OUTDIR=$(fnb_outdir "${OUTDIR_ARG:-${OUT:-$FNB_REPO/bench/results/$(date +%Y-%m-%d)-gpu-profiler}}") || exit 2
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
unset NCCL_NET NCCL_NET_PLUGIN NCCL_FERRY_BACKEND NCCL_PROFILER_PLUGIN
FAILED=0

# Counts per category, NET events inside a ProxyStep of the same rank, and a
# PNG of 2 ms of one rank's trace (trace_plot.py). Args: trace dir, backend.
analyze() {
  python3 - "$1" "$2" "$OUTDIR/timeline-$2.png" "$(dirname "${BASH_SOURCE[0]}")/trace_plot.py" <<'PY'
import glob, os, sys
tdir, backend, png = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[4])))
from trace_plot import load  # reads the example profiler's JSON, unquoted values included
events, files = [], sorted(glob.glob(tdir + "/*.json"))
for f in files:
    for e in load(f):
        if isinstance(e, dict) and "ph" in e:
            e["_file"] = f
            events.append(e)
cats = {}
for e in events:
    if e["ph"] in ("b", "X", "B"):
        cats[e.get("cat", "?")] = cats.get(e.get("cat", "?"), 0) + 1
print("trace files: %d, events begun per category: %s" % (len(files), ", ".join(
    "%s=%d" % kv for kv in sorted(cats.items()))))
# Pair b/e events by (file, cat, id) into intervals.
open_, spans = {}, []
for e in events:
    key = (e["_file"], e.get("cat"), e.get("name"), e.get("id"))
    if e["ph"] == "b":
        open_[key] = e
    elif e["ph"] == "e" and key in open_:
        b = open_.pop(key)
        spans.append((e["_file"], b.get("cat", "?"), b.get("name", "?"), b["ts"], e["ts"], b))
net = [s for s in spans if s[1] in ("NET_SOCK", "NET_IB")]
others = [s for s in spans if s[1] not in ("NET_SOCK", "NET_IB")]
# The innermost NCCL event of the same rank around each NET event (a proxy step, by the hierarchy).
inner = {}
for n in net:
    around = [s for s in others if s[0] == n[0] and s[3] <= n[3] and n[4] <= s[4]]
    if around:
        s = min(around, key=lambda s: s[4] - s[3])
        k = "%s/%s" % (s[1], s[2])
        inner[k] = inner.get(k, 0) + 1
print("NET events: %d (%s), inside an NCCL event of the same rank: %d" % (
    len(net), ",".join(sorted({n[1] for n in net})) or "none", sum(inner.values())))
print("innermost enclosing NCCL events: %s" % (", ".join(
    "%s=%d" % kv for kv in sorted(inner.items(), key=lambda kv: -kv[1])[:8]) or "none"))
if net:
    sizes = sorted({n[5].get("args", {}).get("size") for n in net} - {None})
    print("NET event sizes seen: %s" % sizes[:12])
want = "NET_IB" if backend == "ib" else "NET_SOCK"
ok = any(n[1] == want for n in net)
print("verdict-events: %s (%s events %s)" % ("PASS" if ok else "FAIL", want, "present" if ok else "missing"))
if net:
    # The picture: gnuplot (trace_plot.py), one rank's trace from its first large net event.
    import subprocess
    r = subprocess.run([sys.executable, sys.argv[4], net[0][0], png, "2000"],
                       capture_output=True, text=True)
    print("timeline: %s" % (png if r.returncode == 0 else "failed: " + r.stderr.strip()[-200:]))
sys.exit(0 if ok else 1)
PY
}

# run BACKEND: one bench run with the profiler; the summary block for it.
run() {
  local be=$1 log=$OUTDIR/logs/run-$1.log tdir=$OUTDIR/trace-$1 rc verdict=PASS proof info wrap=()
  local extra=()
  rm -rf "$tdir"
  mkdir -p "$tdir"
  if [ "$be" = ib ]; then
    wrap=("$FNB_REPO/tests/fakeibv/test/with_sysfs.sh")
    extra=(NCCL_FERRY_BACKEND=ib LD_LIBRARY_PATH="$FNB_FAKEIBV_DIR${NCCL_LDPATH:+:$NCCL_LDPATH}")
  else
    extra=(NCCL_FERRY_BACKEND=socket LD_LIBRARY_PATH="$NCCL_LDPATH")
  fi
  fnb_log "run: $be backend, NCCL $NCCL_BUILD, profiler $FERRY_PROFILER_LIB"
  # Event mask 255: group, collective, p2p, proxy op/step/ctrl, kernel channel, net plugin.
  env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_NET_PLUGIN="$FNB_PLUGIN" NCCL_NET=ferry \
      NCCL_PROFILER_PLUGIN="$FERRY_PROFILER_LIB" NCCL_PROFILE_EVENT_MASK=255 \
      NCCL_PROFILE_DUMP_FILE="$tdir/trace" "${extra[@]}" \
      "${wrap[@]}" "$FNB_BENCH" -N 2 -o all_reduce -l 64K,1M,16M -n 10 -w 2 -T 180 \
      --label "profiler-$be" >"$log" 2>&1
  rc=$?
  proof=$(fnb_proof_check "$log" ferry) || verdict=FAIL
  info=$(grep -m 1 -o 'NCCL profiler net events [a-z]* ([^)]*)' "$log")
  case $info in *"events on"*) ;; *) verdict=FAIL ;; esac
  [ "$rc" -eq 0 ] || verdict=FAIL
  {
    echo "== $be backend (NCCL $NCCL_BUILD): bench exit $rc"
    echo "proof: $proof"
    echo "ferry: ${info:-no profiler INFO line from ferry}"
    analyze "$tdir" "$be" || verdict=FAIL
    echo "verdict: $verdict"
    echo
  } >>"$OUTDIR/summary.txt" 2>&1
  [ "$verdict" = PASS ] || FAILED=1
}

main() {
  trap fnb_mps_stop EXIT
  : >"$OUTDIR/summary.txt"
  fnb_build_ferry "$OUTDIR/logs/build-ferry.log" || return 2
  fnb_build_bench "$OUTDIR/logs/build-bench.log" || return 2
  if [ "$IB" = 1 ]; then
    fnb_build_fakeibv "$OUTDIR/logs/build-fakeibv.log" || { fnb_log "fakeibv build failed"; return 2; }
  fi
  fnb_mps_start || return 2
  run socket
  [ "$IB" = 1 ] && run ib
  cat "$OUTDIR/summary.txt" >&2
  return $FAILED
}

main
