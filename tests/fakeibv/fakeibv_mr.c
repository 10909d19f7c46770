/*
 * fakeibv protection domains, memory regions and the key table.
 *
 * lkey == rkey, as on mlx5. A key is (slot << 8 | tag): the slot finds the
 * MR in O(1) and the random tag makes a stale or guessed key fail the
 * check, as a real HCA's key variant does. Access rules follow the IB spec
 * (C10-xx: remote write/atomic need local write) and rdma-core's checks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fakeibv_dma.h"
#include "fakeibv_internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static pthread_rwlock_t fakeibv_mr_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct fakeibv_mr **fakeibv_mr_tbl; /* Slot 0 unused, so keys are never 0. */
static uint32_t fakeibv_mr_cap;
static uint32_t fakeibv_mr_next;           /* Search start for a free slot. */

FAKEIBV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct fakeibv_pd *pd = calloc(1, sizeof(*pd));

    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->pd.context = context;
    pd->pd.handle = 1;
    fakeibv_live_add(&fakeibv_live.pds, 1);
    return &pd->pd;
}

FAKEIBV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    fakeibv_live_add(&fakeibv_live.pds, -1);
    return 0;
}

static uint8_t fakeibv_key_tag(void)
{
    uint8_t t = 0;

    while (t == 0)
        if (getrandom(&t, 1, 0) != 1)
            t = 0x5a;
    return t;
}

static int fakeibv_mr_insert(struct fakeibv_mr *mr)
{
    uint32_t i, cap = fakeibv_config()->max_mr + 1;

    pthread_rwlock_wrlock(&fakeibv_mr_lock);
    if (fakeibv_mr_tbl == NULL) {
        fakeibv_mr_tbl = calloc(cap, sizeof(*fakeibv_mr_tbl));
        if (fakeibv_mr_tbl == NULL) {
            pthread_rwlock_unlock(&fakeibv_mr_lock);
            return ENOMEM;
        }
        fakeibv_mr_cap = cap;
        fakeibv_mr_next = 1;
    }
    for (i = 0; i < fakeibv_mr_cap - 1; i++) {
        uint32_t slot = 1 + (fakeibv_mr_next - 1 + i) % (fakeibv_mr_cap - 1);

        if (fakeibv_mr_tbl[slot] == NULL) {
            fakeibv_mr_tbl[slot] = mr;
            mr->slot = slot;
            mr->mr.lkey = mr->mr.rkey = (slot << 8) | fakeibv_key_tag();
            fakeibv_mr_next = slot + 1;
            pthread_rwlock_unlock(&fakeibv_mr_lock);
            return 0;
        }
    }
    pthread_rwlock_unlock(&fakeibv_mr_lock);
    return ENOMEM; /* max_mr reached, as the HCA would say. */
}

/* Shared tail of every registration verb. `addr` is the process pointer,
 * `iova` the address SGEs and peers will use. */
static struct ibv_mr *fakeibv_mr_create(struct ibv_pd *pd, void *addr, size_t length,
                                        uint64_t iova, unsigned int access, int dmabuf)
{
    struct fakeibv_mr *mr;
    int rc;

    access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE; /* Optional bits may be ignored. */
    rc = fakeibv_fault_check(FAKEIBV_FAULT_REG_MR);
    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    if (pd == NULL || length == 0 || length > fakeibv_config()->max_mr_size) {
        errno = EINVAL;
        return NULL;
    }
    /* IB spec: remote write or atomic access requires local write. */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    /* The kernel's ib_umem_get: a range whose (page-rounded) end wraps is EINVAL. */
    if ((uintptr_t)addr + length < (uintptr_t)addr ||
        (uintptr_t)addr + length > UINTPTR_MAX - 4095) {
        errno = EINVAL;
        return NULL;
    }
    if (!dmabuf && addr == NULL) {
        errno = EFAULT;
        return NULL;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = 1;
    mr->iova = iova;
    mr->access = (int)access;
    mr->is_cuda = fakeibv_cuda_is_device_ptr((uint64_t)(uintptr_t)addr, &mr->cu_ctx);
    rc = fakeibv_mr_insert(mr);
    if (rc != 0) {
        free(mr);
        errno = rc;
        return NULL;
    }
    fakeibv_live_add(&fakeibv_live.mrs, 1);
    FAKEIBV_TRACE("reg_mr %p+%zu iova 0x%llx access 0x%x key 0x%x%s", addr, length,
                  (unsigned long long)iova, access, mr->mr.lkey, mr->is_cuda ? " (cuda)" : "");
    return &mr->mr;
}

FAKEIBV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                               uint64_t iova, unsigned int access)
{
    return fakeibv_mr_create(pd, addr, length, iova, access, 0);
}

FAKEIBV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return fakeibv_mr_create(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned)access, 0);
}

