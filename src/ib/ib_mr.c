/*
 * The per-HCA registration cache (NCCL's ncclIbRegMrDmaBufInternal2):
 * ranges are registered page-rounded, and a range that lies inside a
 * cached entry registered with at least the access asked for shares its
 * MR. Entries keep exactly the access they were registered with (a wider
 * one than asked would let a peer write where the caller did not allow
 * it), so one range may have several entries, one per access set.
 * Host memory, CUDA pointers and DMA-BUF fds share the cache: an MR is
 * found by address (a DMA-BUF is registered at iova = its address), so a
 * buffer registered either way serves both. A FORCE_SO request never gets
 * an MR registered with relaxed ordering.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib.h"
#include "ib/ib_reg_check.h"

/* "LOCAL_WRITE|REMOTE_WRITE" of an access mask. */
static void ferry_ib_mr_access_str(int access, char *buf, size_t len)
{
    static const struct {
        int         bit;
        const char *name;
    } bits[] = {
        {IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE"},   {IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE"},
        {IBV_ACCESS_REMOTE_READ, "REMOTE_READ"},   {IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"},
        {IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING"},
    };
    size_t off = 0, i;

    buf[0] = '\0';
    for (i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if ((access & bits[i].bit) && off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off > 0 ? "|" : "",
                                    bits[i].name);
    if (buf[0] == '\0')
        snprintf(buf, len, "local read only");
}

/* What to check for a failed registration, by errno. */
static void ferry_ib_mr_advice(int err, char *buf, size_t len)
{
    struct rlimit rl;

    switch (err) {
    case ENOMEM:
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(buf, len, "the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is %llu "
                     "KiB: raise it to unlimited for RDMA (limits.conf memlock, or "
                     "--ulimit memlock=-1 for containers), or the HCA is out of MR resources",
                     (unsigned long long)rl.rlim_cur >> 10);
        else
            snprintf(buf, len, "the locked-memory limit (ulimit -l) is unlimited: the host or "
                     "the HCA is out of memory for registrations");
        break;
    case EFAULT:
        snprintf(buf, len, "the address range is not mapped in this process (a freed or "
                 "wrong buffer)");
        break;
    case EINVAL:
    case EOPNOTSUPP:
        snprintf(buf, len, "the device rejects these access flags or this range");
        break;
    default:
        snprintf(buf, len, "check `dmesg` for the driver's reason");
        break;
    }
}

/*
 * A dma-buf registration the driver refuses for its fd (the kernel's
 * dma_buf_get: EBADF for no file, EINVAL for a file that is no dma-buf or a
 * range outside it): the caller's argument, not the system.
 */
static int ferry_ib_mr_fd_refused(const ferry_ib_mr_req_t *rq, int err)
{
    return rq->fd >= 0 && (err == EBADF || err == EINVAL);
}

/* GPU memory fails for reasons of its own: say those first. */
static void ferry_ib_mr_gpu_advice(const ferry_ib_mr_req_t *rq, int err, char *buf, size_t len)
{
    char more[256];

    ferry_ib_mr_advice(err, more, sizeof(more));
    more[200] = '\0'; /* The GPU words come first; errno advice is short anyway. */
    if (ferry_ib_mr_fd_refused(rq, err)) {
        char what[320];

        ferry_ib_fd_words(rq->fd, what, sizeof(what));
        snprintf(buf, len, "the driver takes fd %d (%s) for no dma-buf of this range: pass "
                 "the fd cuMemGetHandleForAddressRange gave for it, with offset + size inside "
                 "it", rq->fd, what);
    } else if (rq->fd >= 0)
        snprintf(buf, len, "check that the kernel and HCA driver take dma-buf MRs (Linux 5.12+, "
                 "rdma-core 34+), that NCCL_DMABUF_ENABLE=0 is not the fix you want (NCCL then "
                 "registers through nvidia-peermem), and that the container sees "
                 "/dev/infiniband; else %s", more);
    else
        snprintf(buf, len, "check that nvidia-peermem is loaded (lsmod | grep nvidia_peermem; "
                 "modprobe nvidia-peermem) and matches the GPU driver, that the buffer is "
                 "cuMemAlloc'd device memory, and that the container sees /dev/infiniband; "
                 "or NCCL_DMABUF_ENABLE=1 with a dma-buf capable kernel; else %s", more);
}

static ferry_status_t ferry_ib_mr_fail(const ferry_ib_hca_t *hca, const char *verb,
                                       const ferry_ib_mr_req_t *rq, uintptr_t start, size_t len,
                                       int access, int err_no, char *err, size_t err_len)
{
    char flags[96], advice[768], type[96];
    const char *name = strerrorname_np(err_no);

    ferry_ib_mr_access_str(access, flags, sizeof(flags));
    if (rq->gpu)
        ferry_ib_mr_gpu_advice(rq, err_no, advice, sizeof(advice));
    else
        ferry_ib_mr_advice(err_no, advice, sizeof(advice));
    type[0] = '\0'; /* Host memory: no words, the common case. */
    if (rq->fd >= 0)
        snprintf(type, sizeof(type), ", GPU memory, DMA-BUF fd %d offset %llu", rq->fd,
                 (unsigned long long)rq->offset);
    else if (rq->gpu)
        snprintf(type, sizeof(type), ", GPU memory (CUDA pointer)");
    snprintf(err, err_len, "ib %s: %s of %p (%zu bytes%s; page-rounded 0x%lx, %zu bytes; %s) "
             "failed: %s (%s); %s", hca->name, verb, rq->addr, rq->size, type,
             (unsigned long)start, len, flags, strerror(err_no), name != NULL ? name : "?",
             advice);
    if (ferry_ib_mr_fd_refused(rq, err_no))
        return FERRY_ERR_ARGUMENT;
    return err_no == ENOMEM ? FERRY_ERR_NO_MEMORY : err_no == EFAULT ? FERRY_ERR_INVALID
                                                                     : FERRY_ERR_IO;
}

/*
 * An entry covering [start, end) with at least access, or NULL. force_so:
 * only an entry registered without relaxed ordering. Under mr_lock.
 */
static ferry_ib_mr_entry_t *ferry_ib_mr_find(ferry_ib_hca_t *hca, uintptr_t start, uintptr_t end,
                                             int access, int force_so)
{
    int i;

    /* Sorted by addr: no entry past one starting after start can cover it. */
    for (i = 0; i < hca->nmrs && hca->mrs[i].addr <= start; i++) {
        ferry_ib_mr_entry_t *e = &hca->mrs[i];

        if (e->addr + e->len >= end && (e->access & access) == access &&
            (!force_so || !e->relaxed))
            return e;
    }
    return NULL;
}

/* Insert keeping the array sorted by addr. Under mr_lock. */
static int ferry_ib_mr_insert(ferry_ib_hca_t *hca, const ferry_ib_mr_entry_t *entry)
{
    int i;

    if (hca->nmrs == hca->mrs_cap) {
        int cap = hca->mrs_cap > 0 ? 2 * hca->mrs_cap : 16;
        ferry_ib_mr_entry_t *grown = realloc(hca->mrs, (size_t)cap * sizeof(*grown));

        if (grown == NULL)
            return -1;
        hca->mrs = grown;
        hca->mrs_cap = cap;
    }
    for (i = hca->nmrs; i > 0 && hca->mrs[i - 1].addr > entry->addr; i--)
        hca->mrs[i] = hca->mrs[i - 1];
    hca->mrs[i] = *entry;
    hca->nmrs++;
    return 0;
}

/*
 * Register rq's range, page-rounded as NCCL rounds (host pages, for GPU
 * memory too: nvidia-peermem pins the whole 64 KiB GPU pages under the
 * range itself, and rounding further could cross the end of the
 * allocation). A DMA-BUF keeps its iova equal to the address, so its offset
 * moves back with the rounding, or the start is not rounded down when the
 * offset is too small for that. Under mr_lock.
 */
static struct ibv_mr *ferry_ib_mr_register(ferry_ib_hca_t *hca, const ferry_ib_mr_req_t *rq,
                                           uintptr_t start, size_t len, int access,
                                           const char **verb_p)
{
    uintptr_t shift = (uintptr_t)rq->addr - start;

    if (rq->fd >= 0) {
        *verb_p = "ibv_reg_dmabuf_mr";
        if (ferry_ibv.reg_dmabuf_mr == NULL) {
            errno = EOPNOTSUPP;
            return NULL;
        }
        return ferry_ibv.reg_dmabuf_mr(hca->pd, rq->offset - shift, len, start, rq->fd, access);
    }
    if (access & IBV_ACCESS_RELAXED_ORDERING) {
        *verb_p = "ibv_reg_mr_iova2";
        return ferry_ibv.reg_mr_iova2(hca->pd, (void *)start, len, start, (unsigned)access);
    }
    *verb_p = "ibv_reg_mr";
    return ferry_ibv.reg_mr(hca->pd, (void *)start, len, access);
}

ferry_status_t ferry_ib_mr_get_ex(ferry_ib_hca_t *hca, const ferry_ib_mr_req_t *rq,
                                  struct ibv_mr **mr_p, char *err, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)rq->addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)rq->addr + (rq->size > 0 ? rq->size : 1) + page - 1) & ~(page - 1);
    int relaxed = hca->relaxed_ordering && !rq->force_so;
    int access = relaxed ? rq->access | IBV_ACCESS_RELAXED_ORDERING : rq->access;
    ferry_ib_mr_entry_t entry, *e;
    ferry_status_t status = FERRY_OK;
    const char *verb = "ibv_reg_mr";

    if (rq->fd >= 0 && rq->offset < (uintptr_t)rq->addr - start)
        start = (uintptr_t)rq->addr;
    pthread_mutex_lock(&hca->mr_lock);
    e = ferry_ib_mr_find(hca, start, end, rq->access, rq->force_so);
    if (e != NULL) {
        e->refs++;
        *mr_p = e->mr;
        goto out_unlock;
    }
    memset(&entry, 0, sizeof(entry));
    entry.addr = start;
    entry.len = end - start;
    entry.access = rq->access;
    entry.relaxed = relaxed;
    entry.refs = 1;
    entry.mr = ferry_ib_mr_register(hca, rq, start, entry.len, access, &verb);
    if (entry.mr == NULL) {
        status = ferry_ib_mr_fail(hca, verb, rq, start, entry.len, access, errno, err, len);
        goto out_unlock;
    }
    if (ferry_ib_mr_insert(hca, &entry) != 0) {
        ferry_ibv.dereg_mr(entry.mr);
        snprintf(err, len, "ib %s: out of memory growing the registration cache to %d entries",
                 hca->name, hca->nmrs + 1);
        status = FERRY_ERR_NO_MEMORY;
        goto out_unlock;
    }
    *mr_p = entry.mr;
out_unlock:
    pthread_mutex_unlock(&hca->mr_lock);
    return status;
}

