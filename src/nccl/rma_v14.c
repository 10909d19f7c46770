/*
 * ncclRmaPlugin_v14: NCCL 2.30's native RMA plugin struct, found in the net
 * plugin's library. Only isStrongSignal needs a word of its own: every
 * signal of ferry's is applied after its data, in order, so weak ones are
 * served as strong ones.
 */
#include "nccl/rma_entry.h"

static ncclResult_t ferry_nccl_v14_create_context(void *coll, ncclRmaConfig_v14_t *config,
                                                  void **rma_ctx_p)
{
    return ferry_nccl_rma_create_context(coll, config != NULL ? config->nContexts : 0,
                                         rma_ctx_p);
}

static ncclResult_t ferry_nccl_v14_iput_signal(void *rma_ctx, int context, uint64_t src_off,
                                               void *src_mh, size_t size, uint64_t dst_off,
                                               void *dst_mh, uint32_t rank, uint64_t sig_off,
                                               void *sig_mh, uint64_t sig_value,
                                               uint32_t sig_op, bool is_strong,
                                               void **request_p)
{
    (void)is_strong;
    return ferry_nccl_rma_iput_signal(rma_ctx, context, src_off, src_mh, size, dst_off, dst_mh,
                                      rank, sig_off, sig_mh, sig_value, sig_op, request_p);
}

FERRY_NCCL_EXPORT const ncclRma_v14_t ncclRmaPlugin_v14 = {
    .name           = FERRY_NCCL_RMA_NAME,
    .init           = ferry_nccl_rma_init,
    .devices        = ferry_nccl_rma_devices,
    .getProperties  = ferry_nccl_rma_get_properties,
    .listen         = ferry_nccl_rma_listen,
    .connect        = ferry_nccl_rma_connect,
    .createContext  = ferry_nccl_v14_create_context,
    .regMrSym       = ferry_nccl_rma_reg,
    .regMrSymDmaBuf = ferry_nccl_rma_reg_dmabuf,
    .deregMrSym     = ferry_nccl_rma_dereg,
    .destroyContext = ferry_nccl_rma_destroy_context,
    .closeColl      = ferry_nccl_rma_close_coll,
    .closeListen    = ferry_nccl_rma_close_listen,
    .iput           = ferry_nccl_rma_iput,
    .iputSignal     = ferry_nccl_v14_iput_signal,
    .iget           = ferry_nccl_rma_iget,
    .iflush         = ferry_nccl_rma_iflush,
    .test           = ferry_nccl_rma_test,
    .rmaProgress    = ferry_nccl_rma_progress,
    .queryLastError = ferry_nccl_rma_query_last_error,
    .finalize       = ferry_nccl_rma_finalize,
};
