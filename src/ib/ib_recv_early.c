/*
 * Receives NCCL lets complete early. For LL and LL128 NCCL's kernel finds
 * the data by the flags inside it, so NCCL passes
 * NCCL_NET_OPTIONAL_RECV_COMPLETION in *request on entry to irecv (n == 1;
 * NCCL_NET_OPTIONAL_RECV_COMPLETION=0 turns it off): the receive may be
 * reported done before its data lands. Reporting it done as soon as the
 * clear-to-send is out takes the completion's detection (a CQ poll in a
 * later pass of NCCL's proxy) out of every step, so the next clear-to-send
 * goes as soon as NCCL's kernel has read the data.
 *
 * The data still comes as RDMA writes ending in a WRITE_WITH_IMM that
 * consumes a receive WR and leaves a completion: later irecv calls poll
 * them, check the size against the posted buffer (a send that did not fit
 * fails the comm with ncclInvalidUsage at the next call) and free the FIFO
 * slot for reuse. Only single-QP receives on one port take this path; a
 * split or merged receive counts its parts as before.
 */
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/api.h"
#include "core/log.h"
#include "ib/ib_comm.h"

int ferry_ib_recv_early_wanted(const ferry_ib_recv_comm_t *rc, void *hint, int n, int nq)
{
    return hint == (void *)FERRY_RECV_OPTIONAL_COMPLETION && n == 1 && nq == 1 &&
           !rc->base.conn.multi;
}

int ferry_ib_recv_early_slot_busy(ferry_ib_recv_comm_t *rc, uint32_t s)
{
    /*
     * Early receives leave their completions for later, and an irecv takes them
     * in one go once FERRY_IB_EARLY_POLL of them are out, or when this slot's
     * is: that frees their FIFO slots and surfaces a send that did not fit.
     * Not on every irecv: each poll that finds work costs NCCL's proxy thread
     * a pass through the CQ, on the very path early completion shortens.
     */
    long st;

    if (rc->early_mask == 0) /* No early receive out (every receive but LL's): nothing to count. */
        return 0;
    if (!((rc->early_mask >> s) & 1U) && __builtin_popcount(rc->early_mask) < FERRY_IB_EARLY_POLL)
        return 0;
    st = ferry_ib_cq_drain(&rc->base, 0);
    if (st < 0)
        return (int)st;
    return (rc->early_mask >> s) & 1U; /* 32 receives ago, its data not yet seen land. */
}

void ferry_ib_recv_early_post(ferry_ib_recv_comm_t *rc, ferry_px_req_t *req, uint32_t s,
                              uint64_t seq)
{
    static atomic_int said;

    if (atomic_exchange_explicit(&said, 1, memory_order_relaxed) == 0)
        FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u from %s on %s: receives NCCL marks "
                   "NCCL_NET_OPTIONAL_RECV_COMPLETION (LL, LL128) complete when posted, their "
                   "data's completions checked later (once per process; "
                   "NCCL_NET_OPTIONAL_RECV_COMPLETION=0 waits for each)", rc->base.ring.serial,
                   rc->base.conn.peer, ferry_ib_comm_where(&rc->base));
    rc->early_seq[s] = (uint32_t)seq;
    rc->early_cap[s] = req->sub[0].capacity;
    rc->early_mask |= 1U << s;
    rc->fifo_reqs[s] = NULL;
    FERRY_IB_DIAG_ADD(rc->early_posted, 1);
    /* Done now, with no size known: NCCL reads LL sizes from the data's flags. */
    ferry_px_req_parts_finish(req, atomic_load_explicit(&req->nparts, memory_order_relaxed), 0);
}

int ferry_ib_recv_early_landed(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc)
{
    uint32_t seq = FERRY_IB_WR_SEQ(wc->wr_id), s = seq % FERRY_IB_FIFO_SLOTS;
    uint32_t got;

    if (!((rc->early_mask >> s) & 1U) || rc->early_seq[s] != seq)
        return 0;
    rc->early_mask &= ~(1U << s);
    FERRY_IB_DIAG_ADD(rc->early_landed, 1);
    got = ntohl(wc->imm_data);
    if (got <= rc->early_cap[s])
        return 1;
    FERRY_WARN("ib recv comm #%u from %s on %s, QP 0x%x: message %u: the peer sent %u bytes "
               "into a receive of %zu bytes that NCCL let complete early (LL/LL128, "
               "NCCL_NET_OPTIONAL_RECV_COMPLETION: reported done when posted, its data "
               "awaited since); nothing was written. Every receive must be at least as large "
               "as its send (a size mismatch between ranks)", rc->base.ring.serial,
               rc->base.conn.peer, ferry_ib_comm_where(&rc->base), wc->qp_num, seq, got,
               rc->early_cap[s]);
    ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_USAGE,
                       "message %u of %u bytes did not fit its early-completed receive of %zu "
                       "bytes", seq, got, rc->early_cap[s]);
    return 1;
}

int ferry_ib_recv_early_words(const ferry_ib_recv_comm_t *rc, char *buf, size_t len)
{
    uint64_t posted = FERRY_IB_DIAG_GET(rc->early_posted);

    if (posted == 0)
        return 0;
    return snprintf(buf, len, "; receives completed early (NCCL_NET_OPTIONAL_RECV_COMPLETION) "
                    "%llu, of which seen landed %llu", (unsigned long long)posted,
                    (unsigned long long)FERRY_IB_DIAG_GET(rc->early_landed));
}
