/* GPU buffers staged through pinned host shadows by the copy engines (why: sock_gpu.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "socket/sock_gpu.h"

/* The few driver API types and constants used, without cuda.h (not needed to build). */
typedef int ferry_cu_result_t;
typedef int ferry_cu_device_t;
typedef void *ferry_cu_ctx_t;
typedef void *ferry_cu_stream_t;
typedef unsigned long long ferry_cu_ptr_t;
#define FERRY_CU_POINTER_ATTRIBUTE_MEMORY_TYPE    2
#define FERRY_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define FERRY_CU_MEMORYTYPE_DEVICE                2
#define FERRY_CU_MEMHOSTALLOC_PORTABLE            1
#define FERRY_CU_STREAM_NON_BLOCKING              1

typedef struct ferry_cu_api {
    ferry_cu_result_t (*init)(unsigned);
    ferry_cu_result_t (*error_name)(ferry_cu_result_t, const char **);
    ferry_cu_result_t (*error_string)(ferry_cu_result_t, const char **);
    ferry_cu_result_t (*pointer_attr)(void *, int, ferry_cu_ptr_t);
    ferry_cu_result_t (*device_get)(ferry_cu_device_t *, int);
    ferry_cu_result_t (*primary_retain)(ferry_cu_ctx_t *, ferry_cu_device_t);
    ferry_cu_result_t (*ctx_set_current)(ferry_cu_ctx_t);
    ferry_cu_result_t (*stream_create)(ferry_cu_stream_t *, unsigned);
    ferry_cu_result_t (*stream_destroy)(ferry_cu_stream_t);
    ferry_cu_result_t (*stream_sync)(ferry_cu_stream_t);
    ferry_cu_result_t (*host_alloc)(void **, size_t, unsigned);
    ferry_cu_result_t (*host_free)(void *);
    ferry_cu_result_t (*dtoh_async)(void *, ferry_cu_ptr_t, size_t, ferry_cu_stream_t);
    ferry_cu_result_t (*htod_async)(ferry_cu_ptr_t, const void *, size_t, ferry_cu_stream_t);
} ferry_cu_api_t;

static ferry_cu_api_t ferry_cu;

static pthread_once_t ferry_sock_gpu_once = PTHREAD_ONCE_INIT;
static int ferry_sock_gpu_loaded;
static char ferry_sock_gpu_off[256];

static void ferry_sock_gpu_load(void)
{
    static const struct { const char *name; size_t off; } syms[] = {
#define FERRY_CU_SYM(field, name) {name, offsetof(ferry_cu_api_t, field)}
        FERRY_CU_SYM(init, "cuInit"),
        FERRY_CU_SYM(error_name, "cuGetErrorName"),
        FERRY_CU_SYM(error_string, "cuGetErrorString"),
        FERRY_CU_SYM(pointer_attr, "cuPointerGetAttribute"),
        FERRY_CU_SYM(device_get, "cuDeviceGet"),
        FERRY_CU_SYM(primary_retain, "cuDevicePrimaryCtxRetain"),
        FERRY_CU_SYM(ctx_set_current, "cuCtxSetCurrent"),
        FERRY_CU_SYM(stream_create, "cuStreamCreate"),
        FERRY_CU_SYM(stream_destroy, "cuStreamDestroy_v2"),
        FERRY_CU_SYM(stream_sync, "cuStreamSynchronize"),
        FERRY_CU_SYM(host_alloc, "cuMemHostAlloc"),
        FERRY_CU_SYM(host_free, "cuMemFreeHost"),
        FERRY_CU_SYM(dtoh_async, "cuMemcpyDtoHAsync_v2"),
        FERRY_CU_SYM(htod_async, "cuMemcpyHtoDAsync_v2"),
#undef FERRY_CU_SYM
    };
    void *h;
    ferry_cu_result_t r;
    size_t i;

    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(ferry_sock_gpu_off, sizeof(ferry_sock_gpu_off),
                 "no CUDA driver: dlopen(libcuda.so.1) failed: %s", dlerror());
        return;
    }
    for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = dlsym(h, syms[i].name);

        if (p == NULL) {
            snprintf(ferry_sock_gpu_off, sizeof(ferry_sock_gpu_off),
                     "libcuda.so.1 has no %s (driver too old?)", syms[i].name);
            dlclose(h);
            return;
        }
        memcpy((char *)&ferry_cu + syms[i].off, &p, sizeof(p));
    }
    r = ferry_cu.init(0);
    if (r != 0) {
        const char *name = NULL;

        ferry_cu.error_name(r, &name);
        snprintf(ferry_sock_gpu_off, sizeof(ferry_sock_gpu_off), "cuInit failed: %s (%d)",
                 name != NULL ? name : "?", r);
        return; /* The library stays open: NCCL's runtime may use it too. */
    }
    ferry_sock_gpu_loaded = 1;
}

