#!/usr/bin/env bash
# ferry's ib backend against its verbs ceiling on the same emulated device.
#
#   bench/ib-ceiling.sh [--sizes 1M,4M,16M,64M] [--reps 5] [--conns 1] [--depth D] [OUTDIR]
#
# Builds build-bench/ (Release: the plugin, ferry-bench and tests/fakeibv), then
# for every size runs, interleaved A B A B, --reps times each:
#   A  ferry-bench --mode ferry with NCCL_FERRY_BACKEND=ib over fakeibv (the
#      plugin driven like NCCL's proxy: depth 8 per connection, oldest first),
#      all messages of a connection in one buffer (--slots 1), as perftest
#      writes one buffer over and over: the same memory footprint on both sides;
#   B  perftest's ib_write_bw between two processes over the same fakeibv
#      (RDMA WRITE of one buffer, its default tx depth): what the device moves
#      with no plugin at all.
# --depth D runs ferry-bench with D requests in flight per connection and
#   ib_write_bw with -t D (tx depth D): a depth-matched pair, which separates
#   the plugin's per-message cost from the deeper queue perftest keeps by
#   default (NCCL's proxy keeps 8 per connection, which is ferry-bench's
#   default depth).
# Reports the median GB/s (10^9 B/s; perftest's MB/s are 2^20 B/s and are
# converted) of each and ferry / ib_write_bw. Writes ib-ceiling.csv and
# summary.md into OUTDIR (default $OUT, else bench/results/<date>-<host>-ib/).
# Needs perftest (apt-get install perftest). Traffic stays on 127.0.0.1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
build=$repo/build-bench
sizes=1M,4M,16M,64M
reps=5
conns=1
depth=
out=
while [ $# -gt 0 ]; do
    case $1 in
        --sizes) sizes=$2; shift ;;
        --reps) reps=$2; shift ;;
        --conns) conns=$2; shift ;;
        --depth) depth=$2; shift ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) out=$1 ;;
    esac
    shift
done
out=${out:-${OUT:-$repo/bench/results/$(date +%Y-%m-%d)-$(hostname -s 2>/dev/null || echo host)-ib}}
mkdir -p "$out"
command -v ib_write_bw >/dev/null || { echo "ib-ceiling: perftest is not installed (apt-get install perftest)" >&2; exit 2; }

# The plugin and ferry-bench without the tests (no cmocka needed), fakeibv on its own.
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target nccl-net-ferry ferry-bench >/dev/null
cmake -S "$repo/tests/fakeibv" -B "$build/fakeibv-alone" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build/fakeibv-alone" -j "$(nproc)" --target fakeibv >/dev/null
fakeibv=$(dirname "$(find "$build/fakeibv-alone" -name libibverbs.so.1 -print -quit)")
export LD_LIBRARY_PATH=$fakeibv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_SOCKET_IFNAME=lo

bytes() { # 1M -> 1048576
    local n=${1%[KkMmGg]}
    case $1 in *[Kk]) echo $((n << 10)) ;; *[Mm]) echo $((n << 20)) ;; *[Gg]) echo $((n << 30)) ;; *) echo "$n" ;; esac
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ferry SIZE: GB/s of one ferry-bench stream point.
run_ferry() {
    NCCL_FERRY_BACKEND=ib timeout 120 "$build/bench/ferry-bench" --mode ferry --plugin "$build/libnccl-net-ferry.so" \
        --min "$1" --max "$1" --conns "$conns" --depth "${depth:-8}" --slots 1 --reps 1 --time 0.5 2>/dev/null |
        awk -v c="$conns" '$1 == c && $2 ~ /[KMG]$/ { print $3; exit }' || true
}

# perftest SIZE: GB/s of ib_write_bw (average column, MiB/s -> GB/s).
run_perftest() {
    local size port spid iters line
    size=$(bytes "$1")
    iters=$(( (4 << 30) / size )); [ "$iters" -lt 50 ] && iters=50; [ "$iters" -gt 5000 ] && iters=5000
    port=$(free_port)
    timeout 120 ib_write_bw -d fakeib0 -p "$port" -s "$size" -n "$iters" ${depth:+-t "$depth"} >/dev/null 2>&1 &
    spid=$!
    sleep 0.3
    line=$(timeout 120 ib_write_bw -d fakeib0 -p "$port" -s "$size" -n "$iters" ${depth:+-t "$depth"} 127.0.0.1 2>/dev/null |
           awk -v s="$size" '$1 == s { print $4; exit }' || true)
    wait "$spid" || true
    [ -n "$line" ] && awk -v m="$line" 'BEGIN { printf "%.3f\n", m * 1048576 / 1e9 }'
}

csv=$out/ib-ceiling.csv
echo "size,rep,impl,gbps" >"$csv"
IFS=, read -ra size_list <<<"$sizes"
for s in "${size_list[@]}"; do
    for r in $(seq "$reps"); do
        f=$(run_ferry "$s"); p=$(run_perftest "$s")
        echo "$s,$r,ferry-ib,${f:-NA}" >>"$csv"
        echo "$s,$r,ib_write_bw,${p:-NA}" >>"$csv"
        echo "ib-ceiling: $s rep $r: ferry ${f:-failed} GB/s, ib_write_bw ${p:-failed} GB/s" >&2
    done
done

python3 - "$csv" "$out/summary.md" "$conns" "${depth:-}" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sizes = list(dict.fromkeys(r["size"] for r in rows))
def med(size, impl):
    v = [float(r["gbps"]) for r in rows if r["size"] == size and r["impl"] == impl and r["gbps"] != "NA"]
    return (statistics.median(v), len(v)) if v else (None, 0)
out = ["# ferry ib backend vs ib_write_bw on fakeibv", "",
       f"ferry-bench --mode ferry, {sys.argv[3]} connection(s), depth {sys.argv[4] or 8}, one buffer (--slots 1), "
       f"against perftest's ib_write_bw ({'tx depth ' + sys.argv[4] if sys.argv[4] else 'its default tx depth'}) "
       "on the same emulated device, interleaved; medians (GB/s = 10^9 B/s).", "",
       "| size | ferry ib | ib_write_bw | ferry / ib_write_bw | runs |", "|---|---|---|---|---|"]
for s in sizes:
    (f, nf), (p, np_) = med(s, "ferry-ib"), med(s, "ib_write_bw")
    ratio = f"{f / p:.2f}" if f and p else "-"
    out.append(f"| {s} | {f if f is not None else '-'} | {p if p is not None else '-'} | {ratio} | {nf}/{np_} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
