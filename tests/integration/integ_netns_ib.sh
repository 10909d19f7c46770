#!/bin/bash
# integ_netns_ib: the ib backend between "two hosts" on one machine. Two
# network namespaces joined by a veth pair (10.214.<n>.1/30 and .2/30, only
# inside them); integ_fork's receiver runs in one and its sender in the other
# (the handle passed through a file), each with
#
#   NCCL_FERRY_BACKEND=ib  FAKEIBV_LINK=eth (RoCE)
#   NCCL_SOCKET_IFNAME=<its veth>   the out-of-band TCP exchange over the veth
#   FAKEIBV_NETDEV=<its veth>       RoCE GIDs 2/3 = ::ffff:<its veth address>
#   FAKEIBV_FABRIC_DIR=<one dir>    shared, so the emulated fabric reaches
#                                   across the namespaces (abstract sockets
#                                   would not), as a real fabric does
#   NCCL_IB_GID_INDEX unset         ferry must pick index 3 itself (sysfs
#                                   gid_attrs/types, ibv_query_gid_ex)
#
# Checks: integ_fork's sweep, 0 B .. 64 MiB byte for byte, exits 0 on both
# sides; the handle's listen address is the receiver's veth address; each
# side's INFO log says "ib fakeib0:1: GID index 3 ::ffff:<its veth address>"
# and "ib backend using [0]fakeib0:1/RoCE; OOB <its veth>:<its address>"; the
# data went over the fabric dir, not the veth: while the pair runs, the dir
# holds both ports' gid/<hex> socket files, each side's QP stream is seen
# connected to the other side's gid socket file (fakeibv routes a GRH by its
# destination GID, so this is the ::ffff:<veth address> GID at work), and
# the veth counters show only the out-of-band exchange (>0, < 1 MiB, where
# the sweep moves about 400 MiB); no socket file is left afterwards.
#
#   integ_netns_ib.sh INTEG_FORK_BINARY PLUGIN_PATH FAKEIBV_LIB_DIR
#
# Exits 77 (ctest SKIP_RETURN_CODE) when not root or when namespaces or veth
# pairs cannot be created here.
set -uo pipefail
# shellcheck source=netns_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_pair.sh"

usage="usage: integ_netns_ib.sh INTEG_FORK_BINARY PLUGIN_PATH FAKEIBV_LIB_DIR"
fork_bin=${1:?$usage}
plugin=${2:?$usage}
libdir=${3:?$usage}
# dlopen searches the library path for a bare name: make a relative path absolute.
if [ -f "$plugin" ]; then
    plugin=$(readlink -f "$plugin")
fi
fork_bin=$(readlink -f "$fork_bin")
libdir=$(readlink -f "$libdir")
limit_s=150
name=integ_netns_ib

