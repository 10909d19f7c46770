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
name="ferry-quota-test-$$"
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    cg=/sys/fs/cgroup/cpu/$name
    mkdir "$cg" 2>/dev/null || { cg=; skip "cannot make a cgroup under /sys/fs/cgroup/cpu"; }
    quota_file=$cg/cpu.cfs_quota_us
    # set_quota US: US microseconds of CPU time per 100 ms period.
    set_quota() { echo 100000 >"$cg/cpu.cfs_period_us" && echo "$1" >"$cg/cpu.cfs_quota_us"; }
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
        echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
        skip "cannot enable the cpu controller for the root cgroup's children (cgroup v2)"
    cg=/sys/fs/cgroup/$name
    mkdir "$cg" 2>/dev/null || { cg=; skip "cannot make a cgroup under /sys/fs/cgroup"; }
    quota_file=$cg/cpu.max
    set_quota() { echo "$1 100000" >"$cg/cpu.max"; }
else
    skip "no cgroup cpu controller here (neither v1's /sys/fs/cgroup/cpu nor v2's cpu)"
fi
set_quota 150000 || skip "cannot set a CPU quota on $cg"
ncpus=$(nproc)

# in_cgroup: ferry-info in the cgroup (a child shell joins it, then becomes
# ferry-info), output in $out; returns ferry-info's exit status.
in_cgroup() {
    local rc=0
    # shellcheck disable=SC2016 # $$ and $1 are the child shell's, on purpose.
    timeout 120 bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
        "$info" --backend socket --verbose >"$out" 2>&1 || rc=$?
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
set_quota $((ncpus * 100000 + 50000)) || fail "cannot raise the quota on $cg"
in_cgroup || fail "ferry-info exited $? under a quota above the mask"
has "cpu quota: $((ncpus * 100000 + 50000)) us per 100000 us, $ncpus whole CPU"
has "chosen for $ncpus CPU"
grep -F "socket backend: " "$out" | grep -qF "cgroup CPU quota" &&
    fail "the line names a quota that caps nothing"
echo "PASS info_cpu_quota ($quota_file, $ncpus CPUs online)"
exit 0
