/*
 * The per-HCA registration cache (NCCL's ncclIbRegMrDmaBufInternal2):
 * ranges are registered page-rounded, and a range that lies inside a
 * cached entry registered with at least the access asked for shares its
 * MR. Entries keep exactly the access they were registered with (a wider
 * one than asked would let a peer write where the caller did not allow
 * it), so one range may have several entries, one per access set.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib.h"

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

static ferry_status_t ferry_ib_mr_fail(const ferry_ib_hca_t *hca, const char *verb, void *addr,
                                       size_t size, uintptr_t start, size_t len, int access,
                                       int err_no, char *err, size_t err_len)
{
    char flags[96], advice[256];
    const char *name = strerrorname_np(err_no);

    ferry_ib_mr_access_str(access, flags, sizeof(flags));
    ferry_ib_mr_advice(err_no, advice, sizeof(advice));
    snprintf(err, err_len, "ib %s: %s of %p (%zu bytes; page-rounded 0x%lx, %zu bytes; %s) "
             "failed: %s (%s); %s", hca->name, verb, addr, size, (unsigned long)start, len, flags,
             strerror(err_no), name != NULL ? name : "?", advice);
    return err_no == ENOMEM ? FERRY_ERR_NO_MEMORY : err_no == EFAULT ? FERRY_ERR_INVALID
                                                                     : FERRY_ERR_IO;
}

/* An entry covering [start, end) with at least access, or NULL. Under mr_lock. */
static ferry_ib_mr_entry_t *ferry_ib_mr_find(ferry_ib_hca_t *hca, uintptr_t start, uintptr_t end,
                                             int access)
{
    int i;

    /* Sorted by addr: no entry past one starting after start can cover it. */
    for (i = 0; i < hca->nmrs && hca->mrs[i].addr <= start; i++) {
        ferry_ib_mr_entry_t *e = &hca->mrs[i];

        if (e->addr + e->len >= end && (e->access & access) == access)
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

ferry_status_t ferry_ib_mr_get(ferry_ib_hca_t *hca, void *addr, size_t size, int access,
                               int force_so, struct ibv_mr **mr_p, char *err, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + (size > 0 ? size : 1) + page - 1) & ~(page - 1);
    int relaxed = hca->relaxed_ordering && !force_so;
    ferry_ib_mr_entry_t entry, *e;
    ferry_status_t status = FERRY_OK;

    pthread_mutex_lock(&hca->mr_lock);
    e = ferry_ib_mr_find(hca, start, end, access);
    if (e != NULL) {
        e->refs++;
        *mr_p = e->mr;
        goto out_unlock;
    }
    memset(&entry, 0, sizeof(entry));
    entry.addr = start;
    entry.len = end - start;
    entry.access = access;
    entry.refs = 1;
    if (relaxed)
        entry.mr = ferry_ibv.reg_mr_iova2(hca->pd, (void *)start, entry.len, start,
                                          (unsigned)(access | IBV_ACCESS_RELAXED_ORDERING));
    else
        entry.mr = ferry_ibv.reg_mr(hca->pd, (void *)start, entry.len, access);
    if (entry.mr == NULL) {
        status = ferry_ib_mr_fail(hca, relaxed ? "ibv_reg_mr_iova2" : "ibv_reg_mr", addr, size,
                                  start, entry.len,
                                  relaxed ? access | IBV_ACCESS_RELAXED_ORDERING : access, errno,
                                  err, len);
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
