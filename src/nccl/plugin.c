/*
 * The translations every ncclNet version shares: each function maps one
 * ABI call onto ferry_api_* and the status back through ferry_nccl_result.
 * The plugin_vN.c files add only what differs per version.
 */
#include <string.h>

#include "core/log.h"
#include "nccl/plugin.h"
#include "nccl/profiler.h"
#include "proxy/handle.h"

/* ferry's internal constants are NCCL's values; the boundary relies on it. */
_Static_assert(FERRY_PTR_HOST == NCCL_PTR_HOST, "FERRY_PTR_HOST");
_Static_assert(FERRY_PTR_CUDA == NCCL_PTR_CUDA, "FERRY_PTR_CUDA");
_Static_assert(FERRY_PTR_DMABUF == NCCL_PTR_DMABUF, "FERRY_PTR_DMABUF");
_Static_assert(FERRY_HANDLE_SIZE == NCCL_NET_HANDLE_MAXSIZE, "FERRY_HANDLE_SIZE");
_Static_assert(FERRY_MAX_REQUESTS == NCCL_NET_MAX_REQUESTS, "FERRY_MAX_REQUESTS");
_Static_assert(FERRY_RECV_OPTIONAL_COMPLETION == NCCL_NET_OPTIONAL_RECV_COMPLETION,
               "FERRY_RECV_OPTIONAL_COMPLETION");
_Static_assert(FERRY_LOG_WARN == NCCL_LOG_WARN, "FERRY_LOG_WARN");
_Static_assert(FERRY_LOG_INFO == NCCL_LOG_INFO, "FERRY_LOG_INFO");
_Static_assert(FERRY_LOG_TRACE == NCCL_LOG_TRACE, "FERRY_LOG_TRACE");
_Static_assert(FERRY_LOG_INIT == NCCL_INIT, "FERRY_LOG_INIT");
_Static_assert(FERRY_LOG_NET == NCCL_NET, "FERRY_LOG_NET");
_Static_assert(FERRY_LOG_ENV == NCCL_ENV, "FERRY_LOG_ENV");
_Static_assert(sizeof(ncclDebugLogLevel) == sizeof(int), "logger level width");

ferry_log_fn_t ferry_nccl_log_fn(ncclDebugLogger_t log_fn)
{
    /*
     * The two logger types differ only in the first parameter:
     * ncclDebugLogLevel here, int in the core. Both are 4-byte integers
     * passed in the same register (pinned above), the other parameters are
     * identical and both are variadic, so calling NCCL's logger through the
     * core's type is ABI-exact. A trampoline would need NCCL's pointer in a
     * second global here, with lifetime rules of its own, for no gain. The
     * detour through void (*)(void) is GCC's documented way to mark the
     * conversion as intended (-Wcast-function-type).
     */
    return (ferry_log_fn_t)(void (*)(void))log_fn;
}

ncclResult_t ferry_nccl_ctx_init(void **ctx_p, uint64_t comm_id, int traffic_class,
                                 ncclDebugLogger_t log_fn)
{
    return ferry_nccl_result(ferry_api_init(ctx_p, &ferry_nccl_backend_set, comm_id,
                                            traffic_class, ferry_nccl_log_fn(log_fn)));
}

ncclResult_t ferry_nccl_props_get(int dev, ferry_props_t *props_p, void *dst, size_t dst_size)
{
    ferry_status_t status = ferry_api_get_properties(dev, props_p);

    /* Zeroed so fields ferry does not set (e.g. vProps.devs[1..]) read 0. */
    if (status == FERRY_OK)
        memset(dst, 0, dst_size);
    return ferry_nccl_result(status);
}

ncclResult_t ferry_nccl_devices(int *ndev)
{
    return ferry_nccl_result(ferry_api_devices(ndev));
}

ncclResult_t ferry_nccl_accept(void *listen_comm, void **recv_comm_p,
                               ncclNetDeviceHandle_v11_t **recv_dev_comm_p)
{
    /*
     * ferry is a HOST plugin: NCCL never asks it for device offload, and the
     * pointer (or what it points to) may be NULL, so it is left untouched.
     */
    (void)recv_dev_comm_p;
    return ferry_nccl_result(ferry_api_accept(listen_comm, recv_comm_p));
}

ncclResult_t ferry_nccl_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle_p)
{
    return ferry_nccl_result(ferry_api_reg_mr(comm, data, size, type, mhandle_p));
}

ncclResult_t ferry_nccl_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle_p)
{
    return ferry_nccl_result(ferry_api_reg_mr_dmabuf(comm, data, size, type, offset, fd,
                                                     mhandle_p));
}

ncclResult_t ferry_nccl_dereg_mr(void *comm, void *mhandle)
{
    return ferry_nccl_result(ferry_api_dereg_mr(comm, mhandle));
}

/*
 * NCCL holds handles, not the requests' addresses (proxy/handle.h): each
 * request a backend returns is turned into one on its way out, and test()
 * turns it back, refusing anything that is not a live request of a live
 * comm before a byte of it is read.
 */
static void ferry_nccl_hand_out(ncclResult_t res, void **request_p)
{
    if (res == ncclSuccess && *request_p != NULL)
        *request_p = ferry_px_handle_of(*request_p);
}