ferry_status_t ferry_ib_mr_get(ferry_ib_hca_t *hca, void *addr, size_t size, int access,
                               int force_so, struct ibv_mr **mr_p, char *err, size_t len)
{
    ferry_ib_mr_req_t rq = {addr, size, access, force_so, -1, 0, 0};

    return ferry_ib_mr_get_ex(hca, &rq, mr_p, err, len);
}

void ferry_ib_mr_put(ferry_ib_hca_t *hca, struct ibv_mr *mr)
{
    struct ibv_mr *dead = NULL;
    int i, found;

    pthread_mutex_lock(&hca->mr_lock);
    for (i = 0; i < hca->nmrs && hca->mrs[i].mr != mr; i++)
        ;
    found = i < hca->nmrs;
    if (found && --hca->mrs[i].refs == 0) {
        dead = mr;
        memmove(&hca->mrs[i], &hca->mrs[i + 1], (size_t)(hca->nmrs - i - 1) * sizeof(hca->mrs[0]));
        hca->nmrs--;
    }
    pthread_mutex_unlock(&hca->mr_lock);
    if (!found) {
        FERRY_WARN("ib %s: deregistration of MR %p that the cache does not hold (already "
                   "deregistered?); ignored", hca->name, (void *)mr);
        return;
    }
    /* Outside the lock: a deregistration can take milliseconds on a large range. */
    if (dead != NULL && ferry_ibv.dereg_mr(dead) != 0)
        FERRY_WARN("ib %s: ibv_dereg_mr failed: %s; the memory stays pinned", hca->name,
                   strerror(errno));
}
