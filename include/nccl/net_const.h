/*
 * Constants of the ncclNet ABI (2.28.9 nccl_net.h, plus the v12 additions),
 * in one place so each net_vN.h can be included on its own.
 */
#ifndef FERRY_NCCL_NET_CONST_H
#define FERRY_NCCL_NET_CONST_H

/* Bytes of the opaque handle listen() fills and connect() reads. */
#define NCCL_NET_HANDLE_MAXSIZE 128

/* ptrSupport bits, and the regMr type argument. */
#define NCCL_PTR_HOST   0x1 /* Host memory. */
#define NCCL_PTR_CUDA   0x2 /* GPU memory through peer memory (GDR). */
#define NCCL_PTR_DMABUF 0x4 /* GPU memory through regMrDmaBuf. */

/* Value NCCL may leave in *request on entry to irecv (LL/LL128, n == 1). */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
/* Defined, unused by the 2.28.9 core. */
#define NCCL_NET_MULTI_REQUEST 0x2

/* Outstanding requests each comm must support (8 before v7). */
#define NCCL_NET_MAX_REQUESTS 32
/* External plugins plus IB and Socket. */
#define NCCL_NET_MAX_PLUGINS 16

/* Upper bound of maxP2pBytes and maxCollBytes: 1 TiB. */
#define NCCL_MAX_NET_SIZE_BYTES (1024L * 1024L * 1024L * 1024L)
/* Largest single transfer NCCL posts (1 GiB), and its CollNet twin. */
#define MAX_NET_SIZE     (1024L * 1024L * 1024L)
#define MAX_COLLNET_SIZE (512L * 1024L * 1024L)

/* Length of vProps.devs[]: 4 up to v11, 8 from v12. */
#define NCCL_NET_MAX_DEVS_PER_NIC     4
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

/* ncclNetCommConfig_vN_t.trafficClass when the user set none. */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1

/* ncclNetAttr_vN_t field value meaning "no hint". */
#define NCCL_NET_ATTR_UNDEF -1
/* An ncclNetAttr_vN_t initializer with every field undefined. */
#define NCCL_NET_ATTR_INIT { \
    { NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF }, \
    { NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF }, \
    (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF }

/* v12 railId/planeId when unknown; the core then ignores them. */
#define NCCL_NET_ID_UNDEF -1

#endif
