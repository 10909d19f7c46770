/*
 * The CPU time a cgroup lets this process have: cgroup v2's cpu.max, or
 * cgroup v1's cpu.cfs_quota_us over cpu.cfs_period_us, at the process' own
 * cgroup and every cgroup above it up to the mount's root; the tightest
 * level counts. A container with a CPU limit (Kubernetes, Docker --cpus,
 * Slurm's or systemd's CPUQuota) has one: its affinity mask still holds
 * every CPU of the host, but the threads together get only this much time,
 * and past it the kernel stops all of them until the next period.
 */
#ifndef FERRY_CORE_CPU_QUOTA_H
#define FERRY_CORE_CPU_QUOTA_H

#include <stddef.h>

typedef struct ferry_cpu_quota {
    long long quota_us;  /* CPU time per period the tightest level allows. */
    long long period_us; /* Its period. */
    char      file[256]; /* The file that set it, as the system names it. */
} ferry_cpu_quota_t;

/*
 * 1 and *q filled when some level of the process' cpu cgroup has a quota,
 * 0 when none does or nothing can be read (no cgroup file system, no cpu
 * controller). root is "" on a real system; tests give a directory holding
 * proc/self/cgroup, proc/self/mountinfo and the cgroup trees they name.
 */
int ferry_cpu_quota_read(const char *root, ferry_cpu_quota_t *q);

/*
 * Whole CPUs the quota pays for (0 when q holds none): quota / period
 * rounded down, at least 1. A helper thread needs a core's worth of time to
 * keep pace, and the rest of a fraction does not give it one.
 */
int ferry_cpu_quota_cpus(const ferry_cpu_quota_t *q);

#endif
