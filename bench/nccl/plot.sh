#!/usr/bin/env bash
# plot.sh: busbw by message size, one line per configuration, from a
# compare.sh summary.csv (one NCCL build).
#
#   bench/nccl/plot.sh SUMMARY_CSV OUT_PNG [BUILD] [TITLE]
#
# BUILD picks the rows of one NCCL build (default: the first in the file).
# Needs gnuplot.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
csv=$1 png=$2 build=${3:-} title=${4:-all_reduce busbw}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not installed" >&2; exit 2; }
[ -n "$build" ] || build=$(awk -F, 'NR == 2 { print $1 }' "$csv")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configs=$(awk -F, -v b="$build" 'NR > 1 && $1 == b && $4 == "all_reduce" { print $3 }' "$csv" | sort -u)
plots=
for c in $configs; do
  awk -F, -v b="$build" -v c="$c" 'NR > 1 && $1 == b && $3 == c && $4 == "all_reduce" {
      print $5, $7 }' "$csv" | sort -n >"$tmp/$c.dat"
  label=$c; [ "$c" = before ] && label='ferry, previous defaults'
  plots="${plots:+$plots, }'$tmp/$c.dat' using 1:2 with linespoints lw 2 title '$label'"
done
gnuplot <<GP
set terminal pngcairo size 900,520 font ",11" noenhanced
set output '$png'
set title "$title"
set logscale xy 2
set xlabel 'message size (bytes)'
set ylabel 'busbw, GB/s (median)'
set format x '%.0b%B'
set grid
set key top left
plot $plots
GP
echo "plot.sh: wrote $png ($build: $configs)" | tr '\n' ' '; echo
