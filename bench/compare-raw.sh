#!/usr/bin/env bash
# ferry against its TCP ceiling, in one interleaved run, with everything kept.
#
#   bench/compare-raw.sh [extra ferry-bench options...]
#
# Builds build-bench/ (Release, no tests: cmake and gcc are enough), then runs
# ferry-bench --mode all: the stream test ferry vs raw TCP (same streams and
# threads) on 4K..64M with 1, 4 (and 16 on >= 16 CPUs) connections, and the
# ping-pong test ferry vs one TCP stream on 8..64K, each point 5 times,
# interleaved A B A B. Writes into $OUT if set, else bench/results/<date>-<host>/
# (-<HHMM> appended when that already holds a run):
#   bench.csv     one row per measurement
#   bench.png     medians (skipped with a note when gnuplot is missing)
#   summary.md    machine, configuration, the tables of medians and ferry/raw
#   bench.log     the progress lines
# About 2 minutes on 2 cores, under 5 on 16. NCCL_* variables pass through
# (NCCL_FERRY_STREAMS=8 bench/compare-raw.sh measures both sides at 8 streams).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
build="$repo/build-bench"
host=$(hostname -s 2>/dev/null || echo host)
out=${OUT:-"$repo/bench/results/$(date +%Y-%m-%d)-$host"}
if [ -z "${OUT:-}" ] && [ -e "$out/summary.md" ]; then
    out="$out-$(date +%H%M)"    # A second run the same day keeps the first.
fi
mkdir -p "$out"
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

ncpu=$(nproc)
conns=1,4
if [ "$ncpu" -ge 16 ]; then
    conns=1,4,16
fi

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$ncpu" --target nccl-net-ferry ferry-bench >/dev/null

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "compare-raw: gnuplot is not installed; no PNG (apt-get install gnuplot-nox)"
fi
args=(--plugin "$build/libnccl-net-ferry.so" --mode all --reps 5 --time 0.25
      --min 4K --max 64M --conns "$conns" --pp-min 8 --pp-max 64K
      --timeout 900 --csv "$out/bench.csv" --png "$out/bench.png" "$@")
echo "compare-raw: ferry-bench ${args[*]}"
start=$(date +%s)
"$build/bench/ferry-bench" "${args[@]}" 2> >(tee "$out/bench.log" >&2) | tee "$out/tables.txt"
took=$(($(date +%s) - start))

{
    echo "# ferry vs raw TCP, $(date -u '+%Y-%m-%d %H:%M UTC'), $host"
    echo
    echo "* machine: $ncpu CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
    echo "  kernel $(uname -r), load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "* ferry: $(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)," \
         "Release build"
    echo "* environment: $(env | grep '^NCCL_' | sort | tr '\n' ' ')"
    echo "* command: \`ferry-bench ${args[*]}\` ($took s)"
    echo "* stream: ferry = plugin driven by one NCCL-like proxy thread per side over all"
    echo "  connections (depth 8 per connection, oldest-first test, sched_yield when idle);"
    echo "  raw = the same streams and threads per connection moving the same bytes over"
    echo "  plain TCP sockets. f/raw = ratio of median GB/s. Latency: isend post to"
    echo "  test-done on the sender (raw: from the slot becoming free to the last byte sent)."
    echo "* pingpong: one message each way, round trip; ferry over one connection,"
    echo "  raw over one TCP stream with TCP_NODELAY and blocking calls."
    echo
    echo '```'
    sed -n '/^stream:/,$p' "$out/tables.txt" | sed '/^plot:/d;/^no PNG/d'
    echo '```'
    echo
    if [ -f "$out/bench.png" ]; then
        echo "![medians](bench.png)"
    else
        echo "(no PNG: gnuplot missing)"
    fi
    echo
    echo "Raw rows: bench.csv (one row per measurement). Progress log: bench.log."
} >"$out/summary.md"
rm -f "$out/tables.txt"
echo "compare-raw: wrote $out/summary.md"
