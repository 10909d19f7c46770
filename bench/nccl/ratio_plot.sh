#!/usr/bin/env bash
# ratio_plot.sh: the busbw ratio of two configurations by message size, one
# line per run, from compare.sh / mpirun_ab.sh summary.csv files (e.g. one per
# CPU binding), with the 1.0 line drawn.
#
#   bench/nccl/ratio_plot.sh OUT_PNG CONFIG_A CONFIG_B LABEL=SUMMARY_CSV... [--title T]
#
# Plots median busbw of CONFIG_A / CONFIG_B (all_reduce, the first NCCL build
# of each file) at every size both have. CONFIG_B may join several with '+'
# (socket-default+socket-2x2): the better of them at each size. Prints each
# point ("ratio_plot.sh: LABEL SIZE RATIO") as it plots it. Needs gnuplot.
set -euo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 4 ] || usage
png=$1 a=$2 b=$3
shift 3
title="all_reduce busbw, $a / $b"
runs=()
while [ $# -gt 0 ]; do
  case $1 in
    --title) title=$2; shift ;;
    *=*) runs+=("$1") ;;
    *) usage ;;
  esac
  shift
done
[ ${#runs[@]} -gt 0 ] || usage
command -v gnuplot >/dev/null || { echo "ratio_plot.sh: gnuplot not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plots=
i=0
for run in "${runs[@]}"; do
  label=${run%%=*} csv=${run#*=}
  [ -r "$csv" ] || { echo "ratio_plot.sh: cannot read $csv" >&2; exit 2; }
  i=$((i + 1))
  awk -F, -v a="$a" -v b="$b" '
    NR == 2 { build = $1 }
    NR > 1 && $1 == build && $4 == "all_reduce" && $3 == a { ba[$5] = $7 }
    BEGIN { nb = split(b, bs, "+"); for (k = 1; k <= nb; k++) isb[bs[k]] = 1 }
    NR > 1 && $1 == build && $4 == "all_reduce" && ($3 in isb) && (!($5 in bb) || $7 > bb[$5]) {
      bb[$5] = $7 }
    END { for (s in ba) if ((s in bb) && bb[s] > 0) print s, ba[s] / bb[s] }' "$csv" |
    sort -n >"$tmp/$i.dat"
  [ -s "$tmp/$i.dat" ] || { echo "ratio_plot.sh: no size with both $a and $b in $csv" >&2; exit 2; }
  awk -v label="$label" '{ printf "ratio_plot.sh: %s %s %.3f\n", label, $1, $2 }' "$tmp/$i.dat"
  plots="${plots:+$plots, }'$tmp/$i.dat' using 1:2 with linespoints lw 2 title '$label'"
done
gnuplot <<GP
set terminal pngcairo size 900,520 font ",11" noenhanced
set output '$png'
set title "$title"
set logscale x 2
set xlabel 'message size (bytes)'
set ylabel 'busbw ratio (medians)'
set format x '%.0b %BB'
set grid
set key top right
plot 1 with lines lc rgb 'gray' dt 2 notitle, $plots
GP
echo "ratio_plot.sh: wrote $png"
