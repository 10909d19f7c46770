/*
 * NCCL's RMA plugin ABI (NCCL 2.30): one-sided put, put-with-signal and get
 * between the ranks of a group, looked up by NCCL in the net plugin's
 * library as ncclRmaPlugin_v14, else ncclRmaPlugin_v13 (whose layout is the
 * GIN v13 one: createContext hands out a device handle, regMrSym a GIN
 * handle, and iputSignal has no isStrongSignal). Declared by ferry from the
 * ABI facts; every layout is pinned below.
 *
 * Addressing: regMrSym is collective (every rank, same order); an operation
 * names the target's region by the caller's own handle of the same
 * registration and an offset into it.
 */
#ifndef FERRY_NCCL_RMA_H
#define FERRY_NCCL_RMA_H

#include <stdbool.h>

#include "common.h"
#include "net_v12.h"

/* regMrSym mrFlags bits. */
#define NCCL_NET_MR_FLAG_FORCE_SO           (1 << 0) /* Strict ordering for this region. */
#define NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET (1 << 1) /* A signal region the user never resets. */

/* iputSignal signalOp: what happens to the 64-bit word at signalOff. */
#define NCCL_NET_SIGNAL_OP_INC 0x1 /* Add 1 (signalValue is ignored). */
#define NCCL_NET_SIGNAL_OP_ADD 0x2 /* Add signalValue. */

typedef struct {
    int nContexts;    /* Contexts the caller will name in operations (0..nContexts-1). */
    int trafficClass; /* NCCL_NET_TRAFFIC_CLASS_UNDEF when unset. */
    int rankStride;   /* Rank spacing of the group's devices; a host plugin ignores it. */
} ncclRmaConfig_v14_t;
FERRY_ABI_SIZE(ncclRmaConfig_v14_t, 12);
FERRY_ABI_OFFSET(ncclRmaConfig_v14_t, trafficClass, 4);
FERRY_ABI_OFFSET(ncclRmaConfig_v14_t, rankStride, 8);

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
    /* handle: NCCL_NET_HANDLE_MAXSIZE bytes, all-gathered by NCCL before connect. */
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    /* handles[r]: rank r's listen handle; rank: the caller's. Collective. */
    ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm,
                            void **collComm);
    ncclResult_t (*createContext)(void *collComm, ncclRmaConfig_v14_t *config, void **rmaCtx);
    ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type,
                             uint64_t mrFlags, void **mhandle);
    ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, uint64_t mrFlags, void **mhandle);
    ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
    ncclResult_t (*destroyContext)(void *rmaCtx);
    ncclResult_t (*closeColl)(void *collComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*iput)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle,
                         size_t size, uint64_t dstOff, void *dstMhandle, uint32_t rank,
                         void **request);
    /* The signal word changes only after the payload is visible at the target. */
    ncclResult_t (*iputSignal)(void *rmaCtx, int context, uint64_t srcOff, void *srcMhandle,
                               size_t size, uint64_t dstOff, void *dstMhandle, uint32_t rank,
                               uint64_t signalOff, void *signalMhandle, uint64_t signalValue,
                               uint32_t signalOp, bool isStrongSignal, void **request);
    ncclResult_t (*iget)(void *rmaCtx, int context, uint64_t remoteOff, void *remoteMhandle,
                         size_t size, uint64_t localOff, void *localMhandle, uint32_t rank,
                         void **request);
    /* Completes once the earlier puts to rank are applied; *request may come back NULL. */
    ncclResult_t (*iflush)(void *rmaCtx, int context, void *mhandle, uint32_t rank,
                           void **request);
    ncclResult_t (*test)(void *collComm, void *request, int *done);
    /* Called by NCCL's RMA progress thread when non-NULL. */
    ncclResult_t (*rmaProgress)(void *rmaCtx);
    ncclResult_t (*queryLastError)(void *rmaCtx, bool *hasError);
    ncclResult_t (*finalize)(void *ctx);
} ncclRma_v14_t;
FERRY_ABI_SIZE(ncclRma_v14_t, 21 * 8);
FERRY_ABI_SLOT(ncclRma_v14_t, name, 0);
FERRY_ABI_SLOT(ncclRma_v14_t, init, 1);
FERRY_ABI_SLOT(ncclRma_v14_t, devices, 2);
FERRY_ABI_SLOT(ncclRma_v14_t, getProperties, 3);
FERRY_ABI_SLOT(ncclRma_v14_t, listen, 4);
FERRY_ABI_SLOT(ncclRma_v14_t, connect, 5);
FERRY_ABI_SLOT(ncclRma_v14_t, createContext, 6);
FERRY_ABI_SLOT(ncclRma_v14_t, regMrSym, 7);
FERRY_ABI_SLOT(ncclRma_v14_t, regMrSymDmaBuf, 8);
FERRY_ABI_SLOT(ncclRma_v14_t, deregMrSym, 9);
FERRY_ABI_SLOT(ncclRma_v14_t, destroyContext, 10);
FERRY_ABI_SLOT(ncclRma_v14_t, closeColl, 11);
FERRY_ABI_SLOT(ncclRma_v14_t, closeListen, 12);
FERRY_ABI_SLOT(ncclRma_v14_t, iput, 13);
FERRY_ABI_SLOT(ncclRma_v14_t, iputSignal, 14);
FERRY_ABI_SLOT(ncclRma_v14_t, iget, 15);
FERRY_ABI_SLOT(ncclRma_v14_t, iflush, 16);
FERRY_ABI_SLOT(ncclRma_v14_t, test, 17);
FERRY_ABI_SLOT(ncclRma_v14_t, rmaProgress, 18);
FERRY_ABI_SLOT(ncclRma_v14_t, queryLastError, 19);
FERRY_ABI_SLOT(ncclRma_v14_t, finalize, 20);

