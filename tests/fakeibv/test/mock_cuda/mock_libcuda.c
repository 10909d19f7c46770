/*
 * A stand-in libcuda.so.1 for testing fakeibv's GPU mode on machines with
 * no GPU. It implements only the driver calls fakeibv makes, plus two test
 * helpers. "Device memory" is a memfd mapped twice: PROT_NONE at the
 * address the program sees (so any CPU access by fakeibv to device memory
 * crashes, as it would on a real GPU) and read-write at a shadow address
 * that only the copy functions here use.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MOCK_EXPORT __attribute__((visibility("default")))
#define MOCK_MAX 64
#define CU_OK 0
#define CU_ERROR_INVALID_VALUE 1
#define CU_ERROR_INVALID_CONTEXT 201

struct mock_region {
    uintptr_t base;   /* What the program sees (PROT_NONE). */
    char *shadow;     /* Same pages, read-write, for the copies. */
    size_t size;
};

static struct mock_region mock_regions[MOCK_MAX];
static int mock_nregions;
static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread void *mock_current_ctx;
static int mock_primary_ctx; /* Its address is the context handle. */

/* Test helpers. */
MOCK_EXPORT void *mockcuda_malloc(size_t size);
MOCK_EXPORT void *mockcuda_shadow(const void *dptr);
/* The driver API subset fakeibv uses (prototypes simplified to plain C). */
MOCK_EXPORT int cuInit(unsigned flags);
MOCK_EXPORT int cuPointerGetAttribute(void *data, int attr, unsigned long long ptr);
MOCK_EXPORT int cuDeviceGet(int *dev, int ordinal);
MOCK_EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int dev);
MOCK_EXPORT int cuCtxSetCurrent(void *ctx);
MOCK_EXPORT int cuStreamCreate(void **stream, unsigned flags);
MOCK_EXPORT int cuStreamSynchronize(void *stream);
MOCK_EXPORT int cuStreamDestroy_v2(void *stream);
MOCK_EXPORT int mockcuda_live_streams(void);
MOCK_EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s);
MOCK_EXPORT int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *s);

void *mockcuda_malloc(size_t size)
{
    int fd = memfd_create("mockcuda", 0);
    void *base, *shadow;

    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        return NULL;
    base = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
    shadow = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED || shadow == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&mock_lock);
    mock_regions[mock_nregions].base = (uintptr_t)base;
    mock_regions[mock_nregions].shadow = shadow;
    mock_regions[mock_nregions].size = size;
    mock_nregions++;
    pthread_mutex_unlock(&mock_lock);
    return base;
}

static char *mock_find(uintptr_t p, size_t n)
{
    char *r = NULL;
    int i;

    pthread_mutex_lock(&mock_lock);
    for (i = 0; i < mock_nregions; i++) {
        struct mock_region *m = &mock_regions[i];

        if (p >= m->base && p - m->base <= m->size && n <= m->size - (p - m->base)) {
            r = m->shadow + (p - m->base);
            break;
        }
    }
    pthread_mutex_unlock(&mock_lock);
    return r;
}

void *mockcuda_shadow(const void *dptr)
{
    return mock_find((uintptr_t)dptr, 0);
}

int cuInit(unsigned flags)
{
    return CU_OK;
}

int cuPointerGetAttribute(void *data, int attr, unsigned long long ptr)
{
    if (mock_find((uintptr_t)ptr, 1) == NULL)
        return CU_ERROR_INVALID_VALUE; /* Host memory CUDA never saw. */
    if (attr == 2) /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
        *(unsigned int *)data = 2; /* CU_MEMORYTYPE_DEVICE */
    else if (attr == 9) /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
        *(int *)data = 0;
    else
        return CU_ERROR_INVALID_VALUE;
    return CU_OK;
}

int cuDeviceGet(int *dev, int ordinal)
{
    *dev = ordinal;
    return ordinal == 0 ? CU_OK : CU_ERROR_INVALID_VALUE;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    *ctx = &mock_primary_ctx;
    return CU_OK;
}

int cuCtxSetCurrent(void *ctx)
{
    mock_current_ctx = ctx;
    return CU_OK;
}

static int mock_streams[64];
static int mock_nstreams; /* Live streams: create minus destroy. */

int cuStreamCreate(void **stream, unsigned flags)
{
    static int next;

    if (mock_current_ctx == NULL)
        return CU_ERROR_INVALID_CONTEXT;
    if (flags != 1) /* fakeibv must never use a blocking stream. */
        return CU_ERROR_INVALID_VALUE;
    *stream = &mock_streams[__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % 64];
    __atomic_add_fetch(&mock_nstreams, 1, __ATOMIC_RELAXED);
    return CU_OK;
}

int cuStreamDestroy_v2(void *stream)
{
    __atomic_sub_fetch(&mock_nstreams, 1, __ATOMIC_RELAXED);
    return CU_OK;
}

int mockcuda_live_streams(void)
{
    return __atomic_load_n(&mock_nstreams, __ATOMIC_RELAXED);
}

int cuStreamSynchronize(void *stream)
{
    return mock_current_ctx != NULL ? CU_OK : CU_ERROR_INVALID_CONTEXT;
}

int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s)
{
    char *d = mock_find((uintptr_t)dst, n);

    if (mock_current_ctx == NULL)
        return CU_ERROR_INVALID_CONTEXT;
    if (d == NULL || s == NULL)
        return CU_ERROR_INVALID_VALUE;
    memcpy(d, src, n);
    return CU_OK;
}

int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *s)
{
    char *p = mock_find((uintptr_t)src, n);

    if (mock_current_ctx == NULL)
        return CU_ERROR_INVALID_CONTEXT;
    if (p == NULL || s == NULL)
        return CU_ERROR_INVALID_VALUE;
    memcpy(dst, p, n);
    return CU_OK;
}
