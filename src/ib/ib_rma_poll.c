/*
 * An ib RMA group's progress: the completions of its CQ finish the
 * requests they belong to (wr_id names the target rank and the ring's
 * message number, so a late completion of a request already reported finds
 * nothing), a failed one fails its peer; and the out-of-band links say when
 * a peer is gone (EOF without the close marker: its process died) before
 * any operation towards it times out, so queryLastError reports it.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"
#include "ib/ib_rma.h"
#include "proxy/clock.h"

/* How often progress looks at the out-of-band links. */
#define FERRY_IB_RMA_WATCH_NS (10ULL * 1000000ULL)

void ferry_ib_rma_peer_fail(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p, ferry_status_t st,
                            const char *fmt, ...)
{
    char why[256], who[256];
    va_list ap;

    if (p->dead)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    ferry_ib_rma_describe(g, who, sizeof(who));
    p->dead = 1;
    atomic_store(&g->failed, 1);
    FERRY_WARN_LIMITED("%s: rank %d (%s, QP 0x%x -> 0x%x) failed: %s; its operations in flight "
                       "fail with a remote error and queryLastError reports it", who, p->rank,
                       p->addr, p->qp != NULL ? p->qp->qp_num : 0, p->remote_qpn, why);
    ferry_px_ring_fail(&p->ring, st, "RMA rank %d (%s, QP 0x%x): %s", p->rank, p->addr,
                       p->qp != NULL ? p->qp->qp_num : 0, why);
}

/*
 * The HCA's async thread: an error event on p's QP (a responder-side
 * access or request error, a fatal QP) means it takes no more operations,
 * whichever side started them. Port events are not fatal here: the QP's
 * own retries decide. No group lock here: the ring's failure and the
 * group's flag are atomic, and target() reads the ring's.
 */
static void ferry_ib_rma_async(ferry_ib_watch_t *w, const char *what, int fatal)
{
    ferry_ib_rma_peer_t *p = w->arg;
    ferry_ib_rma_group_t *g = p->group;
    char who[256];

    if (!fatal)
        return;
    ferry_ib_rma_describe(g, who, sizeof(who));
    atomic_store(&g->failed, 1);
    FERRY_WARN_LIMITED("%s: rank %d (%s, QP 0x%x -> 0x%x) failed: %s; its operations fail "
                       "with a remote error and queryLastError reports it", who, p->rank,
                       p->addr, p->qp->qp_num, p->remote_qpn, what);
    ferry_px_ring_fail(&p->ring, FERRY_ERR_REMOTE, "RMA rank %d (%s, QP 0x%x): %s", p->rank,
                       p->addr, p->qp->qp_num, what);
}

void ferry_ib_rma_watch_start(ferry_ib_rma_group_t *g)
{
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        p->watch.dev = g->port;
        p->watch.cq = g->cq;
        p->watch.qpn[0] = p->qp->qp_num;
        p->watch.nqp = 1;
        p->watch.fn = ferry_ib_rma_async;
        p->watch.arg = p;
        ferry_ib_watch_add(&p->watch);
        p->watching = 1;
    }
}

static void ferry_ib_rma_wc(ferry_ib_rma_group_t *g, const struct ibv_wc *wc)
{
    uint32_t rank = (uint32_t)(wc->wr_id & ((1u << FERRY_IB_RMA_RANK_BITS) - 1));
    uint32_t part = (uint32_t)(wc->wr_id >> FERRY_IB_RMA_RANK_BITS) & (FERRY_IB_RMA_MAX_PARTS - 1);
    uint32_t seq = (uint32_t)(wc->wr_id >> 32);
    const ferry_ib_rma_op_t *op;
    ferry_ib_rma_peer_t *p;
    ferry_px_req_t *req;
    uint32_t slot;

    if (rank >= (uint32_t)g->nranks)
        return;
    p = &g->peers[rank];
    if (p->sq_used > 0)
        p->sq_used--; /* Every WR is signalled: its room in the send queue is free again. */
    req = ferry_px_ring_match(&p->ring, seq);
    slot = seq % FERRY_MAX_REQUESTS;
    op = &p->ops[slot];
    if (wc->status == IBV_WC_SUCCESS) {
        if (req != NULL)
            ferry_px_req_part_finish(req, ferry_ib_rma_part_bytes(op, part));
        return;
    }
    /* Flushes after the first error repeat it; the first one says what failed. */
    if (wc->status != IBV_WC_WR_FLUSH_ERR || !p->dead)
        ferry_ib_rma_peer_fail(g, p, FERRY_ERR_REMOTE, "%s of request seq %u (region %u, "
                               "offset %llu at the target, part %u of %u) completed with %s "
                               "(vendor error 0x%x)%s", req != NULL ? "its operation"
                                                                    : "an operation", seq,
                               p->op_reg[slot], (unsigned long long)p->op_off[slot], part + 1,
                               op->seq == seq ? op->nparts : 0,
                               ferry_ibv.wc_status_str((enum ibv_wc_status)wc->status),
                               wc->vendor_err,
                               wc->status == IBV_WC_RETRY_EXC_ERR
                                   ? ": the target did not answer (process, port or link gone)"
                                   : wc->status == IBV_WC_REM_ACCESS_ERR
                                         ? ": the target refused the rkey or range"
                                         : "");
    if (req != NULL)
        ferry_px_req_fail(req, FERRY_ERR_REMOTE);
}

/* One peer's link has something: its close marker, a message of a collective, or EOF. */
static void ferry_ib_rma_link(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p)
{
    char c;
    ssize_t n = recv(p->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n == 1 && c == FERRY_IB_OOB_BYE) {
        (void)recv(p->fd, &c, 1, MSG_DONTWAIT);
        p->bye = 1;
        return;
    }
    if (n == 1 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
        return; /* A collective's message; regMrSym reads it. */
    ferry_ib_rma_peer_fail(g, p, FERRY_ERR_REMOTE, "its out-of-band link %s without the close "
                           "marker (its process died or its host is gone)",
                           n == 0 ? "closed" : "failed");
}

static long ferry_ib_rma_watch(ferry_ib_rma_group_t *g)
{
    long work = 0;

    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];
        struct pollfd pfd = { .fd = p->fd, .events = POLLIN };

        if (p->fd < 0 || p->dead || p->bye)
            continue;
        if (poll(&pfd, 1, 0) == 1) {
            ferry_ib_rma_link(g, p);
            work++;
        }
    }
    return work;
}

long ferry_ib_rma_progress_locked(ferry_ib_rma_group_t *g)
{
    struct ibv_wc wc[FERRY_IB_RMA_POLL_BATCH];
    uint64_t now = ferry_px_coarse_ns();
    long work = 0;
    int n;

    n = ibv_poll_cq(g->cq, FERRY_IB_RMA_POLL_BATCH, wc);
    for (int i = 0; i < n; i++)
        ferry_ib_rma_wc(g, &wc[i]);
    if (n > 0) {
        work += n;
        /* Room freed in send queues: parts waiting for it go now. */
        for (int r = 0; r < g->nranks; r++)
            if (g->peers[r].pump_head != g->peers[r].pump_tail)
                (void)ferry_ib_rma_pump(g, &g->peers[r], 0);
    }
    if (now - g->last_watch_ns >= FERRY_IB_RMA_WATCH_NS || now < g->last_watch_ns) {
        g->last_watch_ns = now;
        work += ferry_ib_rma_watch(g);
    }
    return work;
}
