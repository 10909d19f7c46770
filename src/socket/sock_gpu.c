/* GPU buffers staged through pinned host shadows by the copy engines (why: sock_gpu.h). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/cuda_driver.h"
#include "core/log.h"
#include "socket/sock_gpu.h"

#define FERRY_SOCK_GPU_MAX_DEVICES 64

int ferry_sock_gpu_on(int enabled)
{
    if (!enabled)
        return 0; /* libcuda is not even opened. */
    if (ferry_cu_load())
        FERRY_INFO(FERRY_LOG_INIT, "socket: GPU buffers accepted (ptrSupport HOST|CUDA), "
                   "staged through pinned host memory by the GPU's copy engines");
    else
        FERRY_WARN("NCCL_FERRY_GPU_STAGING=1 but %s: the socket backend takes host buffers "
                   "only (ptrSupport HOST)", ferry_cu_why_off());
    return ferry_cu_load();
}

const char *ferry_sock_gpu_why_off(void)
{
    return ferry_cu_why_off();
}

/*
 * Copies run in a context of ferry's own per device, made once and kept for
 * the process. Copies queued in the primary context (NCCL's) can wait behind
 * NCCL's persistent kernels, which spin until the network delivers the very
 * bytes those copies carry: under MPS they never completed, even with a
 * stream per helper thread and CUDA_DEVICE_MAX_CONNECTIONS=32. A separate
 * context is scheduled beside NCCL's kernels.
 * Device memory is addressed through the process's unified address space
 * either way.
 */
static pthread_mutex_t ferry_sock_gpu_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_cu_ctx_t ferry_sock_gpu_ctxs[FERRY_SOCK_GPU_MAX_DEVICES];

static ferry_cu_result_t ferry_sock_gpu_ctx(int ordinal, ferry_cu_device_t dev,
                                            ferry_cu_ctx_t *ctx_p)
{
    ferry_cu_result_t rc = 0;

    pthread_mutex_lock(&ferry_sock_gpu_ctx_lock);
    if (ferry_sock_gpu_ctxs[ordinal] == NULL) {
        ferry_cu_ctx_t ctx = NULL;

        /* cuCtxCreate also makes it current here; the caller sets what it needs next. */
        rc = ferry_cu.ctx_create(&ctx, 0, dev);
        if (rc == 0)
            ferry_sock_gpu_ctxs[ordinal] = ctx;
    }
    *ctx_p = ferry_sock_gpu_ctxs[ordinal];
    pthread_mutex_unlock(&ferry_sock_gpu_ctx_lock);
    return rc;
}

/* The calling thread leaves its CUDA context as it found it: it may be NCCL's. */
static ferry_cu_ctx_t ferry_sock_gpu_enter(ferry_cu_ctx_t ctx, ferry_cu_result_t *rc_p)
{
    ferry_cu_ctx_t prev = NULL;

    if (ferry_cu.ctx_get_current(&prev) != 0)
        prev = NULL;
    *rc_p = ctx != NULL ? ferry_cu.ctx_set_current(ctx) : 0;
    return prev;
}

static ferry_status_t ferry_sock_gpu_region_make(ferry_sock_gpu_region_t *r, const void *dev_ptr,
                                                 size_t size, char *err, size_t err_len);

ferry_status_t ferry_sock_gpu_region_init(ferry_sock_gpu_region_t *r, const void *dev_ptr,
                                          size_t size, char *err, size_t err_len)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev;
    ferry_status_t status;

    memset(r, 0, sizeof(*r));
    r->ordinal = -1;
    if (!ferry_cu_load()) {
        snprintf(err, err_len, "GPU staging is off: %s", ferry_cu_why_off());
        return FERRY_ERR_UNSUPPORTED;
    }
    prev = ferry_sock_gpu_enter(NULL, &rc);
    status = ferry_sock_gpu_region_make(r, dev_ptr, size, err, err_len);
    ferry_cu.ctx_set_current(prev);
    return status;
}

