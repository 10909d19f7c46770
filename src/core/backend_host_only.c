/* What a host-memory-only backend does for NCCL calls that concern GPU memory. */
#include "core/backend.h"
#include "core/log.h"

ferry_status_t ferry_no_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle_p)
{
    FERRY_WARN("comm %p: dma-buf registration of %zu bytes at %p requested, but this backend "
               "supports host memory only (ptrSupport=HOST); NCCL should not have asked",
               comm, size, data);
    return FERRY_ERR_UNSUPPORTED;
}

ferry_status_t ferry_no_iflush(void *recv_comm, int n, void **data, int *sizes,
                               void **mhandles, void **request_p)
{
    /* Received data lands in host memory by CPU copies: it is visible once test() says done. */
    *request_p = NULL;
    return FERRY_OK;
}
