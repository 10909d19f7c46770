/*
 * ncclNetPlugin_v9 (NCCL 2.24-2.25): v10 without the profiler arguments
 * and without a traffic class.
 */
#include "nccl/props.h"

FERRY_NCCL_DEFINE_GET_PROPERTIES(ferry_nccl_v9_get_properties, ncclNetProperties_v9_t,
                                 FERRY_NCCL_PROPS_FILL_V9)

static ncclResult_t ferry_nccl_v9_isend(void *send_comm, void *data, size_t size, int tag,
                                        void *mhandle, void **request_p)
{
    return ferry_nccl_isend(send_comm, data, size, tag, mhandle, NULL, request_p);
}

static ncclResult_t ferry_nccl_v9_irecv(void *recv_comm, int n, void **data, size_t *sizes,
                                        int *tags, void **mhandles, void **request_p)
{
    return ferry_nccl_irecv(recv_comm, n, data, sizes, tags, mhandles, NULL, request_p);
}

FERRY_NCCL_DEFINE_MAKE_VDEVICE(ferry_nccl_v9_make_vdevice, ncclNetVDeviceProps_v9_t)

/* makeVDevice as in plugin_v11.c. */
FERRY_NCCL_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name          = FERRY_NCCL_NAME,
    .init          = ferry_nccl_legacy_init,
    .getProperties = ferry_nccl_v9_get_properties,
    .listen        = ferry_nccl_legacy_listen,
    .connect       = ferry_nccl_legacy_connect,
    .isend         = ferry_nccl_v9_isend,
    .irecv         = ferry_nccl_v9_irecv,
    FERRY_NCCL_COMMON_MEMBERS,
    .makeVDevice   = ferry_nccl_v9_make_vdevice,
};
