#!/bin/bash
# info_cpu_quota.sh FERRY_INFO
#
# ferry-info, and the socket backend it loads, inside a real cgroup with a
# CPU limit, as a container with --cpus or a Kubernetes CPU limit runs them:
#
#   1.5 CPUs of time   ferry-info reports the quota and its file; on a host of
#                      2 or more CPUs the backend's defaults are one CPU's
#                      (1 stream, no helpers) and its line names the quota;
#                      the loopback self-test (2 MiB, byte-checked) passes
#                      while the kernel throttles the process
#   the same, with     the one-CPU WARN names the quota and says to raise
#   NCCL_FERRY_THREADS=2   the limit (explicit settings still win)
#   nproc + 0.5 CPUs   a quota above the mask caps nothing: the line names
#                      the affinity mask, not the quota
#
# cgroup v1 (the cpu controller's own hierarchy) or v2 (cpu in the root's
# subtree_control). Exits 77 (skipped) when not root or when no cgroup with
# a CPU limit can be made here.
set -u
# shellcheck source=bench/cgroup_quota.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../bench/cgroup_quota.sh"
info=$(readlink -f "${1:?usage: info_cpu_quota.sh FERRY_INFO}")
out=$(mktemp)
cg=
trap 'rm -f "$out"; [ -n "$cg" ] && rmdir "$cg" 2>/dev/null' EXIT

skip() {
    echo "SKIP info_cpu_quota: $*"
    exit 77
}

fail() {
    echo "FAIL (info_cpu_quota): $*"
    echo "---- ferry-info output ----"
    cat "$out"
    exit 1
}

[ "$(id -u)" -eq 0 ] || skip "needs root to make a cgroup (uid $(id -u))"
cg=$(cgq_make "ferry-quota-test-$$") ||
    skip "no cgroup with a CPU limit can be made here (v1's /sys/fs/cgroup/cpu, or v2 with cpu)"
quota_file=$(cgq_file "$cg")
cgq_set "$cg" 1.5 || skip "cannot set a CPU quota on $cg"
ncpus=$(nproc)

# in_cgroup: ferry-info in the cgroup (a child shell joins it, then becomes
# ferry-info), output in $out; returns ferry-info's exit status.
in_cgroup() {
    local rc=0
    (cgq_join "$cg" "$BASHPID" && exec timeout 120 "$info" --backend socket --verbose) \
        >"$out" 2>&1 || rc=$?
    return $rc
}

has() {
    grep -qF -- "$1" "$out" || fail "no '$1' in the output"
}

# 1.5 CPUs of time.
in_cgroup || fail "ferry-info exited $? under a 1.5-CPU quota"
has "cpu quota: 150000 us per 100000 us, 1 whole CPU of time ($quota_file)"
has "self-test: OK (2097152 bytes checked"
if [ "$ncpus" -ge 2 ]; then
    has "socket backend: 1 stream, no helper threads (NCCL's thread moves every byte) per connection, chosen for 1 CPU of time (the cgroup CPU quota, 150000 us per 100000 us in $quota_file, caps the $ncpus CPUs of the affinity mask)"
    grep -qE '^  threads: +none' "$out" || fail "helper threads started under a 1-CPU quota"
else
    has "chosen for 1 CPU in the affinity mask"
fi

# Explicit helpers under the quota: they run, and the WARN says what to change.
NCCL_FERRY_THREADS=2 in_cgroup || fail "ferry-info exited $? with NCCL_FERRY_THREADS=2"
has "self-test: OK (2097152 bytes checked"
if [ "$ncpus" -ge 2 ]; then
    has "2 helper threads per connection (NCCL_FERRY_THREADS) in a process with one CPU of time (the cgroup CPU quota in $quota_file)"
    has "a CPU limit of 2 or more for the container or job"
fi

# A quota above the mask: nothing capped, the line says the mask.
cgq_set "$cg" "$ncpus.5" || fail "cannot raise the quota on $cg"
in_cgroup || fail "ferry-info exited $? under a quota above the mask"
has "cpu quota: $((ncpus * 100000 + 50000)) us per 100000 us, $ncpus whole CPU"
has "chosen for $ncpus CPU"
grep -F "socket backend: " "$out" | grep -qF "cgroup CPU quota" &&
    fail "the line names a quota that caps nothing"
echo "PASS info_cpu_quota ($quota_file, $ncpus CPUs online)"
exit 0
