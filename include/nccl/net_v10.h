/*
 * ncclNet v10 (NCCL 2.26-2.27). Against v9: init also gets the profiler
 * callback, connect takes the per-connection traffic-class config, and
 * isend/irecv take profiler handles. Properties are laid out as in v9.
 * Still init once per process and no finalize.
 */
#ifndef FERRY_NCCL_NET_V10_H
#define FERRY_NCCL_NET_V10_H

#include "common.h"
#include "net_device.h"
#include "net_const.h"

typedef struct {
    int ndevs;                                /* Entries used in devs[]. */
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];  /* Physical device indexes. */
} ncclNetVDeviceProps_v10_t;
FERRY_ABI_SIZE(ncclNetVDeviceProps_v10_t, 20);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v10_t, ndevs, 0);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v10_t, devs, 4);

/* Per-connection settings given to connect (v10) or init (v11+). */
typedef struct {
    int trafficClass; /* ncclConfig_t.trafficClass, or NCCL_NET_TRAFFIC_CLASS_UNDEF. */
} ncclNetCommConfig_v10_t;
FERRY_ABI_SIZE(ncclNetCommConfig_v10_t, 4);
FERRY_ABI_OFFSET(ncclNetCommConfig_v10_t, trafficClass, 0);

typedef struct {
    char                     *name;             /* Unique device name. */
    char                     *pciPath;          /* sysfs PCI path or NULL. */
    uint64_t                  guid;             /* NIC ASIC identity. */
    int                       ptrSupport;       /* NCCL_PTR_* bits. */
    int                       regIsGlobal;      /* 1: regMr not tied to a comm. */
    int                       forceFlush;       /* 1 = always flush GDR receives. */
    int                       speed;            /* Mbps. */
    int                       port;             /* Port number. */
    float                     latency;          /* us; 0 = default. */
    int                       maxComms;         /* Caps channels per NIC. */
    int                       maxRecvs;         /* Largest grouped irecv n. */
    ncclNetDeviceType         netDeviceType;    /* HOST. */
    int                       netDeviceVersion; /* 0 for HOST. */
    ncclNetVDeviceProps_v10_t vProps;           /* {1, {dev}} for a physical NIC. */
    size_t                    maxP2pBytes;      /* In (0, 1 TiB]. */
    size_t                    maxCollBytes;     /* CollNet only. */
} ncclNetProperties_v10_t;
FERRY_ABI_SIZE(ncclNetProperties_v10_t, 104);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, name, 0);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, pciPath, 8);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, guid, 16);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, ptrSupport, 24);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, regIsGlobal, 28);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, forceFlush, 32);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, speed, 36);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, port, 40);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, latency, 44);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, maxComms, 48);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, maxRecvs, 52);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, netDeviceType, 56);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, netDeviceVersion, 60);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, vProps, 64);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, maxP2pBytes, 88);
FERRY_ABI_OFFSET(ncclNetProperties_v10_t, maxCollBytes, 96);

typedef struct {
    const char *name;
    /* Changed: plus the profiler callback. */
    ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    /* Changed: config (traffic class) before handle. */
    ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                            void **sendComm, ncclNetDeviceHandle_v10_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v10_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                uint64_t offset, int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    /* Changed: phandle (profiler, may be NULL) before request. */
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    /* Changed: phandles (may be NULL) before request. */
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;
FERRY_ABI_SIZE(ncclNet_v10_t, 20 * 8);
FERRY_ABI_SLOT(ncclNet_v10_t, name, 0);
FERRY_ABI_SLOT(ncclNet_v10_t, init, 1);
FERRY_ABI_SLOT(ncclNet_v10_t, devices, 2);
FERRY_ABI_SLOT(ncclNet_v10_t, getProperties, 3);
FERRY_ABI_SLOT(ncclNet_v10_t, listen, 4);
FERRY_ABI_SLOT(ncclNet_v10_t, connect, 5);
FERRY_ABI_SLOT(ncclNet_v10_t, accept, 6);
FERRY_ABI_SLOT(ncclNet_v10_t, regMr, 7);
FERRY_ABI_SLOT(ncclNet_v10_t, regMrDmaBuf, 8);
FERRY_ABI_SLOT(ncclNet_v10_t, deregMr, 9);
FERRY_ABI_SLOT(ncclNet_v10_t, isend, 10);
FERRY_ABI_SLOT(ncclNet_v10_t, irecv, 11);
FERRY_ABI_SLOT(ncclNet_v10_t, iflush, 12);
FERRY_ABI_SLOT(ncclNet_v10_t, test, 13);
FERRY_ABI_SLOT(ncclNet_v10_t, closeSend, 14);
FERRY_ABI_SLOT(ncclNet_v10_t, closeRecv, 15);
FERRY_ABI_SLOT(ncclNet_v10_t, closeListen, 16);
FERRY_ABI_SLOT(ncclNet_v10_t, getDeviceMr, 17);
FERRY_ABI_SLOT(ncclNet_v10_t, irecvConsumed, 18);
FERRY_ABI_SLOT(ncclNet_v10_t, makeVDevice, 19);

#endif
