/*
 * The ib backend's one-sided operations (core/rma.h, ib_rma.h): each put,
 * get or flush is checked where it is posted (the rank, the caller's
 * regions, and the range against what the target registered), becomes a
 * request of the target's ring and its work requests on its QP, cut at the
 * port's largest message (ib_rma_parts.c).
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_rma.h"
#include "proxy/handle.h"

static ferry_ib_rma_group_t *ferry_ib_rma_group(void *group, const char *op)
{
    ferry_ib_rma_group_t *g = group;

    if (g == NULL || g->magic != FERRY_IB_RMA_GROUP_MAGIC) {
        FERRY_WARN_LIMITED("RMA %s(%p): not an open RMA context of ferry's ib backend "
                           "(destroyed or closed already?)", op, group);
        return NULL;
    }
    return g;
}

/* A region handle of ours and the range in it; NULL and a WARN if either is wrong. */
static ferry_ib_rma_mr_t *ferry_ib_rma_local(ferry_ib_rma_group_t *g, const char *op,
                                             const char *role, void *mhandle, uint64_t off,
                                             uint64_t size)
{
    ferry_ib_rma_mr_t *mr = mhandle;
    char who[256];

    ferry_ib_rma_describe(g, who, sizeof(who));
    if (mr == NULL || mr->magic != FERRY_IB_RMA_MR_MAGIC ||
        ferry_ib_rma_region(g, mr->index) != mr) {
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
static ferry_status_t ferry_ib_rma_remote_fits(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p,
                                               const char *op, const char *role, uint32_t index,
                                               uint64_t off, uint64_t size)
{
    uint64_t have = ferry_ib_rma_remote(p, index)->size;
    char who[256];

    if (off <= have && size <= have - off)
        return FERRY_OK;
    ferry_ib_rma_describe(g, who, sizeof(who));
    FERRY_WARN_LIMITED("RMA %s: %s: refused: %s range offset %llu + size %llu is beyond the "
                       "%llu bytes rank %d (%s, QP 0x%x) registered as region %u; nothing was "
                       "sent; keep offset + size within each rank's registered size", op, who,
                       role, (unsigned long long)off, (unsigned long long)size,
                       (unsigned long long)have, p->rank, p->addr, p->remote_qpn, index);
    return FERRY_ERR_ARGUMENT;
}

/* The peer an operation goes to, or NULL with a WARN and *st_p set. */
static ferry_ib_rma_peer_t *ferry_ib_rma_target(ferry_ib_rma_group_t *g, const char *op,
                                                uint32_t rank, ferry_status_t *st_p)
{
    ferry_ib_rma_peer_t *p;
    char who[256];

    ferry_ib_rma_describe(g, who, sizeof(who));
    if (rank >= (uint32_t)g->nranks) {
        FERRY_WARN_LIMITED("RMA %s: %s: rank %u is out of range: the group has ranks 0..%d",
                           op, who, rank, g->nranks - 1);
        *st_p = FERRY_ERR_ARGUMENT;
        return NULL;
    }
    p = &g->peers[rank];
    if (p->dead || p->bye || atomic_load(&p->ring.failed) != 0) {
        FERRY_WARN_LIMITED("RMA %s: %s: rank %u (%s, QP 0x%x) %s; nothing more can go to it; "
                           "queryLastError reports a failed peer", op, who, rank, p->addr,
                           p->remote_qpn, p->bye ? "closed its group"
                                                 : "failed earlier (see the WARN about it)");
        *st_p = FERRY_ERR_REMOTE;
        return NULL;
    }
    return p;
}

/*
 * A request of p's ring for op (its parts counted and queued behind every
 * earlier one), its first parts posted; NULL with a WARN when 32 are in
 * flight or op takes too many parts, *st_p then set.
 */
static ferry_px_req_t *ferry_ib_rma_post(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p,
                                         const char *name, ferry_ib_rma_op_t *op, uint32_t reg,
                                         uint64_t off, ferry_status_t *st_p)
{
    ferry_px_sub_t sub = { .buf = op->local, .capacity = op->size };
    uint32_t nparts = ferry_ib_rma_op_parts(g, op, name, p->rank);
    ferry_px_req_t *req;
    uint32_t slot;
    char who[256];

    *st_p = FERRY_ERR_ARGUMENT;
    if (nparts == 0)
        return NULL;
    req = ferry_px_ring_post(&p->ring, 1, &sub, 0, nparts, op->part);
    if (req == NULL) {
        ferry_ib_rma_describe(g, who, sizeof(who));
        FERRY_WARN_LIMITED("RMA %s: %s: %d operations towards rank %d (%s) are in flight "
                           "already, the most one peer takes (maxRecvs is 1); test() them "
                           "before posting more", name, who, FERRY_MAX_REQUESTS, p->rank,
                           p->addr);
        *st_p = FERRY_ERR_USAGE;
        return NULL;
    }
    slot = ferry_px_ring_slot_index(&p->ring, req);
    p->op_reg[slot] = reg;
    p->op_off[slot] = off;
    p->op_size[slot] = op->size;
    op->seq = req->seq;
    p->ops[slot] = *op;
    if (p->pump_head == p->pump_tail)
        p->pump_head = req->seq;
    p->pump_tail = req->seq + 1;
    *st_p = ferry_ib_rma_pump(g, p, req->seq);
    (void)ferry_ib_rma_progress_locked(g);
    return req;
}

static ferry_status_t ferry_ib_rma_put_locked(void *group, const ferry_rma_put_t *op, void **req_p)
{
    ferry_ib_rma_group_t *g = group;
    const char *name = op->sig_op != FERRY_RMA_SIGNAL_NONE ? "iputSignal" : "iput";
    ferry_ib_rma_mr_t *src = NULL, *dst = NULL, *sig = NULL;
    ferry_ib_rma_op_t o;
    ferry_ib_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_px_req_t *req;

    p = ferry_ib_rma_target(g, name, op->rank, &st);
    if (p == NULL)
        return st;
    if (op->sig_op > FERRY_RMA_SIGNAL_ADD) {
        FERRY_WARN_LIMITED("RMA %s to rank %u: signal operation %u is none NCCL defines (1: "
                           "INC, 2: ADD)", name, op->rank, op->sig_op);
        return FERRY_ERR_ARGUMENT;
    }
    memset(&o, 0, sizeof(o));
    o.opcode = IBV_WR_RDMA_WRITE;
    o.size = op->size;
    if (op->size > 0) {
        src = ferry_ib_rma_local(g, name, "source", op->src_mr, op->src_off, op->size);
        dst = ferry_ib_rma_local(g, name, "destination", op->dst_mr, 0, 0);
        if (src == NULL || dst == NULL)
            return FERRY_ERR_USAGE;
        st = ferry_ib_rma_remote_fits(g, p, name, "destination", dst->index, op->dst_off,
                                      op->size);
        if (st != FERRY_OK)
            return st;
        o.local = src->base + op->src_off;
        o.lkey = src->mr->lkey;
        o.raddr = ferry_ib_rma_remote(p, dst->index)->addr + op->dst_off;
        o.rkey = ferry_ib_rma_remote(p, dst->index)->rkey;
    }
    if (op->sig_op != FERRY_RMA_SIGNAL_NONE) {
        sig = ferry_ib_rma_local(g, name, "signal", op->sig_mr, 0, 0);
        if (sig == NULL)
            return FERRY_ERR_USAGE;
        if (op->sig_off % 8 != 0 || (ferry_ib_rma_remote(p, sig->index)->addr + op->sig_off) % 8 != 0) {
            FERRY_WARN_LIMITED("RMA %s to rank %u (%s): signal offset %llu of region %u is not "
                               "a 64-bit aligned word there (signals are atomics on aligned "
                               "64-bit words)", name, op->rank, p->addr,
                               (unsigned long long)op->sig_off, sig->index);
            return FERRY_ERR_ARGUMENT;
        }
        st = ferry_ib_rma_remote_fits(g, p, name, "signal", sig->index, op->sig_off, 8);
        if (st != FERRY_OK)
            return st;
        o.sig = 1;
        o.sig_raddr = ferry_ib_rma_remote(p, sig->index)->addr + op->sig_off;
        o.sig_rkey = ferry_ib_rma_remote(p, sig->index)->rkey;
        o.sig_add = op->sig_op == FERRY_RMA_SIGNAL_INC ? 1 : op->sig_value;
    }
    req = ferry_ib_rma_post(g, p, name, &o, dst != NULL ? dst->index : UINT32_MAX, op->dst_off,
                            &st);
    if (req != NULL)
        *req_p = ferry_px_handle_of(req);
    return st;
}

static ferry_status_t ferry_ib_rma_get_locked(void *group, const ferry_rma_get_t *op, void **req_p)
{
    ferry_ib_rma_group_t *g = group;
    ferry_ib_rma_mr_t *local, *remote;
    ferry_ib_rma_op_t o;
    ferry_ib_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_px_req_t *req;

    p = ferry_ib_rma_target(g, "iget", op->rank, &st);
    if (p == NULL)
        return st;
    local = ferry_ib_rma_local(g, "iget", "local", op->local_mr, op->local_off, op->size);
    remote = ferry_ib_rma_local(g, "iget", "remote", op->remote_mr, 0, 0);
    if (local == NULL || remote == NULL)
        return FERRY_ERR_USAGE;
    st = ferry_ib_rma_remote_fits(g, p, "iget", "remote", remote->index, op->remote_off,
                                  op->size);
    if (st != FERRY_OK)
        return st;
    memset(&o, 0, sizeof(o));
    o.opcode = IBV_WR_RDMA_READ;
    o.size = op->size;
    o.local = local->base + op->local_off;
    o.lkey = local->mr->lkey;
    o.raddr = ferry_ib_rma_remote(p, remote->index)->addr + op->remote_off;
    o.rkey = ferry_ib_rma_remote(p, remote->index)->rkey;
    req = ferry_ib_rma_post(g, p, "iget", &o, remote->index, op->remote_off, &st);
    if (req != NULL)
        *req_p = ferry_px_handle_of(req);
    return st;
}

/*
 * A zero-length READ: the target answers it only after executing every
 * earlier request on the QP, so every earlier put is applied there by its
 * completion (no rkey is checked for zero bytes). It is queued behind the
 * parts of earlier operations not posted yet, so it cannot overtake them.
 */
static ferry_status_t ferry_ib_rma_flush_locked(void *group, uint32_t rank, void **req_p)
{
    ferry_ib_rma_group_t *g = group;
    ferry_ib_rma_peer_t *p;
    ferry_status_t st = FERRY_OK;
    ferry_ib_rma_op_t o;
    ferry_px_req_t *req;

    p = ferry_ib_rma_target(g, "iflush", rank, &st);
    if (p == NULL)
        return st;
    memset(&o, 0, sizeof(o));
    o.opcode = IBV_WR_RDMA_READ;
    req = ferry_ib_rma_post(g, p, "iflush", &o, UINT32_MAX, 0, &st);
    if (req != NULL)
        *req_p = ferry_px_handle_of(req);
    return st;
}

static ferry_status_t ferry_ib_rma_test(void *group, void *handle, int *done_p)
{
    ferry_ib_rma_group_t *g = ferry_ib_rma_group(group, "test");

    *done_p = 0;
    if (g == NULL)
        return FERRY_ERR_INVALID;
    return ferry_px_handle_group_test(handle, &ferry_ib_rma_ring_ops, g, done_p);
}

static pthread_mutex_t *ferry_ib_rma_lock(void *group, const char *op)
{
    ferry_ib_rma_group_t *g = ferry_ib_rma_group(group, op);

    return g != NULL ? &g->lock : NULL;
}

static long ferry_ib_rma_progress_group(void *group)
{
    return ferry_ib_rma_progress_locked(group);
}

static int ferry_ib_rma_failed(void *group)
{
    return atomic_load(&((ferry_ib_rma_group_t *)group)->failed);
}

/* test() on a request not finished: move the whole group a step. */
static long ferry_ib_rma_ring_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now)
{
    ferry_ib_rma_peer_t *p = (ferry_ib_rma_peer_t *)(void *)ring;
    long work;

    (void)req;
    (void)now;
    pthread_mutex_lock(&p->group->lock);
    work = ferry_ib_rma_progress_locked(p->group);
    pthread_mutex_unlock(&p->group->lock);
    return work;
}

static void ferry_ib_rma_stall_why(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                   char *buf, size_t len)
{
    const ferry_ib_rma_peer_t *p = (const ferry_ib_rma_peer_t *)(const void *)ring;
    uint32_t slot = (uint32_t)(req - ring->reqs);

    const ferry_ib_rma_op_t *op = &p->ops[slot];
    char waiting[96] = "";

    if (op->seq == req->seq && op->next < op->nparts)
        snprintf(waiting, sizeof(waiting), " (%u of its %u parts; the rest wait for room in "
                 "the send queue)", op->next, op->nparts);
    snprintf(buf, len, "Its work requests (region %u, offset %llu, %llu bytes at the target) "
             "were posted%s on QP 0x%x towards rank %d (%s, QP 0x%x) and have no completion "
             "yet; the target's HCA answers by itself: check that rank %d's process is alive "
             "and its port is ACTIVE (ibstat), and the link between", p->op_reg[slot],
             (unsigned long long)p->op_off[slot], (unsigned long long)p->op_size[slot], waiting,
             p->qp != NULL ? p->qp->qp_num : 0, p->rank, p->addr, p->remote_qpn, p->rank);
}

const ferry_px_ring_ops_t ferry_ib_rma_ring_ops = {
    .unit = "work requests",
    .poll = ferry_ib_rma_ring_poll,
    .stall_why = ferry_ib_rma_stall_why,
};

const ferry_rma_ops_t ferry_ib_rma_ops = {
    .backend = "ib",
    .listen = ferry_ib_rma_listen,
    .close_listen = ferry_ib_rma_close_listen,
    .connect = ferry_ib_rma_connect,
    .close = ferry_ib_rma_close,
    .reg = ferry_ib_rma_reg,
    .reg_dmabuf = ferry_ib_rma_reg_dmabuf,
    .dereg = ferry_ib_rma_dereg,
    .put_locked = ferry_ib_rma_put_locked,
    .get_locked = ferry_ib_rma_get_locked,
    .flush_locked = ferry_ib_rma_flush_locked,
    .test = ferry_ib_rma_test,
    .lock = ferry_ib_rma_lock,
    .progress_locked = ferry_ib_rma_progress_group,
    .failed = ferry_ib_rma_failed,
};
