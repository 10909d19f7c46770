# README's plot, drawn from two recorded runs' summary.csv (medians of busbw):
#   gnuplot docs/img/allreduce.gp        (from the repository root; writes docs/img/allreduce.png)
# Left: the socket backend against NCCL's Socket transport, 2 ranks on one H200
# (bench/results/2026-11-29-gpu-wakeups/run7-final-compare). Right: the ib backend against
# NCCL's own IB on the emulated verbs device (bench/results/2026-12-01-gpu-ib/run4).
# Only rows of NCCL 2.28.3 ("system") are drawn; awk picks one configuration's rows.
sock = "bench/results/2026-11-29-gpu-wakeups/run7-final-compare/summary.csv"
ib   = "bench/results/2026-12-01-gpu-ib/run4/summary.csv"
rows(f, c) = sprintf("< awk -F, '$1==\"system\" && $3==\"%s\" && $4==\"all_reduce\" {print $5, $7}' %s", c, f)

set terminal pngcairo noenhanced size 1200,460 font ",11"
set output "docs/img/allreduce.png"
set multiplot layout 1,2
set logscale x 2
set xrange [3000:360000000]
set xlabel "all_reduce size"
set ylabel "busbw, GB/s (median)"
set xtics ("4K" 4096, "64K" 65536, "512K" 524288, "4M" 4194304, "64M" 67108864, "256M" 268435456)
set key top left
set grid

set title "socket backend: 2 ranks on one H200, every channel over the network"
plot rows(sock, "ferry")          using 1:2 with linespoints lw 2 pt 7 title "ferry (socket)", \
     rows(sock, "socket-2x2")     using 1:2 with linespoints lw 2 pt 5 title "NCCL Socket 2x2", \
     rows(sock, "socket-default") using 1:2 with linespoints lw 2 pt 9 title "NCCL Socket default"

set title "ib backend: emulated verbs device (fakeibv), same setup"
plot rows(ib, "ferry-ib")         using 1:2 with linespoints lw 2 pt 7 title "ferry (ib)", \
     rows(ib, "ferry-ib-notuner") using 1:2 with linespoints lw 2 pt 6 dt 2 title "ferry (ib), NCCL_FERRY_TUNER=0", \
     rows(ib, "nccl-ib")          using 1:2 with linespoints lw 2 pt 5 title "NCCL's own IB"
unset multiplot
