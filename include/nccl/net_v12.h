/*
 * ncclNet v12 (NCCL 2.30). The members and their order are those of v11
 * (only the types are renamed); the properties differ: vProps.devs[] grows
 * to 8, which moves every later field, and railId/planeId are appended.
 * So v11 and v12 property structs are not interchangeable.
 */
#ifndef FERRY_NCCL_NET_V12_H
#define FERRY_NCCL_NET_V12_H

#include "common.h"
#include "net_device.h"
#include "net_const.h"

typedef struct {
    int ndevs;                                /* Entries used in devs[]. */
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];  /* Physical device indexes (8 now). */
} ncclNetVDeviceProps_v12_t;
FERRY_ABI_SIZE(ncclNetVDeviceProps_v12_t, 36);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v12_t, ndevs, 0);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v12_t, devs, 4);

typedef struct {
    int trafficClass; /* ncclConfig_t.trafficClass, or NCCL_NET_TRAFFIC_CLASS_UNDEF. */
} ncclNetCommConfig_v12_t;
FERRY_ABI_SIZE(ncclNetCommConfig_v12_t, 4);
FERRY_ABI_OFFSET(ncclNetCommConfig_v12_t, trafficClass, 0);

typedef struct {
    char                     *name;                /* Unique device name. */
    char                     *pciPath;             /* sysfs PCI path or NULL. */
    uint64_t                  guid;                /* NIC ASIC identity. */
    int                       ptrSupport;          /* NCCL_PTR_* bits. */
    int                       regIsGlobal;         /* 1: regMr not tied to a comm. */
    int                       forceFlush;          /* 1 = always flush GDR receives. */
    int                       speed;               /* Mbps. */
    int                       port;                /* Port number. */
    float                     latency;             /* us; 0 = default. */
    int                       maxComms;            /* Caps channels per NIC. */
    int                       maxRecvs;            /* Largest grouped irecv n. */
    ncclNetDeviceType         netDeviceType;       /* HOST. */
    int                       netDeviceVersion;    /* 0 for HOST. */
    ncclNetVDeviceProps_v12_t vProps;              /* {1, {dev}}; 36 bytes now. */
    size_t                    maxP2pBytes;         /* In (0, 1 TiB]; moved to 104. */
    size_t                    maxCollBytes;        /* CollNet only. */
    int                       maxMultiRequestSize; /* Requests per multi-request; set 1. */
    int16_t                   railId;              /* New: rail of the netdev, or NCCL_NET_ID_UNDEF. */
    int16_t                   planeId;             /* New: plane of the netdev, or NCCL_NET_ID_UNDEF. */
} ncclNetProperties_v12_t;
FERRY_ABI_SIZE(ncclNetProperties_v12_t, 128);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, name, 0);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, pciPath, 8);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, guid, 16);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, ptrSupport, 24);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, regIsGlobal, 28);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, forceFlush, 32);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, speed, 36);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, port, 40);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, latency, 44);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, maxComms, 48);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, maxRecvs, 52);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceType, 56);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceVersion, 60);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, vProps, 64);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, maxP2pBytes, 104);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, maxCollBytes, 112);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, railId, 124);
FERRY_ABI_OFFSET(ncclNetProperties_v12_t, planeId, 126);

/* Same fields and meaning as ncclNetCommAttr_v11_t. */
typedef struct {
    int32_t maxConcurrentPeers; /* Most peers this side talks to at once. */
    int32_t minConcurrentPeers; /* Fewest peers this side talks to at once. */
    int32_t maxFlowsPerPeer;    /* Most flows per peer. */
    int32_t minFlowsPerPeer;    /* Fewest flows per peer. */
} ncclNetCommAttr_v12_t;
FERRY_ABI_SIZE(ncclNetCommAttr_v12_t, 16);
FERRY_ABI_OFFSET(ncclNetCommAttr_v12_t, minFlowsPerPeer, 12);

/* Same fields and meaning as ncclNetAttr_v11_t. */
typedef struct {
    ncclNetCommAttr_v12_t sendCommAttr; /* Hints for send comms. */
    ncclNetCommAttr_v12_t recvCommAttr; /* Hints for receive comms. */
    uint32_t op;    /* Bit per ncclFunc_t. */
    uint32_t algo;  /* Bit per algorithm. */
    uint32_t proto; /* Bit per protocol. */
} ncclNetAttr_v12_t;
FERRY_ABI_SIZE(ncclNetAttr_v12_t, 44);
FERRY_ABI_OFFSET(ncclNetAttr_v12_t, recvCommAttr, 16);
FERRY_ABI_OFFSET(ncclNetAttr_v12_t, op, 32);
FERRY_ABI_OFFSET(ncclNetAttr_v12_t, proto, 40);

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v12_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v12_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                uint64_t offset, int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
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
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
    ncclResult_t (*finalize)(void *ctx);
    ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v12_t *netAttr);
} ncclNet_v12_t;
FERRY_ABI_SIZE(ncclNet_v12_t, 22 * 8);
FERRY_ABI_SLOT(ncclNet_v12_t, name, 0);
FERRY_ABI_SLOT(ncclNet_v12_t, init, 1);
FERRY_ABI_SLOT(ncclNet_v12_t, devices, 2);
FERRY_ABI_SLOT(ncclNet_v12_t, getProperties, 3);
FERRY_ABI_SLOT(ncclNet_v12_t, listen, 4);
FERRY_ABI_SLOT(ncclNet_v12_t, connect, 5);
FERRY_ABI_SLOT(ncclNet_v12_t, accept, 6);
FERRY_ABI_SLOT(ncclNet_v12_t, regMr, 7);
FERRY_ABI_SLOT(ncclNet_v12_t, regMrDmaBuf, 8);
FERRY_ABI_SLOT(ncclNet_v12_t, deregMr, 9);
FERRY_ABI_SLOT(ncclNet_v12_t, isend, 10);
FERRY_ABI_SLOT(ncclNet_v12_t, irecv, 11);
FERRY_ABI_SLOT(ncclNet_v12_t, iflush, 12);
FERRY_ABI_SLOT(ncclNet_v12_t, test, 13);
FERRY_ABI_SLOT(ncclNet_v12_t, closeSend, 14);
FERRY_ABI_SLOT(ncclNet_v12_t, closeRecv, 15);
FERRY_ABI_SLOT(ncclNet_v12_t, closeListen, 16);
FERRY_ABI_SLOT(ncclNet_v12_t, getDeviceMr, 17);
FERRY_ABI_SLOT(ncclNet_v12_t, irecvConsumed, 18);
FERRY_ABI_SLOT(ncclNet_v12_t, makeVDevice, 19);
FERRY_ABI_SLOT(ncclNet_v12_t, finalize, 20);
FERRY_ABI_SLOT(ncclNet_v12_t, setNetAttr, 21);

#endif
