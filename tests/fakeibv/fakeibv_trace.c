/*
 * FAKEIBV_STATS=1: what the emulated NIC did for this process, printed to
 * stderr at exit. For comparing two clients of the device on the same work
 * (ferry's ib backend against NCCL's own IB): how many work requests each
 * posts and of which kind, who put them on the wire (the posting thread or
 * the QP's tx thread, which costs a wake-up), how often the CQs were polled
 * and found empty, and how long a request took from its post to its ACK
 * (the requester's view of the wire, per opcode and per sender).
 *
 * Off by default: then every hook is one predicted branch on a flag.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv_internal.h"

struct fakeibv_trace fakeibv_trace;

uint64_t fakeibv_trace_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int fakeibv_trace_kind(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:          return FAKEIBV_TRACE_WRITE;
    case IBV_WR_RDMA_WRITE_WITH_IMM: return FAKEIBV_TRACE_WRITE_IMM;
    case IBV_WR_RDMA_READ:           return FAKEIBV_TRACE_READ;
    default:                         return FAKEIBV_TRACE_OTHER;
    }
}

void fakeibv_trace_acked(const struct fakeibv_swqe *w)
{
    uint64_t d;

    if (w->post_ns == 0)
        return;
    d = fakeibv_trace_now_ns() - w->post_ns;
    fakeibv_trace_add(&fakeibv_trace.ack_ns[fakeibv_trace_kind(w->opcode)], d);
    fakeibv_trace_add(&fakeibv_trace.ack_n[fakeibv_trace_kind(w->opcode)], 1);
    fakeibv_trace_add(w->direct ? &fakeibv_trace.ack_direct_ns : &fakeibv_trace.ack_tx_ns, d);
    fakeibv_trace_add(w->direct ? &fakeibv_trace.ack_direct_n : &fakeibv_trace.ack_tx_n, 1);
}

/*
 * Reaction times, per QP: an RC QP of a receiver-driven protocol takes the
 * peer's small WRITEs (clear-to-send) in and sends WRITE_WITH_IMM (data) out,
 * or the other way round. How long the client took from the peer's last
 * write landing to its next post of the other kind says how quickly its
 * progress loop reacts (waits for its GPU included).
 */
void fakeibv_trace_posted(struct fakeibv_qp *qp, const struct ibv_send_wr *wr,
                          struct fakeibv_swqe *w)
{
    enum ibv_wr_opcode op = wr->opcode;
    uint64_t now = fakeibv_trace_now_ns(), t;

    w->post_ns = now;
    fakeibv_trace_add(&fakeibv_trace.wrs[fakeibv_trace_kind(op)], 1);
    fakeibv_trace_add(&fakeibv_trace.signalled,
                      (qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)) ? 1 : 0);
    fakeibv_trace_add(&fakeibv_trace.inlined, (wr->send_flags & IBV_SEND_INLINE) ? 1 : 0);
    if (op == IBV_WR_RDMA_WRITE_WITH_IMM) {
        t = __atomic_exchange_n(&qp->trace_in_write_ns, 0, __ATOMIC_RELAXED);
        if (t != 0 && now > t) {
            fakeibv_trace_add(&fakeibv_trace.write_to_imm_ns, now - t);
            fakeibv_trace_add(&fakeibv_trace.write_to_imm_n, 1);
        }
    } else if (op == IBV_WR_RDMA_WRITE) {
        t = __atomic_exchange_n(&qp->trace_in_imm_ns, 0, __ATOMIC_RELAXED);
        if (t != 0 && now > t) {
            fakeibv_trace_add(&fakeibv_trace.imm_to_write_ns, now - t);
            fakeibv_trace_add(&fakeibv_trace.imm_to_write_n, 1);
        }
    }
}

void fakeibv_trace_placed(struct fakeibv_qp *qp, int imm)
{
    __atomic_store_n(imm ? &qp->trace_in_imm_ns : &qp->trace_in_write_ns, fakeibv_trace_now_ns(),
                     __ATOMIC_RELAXED);
}

/* How often the client comes back to a CQ: its progress loop's period (gaps
 * over 1 ms are idle time, not a loop, and left out). Unlocked: one
 * thread polls a CQ, and a torn stamp only skews a diagnostic. */
void fakeibv_trace_polled(struct fakeibv_cq *cq, int got)
{
    uint64_t now = fakeibv_trace_now_ns(), last = cq->trace_last_poll_ns;

    cq->trace_last_poll_ns = now;
    if (last != 0 && now > last && now - last < 1000000) {
        fakeibv_trace_add(&fakeibv_trace.poll_gap_ns, now - last);
        fakeibv_trace_add(&fakeibv_trace.poll_gap_n, 1);
    }
    fakeibv_trace_add(&fakeibv_trace.poll_calls, 1);
    fakeibv_trace_add(&fakeibv_trace.poll_empty, got == 0 ? 1 : 0);
    fakeibv_trace_add(&fakeibv_trace.cqes, (uint64_t)got);
}

void fakeibv_trace_served(uint64_t t0)
{
    fakeibv_trace_add(&fakeibv_trace.responder_reqs, 1);
    fakeibv_trace_add(&fakeibv_trace.serve_ns, fakeibv_trace_now_ns() - t0);
    fakeibv_trace_add(&fakeibv_trace.serve_n, 1);
}

