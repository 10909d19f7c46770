/* libcuda.so.1 at run time (why: cuda_driver.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/cuda_driver.h"

ferry_cu_api_t ferry_cu;

static pthread_once_t ferry_cu_once = PTHREAD_ONCE_INIT;
static int ferry_cu_loaded;
static char ferry_cu_off[256];

static void ferry_cu_load_once(void)
{
    static const struct { const char *name; size_t off; int optional; } syms[] = {
#define FERRY_CU_SYM(field, name) {name, offsetof(ferry_cu_api_t, field), 0}
#define FERRY_CU_OPT(field, name) {name, offsetof(ferry_cu_api_t, field), 1}
        FERRY_CU_SYM(init, "cuInit"),
        FERRY_CU_SYM(error_name, "cuGetErrorName"),
        FERRY_CU_SYM(error_string, "cuGetErrorString"),
        FERRY_CU_SYM(pointer_attr, "cuPointerGetAttribute"),
        FERRY_CU_SYM(device_get, "cuDeviceGet"),
        FERRY_CU_SYM(ctx_set_current, "cuCtxSetCurrent"),
        FERRY_CU_SYM(ctx_get_current, "cuCtxGetCurrent"),
        FERRY_CU_SYM(stream_create, "cuStreamCreate"),
        FERRY_CU_SYM(stream_destroy, "cuStreamDestroy_v2"),
        FERRY_CU_SYM(stream_sync, "cuStreamSynchronize"),
        FERRY_CU_SYM(host_alloc, "cuMemHostAlloc"),
        FERRY_CU_SYM(host_free, "cuMemFreeHost"),
        FERRY_CU_SYM(dtoh_async, "cuMemcpyDtoHAsync_v2"),
        FERRY_CU_SYM(htod_async, "cuMemcpyHtoDAsync_v2"),
        FERRY_CU_SYM(ctx_create, "cuCtxCreate_v2"),
        FERRY_CU_SYM(event_create, "cuEventCreate"),
        FERRY_CU_SYM(event_destroy, "cuEventDestroy_v2"),
        FERRY_CU_SYM(event_record, "cuEventRecord"),
        FERRY_CU_SYM(event_query, "cuEventQuery"),
        FERRY_CU_OPT(device_get_attribute, "cuDeviceGetAttribute"),
        FERRY_CU_OPT(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
        FERRY_CU_OPT(flush_gpudirect_rdma_writes, "cuFlushGPUDirectRDMAWrites"),
#undef FERRY_CU_OPT
#undef FERRY_CU_SYM
    };
    void *h;
    ferry_cu_result_t r;
    size_t i;

    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(ferry_cu_off, sizeof(ferry_cu_off),
                 "no CUDA driver: dlopen(libcuda.so.1) failed: %s", dlerror());
        return;
    }
    for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = dlsym(h, syms[i].name);

        if (p == NULL && syms[i].optional)
            continue; /* Its user says what is missing when it needs it. */
        if (p == NULL) {
            memset(&ferry_cu, 0, sizeof(ferry_cu));
            snprintf(ferry_cu_off, sizeof(ferry_cu_off),
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
        snprintf(ferry_cu_off, sizeof(ferry_cu_off), "cuInit failed: %s (%d)",
                 name != NULL ? name : "?", r);
        return; /* The library stays open: NCCL's runtime may use it too. */
    }
    ferry_cu_loaded = 1;
}

int ferry_cu_load(void)
{
    pthread_once(&ferry_cu_once, ferry_cu_load_once);
    return ferry_cu_loaded;
}

const char *ferry_cu_why_off(void)
{
    return ferry_cu_loaded ? "" : ferry_cu_off;
}

void ferry_cu_err(char *err, size_t err_len, const char *call, ferry_cu_result_t r)
{
    const char *name = NULL, *text = NULL;

    if (ferry_cu.error_name == NULL || ferry_cu.error_name(r, &name) != 0)
        name = NULL;
    if (ferry_cu.error_string == NULL || ferry_cu.error_string(r, &text) != 0)
        text = NULL;
    snprintf(err, err_len, "%s: %s (%d)%s%s", call, name != NULL ? name : "CUDA error", r,
             text != NULL ? ": " : "", text != NULL ? text : "");
}

