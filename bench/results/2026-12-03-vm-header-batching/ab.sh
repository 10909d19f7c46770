#!/bin/bash
# interleaved A/B of two plugin builds with ferry-bench, ferry mode, loopback
out=/tmp/ab2.csv; echo "label,rep,conns,size,gbps" > $out
for r in 1 2 3 4 5 6; do
  for v in base:/tmp/base-build new:/work/main/build-rel; do
    label=${v%%:*}; dir=${v#*:}
    for c in 1 4; do
      NCCL_SOCKET_IFNAME=lo timeout 120 $dir/bench/ferry-bench --plugin $dir/libnccl-net-ferry.so --mode ferry --min 4K --max 1M --conns $c --reps 1 --time 0.3 --csv /tmp/ab2run.csv > /dev/null 2>&1
      awk -F, -v l=$label -v r=$r 'NR>1 && $2=="ferry"{print l","r","$3","$7","$11}' /tmp/ab2run.csv >> $out
    done
  done
done
