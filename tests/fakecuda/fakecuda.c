/*
 * fakecuda: a stand-in libcuda.so.1 with the few driver calls ferry's GPU
 * staging makes (src/socket/sock_gpu.c), for machines without a GPU.
 *
 * It is stricter than a real GPU where that finds bugs:
 * - "device memory" is a PROT_NONE mapping: a CPU access to it (ferry
 *   treating a GPU pointer as host memory) is a SIGSEGV, not a silent pass.
 *   The bytes live in a second, writable mapping of the same memfd that only
 *   the copy calls use.
 * - an async copy runs at cuStreamSynchronize of its stream, not before: a
 *   copy nobody waited for is visibly missing.
 * - copies need a current context and a range inside one allocation.
 * Tests steer faults through fakecuda_* functions (fakecuda.h), found with
 * dlsym in the library the plugin opened.
 *
 * It also serves fakeibv's GPU mode in the same process (primary context,
 * pointer attributes, async copies on non-blocking streams), so a test of
 * ferry's ib backend on GPU memory has one libcuda.so.1 for both, and the
 * calls the ib backend's GPU path makes: cuDeviceGetAttribute (DMA-BUF
 * support, FAKECUDA_DMABUF=0 says none), cuMemGetHandleForAddressRange (a
 * DMA-BUF fd: a fresh memfd; fakeibv registers DMA-BUFs by address) and
 * cuFlushGPUDirectRDMAWrites (counted; a fault can be armed;
 * FAKECUDA_FLUSH_DELAY_US slows it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"

#define FAKECUDA_API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* The driver API subset it provides (signatures as in cuda.h). */
FAKECUDA_API CUresult cuInit(unsigned flags);
FAKECUDA_API CUresult cuGetErrorName(CUresult r, const char **s);
FAKECUDA_API CUresult cuGetErrorString(CUresult r, const char **s);
FAKECUDA_API CUresult cuDeviceGet(CUdevice *dev, int ordinal);
FAKECUDA_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
FAKECUDA_API CUresult cuCtxSetCurrent(CUcontext ctx);
FAKECUDA_API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size);
FAKECUDA_API CUresult cuMemFree_v2(CUdeviceptr p);
FAKECUDA_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p);
FAKECUDA_API CUresult cuMemHostAlloc(void **p, size_t size, unsigned flags);
FAKECUDA_API CUresult cuMemFreeHost(void *p);
FAKECUDA_API CUresult cuStreamCreate(void **out, unsigned flags);
FAKECUDA_API CUresult cuStreamDestroy_v2(void *stream);
FAKECUDA_API CUresult cuStreamSynchronize(void *stream);
FAKECUDA_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, void *stream);
FAKECUDA_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len,
                                           void *stream);
FAKECUDA_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t len);
FAKECUDA_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len);
FAKECUDA_API CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev);
FAKECUDA_API CUresult cuCtxGetCurrent(CUcontext *ctx);
FAKECUDA_API CUresult cuEventCreate(void **ev, unsigned flags);
FAKECUDA_API CUresult cuEventDestroy_v2(void *ev);
FAKECUDA_API CUresult cuEventRecord(void *ev, void *stream);
FAKECUDA_API CUresult cuEventQuery(void *ev);
FAKECUDA_API CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev);
FAKECUDA_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size,
                                                    int type, unsigned long long flags);
FAKECUDA_API CUresult cuFlushGPUDirectRDMAWrites(int target, int scope);

#define FAKECUDA_ATTR_CONTEXT        1
#define FAKECUDA_ATTR_MEMORY_TYPE    2
#define FAKECUDA_ATTR_DEVICE_ORDINAL 9
#define FAKECUDA_MEMORYTYPE_DEVICE   2
#define FAKECUDA_MAX_ALLOCS          256
#define FAKECUDA_STREAM_OPS          64

typedef struct fakecuda_alloc {
    uintptr_t dev;     /* PROT_NONE view handed out as the device address. */
    char     *backing; /* Writable view of the same pages. */
    size_t    size;    /* Asked for. */
    size_t    mapped;  /* Rounded to pages. */
} fakecuda_alloc_t;