FAKEIBV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                                              uint64_t iova, int access)
{
    return fakeibv_mr_create(pd, addr, length, iova, (unsigned)access, 0);
}

/*
 * The kernel's dma_buf_get: EBADF for an fd that is no open file, EINVAL for
 * a file that is no dma-buf. The dma-bufs here are tests/fakecuda's (a memfd
 * of that name, as cuMemGetHandleForAddressRange makes them) and, should a
 * real exporter hand one in, the kernel's own.
 */
static int fakeibv_dmabuf_fd_check(int fd)
{
    static const char *const names[] = {"/memfd:fakecuda-dmabuf", "anon_inode:dmabuf",
                                        "/dmabuf:"};
    char path[64], target[256];
    struct stat st;
    ssize_t n;
    size_t i;

    if (fd < 0 || fstat(fd, &st) != 0)
        return EBADF;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0)
        return EINVAL;
    target[n] = '\0';
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strncmp(target, names[i], strlen(names[i])) == 0)
            return 0;
    return EINVAL;
}

/*
 * DMA-BUF: the fake cannot map the buffer, but every consumer we know
 * (NCCL) passes the buffer's own virtual address as iova, so the MR is
 * registered at iova in this process. NCCL probes support with fd -1 and
 * treats any errno but EOPNOTSUPP/EPROTONOSUPPORT as "supported".
 */
FAKEIBV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                                uint64_t iova, int fd, int access)
{
    if (!fakeibv_config()->dmabuf) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    errno = fakeibv_dmabuf_fd_check(fd);
    if (errno != 0)
        return NULL;
    return fakeibv_mr_create(pd, (void *)(uintptr_t)iova, length, iova, (unsigned)access, 1);
}

FAKEIBV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct fakeibv_mr *mr = (struct fakeibv_mr *)ibmr;

    if (mr == NULL)
        return EINVAL;
    /* Waits for any transfer still reading or writing the region. */
    pthread_rwlock_wrlock(&fakeibv_mr_lock);
    fakeibv_mr_tbl[mr->slot] = NULL;
    pthread_rwlock_unlock(&fakeibv_mr_lock);
    free(mr);
    fakeibv_live_add(&fakeibv_live.mrs, -1);
    return 0;
}

FAKEIBV_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                                size_t length, int access)
{
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}

enum fakeibv_mr_check fakeibv_mr_get(uint32_t key, struct ibv_pd *pd, uint64_t addr,
                                     uint64_t len, int need_access, struct fakeibv_mr **mr_p)
{
    uint32_t slot = key >> 8;
    struct fakeibv_mr *mr;
    enum fakeibv_mr_check rc = FAKEIBV_MR_OK;

    pthread_rwlock_rdlock(&fakeibv_mr_lock);
    mr = slot < fakeibv_mr_cap ? fakeibv_mr_tbl[slot] : NULL;
    if (mr == NULL || mr->mr.lkey != key)
        rc = FAKEIBV_MR_BAD_KEY;
    else if (pd != NULL && mr->mr.pd != pd)
        rc = FAKEIBV_MR_BAD_PD;
    else if (addr < mr->iova || len > mr->mr.length || addr - mr->iova > mr->mr.length - len)
        rc = FAKEIBV_MR_BAD_RANGE;
    else if ((mr->access & need_access) != need_access)
        rc = FAKEIBV_MR_BAD_ACCESS;
    if (rc != FAKEIBV_MR_OK) {
        pthread_rwlock_unlock(&fakeibv_mr_lock);
        return rc;
    }
    *mr_p = mr;
    return FAKEIBV_MR_OK;
}

void fakeibv_mr_put(void)
{
    pthread_rwlock_unlock(&fakeibv_mr_lock);
}

static uint64_t fakeibv_mr_local(const struct fakeibv_mr *mr, uint64_t addr)
{
    return (uint64_t)(uintptr_t)mr->mr.addr + (addr - mr->iova);
}

#define FAKEIBV_BOUNCE (1u << 20)
static pthread_key_t fakeibv_bounce_key;
static pthread_once_t fakeibv_bounce_once = PTHREAD_ONCE_INIT;

static void fakeibv_bounce_key_init(void)
{
    /* The destructor frees a thread's buffer when the thread ends. */
    pthread_key_create(&fakeibv_bounce_key, free);
}

/* One staging buffer per transfer thread, for device memory only. */
static char *fakeibv_bounce_buf(void)
{
    char *b;

    pthread_once(&fakeibv_bounce_once, fakeibv_bounce_key_init);
    b = pthread_getspecific(fakeibv_bounce_key);
    if (b == NULL) {
        b = malloc(FAKEIBV_BOUNCE);
        if (b != NULL)
            pthread_setspecific(fakeibv_bounce_key, b);
    }
    return b;
}

