#!/usr/bin/env bash
# duplex.sh: ferry against raw TCP with traffic both ways at once, the shape of
# a 2-rank NCCL job's large all_reduce (each rank sends and receives on every
# channel at the same time; NCCL cuts Simple traffic into 512 KiB-1 MiB steps,
# at most 8 in flight per connection).
#
# For each repetition and each mode (ferry, raw; interleaved A B A B) it starts
# two ferry-bench runs at once, one per direction, with the same size, depth
# and connections, and reads the GB/s of each; the per-direction figure of a
# repetition is the mean of the two. Prints every repetition, the medians and
# ferry/raw, and writes duplex.csv (all rows) and duplex.md in OUTDIR.
#
#   bench/duplex.sh [--size SIZE] [--depth N] [--conns N] [--reps N] [--time S]
#                   [--build DIR] [--proxy-sleep US] [--variant LABEL:VAR=V[,VAR=V...]]...
#                   [--rank-cpus A:B] [OUTDIR]
#
# --variant adds ferry with extra variables to the rotation (e.g.
# nob:NCCL_FERRY_RECV_BLOCK=0); its median is reported against ferry's.
# --rank-cpus A:B binds the two runs as two ranks would be bound: rank A's
# sender (direction a) and receiver (direction b) on A, rank B's on B. A is
# one CPU (both copies of a rank on one core, as under mpirun's one-core
# binding, or two cores of which nccl-tests' spinning main thread takes one)
# or two, "S,R" (the rank's sends on S, its receives on R).
# --proxy-sleep is ferry-bench's: idle proxy passes sleep instead of spinning.
# Defaults: 1M, depth 4, 4 connections (NCCL's 4 channels over ferry at 400
# Gbps), 5 repetitions of 2 s. Streams and threads per connection come from
# ferry's config for both modes (NCCL_FERRY_STREAMS, ... pass through).
set -uo pipefail

SIZE=1M
DEPTH=4
CONNS=4
REPS=5
TIME=2
BUILD=
OUTDIR=
PROXY_SLEEP=0
RANK_CPUS=
VARIANTS=()
declare -A VARIANT_ENV=()
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift ;;
    --depth) DEPTH=$2; shift ;;
    --conns) CONNS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --time) TIME=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --proxy-sleep) PROXY_SLEEP=$2; shift ;;
    --rank-cpus) RANK_CPUS=$2; shift ;;
    --variant) VARIANTS+=("${2%%:*}"); VARIANT_ENV[${2%%:*}]=${2#*:}; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "duplex.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) OUTDIR=$1 ;;
  esac
  shift
done

# Per direction, the ferry-bench options that bind its sender and receiver.
declare -A BIND=([a]="" [b]="")
if [ -n "$RANK_CPUS" ]; then
  [[ $RANK_CPUS =~ ^([0-9]+)(,([0-9]+))?:([0-9]+)(,([0-9]+))?$ ]] ||
    { echo "duplex.sh: --rank-cpus takes A:B, each a CPU or S,R (got '$RANK_CPUS')" >&2; exit 2; }
  a_send=${BASH_REMATCH[1]} a_recv=${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}
  b_send=${BASH_REMATCH[4]} b_recv=${BASH_REMATCH[6]:-${BASH_REMATCH[4]}}
  BIND[a]="--cpu-send $a_send --cpu-recv $b_recv"
  BIND[b]="--cpu-send $b_send --cpu-recv $a_recv"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$repo/build-bench}
OUTDIR=${OUTDIR:-${OUT:-$repo/bench/results/$(date +%Y-%m-%d)-duplex}}
mkdir -p "$OUTDIR" || exit 2
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

if [ ! -x "$BUILD/bench/ferry-bench" ]; then
  { cmake -S "$repo" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF &&
    cmake --build "$BUILD" -j "$(nproc)" --target nccl-net-ferry ferry-bench; } \
    >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log" >&2; exit 2; }
fi
FB=$BUILD/bench/ferry-bench
PLUGIN=$(find "$BUILD" -name libnccl-net-ferry.so -print -quit)
[ -n "$PLUGIN" ] || { echo "duplex.sh: no libnccl-net-ferry.so under $BUILD" >&2; exit 2; }

echo "rep,mode,dir,size,depth,conns,gbps" >"$OUTDIR/duplex.csv"
: >"$OUTDIR/duplex.txt"
fail=0
for rep in $(seq 1 "$REPS"); do
  for mode in ferry raw "${VARIANTS[@]}"; do
    impl=$mode vars=()
    if [ -n "${VARIANT_ENV[$mode]+set}" ]; then
      impl=ferry
      IFS=, read -r -a vars <<<"${VARIANT_ENV[$mode]}"
    fi
    for dir in a b; do
      # shellcheck disable=SC2086 # BIND holds ferry-bench options, one word each
      env "${vars[@]}" "$FB" --plugin "$PLUGIN" --mode "$impl" --conns "$CONNS" --depth "$DEPTH" \
            --min "$SIZE" --max "$SIZE" --proxy-sleep "$PROXY_SLEEP" ${BIND[$dir]} --reps 1 --time "$TIME" --timeout 120 \
            --csv "$OUTDIR/run-$rep-$mode-$dir.csv" >"$OUTDIR/run-$rep-$mode-$dir.log" 2>&1 &
    done
    wait
    line=$(awk -F, -v rep="$rep" -v mode="$mode" -v impl="$impl" -v depth="$DEPTH" -v conns="$CONNS" \
        'FNR > 1 && $2 == impl { s += $11; n++; printf "%s,%s,%s,%s,%s,%s,%s\n", rep, mode, n, $7, depth, conns, $11 >> "/dev/stderr" }
         END { if (n == 2) printf "%s rep %s: %.2f GB/s per direction\n", mode, rep, s / n }' \
        "$OUTDIR"/run-"$rep"-"$mode"-?.csv 2>>"$OUTDIR/duplex.csv")
    if [ -z "$line" ]; then
      echo "duplex.sh: $mode rep $rep: a direction did not finish (see $OUTDIR/run-$rep-$mode-?.log)" >&2
      fail=1
      continue
    fi
    echo "$line" | tee -a "$OUTDIR/duplex.txt"
  done
done

med() { grep "^$1 rep" "$OUTDIR/duplex.txt" | awk '{ print $(NF - 3) }' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
mf=$(med ferry)
mr=$(med raw)
{
  echo "# duplex: ferry ${mf:-?} GB/s, raw TCP ${mr:-?} GB/s per direction" \
       "(ferry/raw $(awk -v a="${mf:-0}" -v b="${mr:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "?" }'))"
  echo
  echo "Both directions at once, $SIZE messages, depth $DEPTH, $CONNS connections each way," \
       "medians of $REPS interleaved repetitions ($(nproc) CPUs, proxy sleep $PROXY_SLEEP us${RANK_CPUS:+, ranks on CPUs $RANK_CPUS}):"
  echo
  for v in "${VARIANTS[@]}"; do
    mv_=$(med "$v")
    echo "    variant $v (${VARIANT_ENV[$v]}): ${mv_:-?} GB/s per direction," \
         "$(awk -v a="${mv_:-0}" -v b="${mf:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "?" }')x ferry," \
         "$(awk -v a="${mv_:-0}" -v b="${mr:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "?" }')x raw"
  done
  echo
  sed 's/^/    /' "$OUTDIR/duplex.txt"
} >"$OUTDIR/duplex.md"
cat "$OUTDIR/duplex.md"
[ "$fail" = 0 ] && [ -n "$mf" ] && [ -n "$mr" ]
