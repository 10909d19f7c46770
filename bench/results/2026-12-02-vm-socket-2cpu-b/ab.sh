#!/usr/bin/env bash
# The interleaved A/B used for this record: ab.sh OUT.csv REPS "label|ENV=V ...|build-dir" ...
# Each rep runs every variant once per (conns, size), each run one ferry-bench process under
# perf stat (context switches, task-clock); MODE=ferry|both, SIZES, T (seconds per round).
# Prints medians per variant and point, and context switches per message.
out=$1; reps=$2; shift 2
echo "label,rep,conns,size,gbps,cs,msgs,tc" > $out
for r in $(seq 1 $reps); do
  for v in "$@"; do
    IFS='|' read -r label envs dir <<< "$v"
    for c in 1 4; do for sz in ${SIZES:-1M 4M}; do
      tmp=${TMPDIR:-/tmp}/run.csv; rm -f $tmp
      env NCCL_SOCKET_IFNAME=lo $envs perf stat -x, -e context-switches,task-clock -o ${TMPDIR:-/tmp}/perf.txt \
        $dir/bench/ferry-bench --plugin $dir/libnccl-net-ferry.so --mode ${MODE:-ferry} --min $sz --max $sz \
        --conns $c --reps 1 --time ${T:-0.3} --timeout 60 --csv $tmp >/dev/null 2>${TMPDIR:-/tmp}/err.txt || { echo "FAIL $label"; tail -3 ${TMPDIR:-/tmp}/err.txt; }
      cs=$(grep context-switches ${TMPDIR:-/tmp}/perf.txt | cut -d, -f1); tc=$(grep task-clock ${TMPDIR:-/tmp}/perf.txt | cut -d, -f1)
      msgs=$(awk -F, 'NR>1{s+=$9*$3}END{print s}' $tmp)
      awk -F, -v l="$label" -v r=$r -v cs=$cs -v m=$msgs -v tc=$tc 'NR>1 && $2=="ferry"{print l","r","$3","$7","$11","cs","m","tc}' $tmp >> $out
      awk -F, -v l="raw-$label" -v r=$r -v cs=$cs -v m=$msgs -v tc=$tc 'NR>1 && $2=="raw"{print l","r","$3","$7","$11","cs","m","tc}' $tmp >> $out
    done; done
  done
done
python3 - "$out" <<'PY'
import csv,sys,statistics as st
rows=list(csv.DictReader(open(sys.argv[1])))
keys=sorted({(r['label'],int(r['conns']),int(r['size'])) for r in rows},key=lambda k:(k[1],k[2],k[0]))
base={}
for l,c,s in keys:
    g=[float(r['gbps']) for r in rows if (r['label'],int(r['conns']),int(r['size']))==(l,c,s)]
    m=st.median(g)
    if (c,s) not in base: base[(c,s)]=m
    print(f"{l:28s} conns {c} size {s>>20}M median {m:.3f} GB/s  vs first {m/base[(c,s)]:.2f}  (n={len(g)} min {min(g):.2f} max {max(g):.2f})")
cs={}
for r in rows:
    if r['label'].startswith('raw-') : continue
    cs.setdefault((r['label'],r['conns']+'/'+str(int(r['size'])>>20)+'M',r['rep']),(float(r['cs']),float(r['msgs'])))
agg={}
for (l,c,rep),(a,m) in cs.items(): agg.setdefault((l,c),[]).append(a/m if m else 0)
for (l,c),v in sorted(agg.items()): print(f"cs/msg {l:24s} conns {c}: median {st.median(v):.2f}")
PY
