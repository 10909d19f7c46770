/*
 * Filling each version's ncclNetProperties_vN_t from ferry_props_t. The
 * structs are distinct C types with the same field names, so the shared
 * parts are macros layered by the version that introduced the fields.
 * Callers zero the struct first, so unused vProps.devs[] entries are 0.
 */
#ifndef FERRY_NCCL_PROPS_H
#define FERRY_NCCL_PROPS_H

#include "nccl/plugin.h"

/* Fields present since v8. ferry is a host plugin: type HOST, version 0. */
#define FERRY_NCCL_PROPS_FILL_V8(_dst, _src)                              \
    do {                                                                  \
        /* NCCL never writes through these; the casts only drop const. */ \
        (_dst)->name             = (char *)(_src)->name;                  \
        (_dst)->pciPath          = (char *)(_src)->pci_path;              \
        (_dst)->guid             = (_src)->guid;                          \
        (_dst)->ptrSupport       = (_src)->ptr_support;                   \
        (_dst)->regIsGlobal      = (_src)->reg_is_global;                 \
        (_dst)->speed            = (_src)->speed_mbps;                    \
        (_dst)->port             = (_src)->port;                          \
        (_dst)->latency          = (_src)->latency_us;                    \
        (_dst)->maxComms         = (_src)->max_comms;                     \
        (_dst)->maxRecvs         = (_src)->max_recvs;                     \
        (_dst)->netDeviceType    = NCCL_NET_DEVICE_HOST;                  \
        (_dst)->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;       \
    } while (0)

/* Plus the v9 fields. ferry has no vNICs: every device is {1, {dev}}. */
#define FERRY_NCCL_PROPS_FILL_V9(_dst, _src, _dev)                        \
    do {                                                                  \
        FERRY_NCCL_PROPS_FILL_V8(_dst, _src);                             \
        (_dst)->forceFlush    = (_src)->force_flush;                      \
        (_dst)->vProps.ndevs   = 1;                                       \
        (_dst)->vProps.devs[0] = (_dev);                                  \
        (_dst)->maxP2pBytes   = (_src)->max_p2p_bytes;                    \
        (_dst)->maxCollBytes  = (_src)->max_coll_bytes;                   \
    } while (0)

/* Plus the v11 field. */
#define FERRY_NCCL_PROPS_FILL_V11(_dst, _src, _dev)                       \
    do {                                                                  \
        FERRY_NCCL_PROPS_FILL_V9(_dst, _src, _dev);                       \
        (_dst)->maxMultiRequestSize = (_src)->max_multi_request_size;     \
    } while (0)

#endif
