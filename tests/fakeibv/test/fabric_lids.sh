#!/bin/bash
# LID allocation in a FAKEIBV_FABRIC_DIR, made deterministic with pid
# namespaces: fakeibv starts its LID search from a pid-derived value, and
# every process here is pid 1 of its own pid namespace, so all of them want
# the same first LID.
#   A binds it; B finds A alive (EADDRINUSE, probe connects) and takes the
#   next one; A is killed (kill -9), which leaves its socket file; C finds
#   the file refusing connections (ECONNREFUSED), unlinks it and takes A's
#   LID. B and C then connect an RC QP pair through the fabric dir and both
#   exit 0, which removes their socket files. Their per-process sysfs roots
#   (/tmp/fakeibv-sysfs-<uid>/1 for both pids 1) must not collide either.
#
# usage: fabric_lids.sh <fakeibv_peer binary>
# Needs root (unshare --pid); otherwise it exits 77 (ctest: skipped).
set -u
peer=$1

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root to create pid namespaces (CI runs as root)"
    exit 77
fi
command -v unshare >/dev/null || { echo "SKIP: unshare not installed"; exit 77; }

tmp=$(mktemp -d)
fabric=$tmp/fabric
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.err; do echo "--- $f"; cat "$f"; done; exit 1; }

# start NAME: runs fakeibv_peer as pid 1 of a new pid namespace; its stdin
# is a fifo kept open here in fd variable in_NAME.
start() {
    mkfifo "$tmp/$1.in"
    FAKEIBV_FABRIC_DIR=$fabric FAKEIBV_DEBUG=1 FAKEIBV_RETRY_TIMEOUT_MS=2000 \
        unshare --pid --kill-child "$peer" <"$tmp/$1.in" >"$tmp/$1.out" 2>"$tmp/$1.err" &
    pids+=($!)
    eval "exec {in_$1}>\"$tmp/$1.in\""
    eval "pid_$1=$!"
}

# first_line NAME: waits (10 s at most) for the peer's "<lid> <qpn> ..." line.
first_line() {
    for _ in $(seq 100); do
        [ -s "$tmp/$1.out" ] && { head -n 1 "$tmp/$1.out"; return 0; }
        sleep 0.1
    done
    fail "$1 printed nothing"
}

start a
read -r lid_a _ < <(first_line a)
start b
read -r lid_b qpn_b _ < <(first_line b)
echo "A (pid 1) took LID $lid_a; B (pid 1) took LID $lid_b"
[ "$lid_a" != "$lid_b" ] || fail "A and B share LID $lid_a"
if [ ! -S "$fabric/lid/$lid_a" ] || [ ! -S "$fabric/lid/$lid_b" ]; then fail "socket files missing"; fi

# shellcheck disable=SC2154 # pid_a is set by eval in start().
kill -9 "$pid_a"
wait "$pid_a" 2>/dev/null
[ -S "$fabric/lid/$lid_a" ] || fail "kill -9 left no stale socket file (unexpected)"
start c
read -r lid_c qpn_c _ < <(first_line c)
echo "A killed; C (pid 1) took LID $lid_c"
[ "$lid_c" = "$lid_a" ] || fail "C did not reclaim A's stale LID $lid_a (got $lid_c)"
grep -q "stale socket" "$tmp/c.err" || fail "C did not report the stale socket"

# B and C connect to each other through the fabric dir.
# shellcheck disable=SC2154 # in_b / in_c are set by eval in start().
echo "$lid_c $qpn_c" >&"$in_b"
# shellcheck disable=SC2154
echo "$lid_b $qpn_b" >&"$in_c"
for n in b c; do
    for _ in $(seq 100); do grep -q ready "$tmp/$n.out" && break; sleep 0.1; done
    grep -q ready "$tmp/$n.out" || fail "$n did not connect"
done
# One-copy mode cannot work across pid namespaces (each hello says "pid 1",
# which names the acceptor itself there): the probe must fail, quietly, and
# both streams stay in streaming mode.
for n in b c; do
    for _ in $(seq 100); do grep -q "stream from" "$tmp/$n.err" && break; sleep 0.1; done
    grep -q "stream from.*: streaming, " "$tmp/$n.err" ||
        fail "$n: inbound stream not in streaming mode across pid namespaces"
    sed -n 's/^.*stream from/  '"$n"': stream from/p' "$tmp/$n.err"
done
root_b=$(sed -n 's/.*sysfs tree at //p' "$tmp/b.err")
root_c=$(sed -n 's/.*sysfs tree at //p' "$tmp/c.err")
echo "sysfs roots: B $root_b, C $root_c"
if [ -z "$root_b" ] || [ -z "$root_c" ] || [ "$root_b" = "$root_c" ]; then fail "sysfs roots collide"; fi
eval "exec $in_b>&- $in_c>&-"
for n in b c; do
    eval "p=\$pid_$n"
    # shellcheck disable=SC2154
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    wait "$p" || fail "$n exited nonzero"
done
left=$(find "$fabric" -type s | wc -l)
[ "$left" -eq 0 ] || fail "$left socket file(s) left after B and C exited"
# The tree goes at the owner's exit; a loaded machine (sanitizer builds) may take a moment.
for _ in $(seq 50); do
    [ -e "$root_b" ] || [ -e "$root_c" ] || break
    sleep 0.1
done
if [ -e "$root_b" ] || [ -e "$root_c" ]; then fail "a sysfs root outlived its process by 5 s"; fi
echo "PASS: LIDs unique across pid namespaces, stale LID reclaimed, B<->C connected (streaming: one-copy probe failed as it must)"
