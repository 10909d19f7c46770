/*
 * What sysfs says about an HCA, read under ibv_device->ibdev_path
 * (/sys/class/infiniband/<name> on a real host). Every reader degrades to
 * "unknown" when the files are absent (containers, fakeibv).
 */
#ifndef FERRY_IB_SYSFS_H
#define FERRY_IB_SYSFS_H

#include <stddef.h>

/*
 * realpath of <ibdev_path>/device with the PCI function digit set to 0, so
 * the ports of a multi-port NIC share one path, and with merge_vfs the
 * device digits too (VFs join their PF), as NCCL does. "" when unknown.
 */
void ferry_ib_sysfs_pci_path(const char *ibdev_path, int merge_vfs, char *out, size_t len);
/* <ibdev_path>/device/numa_node, -1 when unknown. */
int ferry_ib_sysfs_numa_node(const char *ibdev_path);
/* RoCE version of a GID from <ibdev_path>/ports/<port>/gid_attrs/types/<index>: 1, 2, or 0 unknown. */
int ferry_ib_sysfs_roce_version(const char *ibdev_path, int port, int index);

#endif
