/*
 * Device-offload description shared by ncclNet v7..v12. A HOST plugin such as
 * ferry only reports NCCL_NET_DEVICE_HOST; the handle type is still part of
 * the connect/accept signatures, so its layout matters.
 */
#ifndef FERRY_NCCL_NET_DEVICE_H
#define FERRY_NCCL_NET_DEVICE_H

#include "common.h"

/* Where data is consumed; NCCL accepts only HOST, or UNPACK at version 0x7. */
typedef enum {
    NCCL_NET_DEVICE_HOST      = 0, /* Plain host-driven plugin. */
    NCCL_NET_DEVICE_UNPACK    = 1, /* Device-side unpack (GPUDirect TCPX style). */
    NCCL_NET_DEVICE_GIN_PROXY = 2, /* GIN proxy (2.28 core header only). */
    NCCL_NET_DEVICE_GIN_GDAKI = 3  /* GIN GDAKI (2.28 core header only). */
} ncclNetDeviceType;
FERRY_ABI_SIZE(ncclNetDeviceType, 4);

#define NCCL_NET_DEVICE_INVALID_VERSION 0x0  /* netDeviceVersion for HOST. */
#define NCCL_NET_DEVICE_UNPACK_VERSION  0x7  /* The one UNPACK version NCCL accepts. */
#define NCCL_NET_MTU_SIZE               4096 /* Unpack MTU. */

/* Filled by an offloading plugin at connect/accept; NCCL passes NULL for HOST. */
typedef struct {
    ncclNetDeviceType netDeviceType;      /* Offload kind of this connection. */
    int               netDeviceVersion;   /* Offload protocol version. */
    void             *handle;             /* Device-side connection state. */
    size_t            size;               /* Bytes at handle. */
    int               needsProxyProgress; /* 1: NCCL's proxy must keep calling test(). */
} ncclNetDeviceHandle_v7_t;
FERRY_ABI_SIZE(ncclNetDeviceHandle_v7_t, 32);
FERRY_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceType, 0);
FERRY_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceVersion, 4);
FERRY_ABI_OFFSET(ncclNetDeviceHandle_v7_t, handle, 8);
FERRY_ABI_OFFSET(ncclNetDeviceHandle_v7_t, size, 16);
FERRY_ABI_OFFSET(ncclNetDeviceHandle_v7_t, needsProxyProgress, 24);

/*
 * Every later version reuses the v7 layout under its own name. They are
 * typedefs of one type (as in NCCL), so accept() has one C type in v8..v12.
 */
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v12_t;

#endif
