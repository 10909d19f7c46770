/*
 * integ_config's NCCL_FERRY_BACKEND=auto cases on fakeibv (integ_config_auto.c):
 * when auto passes over ib for the socket backend, it WARNs if ib was meant
 * to run here (an RDMA port, an NCCL_IB_* variable) and stays quiet if not.
 */
#ifndef INTEG_CONFIG_AUTO_H
#define INTEG_CONFIG_AUTO_H

/* NCCL_IB_HCA=nosuch with fakeib0 and fakeib1 present: socket, and one WARN naming both. */
void config_auto_hca_nosuch(const char *path);
/* No RDMA device, NCCL_IB_GID_INDEX=3 set: socket, and one WARN naming the variable. */
void config_auto_vars_no_device(const char *path);
/* No RDMA device and no ib variable: socket, an INFO line, no WARN. */
void config_auto_quiet(const char *path);
/* NCCL_IB_DISABLE=1 with a port present: the user's choice, no WARN. */
void config_auto_disabled(const char *path);

#endif