int ferry_sock_gpu_on(int enabled)
{
    if (!enabled)
        return 0; /* libcuda is not even opened. */
    pthread_once(&ferry_sock_gpu_once, ferry_sock_gpu_load);
    if (ferry_sock_gpu_loaded)
        FERRY_INFO(FERRY_LOG_INIT, "socket: GPU buffers accepted (ptrSupport HOST|CUDA), "
                   "staged through pinned host memory by the GPU's copy engines");
    else
        FERRY_WARN("NCCL_FERRY_GPU_STAGING=1 but %s: the socket backend takes host buffers "
                   "only (ptrSupport HOST)", ferry_sock_gpu_off);
    return ferry_sock_gpu_loaded;
}

const char *ferry_sock_gpu_why_off(void)
{
    return ferry_sock_gpu_loaded ? "" : ferry_sock_gpu_off;
}

/* "cuMemcpyDtoHAsync: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access ..." */
static void ferry_sock_gpu_err(char *err, size_t err_len, const char *call, ferry_cu_result_t r)
{
    const char *name = NULL, *text = NULL;

    if (ferry_cu.error_name == NULL || ferry_cu.error_name(r, &name) != 0)
        name = NULL;
    if (ferry_cu.error_string == NULL || ferry_cu.error_string(r, &text) != 0)
        text = NULL;
    snprintf(err, err_len, "%s: %s (%d)%s%s", call, name != NULL ? name : "CUDA error", r,
             text != NULL ? ": " : "", text != NULL ? text : "");
}

ferry_status_t ferry_sock_gpu_region_init(ferry_sock_gpu_region_t *r, const void *dev_ptr,
                                          size_t size, char *err, size_t err_len)
{
    ferry_cu_ptr_t p = (ferry_cu_ptr_t)(uintptr_t)dev_ptr;
    unsigned mem_type = 0;
    ferry_cu_device_t dev;
    ferry_cu_result_t rc;
    void *shadow = NULL;

    memset(r, 0, sizeof(*r));
    r->ordinal = -1;
    if (!ferry_sock_gpu_loaded) {
        snprintf(err, err_len, "GPU staging is off: %s", ferry_sock_gpu_off);
        return FERRY_ERR_UNSUPPORTED;
    }
    rc = ferry_cu.pointer_attr(&mem_type, FERRY_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (rc != 0 || mem_type != FERRY_CU_MEMORYTYPE_DEVICE) {
        if (rc != 0)
            ferry_sock_gpu_err(err, err_len, "cuPointerGetAttribute(MEMORY_TYPE)", rc);
        else
            snprintf(err, err_len, "%p is not device memory (CUDA memory type %u)", dev_ptr,
                     mem_type);
        return FERRY_ERR_INVALID;
    }
    /*
     * NCCL allocates with cuMem* (VMM): such pointers have no owning context,
     * so copies go through the device's primary context, the one the CUDA
     * runtime (and so NCCL) uses anyway.
     */
    rc = ferry_cu.pointer_attr(&r->ordinal, FERRY_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuPointerGetAttribute(DEVICE_ORDINAL)", rc);
        return FERRY_ERR_IO;
    }
    rc = ferry_cu.device_get(&dev, r->ordinal);
    if (rc == 0)
        rc = ferry_cu.primary_retain(&r->cu_ctx, dev);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuDevicePrimaryCtxRetain", rc);
        return FERRY_ERR_IO;
    }
    rc = ferry_cu.ctx_set_current(r->cu_ctx);
    if (rc == 0)
        rc = ferry_cu.host_alloc(&shadow, size > 0 ? size : 1, FERRY_CU_MEMHOSTALLOC_PORTABLE);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuMemHostAlloc (pinned shadow)", rc);
        return FERRY_ERR_NO_MEMORY;
    }
    r->shadow = shadow;
    return FERRY_OK;
}