typedef struct fakecuda_op {
    int       to_device;
    char     *host;
    uintptr_t dev;
    size_t    len;
} fakecuda_op_t;

/* A stream's queue: ops[done % N .. queued % N) wait for a synchronisation. */
typedef struct fakecuda_stream {
    uint64_t      magic;
    unsigned      flags;
    uint64_t      queued, done; /* Ops ever queued / ever run (or dropped by an error). */
    fakecuda_op_t ops[FAKECUDA_STREAM_OPS];
} fakecuda_stream_t;

#define FAKECUDA_STREAM_MAGIC 0x6d61657274736366ULL

static pthread_mutex_t fakecuda_lock = PTHREAD_MUTEX_INITIALIZER;
static fakecuda_alloc_t fakecuda_allocs[FAKECUDA_MAX_ALLOCS];
static int fakecuda_inited;
static int fakecuda_primary_ctx; /* Its address is the primary context... */
static int fakecuda_own_ctx[8];   /* ...these, contexts made with cuCtxCreate. */
static _Atomic int fakecuda_nctx;
static __thread void *fakecuda_current;
static _Atomic long fakecuda_copies_done, fakecuda_streams_live, fakecuda_blocking_streams;
static _Atomic long fakecuda_fail_after = -1; /* Copies that still succeed; -1: all. */
static _Atomic int fakecuda_sticky;            /* A failed copy poisons the context, as on a GPU. */
static _Atomic int fakecuda_fail_host_alloc;
static _Atomic int fakecuda_hold;               /* Event queries say "not ready" while set. */
static _Atomic long fakecuda_flush_calls, fakecuda_dmabuf_calls;
static _Atomic int fakecuda_flush_fail;          /* The next flush returns this CUresult. */

FAKECUDA_API long fakecuda_copies(void) { return atomic_load(&fakecuda_copies_done); }
FAKECUDA_API long fakecuda_streams(void) { return atomic_load(&fakecuda_streams_live); }
FAKECUDA_API long fakecuda_blocking(void) { return atomic_load(&fakecuda_blocking_streams); }
FAKECUDA_API void fakecuda_fail_copies_after(long n)
{
    atomic_store(&fakecuda_fail_after, n);
    if (n < 0)
        atomic_store(&fakecuda_sticky, 0);
}
FAKECUDA_API void fakecuda_fail_next_host_alloc(int on) { atomic_store(&fakecuda_fail_host_alloc, on); }
FAKECUDA_API void fakecuda_hold_copies(int on) { atomic_store(&fakecuda_hold, on); }
FAKECUDA_API long fakecuda_flushes(void) { return atomic_load(&fakecuda_flush_calls); }
FAKECUDA_API long fakecuda_dmabuf_fds(void) { return atomic_load(&fakecuda_dmabuf_calls); }
FAKECUDA_API void fakecuda_fail_next_flush(int r) { atomic_store(&fakecuda_flush_fail, r); }

FAKECUDA_API CUresult cuInit(unsigned flags)
{
    const char *nodev = getenv("FAKECUDA_NO_DEVICE");

    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodev != NULL && atoi(nodev) != 0)
        return CUDA_ERROR_NO_DEVICE;
    fakecuda_inited = 1;
    return CUDA_SUCCESS;
}

static const struct { CUresult code; const char *name, *text; } fakecuda_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static int fakecuda_error_index(CUresult r)
{
    size_t i;

    for (i = 0; i < sizeof(fakecuda_errors) / sizeof(fakecuda_errors[0]); i++)
        if (fakecuda_errors[i].code == r)
            return (int)i;
    return -1;
}

