/*
 * The socket backend's one-sided operations (core/rma.h): each put, get or
 * flush is checked where it is posted (the rank, the caller's regions, and
 * the range against the size the target registered), becomes a request of
 * the target's ring and a frame in its queue (sock_rma_progress.c). One
 * towards the caller's own rank is applied at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "proxy/handle.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

/* The group, or NULL with a WARN. */
static ferry_sock_rma_group_t *ferry_sock_rma_group(void *group, const char *op)
{
    ferry_sock_rma_group_t *g = group;

    if (g == NULL || g->magic != FERRY_SOCK_RMA_GROUP_MAGIC) {
        FERRY_WARN_LIMITED("RMA %s(%p): not an open RMA context of ferry's socket backend "
                           "(destroyed or closed already?)", op, group);
        return NULL;
    }
    return g;
}

/* A region handle of ours and the range in it; NULL and a WARN if either is wrong. */
static ferry_sock_rma_mr_t *ferry_sock_rma_local(ferry_sock_rma_group_t *g, const char *op,
                                                 const char *role, void *mhandle, uint64_t off,
                                                 uint64_t size)
{
    ferry_sock_rma_mr_t *mr = mhandle;
    char who[160];

    ferry_sock_rma_describe(g, who, sizeof(who));
    if (mr == NULL || mr->magic != FERRY_SOCK_RMA_MR_MAGIC ||
        ferry_sock_rma_region(g, mr->index) != mr) {
        FERRY_WARN_LIMITED("RMA %s: %s: the %s handle %p is no live region of this group; pass "
                           "a handle regMrSym returned for this group, before deregMrSym", op,
                           who, role, mhandle);
        return NULL;
    }
    if (off > mr->size || size > mr->size - off) {
        FERRY_WARN_LIMITED("RMA %s: %s: %s range offset %llu + size %llu is beyond region %u's "
                           "%zu bytes here", op, who, role, (unsigned long long)off,
                           (unsigned long long)size, mr->index, mr->size);
        return NULL;
    }
    return mr;
}

/* The target's region index of the same registration holds [off, off + size)? */
static ferry_status_t ferry_sock_rma_remote_fits(ferry_sock_rma_group_t *g,
                                                 ferry_sock_rma_peer_t *p, const char *op,
                                                 const char *role, uint32_t index,
                                                 uint64_t off, uint64_t size)
{
    const uint64_t *rec = ferry_rma_regs_find(&p->reg_size, index, sizeof(*rec));
    uint64_t have = rec != NULL ? *rec : 0;
    char who[160];

    if (!g->source_check || (off <= have && size <= have - off))
        return FERRY_OK;
    ferry_sock_rma_describe(g, who, sizeof(who));
    FERRY_WARN_LIMITED("RMA %s: %s: refused: %s range offset %llu + size %llu is beyond the "
                       "%llu bytes rank %d (%s) registered as region %u; nothing was sent; keep "
                       "offset + size within each rank's registered size", op, who, role,
                       (unsigned long long)off, (unsigned long long)size,
                       (unsigned long long)have, p->rank, p->addr, index);
    return FERRY_ERR_USAGE;
}

/* The peer an operation goes to, or NULL with a WARN and *st_p set. */
static ferry_sock_rma_peer_t *ferry_sock_rma_target(ferry_sock_rma_group_t *g, const char *op,
                                                    uint32_t rank, ferry_status_t *st_p)
{
    ferry_sock_rma_peer_t *p;
    char who[160];

    ferry_sock_rma_describe(g, who, sizeof(who));
    if (rank >= (uint32_t)g->nranks) {
        FERRY_WARN_LIMITED("RMA %s: %s: rank %u is out of range: the group has ranks 0..%d",
                           op, who, rank, g->nranks - 1);
        *st_p = FERRY_ERR_ARGUMENT;
        return NULL;
    }
    p = &g->peers[rank];
    if (p->dead || p->bye) {
        FERRY_WARN_LIMITED("RMA %s: %s: rank %u (%s) %s; nothing more can go to it; "
                           "queryLastError reports a failed peer", op, who, rank, p->addr,
                           p->dead ? "failed earlier (see the WARN about its connection)"
                                   : "closed its group");
        *st_p = FERRY_ERR_REMOTE;
        return NULL;
    }
    return p;
}

