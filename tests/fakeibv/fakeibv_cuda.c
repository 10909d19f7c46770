/*
 * fakeibv GPU mode: device memory in MRs, moved with the CUDA driver API.
 *
 * libcuda.so.1 is loaded at run time, so the library builds and runs on a
 * machine without CUDA (dlopen fails -> every MR is host memory). Copies run
 * on a per-thread non-blocking stream and are synchronised on that stream
 * only: the legacy default stream would wait for the consumer's own kernels
 * (NCCL's are waiting for our data), a deadlock. By default they also run in
 * a context of fakeibv's own per device (FAKEIBV_CUDA_CTX=own), not in the
 * primary context the application's kernels run in: a copy in that context
 * can be held behind a kernel that spins until the copy's data arrives (a
 * real NIC's DMA waits for nothing). FAKEIBV_CUDA_CTX=primary copies in the
 * primary context.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "fakeibv_internal.h"

/* The few driver API types and constants we need, without cuda.h. */
typedef int fakeibv_CUresult;
typedef int fakeibv_CUdevice;
typedef void *fakeibv_CUcontext;
typedef void *fakeibv_CUstream;
typedef unsigned long long fakeibv_CUdeviceptr;
#define FAKEIBV_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define FAKEIBV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define FAKEIBV_CU_MEMORYTYPE_DEVICE 2
#define FAKEIBV_CU_STREAM_NON_BLOCKING 1

static struct {
    int loaded;   /* 1: all symbols found. */
    fakeibv_CUresult (*init)(unsigned);
    fakeibv_CUresult (*pointer_get_attribute)(void *, int, fakeibv_CUdeviceptr);
    fakeibv_CUresult (*primary_ctx_retain)(fakeibv_CUcontext *, fakeibv_CUdevice);
    fakeibv_CUresult (*device_get)(fakeibv_CUdevice *, int);
    fakeibv_CUresult (*ctx_set_current)(fakeibv_CUcontext);
    fakeibv_CUresult (*stream_create)(fakeibv_CUstream *, unsigned);
    fakeibv_CUresult (*stream_sync)(fakeibv_CUstream);
    fakeibv_CUresult (*stream_destroy)(fakeibv_CUstream);
    fakeibv_CUresult (*htod_async)(fakeibv_CUdeviceptr, const void *, size_t, fakeibv_CUstream);
    fakeibv_CUresult (*dtoh_async)(void *, fakeibv_CUdeviceptr, size_t, fakeibv_CUstream);
    fakeibv_CUresult (*ctx_create)(fakeibv_CUcontext *, unsigned, fakeibv_CUdevice); /* Optional. */
} fakeibv_cu;

/* What an MR on device memory copies through: one per device ordinal. */
#define FAKEIBV_CU_MAX_DEVS 16
struct fakeibv_cu_dev {
    fakeibv_CUdevice  dev;
    fakeibv_CUcontext primary;
    fakeibv_CUcontext own;    /* Made by the first copying thread (FAKEIBV_CUDA_CTX=own). */
};
static struct fakeibv_cu_dev fakeibv_cu_devs[FAKEIBV_CU_MAX_DEVS];
static pthread_mutex_t fakeibv_cu_devs_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t fakeibv_cu_once = PTHREAD_ONCE_INIT;

static void *fakeibv_cu_sym(void *h, const char *name)
{
    void *p = dlsym(h, name);

    if (p == NULL)
        FAKEIBV_WARN("libcuda.so.1 lacks %s; GPU mode off", name);
    return p;
}

