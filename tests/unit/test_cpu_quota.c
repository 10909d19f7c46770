/*
 * The cgroup CPU quota reader (core/cpu_quota.c) on file trees made in a
 * temporary directory: /proc/self/cgroup and /proc/self/mountinfo as the
 * kernel writes them for cgroup v1, v2 and a hybrid, with and without a
 * container's own cgroup namespace, and the quota files at several levels.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/cpu_quota.h"

/* The tree's root, a fresh directory per test. */
static char root[PATH_MAX];

/* Writes text to root/rel, making the directories on the way. */
static void put(const char *rel, const char *text)
{
    char path[PATH_MAX];
    char *slash;
    FILE *f;

    assert_true(snprintf(path, sizeof(path), "%s%s", root, rel) < (int)sizeof(path));
    for (slash = strchr(path + strlen(root) + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
        *slash = '/';
    }
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int make_root(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/ferry-cpu-quota-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int remove_root(void **state)
{
    char cmd[PATH_MAX + 16];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* The v1 cpu hierarchy mounted whole, as a host without containers has it. */
#define V1_MOUNTINFO                                                                       \
    "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"                             \
    "30 25 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"                  \
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n" \
    "32 30 0:29 / /sys/fs/cgroup/cpuset rw,nosuid shared:10 - cgroup cgroup rw,cpuset\n"

/* A Slurm-like job cgroup with a quota, and the rank's own cgroup below it without one. */
static void test_v1_parent_level(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo", V1_MOUNTINFO);
    put("/proc/self/cgroup", "5:cpuset:/\n4:cpu,cpuacct:/job_7/rank_0\n1:name=systemd:/x\n");
    put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_quota_us", "250000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_period_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/rank_0/cpu.cfs_quota_us", "-1\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/rank_0/cpu.cfs_period_us", "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 250000);
    assert_int_equal(q.period_us, 100000);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_quota_us");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 2);
}

/* Quotas at two levels: the tighter one counts, by ratio, whatever the periods. */
static void test_v1_tightest_level(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo", V1_MOUNTINFO);
    put("/proc/self/cgroup", "4:cpu,cpuacct:/job_7/rank_0\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_quota_us", "300000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_period_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/rank_0/cpu.cfs_quota_us", "50000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/rank_0/cpu.cfs_period_us", "25000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 50000);
    assert_int_equal(q.period_us, 25000);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu,cpuacct/job_7/rank_0/cpu.cfs_quota_us");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 2);
    /* The parent tighter than the child: the parent's. */
    put("/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_quota_us", "150000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 150000);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu,cpuacct/job_7/cpu.cfs_quota_us");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
}

/* A container with its own cgroup namespace on cgroup v2: "0::/" and cpu.max at the mount. */
static void test_v2_container_namespace(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo",
        "700 650 0:35 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n");
    put("/proc/self/cgroup", "0::/\n");
    put("/sys/fs/cgroup/cpu.max", "200000 100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 200000);
    assert_int_equal(q.period_us, 100000);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu.max");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 2);
    /* "max": no limit. */
    put("/sys/fs/cgroup/cpu.max", "max 100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
    assert_int_equal(q.quota_us, 0);
    assert_int_equal(ferry_cpu_quota_cpus(&q), 0);
}

/* A Kubernetes pod on cgroup v2 seen from the host's namespace: the pod's level holds the limit. */
static void test_v2_nested_pod(void **state)
{
    const char *pod = "/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice";
    char rel[PATH_MAX];
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo", "35 25 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "0::/kubepods.slice/kubepods-pod1.slice/cri-abc.scope\n");
    snprintf(rel, sizeof(rel), "%s/cpu.max", pod);
    put(rel, "350000 100000\n");
    snprintf(rel, sizeof(rel), "%s/cri-abc.scope/cpu.max", pod);
    put(rel, "max 100000\n");
    put("/sys/fs/cgroup/kubepods.slice/cpu.max", "max 100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 350000);
    snprintf(rel, sizeof(rel), "%s/cpu.max", pod);
    assert_string_equal(q.file, rel);
    assert_int_equal(ferry_cpu_quota_cpus(&q), 3);
    /* A quota with no period named: cpu.max's default, 100000 us. */
    snprintf(rel, sizeof(rel), "%s/cri-abc.scope/cpu.max", pod);
    put(rel, "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 100000);
    assert_int_equal(q.period_us, 100000);
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
}

/*
 * A container without a cgroup namespace on v1: the mount's root is the
 * container's cgroup, which /proc/self/cgroup names by the host's path.
 * Half a CPU still counts as one.
 */
static void test_v1_container_mount_root(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo",
        "40 30 0:28 /docker/abc /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu\n");
    put("/proc/self/cgroup", "3:cpu:/docker/abc\n");
    put("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000\n");
    put("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
    /* A cgroup outside the mounted part: the mount's root is what there is to read. */
    put("/proc/self/cgroup", "3:cpu:/elsewhere/x\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_string_equal(q.file, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    /* A path that only starts like the mount's root is not below it. */
    put("/proc/self/cgroup", "3:cpu:/docker/abcdef\n");
    put("/sys/fs/cgroup/cpudef/cpu.cfs_quota_us", "10000\n");
    put("/sys/fs/cgroup/cpudef/cpu.cfs_period_us", "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(q.quota_us, 50000);
}

/* A hybrid host: the cpu controller on v1, a v2 tree beside it; the tighter counts. */
static void test_hybrid(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    put("/proc/self/mountinfo", V1_MOUNTINFO
        "40 30 0:37 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "4:cpu,cpuacct:/a\n0::/b\n");
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", "400000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    /* v2 without the cpu controller has no cpu.max: v1's quota. */
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_int_equal(ferry_cpu_quota_cpus(&q), 4);
    put("/sys/fs/cgroup/unified/b/cpu.max", "120000 100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 1);
    assert_string_equal(q.file, "/sys/fs/cgroup/unified/b/cpu.max");
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
}

/* Nothing to read, or nothing that makes sense: no quota, never a crash. */
static void test_nothing_or_garbage(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
    put("/proc/self/mountinfo", V1_MOUNTINFO "garbage without a separator\n- \n");
    put("/proc/self/cgroup", "no colons here\n4:cpu,cpuacct\n4:cpu,cpuacct:/a\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", "lots\n");
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
    /* A quota with no period file, or a zero period, is not a limit to count. */
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "0\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
    /* The cpu controller named only inside another word ("cpuset") is not it. */
    put("/proc/self/cgroup", "5:cpuset:/a\n");
    put("/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    assert_int_equal(ferry_cpu_quota_read(root, &q), 0);
}

static void test_whole_cpus(void **state)
{
    ferry_cpu_quota_t q;

    (void)state;
    memset(&q, 0, sizeof(q));
    assert_int_equal(ferry_cpu_quota_cpus(&q), 0);
    q.quota_us = 1000;
    q.period_us = 100000;
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
    q.quota_us = 199999;
    assert_int_equal(ferry_cpu_quota_cpus(&q), 1);
    q.quota_us = 200000;
    assert_int_equal(ferry_cpu_quota_cpus(&q), 2);
    q.quota_us = 6400000;
    assert_int_equal(ferry_cpu_quota_cpus(&q), 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v1_parent_level, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_v1_tightest_level, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_v2_container_namespace, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_v2_nested_pod, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_v1_container_mount_root, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_hybrid, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_nothing_or_garbage, make_root, remove_root),
        cmocka_unit_test(test_whole_cpus),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