static double fakeibv_trace_mean_us(const uint64_t *sum, const uint64_t *n)
{
    uint64_t k = __atomic_load_n(n, __ATOMIC_RELAXED);

    return k == 0 ? 0.0 : (double)__atomic_load_n(sum, __ATOMIC_RELAXED) / (double)k / 1000.0;
}

#define FAKEIBV_TRACE_LD(f) \
    ((unsigned long long)__atomic_load_n(&fakeibv_trace.f, __ATOMIC_RELAXED))

static void fakeibv_trace_print(void)
{
    const struct fakeibv_trace *t = &fakeibv_trace;

    if (!t->on)
        return;
    fprintf(stderr,
            "fakeibv[%d]: stats: post_send calls %llu, WRs write %llu write_imm %llu read %llu "
            "other %llu (signalled %llu, inline %llu); sent by the poster %llu, by the tx "
            "thread %llu; post_recv WRs %llu; poll_cq calls %llu (empty %llu), CQEs %llu; "
            "responder requests %llu; post-to-ACK mean us: write %.2f, write_imm %.2f, read "
            "%.2f, poster-sent %.2f, tx-thread-sent %.2f; responder serve mean us %.2f; "
            "reaction mean us: inbound WRITE to WRITE_IMM post %.2f (%llu), inbound WRITE_IMM "
            "to WRITE post %.2f (%llu); CQE pushed to polled mean us: receive %.2f, send %.2f; "
            "mean us between polls of a CQ %.3f, in ibv_post_send %.3f\n",
            (int)getpid(), FAKEIBV_TRACE_LD(post_calls),
            FAKEIBV_TRACE_LD(wrs[FAKEIBV_TRACE_WRITE]),
            FAKEIBV_TRACE_LD(wrs[FAKEIBV_TRACE_WRITE_IMM]),
            FAKEIBV_TRACE_LD(wrs[FAKEIBV_TRACE_READ]), FAKEIBV_TRACE_LD(wrs[FAKEIBV_TRACE_OTHER]),
            FAKEIBV_TRACE_LD(signalled), FAKEIBV_TRACE_LD(inlined),
            (unsigned long long)__atomic_load_n(&fakeibv_stats.direct_ops, __ATOMIC_RELAXED),
            FAKEIBV_TRACE_LD(tx_sends), FAKEIBV_TRACE_LD(recv_wrs), FAKEIBV_TRACE_LD(poll_calls),
            FAKEIBV_TRACE_LD(poll_empty), FAKEIBV_TRACE_LD(cqes), FAKEIBV_TRACE_LD(responder_reqs),
            fakeibv_trace_mean_us(&t->ack_ns[FAKEIBV_TRACE_WRITE], &t->ack_n[FAKEIBV_TRACE_WRITE]),
            fakeibv_trace_mean_us(&t->ack_ns[FAKEIBV_TRACE_WRITE_IMM],
                                  &t->ack_n[FAKEIBV_TRACE_WRITE_IMM]),
            fakeibv_trace_mean_us(&t->ack_ns[FAKEIBV_TRACE_READ], &t->ack_n[FAKEIBV_TRACE_READ]),
            fakeibv_trace_mean_us(&t->ack_direct_ns, &t->ack_direct_n),
            fakeibv_trace_mean_us(&t->ack_tx_ns, &t->ack_tx_n),
            fakeibv_trace_mean_us(&t->serve_ns, &t->serve_n),
            fakeibv_trace_mean_us(&t->write_to_imm_ns, &t->write_to_imm_n),
            FAKEIBV_TRACE_LD(write_to_imm_n),
            fakeibv_trace_mean_us(&t->imm_to_write_ns, &t->imm_to_write_n),
            FAKEIBV_TRACE_LD(imm_to_write_n),
            fakeibv_trace_mean_us(&t->cqe_recv_ns, &t->cqe_recv_n),
            fakeibv_trace_mean_us(&t->cqe_send_ns, &t->cqe_send_n),
            fakeibv_trace_mean_us(&t->poll_gap_ns, &t->poll_gap_n),
            fakeibv_trace_mean_us(&t->post_call_ns, &t->post_calls));
    if (fakeibv_config()->null_payload)
        fprintf(stderr,
                "fakeibv[%d]: null payload: %llu requests sent without their %llu bytes, "
                "%llu served without placing any (FAKEIBV_NULL_PAYLOAD_MIN %llu)\n",
                (int)getpid(),
                (unsigned long long)__atomic_load_n(&fakeibv_stats.null_ops, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&fakeibv_stats.null_bytes, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&fakeibv_stats.null_served_ops,
                                                    __ATOMIC_RELAXED),
                (unsigned long long)fakeibv_config()->null_payload_min);
}

__attribute__((constructor)) static void fakeibv_trace_init(void)
{
    const char *s = getenv("FAKEIBV_STATS");

    if (s != NULL && atoi(s) > 0) {
        fakeibv_trace.on = 1;
        atexit(fakeibv_trace_print);
    }
}