/* A request of p's ring for one operation, started; NULL with a WARN when 32 are in flight. */
static ferry_px_req_t *ferry_sock_rma_post(ferry_sock_rma_group_t *g, ferry_sock_rma_peer_t *p,
                                           const char *op, char *buf, size_t size)
{
    ferry_px_sub_t sub = { .buf = buf, .capacity = size };
    ferry_px_req_t *req = ferry_px_ring_post(&p->ring, 1, &sub, 0, 1, size);
    char who[160];

    if (req == NULL) {
        ferry_sock_rma_describe(g, who, sizeof(who));
        FERRY_WARN_LIMITED("RMA %s: %s: %d operations towards rank %d (%s) are in flight "
                           "already, the most one peer takes (maxRecvs is 1); test() them "
                           "before posting more", op, who, FERRY_MAX_REQUESTS, p->rank,
                           p->addr);
        return NULL;
    }
    ferry_px_req_parts_start(req, 1);
    return req;
}

/* Send frame f for req to p, and move the queue along at once. */
static ferry_status_t ferry_sock_rma_send(ferry_sock_rma_group_t *g, ferry_sock_rma_peer_t *p,
                                          ferry_px_req_t *req, ferry_sock_rma_frame_t *f,
                                          const char *payload, size_t len)
{
    ferry_status_t st;

    f->seq = req->seq;
    ferry_sock_rma_seal(f);
    p->sent[ferry_px_ring_slot_index(&p->ring, req)] = *f;
    st = ferry_sock_rma_queue(p, f, payload, len, req);
    if (st != FERRY_OK) {
        ferry_px_req_fail(req, st);
        return st;
    }
    (void)ferry_sock_rma_progress_locked(g);
    return FERRY_OK;
}

static ferry_status_t ferry_sock_rma_put_locked(void *group, const ferry_rma_put_t *op,
                                                void **req_p)
{
    ferry_sock_rma_group_t *g = group;
    const char *name = op->sig_op != FERRY_RMA_SIGNAL_NONE ? "iputSignal" : "iput";
    ferry_sock_rma_mr_t *src = NULL, *dst = NULL, *sig = NULL;
    ferry_sock_rma_frame_t f;
    ferry_sock_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_px_req_t *req;
    char *from = NULL;

    p = ferry_sock_rma_target(g, name, op->rank, &st);
    if (p == NULL)
        return st;
    if (op->sig_op > FERRY_RMA_SIGNAL_ADD) {
        FERRY_WARN_LIMITED("RMA %s to rank %u: signal operation %u is none NCCL defines (1: "
                           "INC, 2: ADD)", name, op->rank, op->sig_op);
        return FERRY_ERR_ARGUMENT;
    }
    if (op->size > 0) {
        src = ferry_sock_rma_local(g, name, "source", op->src_mr, op->src_off, op->size);
        dst = ferry_sock_rma_local(g, name, "destination", op->dst_mr, 0, 0);
        if (src == NULL || dst == NULL)
            return FERRY_ERR_USAGE;
        st = ferry_sock_rma_remote_fits(g, p, name, "destination", dst->index, op->dst_off,
                                        op->size);
        if (st != FERRY_OK)
            return st;
        st = ferry_sock_rma_gpu_copy(g, src, op->src_off, op->size, 0);
        if (st != FERRY_OK)
            return st;
        from = ferry_sock_rma_host(src, op->src_off);
    }
    if (op->sig_op != FERRY_RMA_SIGNAL_NONE) {
        sig = ferry_sock_rma_local(g, name, "signal", op->sig_mr, 0, 0);
        if (sig == NULL)
            return FERRY_ERR_USAGE;
        if (op->sig_off % 8 != 0) {
            FERRY_WARN_LIMITED("RMA %s to rank %u: signal offset %llu is not a multiple of 8 "
                               "(signals are 64-bit words)", name, op->rank,
                               (unsigned long long)op->sig_off);
            return FERRY_ERR_ARGUMENT;
        }
        st = ferry_sock_rma_remote_fits(g, p, name, "signal", sig->index, op->sig_off, 8);
        if (st != FERRY_OK)
            return st;
    }
    req = ferry_sock_rma_post(g, p, name, from, op->size);
    if (req == NULL)
        return FERRY_ERR_USAGE;
    *req_p = ferry_px_handle_of(req);
    if (p->rank == g->rank) {
        /* Our own memory: the bounds are our own regions' (checked above, or here). */
        if (dst != NULL && (op->dst_off > dst->size || op->size > dst->size - op->dst_off)) {
            ferry_px_req_fail(req, FERRY_ERR_USAGE);
            return ferry_sock_rma_remote_fits(g, p, name, "destination", dst->index,
                                              op->dst_off, op->size);
        }
        if (op->size > 0) {
            memmove(ferry_sock_rma_host(dst, op->dst_off), from, op->size);
            st = ferry_sock_rma_gpu_copy(g, dst, op->dst_off, op->size, 1);
        }
        if (st == FERRY_OK && sig != NULL)
            st = ferry_sock_rma_signal(g, sig, op->sig_off,
                                       op->sig_op == FERRY_RMA_SIGNAL_INC ? 1 : op->sig_value);
        if (st != FERRY_OK) {
            ferry_px_req_fail(req, st);
            *req_p = NULL;
            return st;
        }
        ferry_px_req_part_finish(req, op->size);
        return FERRY_OK;
    }
    memset(&f, 0, sizeof(f));
    f.op = FERRY_SOCK_RMA_PUT;
    f.sig_op = (uint8_t)op->sig_op;
    f.reg = dst != NULL ? dst->index : UINT32_MAX;
    f.off = op->dst_off;
    f.size = op->size;
    f.sig_reg = sig != NULL ? sig->index : UINT32_MAX;
    f.sig_off = op->sig_off;
    f.sig_value = op->sig_value;
    return ferry_sock_rma_send(g, p, req, &f, from, op->size);
}

