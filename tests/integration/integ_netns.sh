#!/bin/bash
# integ_netns: "two hosts" on one machine. Two network namespaces joined by a
# veth pair; integ_fork's receiver runs in one and its sender in the other,
# each with NCCL_SOCKET_IFNAME naming its own veth end, the handle passed
# through a file. Checks the listen address is the receiver's veth address,
# the data arrives byte for byte (integ_fork checks it), and it really crossed
# the veth (rx byte counter).
#
#   integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH [MODE]
#
# MODE "main" (default): an IPv4 run and an IPv6 run (ULA addresses).
# MODE "linklocal": one IPv6 run over link-local addresses only, where the
# handle's scope id (the receiver's ifindex) means nothing on the sender.
#
# Exits 77 (ctest SKIP_RETURN_CODE) when not root or when namespaces or veth
# pairs cannot be created here.
set -uo pipefail
# shellcheck source=netns_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_pair.sh"

fork_bin=${1:?usage: integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH}
plugin=${2:?usage: integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH}
mode=${3:-main}
# dlopen searches the library path for a bare name: make a relative path absolute.
if [ -f "$plugin" ]; then
    plugin=$(readlink -f "$plugin")
fi
fork_bin=$(readlink -f "$fork_bin")
limit_s=150

skip() {
    echo "SKIP integ_netns: $*"
    exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"

netns_pair_setup it fr fs 213 netns

netns_pair_up

echo "namespaces $ns_r ($veth_r $addr_r) <-> $ns_s ($veth_s $addr_s)"

fail=0

# run_pair LABEL ADDR_PATTERN [VAR=value...]: one receiver/sender run; sets fail=1 on error.
run_pair() {
    local label=$1 want=$2 recv_rc send_rc recv_pid send_pid rx_before rx_after rx
    shift 2
    rm -f "$tmp/handle"
    rx_before=$(ip netns exec "$ns_r" cat "/sys/class/net/$veth_r/statistics/rx_bytes")
    timeout -s KILL "$limit_s" ip netns exec "$ns_r" env NCCL_SOCKET_IFNAME="$veth_r" "$@" \
        "$fork_bin" --plugin "$plugin" --role recv --handle-file "$tmp/handle" \
        >"$tmp/recv.log" 2>&1 &
    recv_pid=$!
    pids+=("$recv_pid")
    timeout -s KILL "$limit_s" ip netns exec "$ns_s" env NCCL_SOCKET_IFNAME="$veth_s" "$@" \
        "$fork_bin" --plugin "$plugin" --role send --handle-file "$tmp/handle" \
        >"$tmp/send.log" 2>&1 &
    send_pid=$!
    pids+=("$send_pid")
    wait "$recv_pid"
    recv_rc=$?
    wait "$send_pid"
    send_rc=$?
    pids=()

    echo "---- $label: receiver (in $ns_r, exit $recv_rc) ----"
    cat "$tmp/recv.log"
    echo "---- $label: sender (in $ns_s, exit $send_rc) ----"
    cat "$tmp/send.log"
    echo "----"
    if [ "$recv_rc" -ne 0 ] || [ "$send_rc" -ne 0 ]; then
        echo "FAIL integ_netns $label: receiver exit $recv_rc, sender exit $send_rc" \
            "(137 = killed at ${limit_s} s)"
        fail=1
        return
    fi
    if ! grep -Eq "listen address ${want}:[0-9]+" "$tmp/recv.log"; then
        echo "FAIL integ_netns $label: the handle does not carry ${veth_r}'s address" \
            "(want ${want}; NCCL_SOCKET_IFNAME=${veth_r} ignored?)"
        fail=1
    fi
    rx_after=$(ip netns exec "$ns_r" cat "/sys/class/net/$veth_r/statistics/rx_bytes")
    rx=$((rx_after - rx_before))
    echo "$label: bytes received on $veth_r: $rx"
    if [ "$rx" -lt $((64 * 1024 * 1024)) ]; then
        echo "FAIL integ_netns $label: only $rx bytes crossed the veth; the data did not take it"
        fail=1
    fi
}

if [ "$mode" = main ]; then
    run_pair IPv4 "${addr_r//./\\.}"
fi

# IPv6 link-local only: the handle must carry the scope id for the peer to reach it.
ll_ready=0
for _ in $(seq 1 50); do
    if ip -n "$ns_r" -6 addr show dev "$veth_r" scope link 2>/dev/null | grep -q "inet6 fe80" &&
        ip -n "$ns_s" -6 addr show dev "$veth_s" scope link 2>/dev/null | grep -q "inet6 fe80" &&
        ! ip -n "$ns_r" -6 addr show dev "$veth_r" | grep -q tentative &&
        ! ip -n "$ns_s" -6 addr show dev "$veth_s" | grep -q tentative; then
        ll_ready=1
        break
    fi
    sleep 0.1
done
if [ "$mode" != linklocal ]; then
    :
elif [ "$ll_ready" -eq 1 ]; then
    run_pair "IPv6 link-local" "\\[fe80:[0-9a-f:]*(%[0-9]+)?\\]" NCCL_SOCKET_FAMILY=AF_INET6
else
    echo "note: no usable IPv6 link-local address on the veth; that run skipped"
fi

# IPv6: a ULA on each end (nodad: usable at once); the handle may name it or the
# link-local address (then with its scope id), both must work.
if [ "$mode" != main ]; then
    :
elif ip -n "$ns_r" -6 addr add "fd00:213:${net3}::1/64" dev "$veth_r" nodad 2>/dev/null &&
    ip -n "$ns_s" -6 addr add "fd00:213:${net3}::2/64" dev "$veth_s" nodad 2>/dev/null; then
    run_pair IPv6 "\\[(fd00:213:${net3}::1|fe80:[0-9a-f:]*(%[0-9]+)?)\\]" NCCL_SOCKET_FAMILY=AF_INET6
else
    echo "note: IPv6 unavailable in the namespaces; IPv6 run skipped"
fi
[ "$fail" -eq 0 ] && echo "integ_netns: all checks passed"
exit "$fail"
