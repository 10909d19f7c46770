#!/usr/bin/env bash
# cpu_matrix.sh: ferry's socket backend by CPU budget in one command:
# mpirun_ab.sh at 1, 2 and 4 cores per rank and unbound (each binding's
# configurations interleaved as mpirun_ab.sh does), then ferry's defaults
# against the better of NCCL's Socket default and Socket 2x2 at every size and
# binding: matrix.md (ratios of medians) and matrix.png (ratio_plot.sh).
#
#   bench/nccl/cpu_matrix.sh --tests PATH/all_reduce_perf [--reps N]
#                            [--bindings 1,2,4,none] [--variant LABEL:VAR=V[,VAR=V...]]...
#                            [--args "nccl-tests options"] [OUTDIR]
#
# Bindings: N = mpirun's --map-by slot:PE=N (1: mpirun's own default, one core
# per rank), none = --bind-to none, qC = --bind-to none with each rank in a
# cgroup limited to C CPUs of time (a container's CPU limit; mpirun_ab.sh
# --rank-quota, root). Output: OUTDIR/<binding>/ (mpirun_ab.sh's
# files), OUTDIR/matrix.md, OUTDIR/matrix.png (needs gnuplot; without it the
# table only). OUTDIR defaults to $OUT, else bench/results/<date>-gpu. Exit 0
# only if every binding's run passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TESTS=
REPS=4
BINDINGS=1,2,4,none
ARGS=
OUTDIR_ARG=
VARIANTS=()

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --tests) TESTS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --bindings) BINDINGS=$2; shift ;;
    --variant) VARIANTS+=(--variant "$2"); shift ;;
    --args) ARGS=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) OUTDIR_ARG=$1 ;;
  esac
  shift
done

[ -x "$TESTS" ] || { echo "cpu_matrix.sh: --tests must name a built all_reduce_perf (got '$TESTS')" >&2; exit 2; }
IFS=, read -r -a BIND_LIST <<<"$BINDINGS"
for b in "${BIND_LIST[@]}"; do
  case $b in
    none|[1-9]|[1-9][0-9]|q[0-9]|q[0-9][0-9]|q[0-9].[0-9]) ;;
    *) echo "cpu_matrix.sh: a binding is a core count, none or qCPUS (got '$b')" >&2; exit 2 ;;
  esac
done
OUTDIR=$(fnb_outdir "$OUTDIR_ARG") || exit 2

# cpu_matrix_label BINDING: the words for the table and the plot.
cpu_matrix_label() {
  case $1 in
    none) echo "no binding" ;;
    q1) echo "1 CPU of time per rank" ;;
    q*) echo "${1#q} CPUs of time per rank" ;;
    1) echo "1 core per rank" ;;
    *) echo "$1 cores per rank" ;;
  esac
}

failed=0
plot_runs=()
for b in "${BIND_LIST[@]}"; do
  opts=()
  case $b in
    none) opts=(--bind none) ;;
    q*) opts=(--bind none --rank-quota "${b#q}") ;;
    1) ;;
    *) opts=(--mpirun-args "--map-by slot:PE=$b") ;;
  esac
  [ -n "$ARGS" ] && opts+=(--args "$ARGS")
  fnb_log "cpu_matrix: binding $b"
  "$FNB_DIR/mpirun_ab.sh" --tests "$TESTS" --reps "$REPS" "${opts[@]}" "${VARIANTS[@]}" \
    "$OUTDIR/$b" >"$OUTDIR/$b.out" 2>&1 || { failed=1; fnb_log "cpu_matrix: binding $b failed ($OUTDIR/$b.out)"; }
  [ -s "$OUTDIR/$b/summary.csv" ] && plot_runs+=("$(cpu_matrix_label "$b")=$OUTDIR/$b/summary.csv")
done
[ ${#plot_runs[@]} -gt 0 ] || { echo "cpu_matrix.sh: no binding produced a summary" >&2; exit 1; }

# The ratios, from the same medians ratio_plot.sh draws, and per repetition
# (the k-th run of each configuration ran in repetition k): how many ferry won.
python3 - "$OUTDIR/matrix.md" "${plot_runs[@]}" <<'PY' || failed=1
import csv, os, sys
out, runs = sys.argv[1], [r.split("=", 1) for r in sys.argv[2:]]
table, sizes = {}, set()
for label, path in runs:
    med, reps = {}, {}
    rows = list(csv.DictReader(open(path)))
    build = rows[0]["build"] if rows else None
    for r in rows:
        if r["build"] == build and r["op"] == "all_reduce":
            med[(r["config"], int(r["size_bytes"]))] = float(r["busbw_median"])
    raw = os.path.join(os.path.dirname(path), "raw-mpirun.csv")
    for r in csv.DictReader(open(raw)) if os.path.exists(raw) else []:
        reps.setdefault((r["label"], int(r["size_bytes"])), []).append(float(r["busbw_gbps"]))
    for (config, size), bw in med.items():
        best = max(med.get(("socket-default", size), 0), med.get(("socket-2x2", size), 0))
        if config != "ferry" or best <= 0:
            continue
        f = reps.get(("ferry", size), [])
        a, b = reps.get(("socket-default", size), []), reps.get(("socket-2x2", size), [])
        n = min(len(f), len(a), len(b))
        won = sum(1 for k in range(n) if f[k] >= max(a[k], b[k]))
        table[(label, size)] = f"{bw / best:.2f} ({won}/{n})" if n else f"{bw / best:.2f}"
        sizes.add(size)
def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
with open(out, "w") as f:
    f.write("# ferry's defaults / the better of NCCL Socket default and Socket 2x2, all_reduce busbw\n\n"
            "Ratio of medians; in brackets, the repetitions in which ferry beat both.\n\n")
    f.write("| size | " + " | ".join(l for l, _ in runs) + " |\n")
    f.write("|---|" + "---|" * len(runs) + "\n")
    for s in sorted(sizes):
        f.write(f"| {human(s)} | " + " | ".join(table.get((l, s), "-") for l, _ in runs) + " |\n")
PY
if command -v gnuplot >/dev/null; then
  "$FNB_DIR/ratio_plot.sh" "$OUTDIR/matrix.png" ferry socket-default+socket-2x2 "${plot_runs[@]}" \
    --title "all_reduce busbw, ferry / the better of NCCL Socket default and 2x2, by CPU binding" \
    >"$OUTDIR/matrix-points.txt" || failed=1
else
  fnb_log "cpu_matrix: gnuplot not installed, no matrix.png"
fi
cat "$OUTDIR/matrix.md"
exit $failed