static ferry_status_t ferry_sock_rma_get_locked(void *group, const ferry_rma_get_t *op,
                                                void **req_p)
{
    ferry_sock_rma_group_t *g = group;
    ferry_sock_rma_mr_t *local, *remote;
    ferry_sock_rma_frame_t f;
    ferry_sock_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_px_req_t *req;
    char *to;

    p = ferry_sock_rma_target(g, "iget", op->rank, &st);
    if (p == NULL)
        return st;
    local = ferry_sock_rma_local(g, "iget", "local", op->local_mr, op->local_off, op->size);
    remote = ferry_sock_rma_local(g, "iget", "remote", op->remote_mr, 0, 0);
    if (local == NULL || remote == NULL)
        return FERRY_ERR_USAGE;
    st = ferry_sock_rma_remote_fits(g, p, "iget", "remote", remote->index, op->remote_off,
                                    op->size);
    if (st != FERRY_OK)
        return st;
    to = ferry_sock_rma_host(local, op->local_off);
    req = ferry_sock_rma_post(g, p, "iget", to, op->size);
    if (req == NULL)
        return FERRY_ERR_USAGE;
    *req_p = ferry_px_handle_of(req);
    if (p->rank == g->rank) {
        if (op->remote_off > remote->size || op->size > remote->size - op->remote_off) {
            ferry_px_req_fail(req, FERRY_ERR_USAGE);
            return FERRY_ERR_USAGE;
        }
        st = ferry_sock_rma_gpu_copy(g, remote, op->remote_off, op->size, 0);
        if (st == FERRY_OK && op->size > 0) {
            memmove(to, ferry_sock_rma_host(remote, op->remote_off), op->size);
            st = ferry_sock_rma_gpu_copy(g, local, op->local_off, op->size, 1);
        }
        if (st != FERRY_OK) {
            ferry_px_req_fail(req, st);
            return st;
        }
        ferry_px_req_part_finish(req, op->size);
        return FERRY_OK;
    }
    p->land[ferry_px_ring_slot_index(&p->ring, req)] = local;
    p->land_off[ferry_px_ring_slot_index(&p->ring, req)] = op->local_off;
    memset(&f, 0, sizeof(f));
    f.op = FERRY_SOCK_RMA_GET;
    f.reg = remote->index;
    f.off = op->remote_off;
    f.size = op->size;
    return ferry_sock_rma_send(g, p, req, &f, NULL, 0);
}

