#!/usr/bin/env bash
# regen_plot.sh: the plot of a bench/regenerate.sh run: ferry's busbw over the
# baseline by message size, one line per topic and operation, each point the
# median ratio with its 95 % bootstrap interval as an error bar, and the 1.0
# line. Reads DIR/summary.csv, writes DIR/ratios.png, then re-renders
# DIR/README.md (regen_stats.py, and step_table.py for a --step-time run) so
# that it shows the plot.
#
#   bench/nccl/regen_plot.sh DIR
#
# Needs gnuplot (the GPU machine may lack it: run it where the results land).
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dir=$1
[ -f "$dir/summary.csv" ] || { echo "regen_plot.sh: no summary.csv in $dir" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "regen_plot.sh: gnuplot not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One data file per topic/op: size ratio lo hi.
python3 - "$dir/summary.csv" "$tmp" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
series = {}
for r in rows:
    extra = f" {r['ferry']}" if r.get("variant") == "1" else ""
    series.setdefault(f"{r['topic']} {r['op']}{extra}", []).append(r)
with open(f"{sys.argv[2]}/series.txt", "w") as idx:
    for i, (name, rs) in enumerate(series.items()):
        with open(f"{sys.argv[2]}/s{i}.dat", "w") as f:
            for r in sorted(rs, key=lambda r: int(r["size"])):
                f.write(f"{r['size']} {r['ratio']} {r['lo']} {r['hi']}\n")
        idx.write(f"{i}\t{name}\n")
PY
plots=()
while IFS=$'\t' read -r i name; do
  plots+=("'$tmp/s$i.dat' using 1:2:3:4 with yerrorlines lw 2 pt 7 title '$name'")
done <"$tmp/series.txt"
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 900,520 font ",11" noenhanced
set output '$dir/ratios.png'
set logscale x 2
set format x "%.0b%B"
set xlabel "message size (bytes)"
set ylabel "ferry busbw / baseline busbw"
set title "$(basename "$dir"): median ratio per size, 95 % bootstrap interval"
set grid
set key top right
set yrange [0:*]
set offsets graph 0.04, graph 0.04, 0, 0
plot $joined, 1 with lines dt 2 lc rgb "black" title "level (1.0)"
GP
python3 "$(dirname "$0")/regen_stats.py" "$dir"
# A --step-time run's phase tables follow the rows again.
if [ -f "$dir/step-prof.txt.xz" ] || [ -f "$dir/step-prof.txt" ]; then
  python3 "$(dirname "$0")/step_table.py" --regen "$dir" >/dev/null
fi
echo "regen_plot.sh: wrote $dir/ratios.png"
