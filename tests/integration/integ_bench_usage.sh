#!/usr/bin/env bash
# ferry-bench's command line and its plot's words:
#  - a usage error (unknown option, a bad or missing value, a stray word)
#    exits 2 with "ferry-bench: <what>" and the usage on stderr, nothing on
#    stdout; --help exits 0 with the usage on stdout;
#  - --png from a known CSV (--replot; the gnuplot script captured through
#    FERRY_BENCH_GNUPLOT): the titles say what is compared and which way is
#    better, the legend names ferry and raw TCP, the figure names host,
#    commit and date; with gnuplot installed the PNG itself is made too.
#   integ_bench_usage.sh FERRY_BENCH
set -euo pipefail
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0

fail() {
    echo "FAIL: $*"
    for f in out err plot.gp; do
        [ -f "$dir/$f" ] && { echo "---- $f ----"; cat "$dir/$f"; }
    done
    exit 1
}

# usage_error "ARGS" "MESSAGE": exit 2, MESSAGE on stderr's first line, the usage after it.
usage_error() {
    local rc=0
    # shellcheck disable=SC2086
    timeout 20 "$bench" $1 >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" -eq 2 ] || fail "ferry-bench $1: exit $rc, wanted 2"
    [ "$(head -n 1 "$dir/err")" = "ferry-bench: $2" ] ||
        fail "ferry-bench $1: first line of stderr is not 'ferry-bench: $2'"
    grep -qx "usage: ferry-bench \[options\]" "$dir/err" || fail "ferry-bench $1: no usage on stderr"
    [ ! -s "$dir/out" ] || fail "ferry-bench $1: wrote to stdout"
    passed=$((passed + 1))
}

usage_error "--bogus" "unknown option --bogus"
usage_error "--depth 0" "--depth 0: want a whole number from 1 to 32"
usage_error "--reps 3x" "--reps 3x: want a whole number from 1 to 15"
usage_error "--conns 1,x" "--conns 1,x: want up to 8 counts 1..32, comma separated"
usage_error "--min 0" "--min 0: want a size from 1 to 1G (K/M/G suffixes)"
usage_error "--mode nope" "--mode nope: want a comma list of ferry, raw, both, pingpong, pingpong-raw, pingpong-both, all"
usage_error "--time 0" "--time 0: want seconds, more than 0 and at most 60"
usage_error "--timeout 0.5" "--timeout 0.5: want at least 1 s"
usage_error "--slots 9 --depth 4" "--slots 9: want 1..--depth (4)"
usage_error "--min 8M --max 4M" "--min 8388608 is above --max 4194304"
usage_error "--csv" "--csv needs a value"
usage_error "stray" "unexpected argument 'stray': options start with --"

rc=0
"$bench" --help >"$dir/out" 2>"$dir/err" || rc=$?
[ "$rc" -eq 0 ] || fail "--help: exit $rc, wanted 0"
grep -qx "usage: ferry-bench \[options\]" "$dir/out" || fail "--help: no usage on stdout"
grep -qF "Exit status 0: done; 1: the run failed; 2: bad usage; 3: --timeout reached." \
    "$dir/out" || fail "--help does not give the exit statuses"
passed=$((passed + 1))

# The plot's words, from a CSV with ferry and raw for both tests.
cat >"$dir/run.csv" <<'CSV'
test,impl,conns,streams,threads,depth,size_bytes,rep,iterations,seconds,gbytes_per_s,msgs_per_s,lat_p50_us,lat_p99_us
stream,ferry,1,4,2,8,4194304,1,100,0.1,12.0000,3000.0,100.00,200.00
stream,raw,1,4,2,8,4194304,1,100,0.1,10.0000,2500.0,110.00,210.00
stream,ferry,1,4,2,8,1048576,1,100,0.1,6.0000,3000.0,100.00,200.00
stream,raw,1,4,2,8,1048576,1,100,0.1,8.0000,2500.0,110.00,210.00
pingpong,ferry,1,4,2,1,8,1,100,0.1,0.0010,60000.0,16.00,28.00
pingpong,raw,1,4,2,1,8,1,100,0.1,0.0008,50000.0,20.00,30.00
CSV
touch -d "2026-01-02 03:04:00 UTC" "$dir/run.csv"
FERRY_BENCH_GNUPLOT="cat >$dir/plot.gp" "$bench" --replot "$dir/run.csv" --png "$dir/x.png" \
    >"$dir/out" 2>"$dir/err" || fail "--replot --png with FERRY_BENCH_GNUPLOT failed"
has() {
    grep -qF -- "$1" "$dir/plot.gp" || fail "the gnuplot script has no '$1'"
    passed=$((passed + 1))
}
has "set multiplot layout 1,3 title \"ferry-bench: ferry against raw TCP with the same streams and threads\\nmeasured as in run.csv (written 2026-01-02 03:04 UTC); plotted on $(hostname), ferry commit "
has "set title \"stream throughput: higher is better\\n4 stream(s) x 2 thread(s) per connection, depth 8, median of 1\""
has "set title \"ferry / raw TCP throughput: >1 means ferry faster\\nratio of the medians at each size and connection count\""
has "set title \"ping-pong round trip: lower is better\\n1 connection, median of 1 p50s\""
has "title \"ferry, 1 connection\""
has "title \"raw TCP, 1 connection\""
has "title \"ferry / raw TCP, 1 connection\""
has "title \"1: as fast as raw TCP\""
has "title \"raw TCP (TCP_NODELAY)\""
# The ratio series: 12/10 at 4M and 6/8 at 1M, in the CSV's order.
tr '\n' ' ' <"$dir/plot.gp" | grep -qF "as fast as raw TCP\" 4194304 1.2 1048576 0.75 e " ||
    fail "the ratio series is not 4M 1.2, 1M 0.75"
passed=$((passed + 1))
commit=$(grep -o 'ferry commit [^"]*' "$dir/plot.gp" | head -n 1)
[ "$commit" != "ferry commit unknown" ] || echo "note: built outside git, the commit is 'unknown'"
echo "plot title: $(grep -o 'measured as in [^"]*' "$dir/plot.gp")"

if command -v gnuplot >/dev/null; then
    "$bench" --replot "$dir/run.csv" --png "$dir/x.png" >"$dir/out" 2>"$dir/err" ||
        fail "--replot --png with gnuplot failed"
    [ "$(head -c 8 "$dir/x.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "$dir/x.png is not a PNG"
    passed=$((passed + 1))
else
    echo "note: no gnuplot; the PNG itself was not made"
fi
echo "integ_bench_usage: $passed checks passed"