static ferry_status_t ferry_sock_rma_flush_locked(void *group, uint32_t rank, void **req_p)
{
    ferry_sock_rma_group_t *g = group;
    ferry_sock_rma_frame_t f;
    ferry_sock_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_px_req_t *req;

    p = ferry_sock_rma_target(g, "iflush", rank, &st);
    req = p != NULL ? ferry_sock_rma_post(g, p, "iflush", NULL, 0) : NULL;
    if (p != NULL && req == NULL)
        st = FERRY_ERR_USAGE;
    if (req != NULL) {
        *req_p = ferry_px_handle_of(req);
        if (p->rank == g->rank) {
            ferry_px_req_part_finish(req, 0); /* Our own puts were applied when posted. */
        } else {
            memset(&f, 0, sizeof(f));
            f.op = FERRY_SOCK_RMA_FLUSH;
            f.reg = UINT32_MAX;
            st = ferry_sock_rma_send(g, p, req, &f, NULL, 0);
        }
    }
    return st;
}

static ferry_status_t ferry_sock_rma_test(void *group, void *handle, int *done_p)
{
    ferry_sock_rma_group_t *g = ferry_sock_rma_group(group, "test");

    *done_p = 0;
    if (g == NULL)
        return FERRY_ERR_INVALID;
    return ferry_px_handle_group_test(handle, &ferry_sock_rma_ring_ops, g, done_p);
}

static pthread_mutex_t *ferry_sock_rma_lock(void *group, const char *op)
{
    ferry_sock_rma_group_t *g = ferry_sock_rma_group(group, op);

    return g != NULL ? &g->lock : NULL;
}

static long ferry_sock_rma_progress_group(void *group)
{
    return ferry_sock_rma_progress_locked(group);
}

static int ferry_sock_rma_failed(void *group)
{
    return atomic_load(&((ferry_sock_rma_group_t *)group)->failed);
}

/* test() on a request not finished: move the whole group a step. */
static long ferry_sock_rma_ring_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now)
{
    ferry_sock_rma_peer_t *p = (ferry_sock_rma_peer_t *)(void *)ring;
    long work;

    (void)req;
    (void)now;
    pthread_mutex_lock(&p->group->lock);
    work = ferry_sock_rma_progress_locked(p->group);
    pthread_mutex_unlock(&p->group->lock);
    return work < 0 && atomic_load(&ring->failed) != 0 ? atomic_load(&ring->failed) : work;
}

static void ferry_sock_rma_stall_why(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                     char *buf, size_t len)
{
    const ferry_sock_rma_peer_t *p = (const ferry_sock_rma_peer_t *)(const void *)ring;

    snprintf(buf, len, "%s; the target rank %d (%s) applies and answers it from its own "
             "progress: check that rank %d is alive and calls NCCL's RMA progress",
             atomic_load(&req->transmitted) == 0 ? "Its frame has not left yet (the connection "
                                                   "is backed up)"
                                                 : "Its frame left, no answer yet",
             p->rank, p->addr, p->rank);
}

const ferry_px_ring_ops_t ferry_sock_rma_ring_ops = {
    .unit = "frames",
    .poll = ferry_sock_rma_ring_poll,
    .stall_why = ferry_sock_rma_stall_why,
};

const ferry_rma_ops_t ferry_sock_rma_ops = {
    .backend = "socket",
    .listen = ferry_sock_rma_listen,
    .close_listen = ferry_sock_rma_close_listen,
    .connect = ferry_sock_rma_connect,
    .close = ferry_sock_rma_close,
    .reg = ferry_sock_rma_reg,
    .dereg = ferry_sock_rma_dereg,
    .put_locked = ferry_sock_rma_put_locked,
    .get_locked = ferry_sock_rma_get_locked,
    .flush_locked = ferry_sock_rma_flush_locked,
    .test = ferry_sock_rma_test,
    .lock = ferry_sock_rma_lock,
    .progress_locked = ferry_sock_rma_progress_group,
    .failed = ferry_sock_rma_failed,
};
