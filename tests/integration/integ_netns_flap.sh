#!/bin/bash
# integ_netns_flap: the link between "two hosts" goes down under traffic.
# Two network namespaces joined by a veth pair, integ_fork's receiver in one
# and its sender in the other (as integ_netns.sh), the 1..64 MiB part of the
# sweep repeated (FIT_FORK_REPEAT) so the link can go down in the middle:
#
#   flap   the sender's veth down for 2 s, then up again, with
#          NCCL_FERRY_SOCKET_TIMEOUT_S=6: both sides wait it out (TCP
#          retransmits) and every message arrives intact (exit 0 each).
#   down   the veth down for good, NCCL_FERRY_SOCKET_TIMEOUT_S=3: both sides
#          fail with ncclRemoteError within the timeout + 10 s, each with a
#          WARN naming the other's address; nothing hangs.
#
# Prints "FLAP case=... seconds=..." lines (tests/RELIABILITY.md).
#
#   integ_netns_flap.sh INTEG_FORK_BINARY PLUGIN_PATH
#
# Exits 77 (ctest SKIP_RETURN_CODE) when not root or when namespaces or veth
# pairs cannot be created here.
set -uo pipefail
# shellcheck source=netns_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_pair.sh"

fork_bin=${1:?usage: integ_netns_flap.sh INTEG_FORK_BINARY PLUGIN_PATH}
plugin=${2:?usage: integ_netns_flap.sh INTEG_FORK_BINARY PLUGIN_PATH}
if [ -f "$plugin" ]; then
    plugin=$(readlink -f "$plugin")
fi
fork_bin=$(readlink -f "$fork_bin")
limit_s=120

skip() {
    echo "SKIP integ_netns_flap: $*"
    exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"

netns_pair_setup fl gr gs 214 flap

netns_pair_up

echo "namespaces $ns_r ($veth_r $addr_r) <-> $ns_s ($veth_s $addr_s)"

fail=0

# run_case NAME DOWN_SECONDS(0: for good) REPEAT TIMEOUT_S
run_case() {
    local name=$1 down=$2 repeat=$3 tmo=$4 recv_pid send_pid recv_rc send_rc t0 t1 secs
    rm -f "$tmp/handle"
    timeout -s KILL "$limit_s" ip netns exec "$ns_r" env NCCL_SOCKET_IFNAME="$veth_r" \
        FIT_FORK_REPEAT="$repeat" NCCL_FERRY_SOCKET_TIMEOUT_S="$tmo" \
        "$fork_bin" --plugin "$plugin" --role recv --handle-file "$tmp/handle" \
        >"$tmp/recv.log" 2>&1 &
    recv_pid=$!
    timeout -s KILL "$limit_s" ip netns exec "$ns_s" env NCCL_SOCKET_IFNAME="$veth_s" \
        FIT_FORK_REPEAT="$repeat" NCCL_FERRY_SOCKET_TIMEOUT_S="$tmo" \
        "$fork_bin" --plugin "$plugin" --role send --handle-file "$tmp/handle" \
        >"$tmp/send.log" 2>&1 &
    send_pid=$!
    pids=("$recv_pid" "$send_pid")
    # In the middle of the traffic: after the first large sweep is through.
    for _ in $(seq 1 300); do
        grep -q "sweep 1 MiB..64 MiB" "$tmp/recv.log" 2>/dev/null && break
        sleep 0.1
    done
    ip -n "$ns_s" link set "$veth_s" down
    t0=$(date +%s.%N)
    echo "$name: $veth_s down"
    if [ "$down" -gt 0 ]; then
        sleep "$down"
        ip -n "$ns_s" link set "$veth_s" up
        netns_pair_wait_carrier
        echo "$name: $veth_s up after ${down} s"
    fi
    wait "$recv_pid"
    recv_rc=$?
    t1=$(date +%s.%N)
    wait "$send_pid"
    send_rc=$?
    pids=()
    secs=$(echo "$t1 $t0" | awk '{printf "%.2f", $1 - $2}')
    echo "---- $name: receiver (exit $recv_rc) ----"
    grep -v "^  INFO" "$tmp/recv.log" | tail -n 12
    echo "---- $name: sender (exit $send_rc) ----"
    grep -v "^  INFO" "$tmp/send.log" | tail -n 12
    echo "----"
    if [ "$down" -gt 0 ]; then
        if [ "$recv_rc" -ne 0 ] || [ "$send_rc" -ne 0 ]; then
            echo "FAIL $name: receiver exit $recv_rc, sender exit $send_rc after a ${down} s flap"
            fail=1
            return
        fi
        echo "FLAP case=$name down=${down}s outcome=intact reps=$repeat seconds_after_down=$secs"
        return
    fi
    if [ "$recv_rc" -eq 0 ] || [ "$send_rc" -eq 0 ] || [ "$recv_rc" -eq 137 ] ||
        [ "$send_rc" -eq 137 ]; then
        echo "FAIL $name: receiver exit $recv_rc, sender exit $send_rc (want a failure, not" \
            "success or the ${limit_s} s kill)"
        fail=1
        return
    fi
    if ! grep -q "ncclRemoteError" "$tmp/recv.log" || ! grep -q "ncclRemoteError" "$tmp/send.log"
    then
        echo "FAIL $name: not both sides failed with ncclRemoteError"
        fail=1
    fi
    if ! grep "WARN" "$tmp/recv.log" | grep -q "$addr_s" ||
        ! grep "WARN" "$tmp/send.log" | grep -q "$addr_r"; then
        echo "FAIL $name: a side's WARN does not name the peer's address"
        fail=1
    fi
    if awk -v s="$secs" -v t="$tmo" 'BEGIN { exit !(s > t + 10) }'; then
        echo "FAIL $name: the receiver failed ${secs} s after the link went down (bound $((tmo + 10)) s)"
        fail=1
    fi
    echo "FLAP case=$name outcome=ncclRemoteError socket_timeout=${tmo}s seconds_after_down=$secs"
}

run_case flap 2 6 6
run_case down 0 50 3
[ "$fail" -eq 0 ] && echo "integ_netns_flap: all checks passed"
exit "$fail"
