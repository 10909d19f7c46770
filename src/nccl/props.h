/*
 * Filling each version's ncclNetProperties_vN_t from ferry_props_t. The
 * structs are distinct C types with the same field names, so the shared
 * parts are macros layered by the version that introduced the fields.
 * The struct is zeroed first, so unused vProps.devs[] entries are 0.
 */
#ifndef FERRY_NCCL_PROPS_H
#define FERRY_NCCL_PROPS_H

#include "nccl/plugin.h"

/* Fields present since v8. ferry is a host plugin: type HOST, version 0. */
#define FERRY_NCCL_PROPS_FILL_V8(_dst, _src, _dev)                        \
    do {                                                                  \
        (void)(_dev); /* No field of v8 names the device. */              \
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

/* Plus the v9 fields. A physical device is {1, {dev}}; a merged one lists its members. */
#define FERRY_NCCL_PROPS_FILL_V9(_dst, _src, _dev)                        \
    do {                                                                  \
        FERRY_NCCL_PROPS_FILL_V8(_dst, _src, _dev);                       \
        (_dst)->forceFlush    = (_src)->force_flush;                      \
        (_dst)->vProps.ndevs   = 1;                                       \
        (_dst)->vProps.devs[0] = (_dev);                                  \
        if ((_src)->vdevs_n > 0) {                                        \
            (_dst)->vProps.ndevs = (_src)->vdevs_n;                       \
            for (int _m = 0; _m < (_src)->vdevs_n &&                      \
                             _m < FERRY_MAX_VDEV_MEMBERS; _m++)           \
                (_dst)->vProps.devs[_m] = (_src)->vdevs[_m];              \
        }                                                                 \
        (_dst)->maxP2pBytes   = (_src)->max_p2p_bytes;                    \
        (_dst)->maxCollBytes  = (_src)->max_coll_bytes;                   \
    } while (0)

/* Plus the v11 field. */
#define FERRY_NCCL_PROPS_FILL_V11(_dst, _src, _dev)                       \
    do {                                                                  \
        FERRY_NCCL_PROPS_FILL_V9(_dst, _src, _dev);                       \
        (_dst)->maxMultiRequestSize = (_src)->max_multi_request_size;     \
    } while (0)

/*
 * Plus the v12 fields: the rail and plane the user gave the device in
 * NCCL_IB_HCA (name:port:rail:plane), as NCCL's own IB reports them, else
 * NCCL_NET_ID_UNDEF, which makes the core ignore them. ferry does not guess
 * them from the PCI tree: on a rail-optimized node NICs that share a PCI
 * switch sit on different rails, and a wrong id would hold a channel's two
 * ends to NICs of one rail (or merge NICs of different rails) for nothing.
 */
#define FERRY_NCCL_PROPS_FILL_V12(_dst, _src, _dev)                       \
    do {                                                                  \
        FERRY_NCCL_PROPS_FILL_V11(_dst, _src, _dev);                      \
        (_dst)->railId  = (int16_t)((_src)->rail_id >= 0 ? (_src)->rail_id \
                                               : NCCL_NET_ID_UNDEF);      \
        (_dst)->planeId = (int16_t)((_src)->plane_id >= 0 ? (_src)->plane_id \
                                                : NCCL_NET_ID_UNDEF);     \
    } while (0)

/*
 * Defines `static ncclResult_t _fn(int dev, _type *props)`, the
 * getProperties of one version: fetch ferry's properties, zero the
 * version's struct, fill it with _fill.
 */
#define FERRY_NCCL_DEFINE_GET_PROPERTIES(_fn, _type, _fill)                      \
    static ncclResult_t _fn(int dev, _type *props)                               \
    {                                                                            \
        ferry_props_t fp;                                                        \
        ncclResult_t res = ferry_nccl_props_get(dev, &fp, props, sizeof(*props)); \
                                                                                 \
        if (res == ncclSuccess)                                                  \
            _fill(props, &fp, dev);                                              \
        return res;                                                              \
    }

/*
 * Defines `static ncclResult_t _fn(int *d, _type *props)`, the makeVDevice
 * of one version (v9..v12 differ only in the length of props->devs).
 */
#define FERRY_NCCL_DEFINE_MAKE_VDEVICE(_fn, _type)                                   \
    static ncclResult_t _fn(int *d, _type *props)                                    \
    {                                                                                \
        return ferry_nccl_result(ferry_api_make_vdevice(                             \
            d, props != NULL ? props->ndevs : 0, props != NULL ? props->devs : NULL)); \
    }

#endif
