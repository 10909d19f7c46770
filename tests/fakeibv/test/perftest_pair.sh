#!/bin/bash
# Runs one unmodified perftest tool as server and client, two processes on
# this host, over fakeibv, and checks that both exit 0 and report a result
# line with a nonzero figure.
#
# usage: perftest_pair.sh <fakeibv lib dir> <tool> <ib|eth> "<tool options>"
# e.g.   perftest_pair.sh build/fakeibv/lib ib_write_bw ib "-s 65536 -n 500"
#
# netns_perftest.sh runs the two sides elsewhere through these (optional):
#   PT_SERVER_WRAP / PT_CLIENT_WRAP  command prefixes for each side (word-split),
#                                    e.g. "ip netns exec ns1 env FAKEIBV_NETDEV=veth0"
#   PT_SERVER_ADDR                   address the client dials (default 127.0.0.1)
#   PT_EXPECT                        a string both sides' output must hold
#   PT_CLIENT_EXPECT                 an extended regex a line of the client's must match
set -u
libdir=$1 tool=$2 link=$3 opts=${4:-}
server_wrap=${PT_SERVER_WRAP:-} client_wrap=${PT_CLIENT_WRAP:-}
server_addr=${PT_SERVER_ADDR:-127.0.0.1}

if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed (apt-get install perftest)"
    exit 77
fi
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKEIBV_LINK=$link
tmp=$(mktemp -d)
spid='' holder=''
# shellcheck disable=SC2317 # run by the EXIT trap.
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null
    [ -n "$holder" ] && kill "$holder" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# A TCP port for perftest's exchange (-R: the emulated rdma_cm listens on
# it), held for the whole pair: a socket bound to 0.0.0.0:<port> with
# SO_REUSEADDR, never listening, in the server's network namespace. perftest
# and the fake bind with SO_REUSEADDR too, so they may bind and listen there
# (the server binds it twice with -R); anybody else's bind(0), connect() or
# plain bind skips or fails on it. Picking a free port and releasing it
# would leave it to other processes until the server binds it.
hold_port() {
    local _
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    holder='' port=''
    : >"$tmp/port"
    # shellcheck disable=SC2086 # the wrapper is deliberately word-split.
    $server_wrap python3 -c '
import signal, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
signal.pause()' >"$tmp/port" 2>/dev/null &
    holder=$!
    for _ in $(seq 100); do
        port=$(cat "$tmp/port")
        [ -n "$port" ] && return
        kill -0 "$holder" 2>/dev/null || break
        sleep 0.1
    done
    holder=
    echo "FAIL: no port held for perftest (python3 in the server's namespace)"
    exit 1
}
hold_port

listening() {
    # perftest accepts exactly one connection, so probe /proc, not the port
    # (in the server's network namespace: /proc/net is per namespace).
    # shellcheck disable=SC2086 # the wrapper is deliberately word-split.
    $server_wrap cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf '%04X' "$port") 00000000:0000 0A"
}

# A result row: "<bytes> <iterations> <n> <n> ..." with the 4th field > 0
# (average bandwidth for *_bw, t_max for *_lat).
result_ok() {
    awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 && $4 + 0 > 0 { ok = 1 } END { exit !ok }' "$1"
}

# One server + client run; sets fail (0/1) and prints what failed.
run_pair() {
    local crc src side
    # shellcheck disable=SC2086 # opts and wrappers are deliberately word-split.
    $server_wrap timeout 60 "$tool" -d fakeib0 -p "$port" $opts >"$tmp/server.log" 2>&1 &
    spid=$!
    for _ in $(seq 100); do
        listening && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    # shellcheck disable=SC2086
    $client_wrap timeout 60 "$tool" -d fakeib0 -p "$port" $opts "$server_addr" >"$tmp/client.log" 2>&1
    crc=$?
    wait "$spid"
    src=$?
    spid=
    fail=0
    [ "$crc" -eq 0 ] || { echo "FAIL: client exited $crc"; fail=1; }
    [ "$src" -eq 0 ] || { echo "FAIL: server exited $src"; fail=1; }
    for side in server client; do
        grep -q "Device *: fakeib0" "$tmp/$side.log" || { echo "FAIL: $side did not use fakeib0"; fail=1; }
        result_ok "$tmp/$side.log" || { echo "FAIL: $side printed no nonzero result row"; fail=1; }
        if [ -n "${PT_EXPECT:-}" ] && ! grep -q -- "$PT_EXPECT" "$tmp/$side.log"; then
            echo "FAIL: $side log lacks '$PT_EXPECT'"; fail=1
        fi
    done
    if [ -n "${PT_CLIENT_EXPECT:-}" ] && ! grep -Eq -- "$PT_CLIENT_EXPECT" "$tmp/client.log"; then
        echo "FAIL: client log has no line matching '$PT_CLIENT_EXPECT'"; fail=1
    fi
}

# perftest times itself with the CPU's cycle counter and first checks that the
# counter tracks wall time (r^2 >= 0.9 over a few short samples); on a loaded
# 2-core machine that check can fail, and the tool then prints "Can't produce
# a report" whatever the transfer did. That is perftest's clock, not the fake:
# such a run is repeated, at most twice more. Any other failure counts.
for attempt in 1 2 3; do
    run_pair
    [ "$fail" -eq 0 ] && break
    grep -q "Correlation coefficient" "$tmp/server.log" "$tmp/client.log" || break
    [ "$attempt" -lt 3 ] || break
    echo "NOTE: perftest's clock calibration failed (a loaded machine); run $((attempt + 1)) of 3"
    hold_port
done
if [ "$fail" -ne 0 ]; then
    for side in server client; do
        echo "----- $tool $side ($link) -----"
        cat "$tmp/$side.log"
    done
    exit 1
fi
echo "PASS: $tool over fakeibv ($link) $opts"
grep -E '^ *[0-9]+ +[0-9]+ ' "$tmp/client.log"
exit 0
