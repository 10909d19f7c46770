# shellcheck shell=bash
# Two network namespaces joined by a veth pair, as two hosts: sourced by the
# integ_netns*.sh tests, which define skip(). netns_pair_setup names the pair
# and a temp dir, unique per run (several runs or ctest -j may share the
# machine), and installs the cleanup; netns_pair_up makes the pair (or skips
# the test, exit 77, when this host cannot) and waits for carrier (ferry,
# like NCCL, only uses interfaces that are running; 5 s at most);
# netns_pair_down removes it (deleting a namespace deletes its veth end too).

# netns_pair_setup NAME VETH_R VETH_S OCTET TMPNAME: sets ns_r ns_s veth_r veth_s
# (interface names are at most 15 characters), addr_r addr_s (10.OCTET.x.1/.2),
# tmp (short and under /tmp whatever TMPDIR is: FAKEIBV_FABRIC_DIR takes 70
# characters at most), and empty pids (processes run under timeout(1), each
# leading its own process group) and helpers (plain children); net3, the
# third octet, for addresses of its own (IPv6 in integ_netns.sh).
netns_pair_setup() {
    local tag
    tag="$$$((RANDOM % 100))"
    ns_r="ferry-$1-${tag}-r"
    ns_s="ferry-$1-${tag}-s"
    veth_r="$2${tag}"
    veth_s="$3${tag}"
    net3=$((RANDOM % 250 + 1))
    addr_r="10.$4.${net3}.1"
    addr_s="10.$4.${net3}.2"
    tmp=$(mktemp -d "/tmp/ferry-$5.XXXXXX")
    pids=()
    helpers=()
    trap netns_pair_cleanup EXIT
    trap 'exit 1' INT TERM
}

# shellcheck disable=SC2317 # run by the EXIT trap.
netns_pair_cleanup() {
    local pid
    # A side under timeout(1) leads its own process group: kill the group, so an
    # interrupted run leaves no integ_fork behind.
    for pid in "${pids[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${helpers[@]}"; do
        kill -KILL "$pid" 2>/dev/null
    done
    netns_pair_down
    rm -rf "$tmp"
}

netns_pair_up() {
    ip netns add "$ns_r" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
    ip netns add "$ns_s" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
    ip link add "$veth_r" type veth peer name "$veth_s" 2>"$tmp/err" ||
        skip "cannot create a veth pair: $(cat "$tmp/err")"
    ip link set "$veth_r" netns "$ns_r" &&
        ip link set "$veth_s" netns "$ns_s" &&
        ip -n "$ns_r" addr add "$addr_r/30" dev "$veth_r" &&
        ip -n "$ns_s" addr add "$addr_s/30" dev "$veth_s" &&
        ip -n "$ns_r" link set lo up &&
        ip -n "$ns_s" link set lo up &&
        ip -n "$ns_r" link set "$veth_r" up &&
        ip -n "$ns_s" link set "$veth_s" up || { echo "FAIL: setting up $veth_r/$veth_s"; exit 1; }
    netns_pair_wait_carrier || echo "warning: no carrier on $veth_r/$veth_s after 5 s"
}

# 0 once both ends are LOWER_UP, 1 after 5 s.
netns_pair_wait_carrier() {
    local _
    for _ in $(seq 1 50); do
        if ip -n "$ns_r" link show "$veth_r" | grep -q LOWER_UP &&
            ip -n "$ns_s" link show "$veth_s" | grep -q LOWER_UP; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

netns_pair_down() {
    ip netns del "$ns_r" 2>/dev/null
    ip netns del "$ns_s" 2>/dev/null
    ip link del "$veth_r" 2>/dev/null
}
