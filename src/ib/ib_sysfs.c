#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib_sysfs.h"

void ferry_ib_sysfs_pci_path(const char *ibdev_path, int merge_vfs, char *out, size_t len)
{
    char path[PATH_MAX], real[PATH_MAX];
    size_t n;

    out[0] = '\0';
    if (snprintf(path, sizeof(path), "%s/device", ibdev_path) >= (int)sizeof(path) ||
        realpath(path, real) == NULL)
        return;
    n = strlen(real);
    if (n >= len)
        return;
    /* Only a path ending in a PCI address ("...:dd.f") has digits to merge. */
    if (n >= 5 && real[n - 2] == '.' && real[n - 5] == ':') {
        real[n - 1] = '0';
        if (merge_vfs)
            real[n - 3] = real[n - 4] = '0';
    }
    strcpy(out, real);
}

/* First line of a sysfs file, without its newline; -1 when it cannot be read. */
static int ferry_ib_sysfs_read(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    int ok;

    if (f == NULL)
        return -1;
    ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

int ferry_ib_sysfs_numa_node(const char *ibdev_path)
{
    char path[PATH_MAX], buf[32], *end;
    long node;

    snprintf(path, sizeof(path), "%s/device/numa_node", ibdev_path);
    if (ferry_ib_sysfs_read(path, buf, sizeof(buf)) != 0)
        return -1;
    node = strtol(buf, &end, 10);
    return end != buf && node >= 0 && node < INT_MAX ? (int)node : -1;
}

int ferry_ib_sysfs_roce_version(const char *ibdev_path, int port, int index)
{
    char path[PATH_MAX], buf[32];

    snprintf(path, sizeof(path), "%s/ports/%d/gid_attrs/types/%d", ibdev_path, port, index);
    if (ferry_ib_sysfs_read(path, buf, sizeof(buf)) != 0)
        return 0;
    /* The kernel's names: "IB/RoCE v1" (older kernels) or "RoCE v1", and "RoCE v2". */
    if (strncmp(buf, "IB/RoCE v1", 10) == 0 || strncmp(buf, "RoCE v1", 7) == 0)
        return 1;
    if (strncmp(buf, "RoCE v2", 7) == 0)
        return 2;
    return 0;
}
