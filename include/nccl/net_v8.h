/*
 * ncclNet v8 (NCCL 2.20-2.23): int sizes on isend/irecv, no vNICs, no
 * forceFlush/maxP2pBytes/maxCollBytes in the properties, init once per
 * process, no finalize.
 */
#ifndef FERRY_NCCL_NET_V8_H
#define FERRY_NCCL_NET_V8_H

#include "common.h"
#include "net_device.h"
#include "net_const.h"

typedef struct {
    char             *name;             /* Unique device name; key of the topology <net> node. */
    char             *pciPath;          /* sysfs PCI path, or NULL (then attached to CPU 0). */
    uint64_t          guid;             /* NIC ASIC identity; equal guid+port = one port. */
    int               ptrSupport;       /* NCCL_PTR_* bits. */
    int               regIsGlobal;      /* 1: regMr is not tied to one comm. */
    int               speed;            /* Port speed in Mbps. */
    int               port;             /* Port number, paired with guid. */
    float             latency;          /* Extra latency in us; 0 = default. */
    int               maxComms;         /* Caps channels per NIC. */
    int               maxRecvs;         /* Largest n for a grouped irecv. */
    ncclNetDeviceType netDeviceType;    /* NCCL_NET_DEVICE_HOST for a host plugin. */
    int               netDeviceVersion; /* NCCL_NET_DEVICE_INVALID_VERSION for HOST. */
} ncclNetProperties_v8_t;
FERRY_ABI_SIZE(ncclNetProperties_v8_t, 64);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, name, 0);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, pciPath, 8);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, guid, 16);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, ptrSupport, 24);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, regIsGlobal, 28);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, speed, 32);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, port, 36);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, latency, 40);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, maxComms, 44);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, maxRecvs, 48);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, netDeviceType, 52);
FERRY_ABI_OFFSET(ncclNetProperties_v8_t, netDeviceVersion, 56);

typedef struct {
    /* Plugin name, matched against NCCL_NET; read before init. */
    const char *name;
    /* Once per process. */
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    /* Number of devices. */
    ncclResult_t (*devices)(int *ndev);
    /* Fill props for dev; may be called from many threads. */
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    /* Open a listener on dev; fill the <= 128-byte handle sent to the peer. */
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    /* Non-blocking: *sendComm NULL means call again with the same handle. */
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v8_t **sendDevComm);
    /* Non-blocking: *recvComm NULL means call again. */
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v8_t **recvDevComm);
    /* Register a region of NCCL_PTR_HOST or NCCL_PTR_CUDA memory. */
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    /* Register GPU memory by dma-buf fd (closed by NCCL right after); optional. */
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                uint64_t offset, int fd, void **mhandle);
    /* Release a registration; mhandle may be NULL. */
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    /* Post a send; *request NULL means retry later. */
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                          void **request);
    /* Post n receives; sizes are capacities. */
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                          void **mhandles, void **request);
    /* Make GDR receives visible to the GPU; *request NULL = nothing to do. */
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    /* Poll a request; sizes may be NULL, else gets the bytes per buffer. */
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);     /* Free a send comm. */
    ncclResult_t (*closeRecv)(void *recvComm);     /* Free a receive comm. */
    ncclResult_t (*closeListen)(void *listenComm); /* Free a listener. */
    /* Device offload only; NULL for HOST plugins. */
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    /* Device offload only: the GPU consumed a finished receive; NULL for HOST. */
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;
FERRY_ABI_SIZE(ncclNet_v8_t, 19 * 8);
FERRY_ABI_SLOT(ncclNet_v8_t, name, 0);
FERRY_ABI_SLOT(ncclNet_v8_t, init, 1);
FERRY_ABI_SLOT(ncclNet_v8_t, devices, 2);
FERRY_ABI_SLOT(ncclNet_v8_t, getProperties, 3);
FERRY_ABI_SLOT(ncclNet_v8_t, listen, 4);
FERRY_ABI_SLOT(ncclNet_v8_t, connect, 5);
FERRY_ABI_SLOT(ncclNet_v8_t, accept, 6);
FERRY_ABI_SLOT(ncclNet_v8_t, regMr, 7);
FERRY_ABI_SLOT(ncclNet_v8_t, regMrDmaBuf, 8);
FERRY_ABI_SLOT(ncclNet_v8_t, deregMr, 9);
FERRY_ABI_SLOT(ncclNet_v8_t, isend, 10);
FERRY_ABI_SLOT(ncclNet_v8_t, irecv, 11);
FERRY_ABI_SLOT(ncclNet_v8_t, iflush, 12);
FERRY_ABI_SLOT(ncclNet_v8_t, test, 13);
FERRY_ABI_SLOT(ncclNet_v8_t, closeSend, 14);
FERRY_ABI_SLOT(ncclNet_v8_t, closeRecv, 15);
FERRY_ABI_SLOT(ncclNet_v8_t, closeListen, 16);
FERRY_ABI_SLOT(ncclNet_v8_t, getDeviceMr, 17);
FERRY_ABI_SLOT(ncclNet_v8_t, irecvConsumed, 18);

#endif
