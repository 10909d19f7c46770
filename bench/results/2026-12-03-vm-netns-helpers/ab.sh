#!/bin/bash
cd /work/main
out=/tmp/ab.txt; : > $out
for rep in 1 2 3 4; do
  for v in base helpers spin raw; do
    case $v in
      base) envs=(); mode=ferry ;;
      helpers) envs=(NCCL_FERRY_THREADS=1); mode=ferry ;;
      spin) envs=(NCCL_FERRY_THREADS=1 NCCL_FERRY_SPIN_US=200000 FERRY_EXP_SPIN_BULK=1); mode=ferry ;;
      raw) envs=(); mode=raw ;;
    esac
    env "${envs[@]}" timeout 120 bash bench/run-netns.sh --bin build-rel/bench/ferry-bench --mode $mode --min 1M --max 4M --conns 4 --reps 1 --time 0.5 2>&1 |
      awk -v v=$v -v r=$rep '/stream .* conns  4/ { print r, v, $7, $(NF-1) }' >> $out
  done
done