/* The v13 (GIN v13) context config. */
typedef struct {
    int nSignals;
    int nCounters;
    int nContexts;
    int queueDepth;
    int trafficClass;
} ncclGinConfig_v13_t;
FERRY_ABI_SIZE(ncclGinConfig_v13_t, 20);
FERRY_ABI_OFFSET(ncclGinConfig_v13_t, nContexts, 8);
FERRY_ABI_OFFSET(ncclGinConfig_v13_t, trafficClass, 16);

/*
 * ncclRmaPlugin_v13 / ncclGinPlugin_v13. NCCL's v13 loader checks after
 * init that device 0 reports netDeviceType NCCL_NET_DEVICE_GIN_PROXY.
 */
typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm,
                            void **collComm);
    /* devHandle: what device code would use; a proxy plugin may leave it NULL. */
    ncclResult_t (*createContext)(void *collComm, ncclGinConfig_v13_t *config, void **ginCtx,
                                  ncclNetDeviceHandle_v11_t **devHandle);
    /* ginHandle: the region as device code names it. */
    ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type,
                             uint64_t mrFlags, void **mhandle, void **ginHandle);
    ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, uint64_t mrFlags, void **mhandle,
                                   void **ginHandle);
    ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
    ncclResult_t (*destroyContext)(void *ginCtx);
    ncclResult_t (*closeColl)(void *collComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*iput)(void *ginCtx, int context, uint64_t srcOff, void *srcMhandle,
                         size_t size, uint64_t dstOff, void *dstMhandle, uint32_t rank,
                         void **request);
    /* Every v13 signal is a strong one. */
    ncclResult_t (*iputSignal)(void *ginCtx, int context, uint64_t srcOff, void *srcMhandle,
                               size_t size, uint64_t dstOff, void *dstMhandle, uint32_t rank,
                               uint64_t signalOff, void *signalMhandle, uint64_t signalValue,
                               uint32_t signalOp, void **request);
    ncclResult_t (*iget)(void *ginCtx, int context, uint64_t remoteOff, void *remoteMhandle,
                         size_t size, uint64_t localOff, void *localMhandle, uint32_t rank,
                         void **request);
    ncclResult_t (*iflush)(void *ginCtx, int context, void *mhandle, uint32_t rank,
                           void **request);
    ncclResult_t (*test)(void *collComm, void *request, int *done);
    ncclResult_t (*ginProgress)(void *ginCtx);
    ncclResult_t (*queryLastError)(void *ginCtx, bool *hasError);
    ncclResult_t (*finalize)(void *ctx);
} ncclRma_v13_t;
FERRY_ABI_SIZE(ncclRma_v13_t, 21 * 8);
FERRY_ABI_SLOT(ncclRma_v13_t, createContext, 6);
FERRY_ABI_SLOT(ncclRma_v13_t, regMrSym, 7);
FERRY_ABI_SLOT(ncclRma_v13_t, iputSignal, 14);
FERRY_ABI_SLOT(ncclRma_v13_t, ginProgress, 18);
FERRY_ABI_SLOT(ncclRma_v13_t, finalize, 20);

#endif