skip() {
    echo "SKIP $name: $*"
    exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"
if [ ! -e "$libdir/libibverbs.so.1" ]; then
    echo "FAIL $name: no fakeibv library at $libdir/libibverbs.so.1 (build the fakeibv target)"
    exit 1
fi

netns_pair_setup ib ir is 214 nsib
fabric="$tmp/fabric"
mkdir "$fabric"

netns_pair_up

echo "namespaces $ns_r ($veth_r $addr_r) <-> $ns_s ($veth_s $addr_s), fabric dir $fabric"

# The GIDs FAKEIBV_NETDEV makes of the veth addresses, as text and as fakeibv's socket file names.
gid_hex() {
    local o1 o2 o3 o4
    IFS=. read -r o1 o2 o3 o4 <<<"$1"
    printf '00000000000000000000ffff%02x%02x%02x%02x' "$o1" "$o2" "$o3" "$o4"
}
gidfile_r="$fabric/gid/$(gid_hex "$addr_r")"
gidfile_s="$fabric/gid/$(gid_hex "$addr_s")"
re() { printf '%s' "${1//./\\.}"; }

fail=0
failed() {
    echo "FAIL $name: $*"
    fail=1
}

counter() { # counter NS DEV rx_bytes|tx_bytes
    ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"
}

# side NS VETH ROLE LOG: one integ_fork side in its namespace, in the background.
side() {
    local ns=$1 veth=$2 role=$3 log=$4
    timeout -s KILL "$limit_s" ip netns exec "$ns" env -u NCCL_IB_GID_INDEX \
        NCCL_FERRY_BACKEND=ib NCCL_DEBUG=INFO FAKEIBV_DEBUG=1 \
        FAKEIBV_LINK=eth FAKEIBV_FABRIC_DIR="$fabric" FAKEIBV_NETDEV="$veth" \
        FAKEIBV_RETRY_TIMEOUT_MS=2000 NCCL_SOCKET_IFNAME="$veth" LD_LIBRARY_PATH="$libdir" \
        "$fork_bin" --plugin "$plugin" --role "$role" --handle-file "$tmp/handle" \
        >"$log" 2>&1 &
    pids+=("$!")
}

# While both run (bounded by their own timeout): what the fabric dir and each
# namespace's Unix sockets look like. A helper process parked in each
# namespace gives its /proc/<pid>/net/unix (the namespace's Unix socket
# table) to read without a fork per sample: the QPs are connected for well
# under a second on a fast machine. A responder's end of a stream is the
# socket accept() returned, which carries its listener's path, and which the
# kernel creates in the connecting socket's namespace: a connected (state 03)
# socket on the receiver's <fabric>/gid/<hex> in the sender's namespace means
# the sender's QP reached the receiver's RoCE GID through the fabric dir from
# across the namespace boundary (and the other way round).
connected_on() { # connected_on HELPER_PID PATH: 0 when a connected socket has that path
    local st path
    # Num RefCount Protocol Flags Type St Inode Path
    while read -r _ _ _ _ _ st _ path; do
        [ "$st" = 03 ] && [ "$path" = "$2" ] && return 0
    done <"/proc/$1/net/unix"
    return 1
}
# ("ip netns exec" execs sleep: the pid is the sleep's, inside the namespace.)
ip netns exec "$ns_r" sleep "$limit_s" &
helper_r=$!
helpers+=("$helper_r")
ip netns exec "$ns_s" sleep "$limit_s" &
helper_s=$!
helpers+=("$helper_s")
# Bounded: the helpers are in their namespaces once their net namespace differs from ours.
for _ in $(seq 1 100); do
    [ "$(readlink "/proc/$helper_r/ns/net")" != "$(readlink /proc/self/ns/net)" ] &&
        [ "$(readlink "/proc/$helper_s/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
    sleep 0.05
done

rx_r0=$(counter "$ns_r" "$veth_r" rx_bytes)
tx_r0=$(counter "$ns_r" "$veth_r" tx_bytes)
side "$ns_r" "$veth_r" recv "$tmp/recv.log"
recv_pid=${pids[0]}
side "$ns_s" "$veth_s" send "$tmp/send.log"
send_pid=${pids[1]}

seen_r=0 seen_s=0 estab_r=0 estab_s=0
while kill -0 "$recv_pid" 2>/dev/null || kill -0 "$send_pid" 2>/dev/null; do
    [ -S "$gidfile_r" ] && seen_r=1
    [ -S "$gidfile_s" ] && seen_s=1
    if [ "$estab_r" -eq 0 ] && connected_on "$helper_s" "$gidfile_r"; then
        estab_r=1
        find "$fabric" -type s >"$tmp/fabric.seen" 2>/dev/null
    fi
    if [ "$estab_s" -eq 0 ] && connected_on "$helper_r" "$gidfile_s"; then
        estab_s=1
    fi
    if [ "$estab_r" -eq 1 ] && [ "$estab_s" -eq 1 ]; then
        sleep 0.1
    else
        sleep 0.005
    fi
done
wait "$recv_pid"
recv_rc=$?
wait "$send_pid"
send_rc=$?
kill -KILL "$helper_r" "$helper_s" 2>/dev/null
wait "$helper_r" "$helper_s" 2>/dev/null
pids=()
helpers=()
rx_r=$(($(counter "$ns_r" "$veth_r" rx_bytes) - rx_r0))
tx_r=$(($(counter "$ns_r" "$veth_r" tx_bytes) - tx_r0))

echo "---- receiver (in $ns_r, exit $recv_rc) ----"
cat "$tmp/recv.log"
echo "---- sender (in $ns_s, exit $send_rc) ----"
cat "$tmp/send.log"
echo "----"

if [ "$recv_rc" -ne 0 ] || [ "$send_rc" -ne 0 ]; then
    failed "receiver exit $recv_rc, sender exit $send_rc (137 = killed at ${limit_s} s)"
fi
grep -q "integ_fork recv: all checks passed" "$tmp/recv.log" ||
    failed "the receiver did not finish its byte-for-byte sweep"
grep -q "integ_fork send: all checks passed" "$tmp/send.log" ||
    failed "the sender did not finish its sweep"
grep -q "sweep 1 MiB..64 MiB" "$tmp/recv.log" ||
    failed "no 'sweep 1 MiB..64 MiB' pass line from the receiver"

# The out-of-band address: the receiver's veth, in the handle and in each side's INFO line.
if ! grep -Eq "listen address $(re "$addr_r"):[0-9]+" "$tmp/recv.log"; then
    failed "the handle does not carry ${veth_r}'s address $addr_r (NCCL_SOCKET_IFNAME ignored?)"
fi
check_side() { # check_side LOG ROLE VETH ADDR
    local log=$1 role=$2 veth=$3 addr=$4 line
    line=$(grep -E "ib fakeib0:1: GID index [0-9]+ " "$log" | head -n 1)
    echo "$role: ${line:-no GID line}"
    if ! grep -Eq "ib fakeib0:1: GID index 3 ::ffff:$(re "$addr") \(AF_INET, RoCE v2\)" "$log"; then
        failed "$role: ferry did not choose GID index 3 ::ffff:$addr (RoCE v2, $veth's address)" \
            "by itself"
    fi
    line=$(grep -E "ib backend using" "$log" | head -n 1)
    echo "$role: ${line:-no 'ib backend using' line}"
    if ! grep -Eq "ib backend using \[0\]fakeib0:1/RoCE(;| ).*OOB $veth:$(re "$addr")\$" "$log"; then
        failed "$role: no 'ib backend using [0]fakeib0:1/RoCE ... OOB $veth:$addr' INFO line"
    fi
    if ! grep -q "fakeibv\[[0-9]*\]: opened fakeib0" "$log"; then
        failed "$role: no 'fakeibv[pid]: opened fakeib0' line: fakeibv was not the verbs library"
    fi
}
check_side "$tmp/recv.log" receiver "$veth_r" "$addr_r"
check_side "$tmp/send.log" sender "$veth_s" "$addr_s"
# NCCL_FERRY_IB_CM=rdmacm (integ_netns_ib_rdmacm): both sides really connected through rdma_cm.
if [ "${NCCL_FERRY_IB_CM:-oob}" = rdmacm ]; then
    grep -q "ib accepted connection from .* (rdmacm)" "$tmp/recv.log" ||
        failed "receiver: no 'ib accepted connection ... (rdmacm)' INFO line"
    grep -q "ib connected to .* (rdmacm)" "$tmp/send.log" ||
        failed "sender: no 'ib connected to ... (rdmacm)' INFO line"
fi
if grep -q "unexpected WARN" "$tmp/recv.log" "$tmp/send.log"; then
    failed "a side logged an unexpected WARN (above)"
fi

# The bytes went over the fabric dir's socket files, not over the veth.
echo "fabric dir while running: receiver's gid socket $([ "$seen_r" -eq 1 ] && echo seen || echo NOT seen)," \
    "sender's $([ "$seen_s" -eq 1 ] && echo seen || echo NOT seen)"
[ -f "$tmp/fabric.seen" ] && sed 's/^/  /' "$tmp/fabric.seen"
[ "$seen_r" -eq 1 ] || failed "$gidfile_r (the receiver's RoCE GID) never appeared in the fabric dir"
[ "$seen_s" -eq 1 ] || failed "$gidfile_s (the sender's RoCE GID) never appeared in the fabric dir"
if [ "$estab_r" -eq 1 ]; then
    echo "sender's QP stream connected to the receiver's gid socket file (seen in $ns_s)"
else
    failed "no stream from $ns_s connected to $gidfile_r: the sender's QP did not" \
        "reach the receiver's GID through the fabric dir"
fi
if [ "$estab_s" -eq 1 ]; then
    echo "receiver's QP stream connected to the sender's gid socket file (seen in $ns_r)"
else
    failed "no stream from $ns_r connected to $gidfile_s: the receiver's QP did not" \
        "reach the sender's GID through the fabric dir"
fi
echo "$veth_r during the run: rx $rx_r bytes, tx $tx_r bytes (the out-of-band exchange only)"
if [ "$rx_r" -le 0 ] || [ "$tx_r" -le 0 ]; then
    failed "nothing crossed $veth_r: the out-of-band exchange did not take the veth"
fi
if [ "$rx_r" -ge $((1 << 20)) ] || [ "$tx_r" -ge $((1 << 20)) ]; then
    failed "$rx_r/$tx_r bytes crossed $veth_r: the data took TCP, not the emulated fabric"
fi
left=$(find "$fabric" -type s 2>/dev/null | wc -l)
if [ "$left" -ne 0 ]; then
    failed "$left socket file(s) left in the fabric dir after both processes exited:" \
        "$(find "$fabric" -type s | tr '\n' ' ')"
fi

[ "$fail" -eq 0 ] && echo "$name: all checks passed"
exit "$fail"
