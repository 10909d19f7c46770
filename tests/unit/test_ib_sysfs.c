/* sysfs readers over a fake device tree in a temporary folder, and their fallbacks. */
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

#include "ib/ib_sysfs.h"

static char root[64]; /* Holds ibdev/ (the device's sysfs folder) and the PCI tree. */

static void put(const char *rel, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void dir(const char *rel)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

static int setup(void **state)
{
    char target[PATH_MAX], link[PATH_MAX];

    (void)state;
    snprintf(root, sizeof(root), "/tmp/ferry-sysfs-XXXXXX");
    assert_non_null(mkdtemp(root));
    dir("pci0000:00");
    dir("pci0000:00/0000:17:03.1");
    dir("ibdev");
    dir("ibdev/ports");
    dir("ibdev/ports/1");
    dir("ibdev/ports/1/gid_attrs");
    dir("ibdev/ports/1/gid_attrs/types");
    put("pci0000:00/0000:17:03.1/numa_node", "1\n");
    put("ibdev/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
    put("ibdev/ports/1/gid_attrs/types/1", "RoCE v2\n");
    put("ibdev/ports/1/gid_attrs/types/2", "RoCE v1\n");
    put("ibdev/ports/1/gid_attrs/types/3", "\n");
    snprintf(target, sizeof(target), "%s/pci0000:00/0000:17:03.1", root);
    snprintf(link, sizeof(link), "%s/ibdev/device", root);
    assert_int_equal(symlink(target, link), 0);
    return 0;
}

static int teardown(void **state)
{
    char cmd[PATH_MAX + 16];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_pci_path_merges_functions(void **state)
{
    char ibdev[PATH_MAX], out[PATH_MAX], want[PATH_MAX + 32], real_root[PATH_MAX];

    (void)state;
    assert_non_null(realpath(root, real_root));
    snprintf(ibdev, sizeof(ibdev), "%s/ibdev", root);
    /* Function digit to 0 (ports of one NIC merge), and with merge_vfs the device digits too. */
    ferry_ib_sysfs_pci_path(ibdev, 0, out, sizeof(out));
    snprintf(want, sizeof(want), "%s/pci0000:00/0000:17:03.0", real_root);
    assert_string_equal(out, want);
    ferry_ib_sysfs_pci_path(ibdev, 1, out, sizeof(out));
    snprintf(want, sizeof(want), "%s/pci0000:00/0000:17:00.0", real_root);
    assert_string_equal(out, want);
    /* Too small a buffer, or no device link: unknown. */
    ferry_ib_sysfs_pci_path(ibdev, 1, out, 8);
    assert_string_equal(out, "");
    ferry_ib_sysfs_pci_path("/nonexistent/fakeib0", 1, out, sizeof(out));
    assert_string_equal(out, "");
}

static void test_numa_node(void **state)
{
    char ibdev[PATH_MAX];

    (void)state;
    snprintf(ibdev, sizeof(ibdev), "%s/ibdev", root);
    assert_int_equal(ferry_ib_sysfs_numa_node(ibdev), 1);
    put("pci0000:00/0000:17:03.1/numa_node", "-1\n"); /* What sysfs says without NUMA. */
    assert_int_equal(ferry_ib_sysfs_numa_node(ibdev), -1);
    assert_int_equal(ferry_ib_sysfs_numa_node("/nonexistent/fakeib0"), -1);
}

static void test_roce_versions(void **state)
{
    char ibdev[PATH_MAX];

    (void)state;
    snprintf(ibdev, sizeof(ibdev), "%s/ibdev", root);
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 1, 0), 1);
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 1, 1), 2);
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 1, 2), 1);
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 1, 3), 0); /* Empty: unknown. */
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 1, 4), 0); /* Absent. */
    assert_int_equal(ferry_ib_sysfs_roce_version(ibdev, 2, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pci_path_merges_functions),
        cmocka_unit_test(test_numa_node),
        cmocka_unit_test(test_roce_versions),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
