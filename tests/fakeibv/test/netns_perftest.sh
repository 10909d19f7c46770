#!/bin/bash
# Two "hosts" joined by a wire: two network namespaces with a veth pair
# between them (10.<a>.<b>.1/24 and .2/24), one unmodified perftest process
# in each, RoCE v2 over fakeibv (-x 3), perftest's own TCP exchange over the
# veth addresses. fakeibv finds the peer through FAKEIBV_FABRIC_DIR (socket
# files, visible from both namespaces) and addresses each port by the GID
# made from its FAKEIBV_NETDEV interface address (::ffff:10.<a>.<b>.x).
#
# Before the run a stale socket file (as a killed process leaves) is put
# where the server's GID listener goes; the server must reclaim it.
#
# usage: netns_perftest.sh <fakeibv lib dir> <tool> "<tool options>"
# Needs root (ip netns); otherwise it exits 77 (ctest: skipped).
set -u
libdir=$1 tool=$2 opts=${3:-}
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root to create network namespaces (CI runs as root)"
    exit 77
fi
for cmd in ip "$tool" python3; do
    command -v "$cmd" >/dev/null || { echo "SKIP: $cmd not installed"; exit 77; }
done

ns_a=fakeibv-a-$$ ns_b=fakeibv-b-$$
# Addresses live only inside the two namespaces made here.
net=10.$((100 + $$ % 100)).$(($$ / 100 % 250))
fabric=$(mktemp -d /tmp/fakeibv-fabric.XXXXXX)
# shellcheck disable=SC2317 # run by the EXIT trap.
cleanup() {
    ip netns del "$ns_a" 2>/dev/null
    ip netns del "$ns_b" 2>/dev/null
    rm -rf "$fabric"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

set -e
ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add veth-a type veth peer name veth-b netns "$ns_b"
ip -n "$ns_a" addr add "$net.1/24" dev veth-a
ip -n "$ns_b" addr add "$net.2/24" dev veth-b
for ns in "$ns_a" "$ns_b"; do
    ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set veth-a up
ip -n "$ns_b" link set veth-b up
# Both ends must have carrier before perftest's exchange starts (a veth
# pair usually has it at once; wait 5 s at most rather than assume).
for _ in $(seq 50); do
    ip -n "$ns_a" link show veth-a | grep -q LOWER_UP &&
        ip -n "$ns_b" link show veth-b | grep -q LOWER_UP && break
    sleep 0.1
done

# A stale GID socket for the server's address ::ffff:$net.1.
IFS=. read -r o1 o2 o3 o4 <<<"$net.1"
gidhex=$(printf '00000000000000000000ffff%02x%02x%02x%02x' "$o1" "$o2" "$o3" "$o4")
mkdir -p "$fabric/gid"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$fabric/gid/$gidhex"
[ -S "$fabric/gid/$gidhex" ]
set +e

export FAKEIBV_FABRIC_DIR=$fabric
export PT_SERVER_WRAP="ip netns exec $ns_a env FAKEIBV_NETDEV=veth-a"
export PT_CLIENT_WRAP="ip netns exec $ns_b env FAKEIBV_NETDEV=veth-b"
export PT_SERVER_ADDR=$net.1
# perftest prints the GIDs it exchanged; both must be the veth addresses.
PT_EXPECT="GID: 00:00:00:00:00:00:00:00:00:00:255:255:$(printf '%02d:%02d:%02d' "$o1" "$o2" "$o3")"
export PT_EXPECT
"$here/perftest_pair.sh" "$libdir" "$tool" eth "$opts"
rc=$?
left=$(find "$fabric" -type s | wc -l)
if [ "$rc" -eq 0 ] && [ "$left" -ne 0 ]; then
    echo "FAIL: $left socket file(s) left in $fabric after both processes exited:"
    find "$fabric" -type s
    rc=1
fi
[ "$rc" -eq 0 ] && echo "PASS: $tool across network namespaces $ns_a <-> $ns_b ($net.0/24)"
exit "$rc"