static void fakeibv_cu_load(void)
{
    void *h;

    if (!fakeibv_config()->cuda)
        return;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        FAKEIBV_INFO("no libcuda.so.1 (%s): host memory only", dlerror());
        return;
    }
    fakeibv_cu.init = (fakeibv_CUresult (*)(unsigned))fakeibv_cu_sym(h, "cuInit");
    fakeibv_cu.pointer_get_attribute = (fakeibv_CUresult (*)(void *, int, fakeibv_CUdeviceptr))
        fakeibv_cu_sym(h, "cuPointerGetAttribute");
    fakeibv_cu.primary_ctx_retain = (fakeibv_CUresult (*)(fakeibv_CUcontext *, fakeibv_CUdevice))
        fakeibv_cu_sym(h, "cuDevicePrimaryCtxRetain");
    fakeibv_cu.device_get = (fakeibv_CUresult (*)(fakeibv_CUdevice *, int))
        fakeibv_cu_sym(h, "cuDeviceGet");
    fakeibv_cu.ctx_set_current = (fakeibv_CUresult (*)(fakeibv_CUcontext))
        fakeibv_cu_sym(h, "cuCtxSetCurrent");
    fakeibv_cu.stream_create = (fakeibv_CUresult (*)(fakeibv_CUstream *, unsigned))
        fakeibv_cu_sym(h, "cuStreamCreate");
    fakeibv_cu.stream_sync = (fakeibv_CUresult (*)(fakeibv_CUstream))
        fakeibv_cu_sym(h, "cuStreamSynchronize");
    fakeibv_cu.stream_destroy = (fakeibv_CUresult (*)(fakeibv_CUstream))
        fakeibv_cu_sym(h, "cuStreamDestroy_v2");
    fakeibv_cu.htod_async = (fakeibv_CUresult (*)(fakeibv_CUdeviceptr, const void *, size_t,
                                                  fakeibv_CUstream))
        fakeibv_cu_sym(h, "cuMemcpyHtoDAsync_v2");
    fakeibv_cu.dtoh_async = (fakeibv_CUresult (*)(void *, fakeibv_CUdeviceptr, size_t,
                                                  fakeibv_CUstream))
        fakeibv_cu_sym(h, "cuMemcpyDtoHAsync_v2");
    fakeibv_cu.ctx_create = (fakeibv_CUresult (*)(fakeibv_CUcontext *, unsigned, fakeibv_CUdevice))
        dlsym(h, "cuCtxCreate_v2");
    if (!fakeibv_cu.init || !fakeibv_cu.pointer_get_attribute || !fakeibv_cu.primary_ctx_retain ||
        !fakeibv_cu.device_get || !fakeibv_cu.ctx_set_current || !fakeibv_cu.stream_create ||
        !fakeibv_cu.stream_sync || !fakeibv_cu.stream_destroy || !fakeibv_cu.htod_async ||
        !fakeibv_cu.dtoh_async)
        return;
    if (fakeibv_cu.init(0) != 0) {
        FAKEIBV_WARN("cuInit failed; GPU mode off");
        return;
    }
    fakeibv_cu.loaded = 1;
    FAKEIBV_INFO("libcuda.so.1 loaded: GPU mode on, copies in the %s context",
                 fakeibv_config()->cuda_own_ctx && fakeibv_cu.ctx_create != NULL ? "own" : "primary");
}

/*
 * Device memory is reachable from any context of its device (NCCL allocates
 * with cuMem* (VMM), whose pointers have no owning context); *cu_dev_p names
 * the device, and the copying thread picks the context (fakeibv_cu_prepare).
 */
int fakeibv_cuda_is_device_ptr(uint64_t addr, void **cu_dev_p)
{
    unsigned int mem_type = 0;
    int ordinal = -1;
    fakeibv_CUdevice dev;
    fakeibv_CUcontext ctx;

    pthread_once(&fakeibv_cu_once, fakeibv_cu_load);
    if (!fakeibv_cu.loaded || addr == 0)
        return 0;
    if (fakeibv_cu.pointer_get_attribute(&mem_type, FAKEIBV_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                         addr) != 0 ||
        mem_type != FAKEIBV_CU_MEMORYTYPE_DEVICE)
        return 0;
    if (fakeibv_cu.pointer_get_attribute(&ordinal, FAKEIBV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                         addr) != 0 ||
        ordinal < 0 || ordinal >= FAKEIBV_CU_MAX_DEVS || fakeibv_cu.device_get(&dev, ordinal) != 0 ||
        fakeibv_cu.primary_ctx_retain(&ctx, dev) != 0) {
        FAKEIBV_WARN("device pointer 0x%llx: cannot get its device/primary context; treating "
                     "it as host memory will crash - check the CUDA driver",
                     (unsigned long long)addr);
        return 0;
    }
    pthread_mutex_lock(&fakeibv_cu_devs_lock);
    fakeibv_cu_devs[ordinal].dev = dev;
    fakeibv_cu_devs[ordinal].primary = ctx;
    pthread_mutex_unlock(&fakeibv_cu_devs_lock);
    *cu_dev_p = &fakeibv_cu_devs[ordinal];
    return 1;
}

