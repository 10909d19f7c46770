/*
 * ncclNet v9 (NCCL 2.24-2.25). Against v8: size_t sizes on isend/irecv,
 * vNICs (vProps, makeVDevice), forceFlush/maxP2pBytes/maxCollBytes in the
 * properties. Still init once per process and no finalize.
 * Member meanings as in net_v8.h; only changes are commented here.
 */
#ifndef FERRY_NCCL_NET_V9_H
#define FERRY_NCCL_NET_V9_H

#include "common.h"
#include "net_device.h"
#include "net_const.h"

/* A (virtual) NIC as the list of physical devices it fuses. */
typedef struct {
    int ndevs;                            /* Entries used in devs[]. */
    int devs[NCCL_NET_MAX_DEVS_PER_NIC];  /* Physical device indexes. */
} ncclNetVDeviceProps_v9_t;
FERRY_ABI_SIZE(ncclNetVDeviceProps_v9_t, 20);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v9_t, ndevs, 0);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v9_t, devs, 4);

typedef struct {
    char                    *name;             /* Unique device name. */
    char                    *pciPath;          /* sysfs PCI path or NULL. */
    uint64_t                 guid;             /* NIC ASIC identity. */
    int                      ptrSupport;       /* NCCL_PTR_* bits. */
    int                      regIsGlobal;      /* 1: regMr not tied to a comm. */
    int                      forceFlush;       /* New: 1 = always flush GDR receives. */
    int                      speed;            /* Mbps. */
    int                      port;             /* Port number. */
    float                    latency;          /* us; 0 = default. */
    int                      maxComms;         /* Caps channels per NIC. */
    int                      maxRecvs;         /* Largest grouped irecv n. */
    ncclNetDeviceType        netDeviceType;    /* HOST. */
    int                      netDeviceVersion; /* 0 for HOST. */
    ncclNetVDeviceProps_v9_t vProps;           /* New: {1, {dev}} for a physical NIC. */
    size_t                   maxP2pBytes;      /* New: in (0, 1 TiB]. */
    size_t                   maxCollBytes;     /* New: CollNet only. */
} ncclNetProperties_v9_t;
FERRY_ABI_SIZE(ncclNetProperties_v9_t, 104);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, name, 0);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, pciPath, 8);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, guid, 16);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, ptrSupport, 24);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, regIsGlobal, 28);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, forceFlush, 32);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, speed, 36);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, port, 40);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, latency, 44);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, maxComms, 48);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, maxRecvs, 52);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, netDeviceType, 56);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, netDeviceVersion, 60);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, vProps, 64);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, maxP2pBytes, 88);
FERRY_ABI_OFFSET(ncclNetProperties_v9_t, maxCollBytes, 96);

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v9_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v9_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                uint64_t offset, int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    /* Changed: size_t size. */
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void **request);
    /* Changed: size_t sizes. */
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    /* New, optional: fuse physical NICs into vNIC *d. */
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;
FERRY_ABI_SIZE(ncclNet_v9_t, 20 * 8);
FERRY_ABI_SLOT(ncclNet_v9_t, name, 0);
FERRY_ABI_SLOT(ncclNet_v9_t, init, 1);
FERRY_ABI_SLOT(ncclNet_v9_t, devices, 2);
FERRY_ABI_SLOT(ncclNet_v9_t, getProperties, 3);
FERRY_ABI_SLOT(ncclNet_v9_t, listen, 4);
FERRY_ABI_SLOT(ncclNet_v9_t, connect, 5);
FERRY_ABI_SLOT(ncclNet_v9_t, accept, 6);
FERRY_ABI_SLOT(ncclNet_v9_t, regMr, 7);
FERRY_ABI_SLOT(ncclNet_v9_t, regMrDmaBuf, 8);
FERRY_ABI_SLOT(ncclNet_v9_t, deregMr, 9);
FERRY_ABI_SLOT(ncclNet_v9_t, isend, 10);
FERRY_ABI_SLOT(ncclNet_v9_t, irecv, 11);
FERRY_ABI_SLOT(ncclNet_v9_t, iflush, 12);
FERRY_ABI_SLOT(ncclNet_v9_t, test, 13);
FERRY_ABI_SLOT(ncclNet_v9_t, closeSend, 14);
FERRY_ABI_SLOT(ncclNet_v9_t, closeRecv, 15);
FERRY_ABI_SLOT(ncclNet_v9_t, closeListen, 16);
FERRY_ABI_SLOT(ncclNet_v9_t, getDeviceMr, 17);
FERRY_ABI_SLOT(ncclNet_v9_t, irecvConsumed, 18);
FERRY_ABI_SLOT(ncclNet_v9_t, makeVDevice, 19);

#endif
