#!/bin/bash
# The long soak: tests/soak/soak for N minutes on the socket backend, then N
# minutes on the ib backend over fakeibv, each with its own seed printed.
# Builds nothing: run it from a build tree made by cmake (default build/).
#
#   tests/soak/soak.sh --minutes N [--build DIR] [--seed S] [--pairs P]
#
# Prints each run's SOAK line; exits non-zero if either run failed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
minutes=""
build="$repo/build"
seed=$(date +%s)
pairs=4
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    *) echo "usage: soak.sh --minutes N [--build DIR] [--seed S] [--pairs P]" >&2; exit 2 ;;
    esac
done
[ -n "$minutes" ] || { echo "usage: soak.sh --minutes N [--build DIR] [--seed S] [--pairs P]" >&2; exit 2; }
bin="$build/tests/soak/soak"
plugin="$build/libnccl-net-ferry.so"
[ -x "$bin" ] && [ -f "$plugin" ] || { echo "soak.sh: build $build first (no $bin or $plugin)" >&2; exit 2; }
secs=$((minutes * 60))
limit=$((secs + 120))
rc=0

echo "== soak: socket backend, $minutes min, seed $seed, $pairs pairs"
NCCL_SOCKET_IFNAME=lo timeout -s KILL "$limit" "$bin" --plugin "$plugin" --seconds "$secs" \
    --seed "$seed" --pairs "$pairs" 2>&1 | grep -v "^  INFO"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ -f "$build/fakeibv/lib/libibverbs.so.1" ]; then
    echo "== soak: ib backend on fakeibv, $minutes min, seed $seed, $pairs pairs"
    NCCL_FERRY_BACKEND=ib NCCL_SOCKET_IFNAME==lo LD_LIBRARY_PATH="$build/fakeibv/lib" \
        FAKEIBV_RETRY_TIMEOUT_MS=500 timeout -s KILL "$limit" "$bin" --plugin "$plugin" \
        --seconds "$secs" --seed "$seed" --pairs "$pairs" 2>&1 | grep -v "^  INFO"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
else
    echo "== soak: no fakeibv in $build; ib run skipped"
fi
exit "$rc"
