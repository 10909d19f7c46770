/*
 * ncclNetPlugin_v8 (NCCL 2.20-2.23): v9 with int sizes on isend/irecv, no
 * forceFlush/vProps/maxP2pBytes/maxCollBytes, and no makeVDevice member.
 */
#include "nccl/props.h"

/*
 * NCCL caps a grouped receive at 64 buffers, whatever maxRecvs says; the
 * widened sizes live on the stack for the duration of the call.
 */
#define FERRY_NCCL_V8_MAX_RECVS 64

FERRY_NCCL_DEFINE_GET_PROPERTIES(ferry_nccl_v8_get_properties, ncclNetProperties_v8_t,
                                 FERRY_NCCL_PROPS_FILL_V8)

static ncclResult_t ferry_nccl_v8_isend(void *send_comm, void *data, int size, int tag,
                                        void *mhandle, void **request_p)
{
    /* A negative size can only be NCCL misusing the ABI. */
    if (size < 0)
        return ncclInternalError;
    return ferry_nccl_isend(send_comm, data, (size_t)size, tag, mhandle, NULL, request_p);
}

static ncclResult_t ferry_nccl_v8_irecv(void *recv_comm, int n, void **data, int *sizes,
                                        int *tags, void **mhandles, void **request_p)
{
    size_t wide[FERRY_NCCL_V8_MAX_RECVS];

    if (n < 1 || n > FERRY_NCCL_V8_MAX_RECVS)
        return ncclInternalError;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0)
            return ncclInternalError;
        wide[i] = (size_t)sizes[i];
    }
    return ferry_nccl_irecv(recv_comm, n, data, wide, tags, mhandles, NULL, request_p);
}

FERRY_NCCL_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name          = FERRY_NCCL_NAME,
    .init          = ferry_nccl_legacy_init,
    .getProperties = ferry_nccl_v8_get_properties,
    .listen        = ferry_nccl_legacy_listen,
    .connect       = ferry_nccl_legacy_connect,
    .isend         = ferry_nccl_v8_isend,
    .irecv         = ferry_nccl_v8_irecv,
    FERRY_NCCL_COMMON_MEMBERS,
};
