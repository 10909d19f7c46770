/*
 * An ib RMA operation larger than one verbs message goes as several work
 * requests on the target's QP, in order: an RC QP executes them in the
 * order posted, so a put-with-signal's fetch-and-add, posted after its last
 * data WRITE, still lands after all of its data. Every WR is signalled and
 * is one part of the request (the ring counts posted / done of N parts);
 * the request is done when all of them completed. The send queue holds
 * FERRY_IB_RMA_SQ_DEPTH of them: what does not fit now is posted from
 * progress as completions free room, oldest request first, so no later
 * operation (a flush included) overtakes a part of an earlier one.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_rma.h"

/* WRs one ibv_post_send takes at most (a chain on the stack). */
#define FERRY_IB_RMA_POST_BATCH 16

uint64_t ferry_ib_rma_max_msg(const ferry_ib_rma_group_t *g)
{
    uint64_t m = g->port->port_attr.max_msg_sz;

    return m != 0 ? m : FERRY_IB_RMA_DEFAULT_MSG;
}

uint32_t ferry_ib_rma_op_parts(ferry_ib_rma_group_t *g, ferry_ib_rma_op_t *op, const char *name,
                               int rank)
{
    uint64_t ndata;
    char who[256];

    op->part = ferry_ib_rma_max_msg(g);
    /* An empty operation is one zero-length WR, unless a signal alone stands for it. */
    ndata = op->size == 0 ? (op->sig ? 0 : 1) : (op->size - 1) / op->part + 1;
    if (ndata + (op->sig ? 1 : 0) > FERRY_IB_RMA_MAX_PARTS) {
        ferry_ib_rma_describe(g, who, sizeof(who));
        FERRY_WARN_LIMITED("RMA %s: %s: %llu bytes to rank %d would take %llu work requests of "
                           "at most %llu bytes (the port's max_msg_sz), more than the %u one "
                           "operation may take; nothing was sent; split it", name, who,
                           (unsigned long long)op->size, rank, (unsigned long long)ndata,
                           (unsigned long long)op->part, FERRY_IB_RMA_MAX_PARTS - 1);
        return 0;
    }
    op->ndata = (uint32_t)ndata;
    op->nparts = op->ndata + (op->sig ? 1 : 0);
    op->next = 0;
    return op->nparts;
}

uint64_t ferry_ib_rma_part_bytes(const ferry_ib_rma_op_t *op, uint32_t k)
{
    uint64_t at = (uint64_t)k * op->part;

    if (k >= op->ndata || at >= op->size)
        return 0;
    return op->size - at < op->part ? op->size - at : op->part;
}

/* Work request k of op into wr and sge (the signal when k is past the data). */
static void ferry_ib_rma_part_wr(ferry_ib_rma_group_t *g, const ferry_ib_rma_peer_t *p,
                                 const ferry_ib_rma_op_t *op, uint32_t k,
                                 struct ibv_send_wr *wr, struct ibv_sge *sge)
{
    uint64_t at = (uint64_t)k * op->part, len = ferry_ib_rma_part_bytes(op, k);

    memset(wr, 0, sizeof(*wr));
    memset(sge, 0, sizeof(*sge));
    wr->wr_id = ferry_ib_rma_wr_id(p, op->seq, k);
    wr->send_flags = IBV_SEND_SIGNALED;
    if (k < op->ndata) {
        wr->opcode = op->opcode;
        if (len > 0) {
            sge->addr = (uint64_t)(uintptr_t)(op->local + at);
            sge->length = (uint32_t)len;
            sge->lkey = op->lkey;
            wr->sg_list = sge;
            wr->num_sge = 1;
            wr->wr.rdma.remote_addr = op->raddr + at;
            wr->wr.rdma.rkey = op->rkey;
        }
        return;
    }
    /*
     * The signal: an RC responder executes requests in order, so the add
     * happens after every WRITE before it is placed (no fence: that only
     * holds a request back behind earlier READs and atomics).
     */
    sge->addr = (uint64_t)(uintptr_t)g->sink;
    sge->length = 8;
    sge->lkey = g->sink_mr->lkey;
    wr->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->wr.atomic.remote_addr = op->sig_raddr;
    wr->wr.atomic.rkey = op->sig_rkey;
    wr->wr.atomic.compare_add = op->sig_add;
}

/* Post what fits of op's remaining WRs; 0, or the errno of a failed post (op then abandoned). */
static int ferry_ib_rma_post_some(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p,
                                  ferry_ib_rma_op_t *op, ferry_px_req_t *req)
{
    struct ibv_send_wr wr[FERRY_IB_RMA_POST_BATCH], *bad = NULL;
    struct ibv_sge sge[FERRY_IB_RMA_POST_BATCH];
    char who[256];
    uint32_t n = 0;
    int rc;

    while (n < FERRY_IB_RMA_POST_BATCH && op->next + n < op->nparts &&
           p->sq_used + n < FERRY_IB_RMA_SQ_DEPTH) {
        ferry_ib_rma_part_wr(g, p, op, op->next + n, &wr[n], &sge[n]);
        if (n > 0)
            wr[n - 1].next = &wr[n];
        n++;
    }
    if (n == 0)
        return 0;
    rc = ibv_post_send(p->qp, wr, &bad);
    if (rc == 0) {
        op->next += n;
        p->sq_used += n;
        ferry_px_req_parts_start(req, n);
        return 0;
    }
    /* The WRs before bad went out and complete as usual; the rest of op never goes. */
    for (struct ibv_send_wr *w = wr; bad != NULL && w != bad && w < wr + n; w++) {
        op->next++;
        p->sq_used++;
    }
    ferry_ib_rma_describe(g, who, sizeof(who));
    FERRY_WARN_LIMITED("RMA: %s: ibv_post_send of part %u of %u (region %u, offset %llu at the "
                       "target) on QP 0x%x towards rank %d (%s) failed: %s; the request (seq %u) "
                       "failed, its later parts were not sent", who, op->next + 1, op->nparts,
                       p->op_reg[op->seq % FERRY_MAX_REQUESTS],
                       (unsigned long long)p->op_off[op->seq % FERRY_MAX_REQUESTS],
                       p->qp->qp_num, p->rank, p->addr, strerror(rc), op->seq);
    op->next = op->nparts;
    ferry_px_req_fail(req, FERRY_ERR_IO);
    return rc;
}

ferry_status_t ferry_ib_rma_pump(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p, uint32_t seq)
{
    ferry_status_t st = FERRY_OK;

    while (p->pump_head != p->pump_tail) {
        ferry_ib_rma_op_t *op = &p->ops[p->pump_head % FERRY_MAX_REQUESTS];
        ferry_px_req_t *req = ferry_px_ring_match(&p->ring, p->pump_head);

        /* Failed already (its peer too, or reported): its remaining parts never go. */
        if (req == NULL || p->dead || op->seq != p->pump_head) {
            p->pump_head++;
            continue;
        }
        while (op->next < op->nparts && p->sq_used < FERRY_IB_RMA_SQ_DEPTH) {
            if (ferry_ib_rma_post_some(g, p, op, req) != 0 && op->seq == seq)
                st = FERRY_ERR_IO;
        }
        if (op->next < op->nparts)
            break; /* The send queue is full: progress posts the rest. */
        p->pump_head++;
    }
    return st;
}