ncclResult_t ferry_nccl_iflush(void *recv_comm, int n, void **data, int *sizes,
                               void **mhandles, void **request_p)
{
    ncclResult_t res = ferry_nccl_result(ferry_api_iflush(recv_comm, n, data, sizes, mhandles,
                                                          request_p));

    ferry_nccl_hand_out(res, request_p);
    return res;
}

/* test() on what is no live request: NCCL (or a driver) looping on it repeats this. */
static ncclResult_t ferry_nccl_test_refused(void *request, int *done_p)
{
    *done_p = 0;
    FERRY_WARN_LIMITED("test(%p): %s; every request from isend/irecv/iflush must be tested "
                       "until it reports done or an error, once, and never after its comm is "
                       "closed", request, ferry_px_handle_why(request));
    return ncclInvalidUsage;
}

/* test() while profiling: the sizes are needed for the event even when NCCL passes none. */
static ncclResult_t ferry_nccl_test_profiled(ncclProfilerCallback_t fn, void *request,
                                             int *done_p, int *sizes)
{
    int mine[FERRY_PX_MAX_SUBS];
    int *out = sizes != NULL ? sizes : mine;
    ncclResult_t res = ferry_nccl_result(ferry_api_test(request, done_p, out));

    /* The profiler's events are keyed by the request (nccl/profiler.c), not the handle. */

    if (res != ncclSuccess)
        ferry_nccl_prof_stop(fn, request, NULL, res);
    else if (*done_p)
        ferry_nccl_prof_stop(fn, request, out, ncclSuccess);
    return res;
}

ncclResult_t ferry_nccl_test(void *handle, int *done_p, int *sizes)
{
    ferry_px_req_t *req = ferry_px_handle_req(handle);
    ncclProfilerCallback_t fn;

    if (req == NULL)
        return ferry_nccl_test_refused(handle, done_p);
    fn = ferry_nccl_prof_get();
    if (fn != NULL)
        return ferry_nccl_test_profiled(fn, req, done_p, sizes);
    return ferry_nccl_result(ferry_api_test(req, done_p, sizes));
}

ncclResult_t ferry_nccl_close_send(void *send_comm)
{
    if (ferry_nccl_prof_get() != NULL)
        ferry_nccl_prof_forget(send_comm);
    return ferry_nccl_result(ferry_api_close_send(send_comm));
}

ncclResult_t ferry_nccl_close_recv(void *recv_comm)
{
    if (ferry_nccl_prof_get() != NULL)
        ferry_nccl_prof_forget(recv_comm);
    return ferry_nccl_result(ferry_api_close_recv(recv_comm));
}

ncclResult_t ferry_nccl_close_listen(void *listen_comm)
{
    return ferry_nccl_result(ferry_api_close_listen(listen_comm));
}

/*
 * The NCCL-owned profiler handles (phandle/phandles, possibly NULL) open
 * one event per buffer of a request that came back, when events are on
 * (nccl/profiler.h); otherwise they are not looked at.
 */
ncclResult_t ferry_nccl_isend(void *send_comm, void *data, size_t size, int tag,
                              void *mhandle, void *phandle, void **request_p)
{
    ncclResult_t res = ferry_nccl_result(ferry_api_isend(send_comm, data, size, tag, mhandle,
                                                         request_p));
    ncclProfilerCallback_t fn = ferry_nccl_prof_get();

    if (fn != NULL && res == ncclSuccess && *request_p != NULL && phandle != NULL)
        ferry_nccl_prof_start(fn, send_comm, *request_p, 1, 1, &phandle, &size, &tag);
    ferry_nccl_hand_out(res, request_p);
    return res;
}

ncclResult_t ferry_nccl_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request_p)
{
    /* *request_p may hold NCCL_NET_OPTIONAL_RECV_COMPLETION; the core always overwrites it. */
    ncclResult_t res = ferry_nccl_result(ferry_api_irecv(recv_comm, n, data, sizes, tags,
                                                         mhandles, request_p));
    ncclProfilerCallback_t fn = ferry_nccl_prof_get();

    if (fn != NULL && res == ncclSuccess && *request_p != NULL && phandles != NULL)
        ferry_nccl_prof_start(fn, recv_comm, *request_p, 0, n, phandles, sizes, tags);
    ferry_nccl_hand_out(res, request_p);
    return res;
}

ncclResult_t ferry_nccl_listen(void *ctx, int dev, void *handle, void **listen_comm_p)
{
    return ferry_nccl_result(ferry_api_listen(ctx, dev, handle, listen_comm_p));
}

ncclResult_t ferry_nccl_connect(void *ctx, int dev, void *handle, void **send_comm_p,
                                ncclNetDeviceHandle_v11_t **send_dev_comm_p)
{
    /* HOST plugin: the device handle is never touched (see accept). */
    (void)send_dev_comm_p;
    /* The traffic class came with init and lives in ctx. */
    return ferry_nccl_result(ferry_api_connect(ctx, dev, handle, NCCL_NET_TRAFFIC_CLASS_UNDEF,
                                               send_comm_p));
}

ncclResult_t ferry_nccl_finalize(void *ctx)
{
    /* NCCL also calls this after a failed init, with ctx possibly NULL. */
    return ferry_nccl_result(ferry_api_finalize(ctx));
}