FAKECUDA_API CUresult cuGetErrorName(CUresult r, const char **s)
{
    int i = fakecuda_error_index(r);

    *s = i >= 0 ? fakecuda_errors[i].name : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKECUDA_API CUresult cuGetErrorString(CUresult r, const char **s)
{
    int i = fakecuda_error_index(r);

    *s = i >= 0 ? fakecuda_errors[i].text : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKECUDA_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = 0;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = &fakecuda_primary_ctx;
    return CUDA_SUCCESS;
}

static int fakecuda_is_ctx(const void *ctx)
{
    int i, n = atomic_load(&fakecuda_nctx);

    if (ctx == &fakecuda_primary_ctx)
        return 1;
    for (i = 0; i < n; i++)
        if (ctx == &fakecuda_own_ctx[i])
            return 1;
    return 0;
}

FAKECUDA_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (ctx != NULL && !fakecuda_is_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    fakecuda_current = ctx;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    *ctx = fakecuda_current;
    return CUDA_SUCCESS;
}

/* Like the driver: the new context becomes the calling thread's current one. */
FAKECUDA_API CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev)
{
    int i;

    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    i = atomic_fetch_add(&fakecuda_nctx, 1);
    if (i >= 8)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ctx = &fakecuda_own_ctx[i];
    fakecuda_current = *ctx;
    return CUDA_SUCCESS;
}

/* Device memory is reachable from every context of the process (unified addressing). */
static int fakecuda_need_ctx(void)
{
    return fakecuda_inited && fakecuda_current != NULL;
}

/* The allocation holding [p, p + len); NULL if none holds all of it. Under the lock. */
static fakecuda_alloc_t *fakecuda_find(uintptr_t p, size_t len)
{
    int i;

    for (i = 0; i < FAKECUDA_MAX_ALLOCS; i++) {
        fakecuda_alloc_t *a = &fakecuda_allocs[i];

        if (a->size != 0 && p >= a->dev && p - a->dev <= a->size && len <= a->size - (p - a->dev))
            return a;
    }
    return NULL;
}

