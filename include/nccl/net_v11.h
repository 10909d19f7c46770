/*
 * ncclNet v11 (NCCL 2.28-2.29 native; 2.30 still loads it). Against v10:
 * init is per communicator and returns a ctx that listen/connect/finalize/
 * setNetAttr get back; the traffic-class config moves from connect to init;
 * finalize (mandatory) and setNetAttr (optional) are new; the properties
 * gain maxMultiRequestSize.
 */
#ifndef FERRY_NCCL_NET_V11_H
#define FERRY_NCCL_NET_V11_H

#include "common.h"
#include "net_device.h"
#include "net_const.h"

typedef struct {
    int ndevs;                            /* Entries used in devs[]. */
    int devs[NCCL_NET_MAX_DEVS_PER_NIC];  /* Physical device indexes. */
} ncclNetVDeviceProps_v11_t;
FERRY_ABI_SIZE(ncclNetVDeviceProps_v11_t, 20);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v11_t, ndevs, 0);
FERRY_ABI_OFFSET(ncclNetVDeviceProps_v11_t, devs, 4);

/* Given to init; points at NCCL's stack, so copy it. */
typedef struct {
    int trafficClass; /* ncclConfig_t.trafficClass, or NCCL_NET_TRAFFIC_CLASS_UNDEF. */
} ncclNetCommConfig_v11_t;
FERRY_ABI_SIZE(ncclNetCommConfig_v11_t, 4);
FERRY_ABI_OFFSET(ncclNetCommConfig_v11_t, trafficClass, 0);

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
    ncclNetVDeviceProps_v11_t vProps;              /* {1, {dev}} for a physical NIC. */
    size_t                    maxP2pBytes;         /* In (0, 1 TiB]. */
    size_t                    maxCollBytes;        /* CollNet only. */
    int                       maxMultiRequestSize; /* New: requests per multi-request; set 1. */
} ncclNetProperties_v11_t;
FERRY_ABI_SIZE(ncclNetProperties_v11_t, 112);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, name, 0);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, pciPath, 8);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, guid, 16);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, ptrSupport, 24);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, regIsGlobal, 28);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, forceFlush, 32);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, speed, 36);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, port, 40);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, latency, 44);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, maxComms, 48);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, maxRecvs, 52);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceType, 56);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceVersion, 60);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, vProps, 64);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, maxP2pBytes, 88);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, maxCollBytes, 96);
FERRY_ABI_OFFSET(ncclNetProperties_v11_t, maxMultiRequestSize, 104);

/* Per-direction traffic hints; NCCL_NET_ATTR_UNDEF = no hint. */
typedef struct {
    int32_t maxConcurrentPeers; /* Most peers this side talks to at once. */
    int32_t minConcurrentPeers; /* Fewest peers this side talks to at once. */
    int32_t maxFlowsPerPeer;    /* Most flows per peer. */
    int32_t minFlowsPerPeer;    /* Fewest flows per peer. */
} ncclNetCommAttr_v11_t;
FERRY_ABI_SIZE(ncclNetCommAttr_v11_t, 16);
FERRY_ABI_OFFSET(ncclNetCommAttr_v11_t, maxConcurrentPeers, 0);
FERRY_ABI_OFFSET(ncclNetCommAttr_v11_t, minConcurrentPeers, 4);
FERRY_ABI_OFFSET(ncclNetCommAttr_v11_t, maxFlowsPerPeer, 8);
FERRY_ABI_OFFSET(ncclNetCommAttr_v11_t, minFlowsPerPeer, 12);

/* setNetAttr argument: hints only, never requirements. */
typedef struct {
    ncclNetCommAttr_v11_t sendCommAttr; /* Hints for send comms. */
    ncclNetCommAttr_v11_t recvCommAttr; /* Hints for receive comms. */
    uint32_t op;    /* Bit per ncclFunc_t: Broadcast 0 .. Gather 10. */
    uint32_t algo;  /* Bits: Tree 0, Ring 1, CollNetDirect 2, CollNetChain 3, NVLS 4, NVLSTree 5, PAT 6. */
    uint32_t proto; /* Bits: LL 0, LL128 1, Simple 2. */
} ncclNetAttr_v11_t;
FERRY_ABI_SIZE(ncclNetAttr_v11_t, 44);
FERRY_ABI_OFFSET(ncclNetAttr_v11_t, sendCommAttr, 0);
FERRY_ABI_OFFSET(ncclNetAttr_v11_t, recvCommAttr, 16);
FERRY_ABI_OFFSET(ncclNetAttr_v11_t, op, 32);
FERRY_ABI_OFFSET(ncclNetAttr_v11_t, algo, 36);
FERRY_ABI_OFFSET(ncclNetAttr_v11_t, proto, 40);

typedef struct {
    const char *name;
    /* Changed: per communicator; *ctx goes back to listen/connect/finalize. */
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
    /* Changed: ctx first. */
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    /* Changed: ctx first, config gone (it came with init). */
    ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v11_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v11_t **recvDevComm);
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
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
    /* New, mandatory: once per init, also after a failed init (ctx may be NULL). */
    ncclResult_t (*finalize)(void *ctx);
    /* New, optional: traffic hints for ctx. */
    ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v11_t;
FERRY_ABI_SIZE(ncclNet_v11_t, 22 * 8);
FERRY_ABI_SLOT(ncclNet_v11_t, name, 0);
FERRY_ABI_SLOT(ncclNet_v11_t, init, 1);
FERRY_ABI_SLOT(ncclNet_v11_t, devices, 2);
FERRY_ABI_SLOT(ncclNet_v11_t, getProperties, 3);
FERRY_ABI_SLOT(ncclNet_v11_t, listen, 4);
FERRY_ABI_SLOT(ncclNet_v11_t, connect, 5);
FERRY_ABI_SLOT(ncclNet_v11_t, accept, 6);
FERRY_ABI_SLOT(ncclNet_v11_t, regMr, 7);
FERRY_ABI_SLOT(ncclNet_v11_t, regMrDmaBuf, 8);
FERRY_ABI_SLOT(ncclNet_v11_t, deregMr, 9);
FERRY_ABI_SLOT(ncclNet_v11_t, isend, 10);
FERRY_ABI_SLOT(ncclNet_v11_t, irecv, 11);
FERRY_ABI_SLOT(ncclNet_v11_t, iflush, 12);
FERRY_ABI_SLOT(ncclNet_v11_t, test, 13);
FERRY_ABI_SLOT(ncclNet_v11_t, closeSend, 14);
FERRY_ABI_SLOT(ncclNet_v11_t, closeRecv, 15);
FERRY_ABI_SLOT(ncclNet_v11_t, closeListen, 16);
FERRY_ABI_SLOT(ncclNet_v11_t, getDeviceMr, 17);
FERRY_ABI_SLOT(ncclNet_v11_t, irecvConsumed, 18);
FERRY_ABI_SLOT(ncclNet_v11_t, makeVDevice, 19);
FERRY_ABI_SLOT(ncclNet_v11_t, finalize, 20);
FERRY_ABI_SLOT(ncclNet_v11_t, setNetAttr, 21);

#endif
