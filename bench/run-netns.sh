#!/usr/bin/env bash
# ferry-bench between two network namespaces joined by a veth pair: "two
# hosts" on one machine, traffic through a real netdev instead of lo.
#
#   bench/run-netns.sh [--bin FERRY_BENCH] [ferry-bench options...]
#
# Needs root (ip netns, veth); exits 77 otherwise. Both namespaces, the veth
# pair and its addresses (10.214.N.1/30 and .2) exist only for the run and
# are removed on exit, Ctrl-C included. The receiver runs in one namespace,
# the sender in the other (ferry-bench --netns-recv/--netns-send), each with
# NCCL_SOCKET_IFNAME naming its own veth end; raw TCP uses the same path.
# FERRY_BENCH_TIMEOUT (default 900 s) bounds the whole run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin="$(pwd)/build-bench/bench/ferry-bench"
if [ "${1:-}" = --bin ]; then
    bin=$(readlink -f "$2")
    shift 2
fi
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
    echo "run-netns: needs root and iproute2 to create network namespaces; skipped"
    exit 77
fi
[ -x "$bin" ] || { echo "run-netns: $bin not built (bench/run-loopback.sh --help builds it)"; exit 1; }

run_id="fb$$"
net=$((RANDOM % 250 + 1))
names=("$run_id-recv" "$run_id-send")
ends=("${run_id}r" "${run_id}s")
addrs=("10.214.$net.1" "10.214.$net.2")

remove_namespaces() {
    ip netns del "${names[0]}" 2>/dev/null || true   # Takes its veth end, and so the pair, along.
    ip netns del "${names[1]}" 2>/dev/null || true
}
trap remove_namespaces EXIT
trap 'exit 130' INT TERM

ip netns add "${names[0]}"
ip netns add "${names[1]}"
ip link add "${ends[0]}" netns "${names[0]}" type veth peer name "${ends[1]}" netns "${names[1]}"
for side in 0 1; do
    ip -n "${names[side]}" address add "${addrs[side]}/30" dev "${ends[side]}"
    ip -n "${names[side]}" link set lo up
    ip -n "${names[side]}" link set "${ends[side]}" up
done
# ferry, like NCCL, skips interfaces without carrier: give the pair a moment.
for _ in $(seq 50); do
    ip -n "${names[0]}" link show "${ends[0]}" | grep -q LOWER_UP &&
        ip -n "${names[1]}" link show "${ends[1]}" | grep -q LOWER_UP && break
    sleep 0.1
done
echo "run-netns: ${names[0]} ${ends[0]} ${addrs[0]} (receiver) <-> ${names[1]} ${ends[1]} ${addrs[1]} (sender)"
timeout -s KILL "${FERRY_BENCH_TIMEOUT:-900}" "$bin" \
    --netns-recv "${names[0]}" --ifname-recv "${ends[0]}" \
    --netns-send "${names[1]}" --ifname-send "${ends[1]}" "$@"