FAKECUDA_API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t mapped = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
    void *dev, *backing;
    int fd, i;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    fd = memfd_create("fakecuda-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    dev = mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    backing = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (dev == MAP_FAILED || backing == MAP_FAILED) {
        if (dev != MAP_FAILED)
            munmap(dev, mapped);
        if (backing != MAP_FAILED)
            munmap(backing, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&fakecuda_lock);
    for (i = 0; i < FAKECUDA_MAX_ALLOCS && fakecuda_allocs[i].size != 0; i++)
        ;
    if (i == FAKECUDA_MAX_ALLOCS) {
        pthread_mutex_unlock(&fakecuda_lock);
        munmap(dev, mapped);
        munmap(backing, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fakecuda_allocs[i] = (fakecuda_alloc_t){(uintptr_t)dev, backing, size, mapped};
    pthread_mutex_unlock(&fakecuda_lock);
    *out = (CUdeviceptr)(uintptr_t)dev;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuMemFree_v2(CUdeviceptr p)
{
    fakecuda_alloc_t a;
    fakecuda_alloc_t *f;

    pthread_mutex_lock(&fakecuda_lock);
    f = fakecuda_find((uintptr_t)p, 0);
    if (f == NULL || f->dev != (uintptr_t)p) {
        pthread_mutex_unlock(&fakecuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    a = *f;
    memset(f, 0, sizeof(*f));
    pthread_mutex_unlock(&fakecuda_lock);
    munmap((void *)a.dev, a.mapped);
    munmap(a.backing, a.mapped);
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    fakecuda_alloc_t *a;

    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find((uintptr_t)p, 0);
    pthread_mutex_unlock(&fakecuda_lock);
    if (a == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* What the driver says of plain host memory. */
    switch (attr) {
    case FAKECUDA_ATTR_MEMORY_TYPE:
        *(unsigned *)data = FAKECUDA_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case FAKECUDA_ATTR_DEVICE_ORDINAL:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case FAKECUDA_ATTR_CONTEXT:
        /* Like NCCL's cuMem (VMM) buffers: no owning context. */
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

FAKECUDA_API CUresult cuMemHostAlloc(void **p, size_t size, unsigned flags)
{
    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (atomic_exchange(&fakecuda_fail_host_alloc, 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    return *p != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKECUDA_API CUresult cuMemFreeHost(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuStreamCreate(void **out, unsigned flags)
{
    fakecuda_stream_t *s;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = FAKECUDA_STREAM_MAGIC;
    s->flags = flags;
    atomic_fetch_add(&fakecuda_streams_live, 1);
    if ((flags & 1) == 0)
        atomic_fetch_add(&fakecuda_blocking_streams, 1);
    *out = s;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuStreamDestroy_v2(void *stream)
{
    fakecuda_stream_t *s = stream;

    if (s == NULL || s->magic != FAKECUDA_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    s->magic = 0;
    free(s);
    atomic_fetch_sub(&fakecuda_streams_live, 1);
    return CUDA_SUCCESS;
}

static CUresult fakecuda_queue(void *stream, int to_device, char *host, uintptr_t dev, size_t len)
{
    fakecuda_stream_t *s = stream;
    fakecuda_alloc_t *a;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (s == NULL || s->magic != FAKECUDA_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE; /* The NULL (legacy) stream is refused on purpose. */
    if (atomic_load(&fakecuda_sticky))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find(dev, len);
    pthread_mutex_unlock(&fakecuda_lock);
    if (a == NULL || host == NULL || s->queued - s->done == FAKECUDA_STREAM_OPS)
        return CUDA_ERROR_INVALID_VALUE;
    s->ops[s->queued++ % FAKECUDA_STREAM_OPS] = (fakecuda_op_t){to_device, host, dev, len};
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, void *stream)
{
    return fakecuda_queue(stream, 0, dst, (uintptr_t)src, len);
}

FAKECUDA_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len,
                                           void *stream)
{
    return fakecuda_queue(stream, 1, (char *)src, (uintptr_t)dst, len);
}

/* Run one queued copy: through the writable view, so the PROT_NONE one stays untouched. */
static CUresult fakecuda_run(const fakecuda_op_t *op)
{
    fakecuda_alloc_t *a;
    char *bytes;
    long left;

    do {
        left = atomic_load(&fakecuda_fail_after);
        if (left == 0) {
            atomic_store(&fakecuda_sticky, 1);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
    } while (left > 0 && !atomic_compare_exchange_weak(&fakecuda_fail_after, &left, left - 1));
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find(op->dev, op->len);
    bytes = a != NULL ? a->backing + (op->dev - a->dev) : NULL;
    pthread_mutex_unlock(&fakecuda_lock);
    if (bytes == NULL)
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* Freed while queued. */
    if (op->to_device)
        memcpy(bytes, op->host, op->len);
    else
        memcpy(op->host, bytes, op->len);
    atomic_fetch_add(&fakecuda_copies_done, 1);
    return CUDA_SUCCESS;
}

/*
 * Events: a query completes the work queued before the record, but only
 * from the second query on, so the caller's "not ready yet" path runs too.
 */
typedef struct fakecuda_event {
    uint64_t           magic;
    fakecuda_stream_t *stream; /* NULL: nothing recorded. */
    uint64_t           upto;   /* Complete once the stream ran this many ops. */
    int                polls;
} fakecuda_event_t;

/* Run a stream's queued ops until `upto` have run; the first error drops the rest up to there. */
static CUresult fakecuda_drain(fakecuda_stream_t *s, uint64_t upto)
{
    CUresult r = CUDA_SUCCESS;

    while (s->done < upto) {
        CUresult one = fakecuda_run(&s->ops[s->done % FAKECUDA_STREAM_OPS]);

        if (r == CUDA_SUCCESS)
            r = one;
        s->done++;
    }
    return r;
}

#define FAKECUDA_EVENT_MAGIC 0x746e657665616366ULL

FAKECUDA_API CUresult cuEventCreate(void **ev, unsigned flags)
{
    fakecuda_event_t *e;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FAKECUDA_EVENT_MAGIC;
    *ev = e;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuEventDestroy_v2(void *ev)
{
    fakecuda_event_t *e = ev;

    if (e == NULL || e->magic != FAKECUDA_EVENT_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuEventRecord(void *ev, void *stream)
{
    fakecuda_event_t *e = ev;
    fakecuda_stream_t *s = stream;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (e == NULL || e->magic != FAKECUDA_EVENT_MAGIC || s == NULL ||
        s->magic != FAKECUDA_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    e->stream = s;
    e->upto = s->queued;
    e->polls = 0;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuEventQuery(void *ev)
{
    fakecuda_event_t *e = ev;
    fakecuda_stream_t *s;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (e == NULL || e->magic != FAKECUDA_EVENT_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    s = e->stream;
    if (s == NULL)
        return CUDA_SUCCESS;
    if (s->done < e->upto && (e->polls++ == 0 || atomic_load(&fakecuda_hold)))
        return CUDA_ERROR_NOT_READY;
    /* What was queued after the record stays queued. A faulted context answers every query. */
    if (fakecuda_drain(s, e->upto) != CUDA_SUCCESS || atomic_load(&fakecuda_sticky))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    return CUDA_SUCCESS;
}

FAKECUDA_API CUresult cuStreamSynchronize(void *stream)
{
    fakecuda_stream_t *s = stream;
    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (s == NULL || s->magic != FAKECUDA_STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    return fakecuda_drain(s, s->queued);
}

/* Synchronous copies, for tests to fill and read device memory. */
FAKECUDA_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t len)
{
    fakecuda_op_t op = {1, (char *)src, (uintptr_t)dst, len};
    fakecuda_alloc_t *a;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find(op.dev, len);
    if (a != NULL)
        memcpy(a->backing + (op.dev - a->dev), src, len);
    pthread_mutex_unlock(&fakecuda_lock);
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKECUDA_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len)
{
    fakecuda_alloc_t *a;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find((uintptr_t)src, len);
    if (a != NULL)
        memcpy(dst, a->backing + ((uintptr_t)src - a->dev), len);
    pthread_mutex_unlock(&fakecuda_lock);
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

#define FAKECUDA_ATTR_DMA_BUF_SUPPORTED       124
#define FAKECUDA_MEM_RANGE_HANDLE_DMA_BUF_FD  1
#define FAKECUDA_FLUSH_TARGET_CURRENT_CTX     0
#define FAKECUDA_FLUSH_TO_OWNER               100
#define FAKECUDA_FLUSH_TO_ALL_DEVICES         200

/* Only what ferry asks; every other attribute is "not supported" so a new caller is noticed. */
FAKECUDA_API CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev)
{
    const char *dmabuf = getenv("FAKECUDA_DMABUF");

    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (attr != FAKECUDA_ATTR_DMA_BUF_SUPPORTED)
        return CUDA_ERROR_NOT_SUPPORTED;
    *value = dmabuf == NULL || atoi(dmabuf) != 0;
    return CUDA_SUCCESS;
}

/* A DMA-BUF fd for a range inside one allocation: a fresh memfd the caller closes. */
FAKECUDA_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size,
                                                    int type, unsigned long long flags)
{
    fakecuda_alloc_t *a;
    int fd;

    if (!fakecuda_inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (type != FAKECUDA_MEM_RANGE_HANDLE_DMA_BUF_FD || flags != 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fakecuda_lock);
    a = fakecuda_find((uintptr_t)p, size);
    pthread_mutex_unlock(&fakecuda_lock);
    if (a == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle = fd;
    atomic_fetch_add(&fakecuda_dmabuf_calls, 1);
    return CUDA_SUCCESS;
}

/* Like the driver: needs a current context and the documented target and scope. */
FAKECUDA_API CUresult cuFlushGPUDirectRDMAWrites(int target, int scope)
{
    const char *delay;
    int fail;

    if (!fakecuda_need_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (target != FAKECUDA_FLUSH_TARGET_CURRENT_CTX ||
        (scope != FAKECUDA_FLUSH_TO_OWNER && scope != FAKECUDA_FLUSH_TO_ALL_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    fail = atomic_exchange(&fakecuda_flush_fail, 0);
    if (fail != 0)
        return fail;
    /* FAKECUDA_FLUSH_DELAY_US: a driver whose flush is slow (tests of the automatic choice). */
    delay = getenv("FAKECUDA_FLUSH_DELAY_US");
    if (delay != NULL && atoi(delay) > 0)
        usleep((useconds_t)atoi(delay));
    atomic_fetch_add(&fakecuda_flush_calls, 1);
    return CUDA_SUCCESS;
}
