#!/bin/bash
# integ_netns: "two hosts" on one machine. Two network namespaces joined by a
# veth pair; integ_fork's receiver runs in one and its sender in the other,
# each with NCCL_SOCKET_IFNAME naming its own veth end, the handle passed
# through a file. Checks the listen address is the receiver's veth address,
# the data arrives byte for byte (integ_fork checks it), and it really crossed
# the veth (rx byte counter).
#
#   integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH
#
# Exits 77 (ctest SKIP_RETURN_CODE) when not root or when namespaces or veth
# pairs cannot be created here.
set -uo pipefail

fork_bin=${1:?usage: integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH}
plugin=${2:?usage: integ_netns.sh INTEG_FORK_BINARY PLUGIN_PATH}
limit_s=150

skip() {
    echo "SKIP integ_netns: $*"
    exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"

# Unique per run: several runs (or ctest -j) may share the machine.
tag="$$$((RANDOM % 100))"
ns_r="ferry-it-${tag}-r"
ns_s="ferry-it-${tag}-s"
veth_r="fr${tag}"      # Interface names are at most 15 characters.
veth_s="fs${tag}"
net3=$((RANDOM % 250 + 1))
addr_r="10.213.${net3}.1"
addr_s="10.213.${net3}.2"
tmp=$(mktemp -d /tmp/ferry-netns.XXXXXX)
pids=()

cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$ns_r" 2>/dev/null   # Deleting a namespace deletes its veth end too.
    ip netns del "$ns_s" 2>/dev/null
    ip link del "$veth_r" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$ns_r" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "$ns_s" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip link add "$veth_r" type veth peer name "$veth_s" 2>"$tmp/err" ||
    skip "cannot create a veth pair: $(cat "$tmp/err")"

set -e
ip link set "$veth_r" netns "$ns_r"
ip link set "$veth_s" netns "$ns_s"
ip -n "$ns_r" addr add "$addr_r/30" dev "$veth_r"
ip -n "$ns_s" addr add "$addr_s/30" dev "$veth_s"
ip -n "$ns_r" link set lo up
ip -n "$ns_s" link set lo up
ip -n "$ns_r" link set "$veth_r" up
ip -n "$ns_s" link set "$veth_s" up
set +e

# ferry, like NCCL, only uses interfaces that are running: wait for carrier.
for _ in $(seq 1 50); do
    if ip -n "$ns_r" link show "$veth_r" | grep -q LOWER_UP &&
        ip -n "$ns_s" link show "$veth_s" | grep -q LOWER_UP; then
        break
    fi
    sleep 0.1
done
echo "namespaces $ns_r ($veth_r $addr_r) <-> $ns_s ($veth_s $addr_s)"

rx_before=$(ip netns exec "$ns_r" cat "/sys/class/net/$veth_r/statistics/rx_bytes")

timeout -s KILL "$limit_s" ip netns exec "$ns_r" env NCCL_SOCKET_IFNAME="$veth_r" \
    "$fork_bin" --plugin "$plugin" --role recv --handle-file "$tmp/handle" \
    >"$tmp/recv.log" 2>&1 &
pids+=($!)
recv_pid=$!
timeout -s KILL "$limit_s" ip netns exec "$ns_s" env NCCL_SOCKET_IFNAME="$veth_s" \
    "$fork_bin" --plugin "$plugin" --role send --handle-file "$tmp/handle" \
    >"$tmp/send.log" 2>&1 &
pids+=($!)
send_pid=$!

wait "$recv_pid"
recv_rc=$?
wait "$send_pid"
send_rc=$?
pids=()

echo "---- receiver (in $ns_r, exit $recv_rc) ----"
cat "$tmp/recv.log"
echo "---- sender (in $ns_s, exit $send_rc) ----"
cat "$tmp/send.log"
echo "----"

fail=0
if [ "$recv_rc" -ne 0 ] || [ "$send_rc" -ne 0 ]; then
    echo "FAIL integ_netns: receiver exit $recv_rc, sender exit $send_rc (137 = killed at ${limit_s} s)"
    fail=1
fi
if ! grep -q "listen address ${addr_r}:" "$tmp/recv.log"; then
    echo "FAIL integ_netns: the handle does not carry ${veth_r}'s address ${addr_r}" \
        "(NCCL_SOCKET_IFNAME=${veth_r} ignored?)"
    fail=1
fi
rx_after=$(ip netns exec "$ns_r" cat "/sys/class/net/$veth_r/statistics/rx_bytes")
rx=$((rx_after - rx_before))
echo "bytes received on $veth_r: $rx"
if [ "$fail" -eq 0 ] && [ "$rx" -lt $((64 * 1024 * 1024)) ]; then
    echo "FAIL integ_netns: only $rx bytes crossed the veth; the data did not take it"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "integ_netns: all checks passed"
exit "$fail"
