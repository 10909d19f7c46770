/*
 * Internal to src/nccl: the RMA entry points both exported RMA structs
 * share (rma_v14.c, rma_v13.c). Each maps one NCCL call onto the RMA ops of
 * the backend that runs (core/rma.h), chosen at init as the net plugin's
 * backend is (NCCL_FERRY_BACKEND); a backend without one-sided support is
 * refused at init with a message saying what to set.
 */
#ifndef FERRY_NCCL_RMA_ENTRY_H
#define FERRY_NCCL_RMA_ENTRY_H

#include "nccl/plugin.h"
#include "nccl/rma.h"

/* The name both structs carry (NCCL logs it). */
#define FERRY_NCCL_RMA_NAME "ferry"

ncclResult_t ferry_nccl_rma_init(void **ctx_p, uint64_t comm_id, ncclDebugLogger_t log_fn);
ncclResult_t ferry_nccl_rma_devices(int *ndev);
/* v12 properties of a host-proxy RMA device (netDeviceType NCCL_NET_DEVICE_GIN_PROXY). */
ncclResult_t ferry_nccl_rma_get_properties(int dev, ncclNetProperties_v12_t *props);
ncclResult_t ferry_nccl_rma_listen(void *ctx, int dev, void *handle, void **listen_p);
ncclResult_t ferry_nccl_rma_connect(void *ctx, void *handles[], int nranks, int rank,
                                    void *listen, void **coll_p);
ncclResult_t ferry_nccl_rma_create_context(void *coll, int ncontexts, void **rma_ctx_p);
ncclResult_t ferry_nccl_rma_reg(void *coll, void *data, size_t size, int type, uint64_t flags,
                                void **mhandle_p);
ncclResult_t ferry_nccl_rma_reg_dmabuf(void *coll, void *data, size_t size, int type,
                                       uint64_t offset, int fd, uint64_t flags,
                                       void **mhandle_p);
ncclResult_t ferry_nccl_rma_dereg(void *coll, void *mhandle);
ncclResult_t ferry_nccl_rma_destroy_context(void *rma_ctx);
ncclResult_t ferry_nccl_rma_close_coll(void *coll);
ncclResult_t ferry_nccl_rma_close_listen(void *listen);
ncclResult_t ferry_nccl_rma_iput(void *rma_ctx, int context, uint64_t src_off, void *src_mh,
                                 size_t size, uint64_t dst_off, void *dst_mh, uint32_t rank,
                                 void **request_p);
/* Every signal of ferry's is a strong one: applied after the data, in order. */
ncclResult_t ferry_nccl_rma_iput_signal(void *rma_ctx, int context, uint64_t src_off,
                                        void *src_mh, size_t size, uint64_t dst_off,
                                        void *dst_mh, uint32_t rank, uint64_t sig_off,
                                        void *sig_mh, uint64_t sig_value, uint32_t sig_op,
                                        void **request_p);
ncclResult_t ferry_nccl_rma_iget(void *rma_ctx, int context, uint64_t remote_off,
                                 void *remote_mh, size_t size, uint64_t local_off,
                                 void *local_mh, uint32_t rank, void **request_p);
ncclResult_t ferry_nccl_rma_iflush(void *rma_ctx, int context, void *mhandle, uint32_t rank,
                                   void **request_p);
ncclResult_t ferry_nccl_rma_test(void *coll, void *request, int *done);
ncclResult_t ferry_nccl_rma_progress(void *rma_ctx);
ncclResult_t ferry_nccl_rma_query_last_error(void *rma_ctx, bool *has_error);
ncclResult_t ferry_nccl_rma_finalize(void *ctx);

#endif