void ferry_sock_gpu_region_fini(ferry_sock_gpu_region_t *r)
{
    if (r->shadow != NULL && ferry_cu.ctx_set_current(r->cu_ctx) == 0)
        ferry_cu.host_free(r->shadow);
    r->shadow = NULL;
}

/*
 * Each thread copies on a stream of its own, so lanes copy in parallel, and
 * a non-blocking one: the legacy default stream would wait for NCCL's
 * kernels, which wait for these very bytes. The stream goes with the thread
 * (helper threads come and go with comms).
 */
struct ferry_sock_gpu_tls {
    ferry_cu_ctx_t    ctx;
    ferry_cu_stream_t stream;
};

static __thread struct ferry_sock_gpu_tls ferry_sock_gpu_tls;
static pthread_key_t ferry_sock_gpu_key;
static pthread_once_t ferry_sock_gpu_key_once = PTHREAD_ONCE_INIT;

static void ferry_sock_gpu_tls_end(void *p)
{
    struct ferry_sock_gpu_tls *t = p;

    if (t->stream != NULL && ferry_cu.ctx_set_current(t->ctx) == 0)
        ferry_cu.stream_destroy(t->stream);
    t->stream = NULL;
    t->ctx = NULL;
}

static void ferry_sock_gpu_key_init(void)
{
    pthread_key_create(&ferry_sock_gpu_key, ferry_sock_gpu_tls_end);
}

static ferry_cu_stream_t ferry_sock_gpu_stream(const ferry_sock_gpu_region_t *r, char *err,
                                               size_t err_len)
{
    struct ferry_sock_gpu_tls *t = &ferry_sock_gpu_tls;
    ferry_cu_result_t rc;

    if (t->stream != NULL && t->ctx == r->cu_ctx)
        return t->stream;
    if (t->stream != NULL)
        ferry_sock_gpu_tls_end(t);
    rc = ferry_cu.ctx_set_current(r->cu_ctx);
    if (rc == 0)
        rc = ferry_cu.stream_create(&t->stream, FERRY_CU_STREAM_NON_BLOCKING);
    if (rc != 0) {
        t->stream = NULL;
        ferry_sock_gpu_err(err, err_len, "cuStreamCreate", rc);
        return NULL;
    }
    t->ctx = r->cu_ctx;
    pthread_once(&ferry_sock_gpu_key_once, ferry_sock_gpu_key_init);
    pthread_setspecific(ferry_sock_gpu_key, t);
    return t->stream;
}

int ferry_sock_gpu_to_host(const ferry_sock_gpu_region_t *r, void *host, const void *dev,
                           size_t len, char *err, size_t err_len)
{
    ferry_cu_stream_t st = ferry_sock_gpu_stream(r, err, err_len);
    ferry_cu_result_t rc;

    if (st == NULL)
        return -1;
    rc = ferry_cu.dtoh_async(host, (ferry_cu_ptr_t)(uintptr_t)dev, len, st);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuMemcpyDtoHAsync", rc);
        return -1;
    }
    rc = ferry_cu.stream_sync(st);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuStreamSynchronize after cuMemcpyDtoHAsync", rc);
        return -1;
    }
    return 0;
}

int ferry_sock_gpu_to_device(const ferry_sock_gpu_region_t *r, void *dev, const void *host,
                             size_t len, char *err, size_t err_len)
{
    ferry_cu_stream_t st = ferry_sock_gpu_stream(r, err, err_len);
    ferry_cu_result_t rc;

    if (st == NULL)
        return -1;
    rc = ferry_cu.htod_async((ferry_cu_ptr_t)(uintptr_t)dev, host, len, st);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuMemcpyHtoDAsync", rc);
        return -1;
    }
    rc = ferry_cu.stream_sync(st);
    if (rc != 0) {
        ferry_sock_gpu_err(err, err_len, "cuStreamSynchronize after cuMemcpyHtoDAsync", rc);
        return -1;
    }
    return 0;
}