int fakeibv_mem_from_fd(const struct fakeibv_mr *mr, uint64_t addr, int fd, size_t len)
{
    uint64_t dst = fakeibv_mr_local(mr, addr);
    char *b;

    if (!mr->is_cuda) {
        int rc;

        fakeibv_dma_begin();
        rc = fakeibv_io_read(fd, (void *)(uintptr_t)dst, len);
        fakeibv_dma_end();
        return rc;
    }
    b = fakeibv_bounce_buf();
    if (b == NULL)
        return ENOMEM;
    while (len > 0) {
        size_t chunk = len < FAKEIBV_BOUNCE ? len : FAKEIBV_BOUNCE;
        int rc = fakeibv_io_read(fd, b, chunk);

        if (rc == 0)
            rc = fakeibv_cuda_htod(mr->cu_ctx, dst, b, chunk);
        if (rc != 0)
            return rc;
        dst += chunk;
        len -= chunk;
    }
    return 0;
}

int fakeibv_mem_to_fd(const struct fakeibv_mr *mr, uint64_t addr, int fd, size_t len)
{
    uint64_t src = fakeibv_mr_local(mr, addr);
    char *b;

    if (!mr->is_cuda) {
        int rc;

        fakeibv_dma_begin();
        rc = fakeibv_io_write(fd, (const void *)(uintptr_t)src, len);
        fakeibv_dma_end();
        return rc;
    }
    b = fakeibv_bounce_buf();
    if (b == NULL)
        return ENOMEM;
    while (len > 0) {
        size_t chunk = len < FAKEIBV_BOUNCE ? len : FAKEIBV_BOUNCE;
        int rc = fakeibv_cuda_dtoh(mr->cu_ctx, b, src, chunk);

        if (rc == 0)
            rc = fakeibv_io_write(fd, b, chunk);
        if (rc != 0)
            return rc;
        src += chunk;
        len -= chunk;
    }
    return 0;
}

/* Copies between local [p, p+len) and the remote pieces from roff on. */
static int fakeibv_pvm_host(void *p, size_t len, int pid, const struct iovec *riov, int nriov,
                            size_t roff, int to_remote)
{
    struct iovec l, r[16];
    int i = 0, nr;

    while (len > 0) {
        size_t want = 0, off = roff;
        ssize_t n;

        /* The pieces of [roff, roff+len), at most 16 at a time. */
        for (i = 0; i < nriov && off >= riov[i].iov_len; i++)
            off -= riov[i].iov_len;
        if (i == nriov)
            return EFAULT; /* Descriptor shorter than the request: caller's bug. */
        for (nr = 0; i < nriov && nr < 16 && want < len; i++, nr++) {
            size_t n1 = riov[i].iov_len - off;

            if (n1 > len - want)
                n1 = len - want;
            r[nr].iov_base = (char *)riov[i].iov_base + off;
            r[nr].iov_len = n1;
            want += n1;
            off = 0;
        }
        l.iov_base = p;
        l.iov_len = want;
        n = to_remote ? process_vm_writev(pid, &l, 1, r, (unsigned long)nr, 0)
                      : process_vm_readv(pid, &l, 1, r, (unsigned long)nr, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            return EFAULT; /* A partial transfer stops at the unmapped page. */
        p = (char *)p + n;
        len -= (size_t)n;
        roff += (size_t)n;
    }
    return 0;
}

int fakeibv_mem_pvm(const struct fakeibv_mr *mr, uint64_t addr, size_t len, int pid,
                    const struct iovec *riov, int nriov, size_t roff, int to_remote)
{
    uint64_t loc = fakeibv_mr_local(mr, addr);
    char *b;

    if (!mr->is_cuda) {
        int rc;

        fakeibv_dma_begin();
        rc = fakeibv_pvm_host((void *)(uintptr_t)loc, len, pid, riov, nriov, roff, to_remote);
        fakeibv_dma_end();
        return rc;
    }
    b = fakeibv_bounce_buf();
    if (b == NULL)
        return ENOMEM;
    while (len > 0) {
        size_t chunk = len < FAKEIBV_BOUNCE ? len : FAKEIBV_BOUNCE;
        int rc;

        if (to_remote) {
            rc = fakeibv_cuda_dtoh(mr->cu_ctx, b, loc, chunk);
            if (rc == 0)
                rc = fakeibv_pvm_host(b, chunk, pid, riov, nriov, roff, 1);
        } else {
            rc = fakeibv_pvm_host(b, chunk, pid, riov, nriov, roff, 0);
            if (rc == 0)
                rc = fakeibv_cuda_htod(mr->cu_ctx, loc, b, chunk);
        }
        if (rc != 0)
            return rc;
        loc += chunk;
        roff += chunk;
        len -= chunk;
    }
    return 0;
}