/* The context copies for device d run in, made current on this (a fakeibv) thread. */
static fakeibv_CUcontext fakeibv_cu_ctx_of(struct fakeibv_cu_dev *d)
{
    fakeibv_CUcontext ctx;

    if (!fakeibv_config()->cuda_own_ctx || fakeibv_cu.ctx_create == NULL)
        return d->primary;
    pthread_mutex_lock(&fakeibv_cu_devs_lock);
    if (d->own == NULL) {
        /* cuCtxCreate makes it current here too: this thread copies next anyway. */
        if (fakeibv_cu.ctx_create(&ctx, 0, d->dev) == 0) {
            d->own = ctx;
        } else {
            FAKEIBV_WARN("cuCtxCreate on device %d failed; copying in the primary context",
                         (int)d->dev);
            d->own = d->primary;
        }
    }
    ctx = d->own;
    pthread_mutex_unlock(&fakeibv_cu_devs_lock);
    return ctx;
}

/* Each transfer thread copies on its own stream; the stream goes away with
 * the thread (QP threads come and go with every NCCL communicator). */
struct fakeibv_cu_tls {
    fakeibv_CUstream stream;
    fakeibv_CUcontext ctx;
};

static pthread_key_t fakeibv_cu_key;
static pthread_once_t fakeibv_cu_key_once = PTHREAD_ONCE_INIT;
static __thread struct fakeibv_cu_tls fakeibv_cu_tls;

static void fakeibv_cu_tls_end(void *p)
{
    struct fakeibv_cu_tls *t = p;

    if (t->stream != NULL && fakeibv_cu.ctx_set_current(t->ctx) == 0)
        fakeibv_cu.stream_destroy(t->stream);
    t->stream = NULL;
}

static void fakeibv_cu_key_init(void)
{
    pthread_key_create(&fakeibv_cu_key, fakeibv_cu_tls_end);
}

static fakeibv_CUstream fakeibv_cu_prepare(void *cu_dev)
{
    struct fakeibv_cu_tls *t = &fakeibv_cu_tls;
    fakeibv_CUcontext cu_ctx = fakeibv_cu_ctx_of(cu_dev);

    if (fakeibv_cu.ctx_set_current(cu_ctx) != 0)
        return NULL;
    if (t->stream != NULL && t->ctx != cu_ctx) {
        fakeibv_cu_tls_end(t);
        fakeibv_cu.ctx_set_current(cu_ctx);
    }
    if (t->stream == NULL) {
        if (fakeibv_cu.stream_create(&t->stream, FAKEIBV_CU_STREAM_NON_BLOCKING) != 0) {
            t->stream = NULL;
            return NULL;
        }
        t->ctx = cu_ctx;
        pthread_once(&fakeibv_cu_key_once, fakeibv_cu_key_init);
        pthread_setspecific(fakeibv_cu_key, t);
    }
    return t->stream;
}

int fakeibv_cuda_htod(void *cu_dev, uint64_t dst, const void *src, size_t len)
{
    fakeibv_CUstream st = fakeibv_cu_prepare(cu_dev);
    int r;

    if (st == NULL) {
        FAKEIBV_WARN("cannot make a CUDA stream for copies to device memory");
        return EIO;
    }
    r = fakeibv_cu.htod_async(dst, src, len, st);
    if (r == 0)
        r = fakeibv_cu.stream_sync(st);
    if (r != 0) {
        FAKEIBV_WARN("cuMemcpyHtoDAsync to 0x%llx (%zu bytes) failed: CUresult %d",
                     (unsigned long long)dst, len, r);
        return EIO;
    }
    return 0;
}

int fakeibv_cuda_dtoh(void *cu_dev, void *dst, uint64_t src, size_t len)
{
    fakeibv_CUstream st = fakeibv_cu_prepare(cu_dev);
    int r;

    if (st == NULL) {
        FAKEIBV_WARN("cannot make a CUDA stream for copies from device memory");
        return EIO;
    }
    r = fakeibv_cu.dtoh_async(dst, src, len, st);
    if (r == 0)
        r = fakeibv_cu.stream_sync(st);
    if (r != 0) {
        FAKEIBV_WARN("cuMemcpyDtoHAsync from 0x%llx (%zu bytes) failed: CUresult %d",
                     (unsigned long long)src, len, r);
        return EIO;
    }
    return 0;
}
