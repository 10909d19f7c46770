/*
 * ncclRmaPlugin_v13: the GIN v13 layout, which NCCL 2.30 still loads from
 * the net plugin's library when v14 is missing. It differs from v14 in
 * three members: createContext also hands out a device handle (none: a CPU
 * proxy drives ferry, so NULL), regMrSym a GIN handle (the region handle
 * itself, which is all a proxy passes back), and iputSignal has no
 * isStrongSignal. NCCL's v13 loader wants netDeviceType GIN_PROXY, which the
 * shared getProperties reports.
 */
#include "nccl/rma_entry.h"

static ncclResult_t ferry_nccl_v13_create_context(void *coll, ncclGinConfig_v13_t *config,
                                                  void **rma_ctx_p,
                                                  ncclNetDeviceHandle_v11_t **dev_handle_p)
{
    if (dev_handle_p != NULL)
        *dev_handle_p = NULL;
    return ferry_nccl_rma_create_context(coll, config != NULL ? config->nContexts : 0,
                                         rma_ctx_p);
}

static ncclResult_t ferry_nccl_v13_reg(void *coll, void *data, size_t size, int type,
                                       uint64_t flags, void **mhandle_p, void **gin_handle_p)
{
    ncclResult_t res = ferry_nccl_rma_reg(coll, data, size, type, flags, mhandle_p);

    if (gin_handle_p != NULL)
        *gin_handle_p = res == ncclSuccess ? *mhandle_p : NULL;
    return res;
}

static ncclResult_t ferry_nccl_v13_reg_dmabuf(void *coll, void *data, size_t size, int type,
                                              uint64_t offset, int fd, uint64_t flags,
                                              void **mhandle_p, void **gin_handle_p)
{
    if (gin_handle_p != NULL)
        *gin_handle_p = NULL;
    return ferry_nccl_rma_reg_dmabuf(coll, data, size, type, offset, fd, flags, mhandle_p);
}

FERRY_NCCL_EXPORT const ncclRma_v13_t ncclRmaPlugin_v13 = {
    .name           = FERRY_NCCL_RMA_NAME,
    .init           = ferry_nccl_rma_init,
    .devices        = ferry_nccl_rma_devices,
    .getProperties  = ferry_nccl_rma_get_properties,
    .listen         = ferry_nccl_rma_listen,
    .connect        = ferry_nccl_rma_connect,
    .createContext  = ferry_nccl_v13_create_context,
    .regMrSym       = ferry_nccl_v13_reg,
    .regMrSymDmaBuf = ferry_nccl_v13_reg_dmabuf,
    .deregMrSym     = ferry_nccl_rma_dereg,
    .destroyContext = ferry_nccl_rma_destroy_context,
    .closeColl      = ferry_nccl_rma_close_coll,
    .closeListen    = ferry_nccl_rma_close_listen,
    .iput           = ferry_nccl_rma_iput,
    .iputSignal     = ferry_nccl_rma_iput_signal,
    .iget           = ferry_nccl_rma_iget,
    .iflush         = ferry_nccl_rma_iflush,
    .test           = ferry_nccl_rma_test,
    .ginProgress    = ferry_nccl_rma_progress,
    .queryLastError = ferry_nccl_rma_query_last_error,
    .finalize       = ferry_nccl_rma_finalize,
};
