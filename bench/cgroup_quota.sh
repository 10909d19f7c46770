# shellcheck shell=bash
# cgroup_quota.sh, sourced: cgroups with a CPU limit, as a container with
# `docker --cpus` or a Kubernetes CPU limit runs in, on cgroup v1's cpu
# hierarchy or on cgroup v2 (cpu enabled for the root's children). Needs root.
# Used by bench/quota_ab.sh, bench/nccl/mpirun_ab.sh --rank-quota and
# tests/info/info_cpu_quota.sh.
#
#   cgq_make NAME        make the cgroup NAME; prints its directory (fails if
#                        neither hierarchy lets one with a CPU limit be made)
#   cgq_set DIR CPUS     CPUS (a decimal: 1, 1.5) of CPU time per 100 ms period
#   cgq_file DIR         the file that holds the limit (what ferry names)
#   cgq_throttled DIR    periods in which the kernel has throttled DIR so far
#   cgq_join DIR [PID]   move PID (default: this shell) into DIR

cgq_make() {
  local d
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    d=/sys/fs/cgroup/cpu/$1
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
      echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || return 1
    d=/sys/fs/cgroup/$1
  else
    return 1
  fi
  mkdir "$d" 2>/dev/null || return 1
  echo "$d"
}

cgq_set() {
  local us
  us=$(awk -v c="$2" 'BEGIN { printf "%d", c * 100000 }')
  if [ -f "$1/cpu.cfs_quota_us" ]; then
    echo 100000 >"$1/cpu.cfs_period_us" && echo "$us" >"$1/cpu.cfs_quota_us"
  else
    echo "$us 100000" >"$1/cpu.max"
  fi
}

cgq_file() {
  if [ -f "$1/cpu.cfs_quota_us" ]; then echo "$1/cpu.cfs_quota_us"; else echo "$1/cpu.max"; fi
}

cgq_throttled() {
  awk '$1 == "nr_throttled" { print $2 }' "$1/cpu.stat"
}

cgq_join() {
  echo "${2:-$$}" >"$1/cgroup.procs"
}