static ferry_status_t ferry_sock_gpu_region_make(ferry_sock_gpu_region_t *r, const void *dev_ptr,
                                                 size_t size, char *err, size_t err_len)
{
    ferry_cu_ptr_t p = (ferry_cu_ptr_t)(uintptr_t)dev_ptr;
    unsigned mem_type = 0;
    ferry_cu_device_t dev;
    ferry_cu_result_t rc;
    void *shadow = NULL;

    rc = ferry_cu.pointer_attr(&mem_type, FERRY_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (rc != 0 || mem_type != FERRY_CU_MEMORYTYPE_DEVICE) {
        if (rc != 0)
            ferry_cu_err(err, err_len, "cuPointerGetAttribute(MEMORY_TYPE)", rc);
        else
            snprintf(err, err_len, "%p is not device memory (CUDA memory type %u)", dev_ptr,
                     mem_type);
        return FERRY_ERR_INVALID;
    }
    rc = ferry_cu.pointer_attr(&r->ordinal, FERRY_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (rc != 0) {
        ferry_cu_err(err, err_len, "cuPointerGetAttribute(DEVICE_ORDINAL)", rc);
        return FERRY_ERR_IO;
    }
    if (r->ordinal < 0 || r->ordinal >= FERRY_SOCK_GPU_MAX_DEVICES) {
        snprintf(err, err_len, "GPU ordinal %d is beyond the %d ferry handles", r->ordinal,
                 FERRY_SOCK_GPU_MAX_DEVICES);
        return FERRY_ERR_UNSUPPORTED;
    }
    rc = ferry_cu.device_get(&dev, r->ordinal);
    if (rc == 0)
        rc = ferry_sock_gpu_ctx(r->ordinal, dev, &r->cu_ctx);
    if (rc != 0) {
        ferry_cu_err(err, err_len, "cuCtxCreate (ferry's copy context)", rc);
        return FERRY_ERR_IO;
    }
    rc = ferry_cu.ctx_set_current(r->cu_ctx);
    if (rc == 0)
        rc = ferry_cu.host_alloc(&shadow, size > 0 ? size : 1, FERRY_CU_MEMHOSTALLOC_PORTABLE);
    if (rc != 0) {
        ferry_cu_err(err, err_len, "cuMemHostAlloc (pinned shadow)", rc);
        return FERRY_ERR_NO_MEMORY;
    }
    r->shadow = shadow;
    return FERRY_OK;
}

void ferry_sock_gpu_region_fini(ferry_sock_gpu_region_t *r)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev;

    if (r->shadow == NULL)
        return;
    prev = ferry_sock_gpu_enter(r->cu_ctx, &rc);
    if (rc == 0)
        ferry_cu.host_free(r->shadow);
    ferry_cu.ctx_set_current(prev);
    r->shadow = NULL;
}

ferry_status_t ferry_sock_gpu_queue_init(ferry_sock_gpu_queue_t *q,
                                        const ferry_sock_gpu_region_t *r, char *err,
                                        size_t err_len)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev;
    const char *call = "cuStreamCreate";
    int i;

    if (q->stream != NULL) {
        if (q->cu_ctx == r->cu_ctx)
            return FERRY_OK;
        snprintf(err, err_len, "the comm already copies for another GPU (ferry stages one GPU "
                 "per comm)");
        return FERRY_ERR_UNSUPPORTED;
    }
    prev = ferry_sock_gpu_enter(r->cu_ctx, &rc);
    if (rc == 0)
        rc = ferry_cu.stream_create(&q->stream, FERRY_CU_STREAM_NON_BLOCKING);
    for (i = 0; rc == 0 && i < FERRY_SOCK_GPU_SLOTS; i++) {
        call = "cuEventCreate";
        rc = ferry_cu.event_create(&q->events[i], FERRY_CU_EVENT_DISABLE_TIMING);
    }
    ferry_cu.ctx_set_current(prev);
    if (rc != 0) {
        q->cu_ctx = r->cu_ctx;
        ferry_sock_gpu_queue_fini(q);
        ferry_cu_err(err, err_len, call, rc);
        return FERRY_ERR_CUDA;
    }
    q->cu_ctx = r->cu_ctx;
    return FERRY_OK;
}

int ferry_sock_gpu_queue_copy(ferry_sock_gpu_queue_t *q, int slot, int to_device, void *host,
                              void *dev, size_t len, char *err, size_t err_len)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev = ferry_sock_gpu_enter(q->cu_ctx, &rc);
    const char *call = to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync";

    if (rc == 0)
        rc = to_device ? ferry_cu.htod_async((ferry_cu_ptr_t)(uintptr_t)dev, host, len, q->stream)
                       : ferry_cu.dtoh_async(host, (ferry_cu_ptr_t)(uintptr_t)dev, len, q->stream);
    if (rc == 0) {
        call = "cuEventRecord";
        rc = ferry_cu.event_record(q->events[slot], q->stream);
    }
    ferry_cu.ctx_set_current(prev);
    if (rc != 0) {
        ferry_cu_err(err, err_len, call, rc);
        return -1;
    }
    return 0;
}

int ferry_sock_gpu_queue_poll(ferry_sock_gpu_queue_t *q, int slot, char *err, size_t err_len)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev = ferry_sock_gpu_enter(q->cu_ctx, &rc);

    if (rc == 0)
        rc = ferry_cu.event_query(q->events[slot]);
    ferry_cu.ctx_set_current(prev);
    if (rc == FERRY_CU_ERROR_NOT_READY)
        return 0;
    if (rc != 0) {
        ferry_cu_err(err, err_len, "the copy (cuEventQuery)", rc);
        return -1;
    }
    return 1;
}

void ferry_sock_gpu_queue_sync(ferry_sock_gpu_queue_t *q)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev;

    if (q->stream == NULL)
        return;
    prev = ferry_sock_gpu_enter(q->cu_ctx, &rc);
    if (rc == 0)
        ferry_cu.stream_sync(q->stream);
    ferry_cu.ctx_set_current(prev);
}

void ferry_sock_gpu_queue_fini(ferry_sock_gpu_queue_t *q)
{
    ferry_cu_result_t rc;
    ferry_cu_ctx_t prev;
    int i;

    if (q->cu_ctx == NULL)
        return;
    prev = ferry_sock_gpu_enter(q->cu_ctx, &rc);
    if (rc == 0) {
        /* A copy still queued must not land in a shadow about to be freed. */
        if (q->stream != NULL)
            ferry_cu.stream_sync(q->stream);
        for (i = 0; i < FERRY_SOCK_GPU_SLOTS; i++)
            if (q->events[i] != NULL)
                ferry_cu.event_destroy(q->events[i]);
        if (q->stream != NULL)
            ferry_cu.stream_destroy(q->stream);
    }
    ferry_cu.ctx_set_current(prev);
    memset(q, 0, sizeof(*q));
}
