/*
 * Internal to src/nccl: the entry points whose C type is the same in several
 * ncclNet versions, shared by the plugin_vN.c tables so each translation is
 * written once. Everything here has hidden visibility; only the five
 * ncclNetPlugin_vN structs are exported.
 */
#ifndef FERRY_NCCL_PLUGIN_H
#define FERRY_NCCL_PLUGIN_H

#include "core/api.h"
#include "nccl/net.h"

/* Marks the exported structs; the build hides everything else. */
#define FERRY_NCCL_EXPORT __attribute__((visibility("default")))

/* The struct name NCCL logs and matches NCCL_NET against. */
#define FERRY_NCCL_NAME "ferry"

/* The backends and services of this build (backends.c), handed to ferry_api_init. */
extern const ferry_backend_set_t ferry_nccl_backend_set;

/* The one ferry_status_t -> ncclResult_t mapping (status.c). */
ncclResult_t ferry_nccl_result(ferry_status_t status);

/* NCCL's logger in the core's type; NULL stays NULL (stderr). */
ferry_log_fn_t ferry_nccl_log_fn(ncclDebugLogger_t log_fn);

/* v11/v12 init and the v8..v10 process context: a ctx with this class. */
ncclResult_t ferry_nccl_ctx_init(void **ctx_p, uint64_t comm_id, int traffic_class,
                                 ncclDebugLogger_t log_fn);

/*
 * ferry_api_get_properties, mapped. On success also zeroes the caller's
 * version-specific struct (dst, dst_size), which the caller then fills.
 */
ncclResult_t ferry_nccl_props_get(int dev, ferry_props_t *props_p, void *dst, size_t dst_size);

/* The traffic class in a v10..v12 config, which NCCL may in theory omit. */
#define FERRY_NCCL_CONFIG_CLASS(_config) \
    ((_config) != NULL ? (_config)->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF)

/* Same C type in v8..v12 (the device-handle types are one typedef). */
ncclResult_t ferry_nccl_devices(int *ndev);
ncclResult_t ferry_nccl_accept(void *listen_comm, void **recv_comm_p,
                               ncclNetDeviceHandle_v11_t **recv_dev_comm_p);
ncclResult_t ferry_nccl_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle_p);
ncclResult_t ferry_nccl_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle_p);
ncclResult_t ferry_nccl_dereg_mr(void *comm, void *mhandle);
ncclResult_t ferry_nccl_iflush(void *recv_comm, int n, void **data, int *sizes,
                               void **mhandles, void **request_p);
ncclResult_t ferry_nccl_test(void *request, int *done_p, int *sizes);
ncclResult_t ferry_nccl_close_send(void *send_comm);
ncclResult_t ferry_nccl_close_recv(void *recv_comm);
ncclResult_t ferry_nccl_close_listen(void *listen_comm);

/* Same C type in v10..v12 (size_t sizes, profiler handles). */
ncclResult_t ferry_nccl_isend(void *send_comm, void *data, size_t size, int tag,
                              void *mhandle, void *phandle, void **request_p);
ncclResult_t ferry_nccl_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request_p);

/* Same C type in v11 and v12 (per-comm ctx). */
ncclResult_t ferry_nccl_listen(void *ctx, int dev, void *handle, void **listen_comm_p);
ncclResult_t ferry_nccl_connect(void *ctx, int dev, void *handle, void **send_comm_p,
                                ncclNetDeviceHandle_v11_t **send_dev_comm_p);
ncclResult_t ferry_nccl_finalize(void *ctx);

/*
 * v8..v10 have no ctx: one process-wide context, created by the first init
 * and finalized when the library is unloaded (legacy.c).
 */
ncclResult_t ferry_nccl_legacy_init(ncclDebugLogger_t log_fn); /* Also v8/v9 init. */
void *ferry_nccl_legacy_ctx(void);
/* Same C type in v8..v10. */
ncclResult_t ferry_nccl_legacy_listen(int dev, void *handle, void **listen_comm_p);
/* Same C type in v8 and v9. */
ncclResult_t ferry_nccl_legacy_connect(int dev, void *handle, void **send_comm_p,
                                       ncclNetDeviceHandle_v9_t **send_dev_comm_p);

/*
 * Designated initializers for the members every version v8..v12 sets to the
 * same function. getDeviceMr and irecvConsumed stay NULL: they are device
 * offload hooks, and NCCL only calls them when non-NULL.
 */
#define FERRY_NCCL_COMMON_MEMBERS                   \
    .devices       = ferry_nccl_devices,            \
    .accept        = ferry_nccl_accept,             \
    .regMr         = ferry_nccl_reg_mr,             \
    .regMrDmaBuf   = ferry_nccl_reg_mr_dmabuf,      \
    .deregMr       = ferry_nccl_dereg_mr,           \
    .iflush        = ferry_nccl_iflush,             \
    .test          = ferry_nccl_test,               \
    .closeSend     = ferry_nccl_close_send,         \
    .closeRecv     = ferry_nccl_close_recv,         \
    .closeListen   = ferry_nccl_close_listen,       \
    .getDeviceMr   = NULL,                          \
    .irecvConsumed = NULL

/* Members with the same C type in v10..v12. */
#define FERRY_NCCL_PHANDLE_MEMBERS                  \
    .isend         = ferry_nccl_isend,              \
    .irecv         = ferry_nccl_irecv

/* Members with the same C type in v11 and v12. */
#define FERRY_NCCL_CTX_MEMBERS                      \
    .listen        = ferry_nccl_listen,             \
    .connect       = ferry_nccl_connect,            \
    .finalize      = ferry_nccl_finalize

#endif
