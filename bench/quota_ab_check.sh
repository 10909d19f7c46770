#!/usr/bin/env bash
# quota_ab_check.sh FERRY-BENCH: quota_ab.sh end to end, briefly (ctest
# bench_quota_ab): two configurations, each rank in a cgroup with a 1-CPU
# limit, one repetition; the table must hold both sizes with a paired ratio
# and the throttle counts. Speed is not checked. Exits 77 (skipped) when not
# root or when no cgroup with a CPU limit can be made here.
set -uo pipefail
bin=${1:?usage: quota_ab_check.sh FERRY-BENCH}
here=$(dirname "${BASH_SOURCE[0]}")
[ "$(id -u)" -eq 0 ] || { echo "SKIP bench_quota_ab: needs root to make cgroups"; exit 77; }
[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null ||
    { echo "SKIP bench_quota_ab: no cgroup cpu controller here"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL bench_quota_ab: $*"; cat "$out/quota_ab.md" 2>/dev/null; exit 1; }
NCCL_SOCKET_IFNAME=lo timeout 120 bash "$here/quota_ab.sh" --bin "$bin" --quota 1 --reps 1 \
    --config "a:" --config "b:NCCL_FERRY_STREAMS=2" "$out" -- --conns 1 --min 64K --max 256K \
    --time 0.05 >"$out/log" 2>&1 || { cat "$out/log"; fail "quota_ab.sh exited non-zero"; }
for size in 64K 256K; do
    grep -qE "^\| 1 \| $size \| [0-9.]+ \[[0-9]+\] \| [0-9.]+ \[[0-9]+\] \| [0-9.]+, [01]/1 \|$" \
        "$out/quota_ab.md" || fail "no row for 1 connection, $size, with both configurations"
done
grep -qE '^- b: median [0-9.]+ over 1 runs$' "$out/quota_ab.md" || fail "no throttle count"
[ "$(grep -c '^stream,' "$out/quota_ab.csv")" -eq 0 ] || fail "rows without the configuration column"
[ "$(grep -cE '^(a|b),1,[0-9]+,[0-9]+,stream,ferry,' "$out/quota_ab.csv")" -eq 4 ] ||
    fail "quota_ab.csv does not hold 2 sizes x 2 configurations"
echo "PASS bench_quota_ab"
