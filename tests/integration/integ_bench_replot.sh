#!/usr/bin/env bash
# ferry-bench --replot: the tables from a CSV written elsewhere (the GPU
# machine has no gnuplot). A hand-made CSV with known medians must give
# exactly these rows, rows out of order and reps interleaved as a real run
# writes them; a file that is not ferry-bench's CSV fails with its line.
#   integ_bench_replot.sh FERRY_BENCH
set -euo pipefail
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/run.csv" <<'CSV'
test,impl,conns,streams,threads,depth,size_bytes,rep,iterations,seconds,gbytes_per_s,msgs_per_s,lat_p50_us,lat_p99_us
stream,ferry,1,4,4,8,4194304,1,100,0.1,12.0000,3000.0,100.00,200.00
stream,raw,1,4,4,8,4194304,1,100,0.1,10.0000,2500.0,110.00,210.00
stream,ferry,1,4,4,8,4194304,2,100,0.1,9.0000,2000.0,300.00,400.00
stream,raw,1,4,4,8,4194304,2,100,0.1,20.0000,5000.0,90.00,190.00
stream,ferry,1,4,4,8,4194304,3,100,0.1,10.0000,2400.0,120.00,220.00
stream,raw,1,4,4,8,4194304,3,100,0.1,12.5000,3100.0,100.00,200.00
stream,ferry,4,4,4,8,1048576,1,100,0.1,30.0000,7000.0,800.00,900.00
stream,raw,4,4,4,8,1048576,1,100,0.1,15.0000,3500.0,700.00,950.00
pingpong,ferry,1,4,4,1,8,1,100,0.1,0.0010,60000.0,16.00,28.00
pingpong,raw,1,4,4,1,8,1,100,0.1,0.0008,50000.0,20.00,30.00
CSV

"$bench" --replot "$dir/run.csv" >"$dir/out.txt"
cat "$dir/out.txt"
expect() {
    grep -qF -- "$1" "$dir/out.txt" || { echo "FAIL: missing line: $1"; exit 1; }
}
expect "ferry-bench: 6 points from $dir/run.csv"
expect "stream: 4 stream(s), 4 thread(s) per connection, depth 8, median of 3"
# 4 MiB, 1 connection: medians 10.0 (ferry) and 12.5 (raw), 0.80; p50 120 / 100.
expect "    1     4M    10.000    12.500    0.80        2400      120.0      220.0      100.0      200.0"
expect "    4     1M    30.000    15.000    2.00        7000      800.0      900.0      700.0      950.0"
expect "     8       16.0       28.0       20.0       30.0      0.80"

printf 'test,impl\nstream,ferry,1,4\n' >"$dir/bad.csv"
if "$bench" --replot "$dir/bad.csv" >"$dir/bad.txt" 2>&1; then
    echo "FAIL: a truncated row was accepted"; exit 1
fi
grep -q "bad.csv line 2 is not a ferry-bench CSV row" "$dir/bad.txt" ||
    { cat "$dir/bad.txt"; echo "FAIL: no line number in the error"; exit 1; }
if "$bench" --replot "$dir/missing.csv" >"$dir/miss.txt" 2>&1; then
    echo "FAIL: a missing file was accepted"; exit 1
fi
grep -q "cannot read .*missing.csv: No such file" "$dir/miss.txt" ||
    { cat "$dir/miss.txt"; echo "FAIL: no reason for the missing file"; exit 1; }
echo "integ_bench_replot: PASS"
