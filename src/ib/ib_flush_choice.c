/*
 * NCCL_FERRY_IB_FLUSH=auto: which flush method a receive comm uses. Both make
 * GPU receives visible (ib_flush.c); which is cheaper depends on the host
 * (the NIC's path to the GPU for the READ, the driver for the CUDA call), so
 * each comm times both on its first flushes, taking turns, and keeps the one
 * with the lower median. Where the CUDA call cannot run (no driver entry
 * point, or it fails), the READ is used without a trial. Only the comm's own
 * thread (iflush, test) runs this; the dump reads `why` after `decided`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

static void ferry_ib_flush_decide(ferry_ib_recv_comm_t *rc, int method)
{
    ferry_ib_flush_choice_t *ch = &rc->flush.choice;

    ch->method = method;
    __atomic_store_n(&ch->decided, 1, __ATOMIC_RELEASE);
    FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u from %s on %s: GDR flush by %s: %s",
               rc->base.ring.serial, rc->base.conn.peer, ferry_ib_comm_where(&rc->base),
               method == FERRY_IB_FLUSH_CUDA ? "cuFlushGPUDirectRDMAWrites" : "RDMA READ",
               ch->why);
}

int ferry_ib_flush_method(ferry_ib_recv_comm_t *rc)
{
    ferry_ib_flush_choice_t *ch = &rc->flush.choice;
    int cfg = ferry_ib_state.cfg.flush;

    if (cfg != FERRY_IB_FLUSH_AUTO)
        return cfg;
    if (ch->decided)
        return ch->method;
    /*
     * Turns: the method with fewer timed flushes goes next, READ first. A
     * driver without the CUDA flush is found by its first try
     * (ferry_ib_flush_cuda), which decides for the READ.
     */
    return ch->tried[1] < ch->tried[0] ? FERRY_IB_FLUSH_CUDA : FERRY_IB_FLUSH_READ;
}

void ferry_ib_flush_cuda_unusable(ferry_ib_recv_comm_t *rc, const char *why)
{
    ferry_ib_flush_choice_t *ch = &rc->flush.choice;

    if (ferry_ib_state.cfg.flush != FERRY_IB_FLUSH_AUTO || ch->cuda_off)
        return;
    __atomic_store_n(&ch->cuda_off, 1, __ATOMIC_RELAXED);
    if (!ch->decided) {
        snprintf(ch->why, sizeof(ch->why), "NCCL_FERRY_IB_FLUSH=auto, and the CUDA flush cannot "
                 "run here: %.120s", why);
        ferry_ib_flush_decide(rc, FERRY_IB_FLUSH_READ);
        return;
    }
    /* Chosen, then failing: the READ from now on; `why` keeps the first decision. */
    __atomic_store_n(&ch->method, FERRY_IB_FLUSH_READ, __ATOMIC_RELAXED);
    FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u from %s on %s: GDR flush by RDMA READ from now "
               "on: %s (NCCL_FERRY_IB_FLUSH=auto had chosen cuFlushGPUDirectRDMAWrites)",
               rc->base.ring.serial, rc->base.conn.peer, ferry_ib_comm_where(&rc->base), why);
}

static int ferry_ib_flush_ns_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The median of the method's timings after the first (the warm-up). */
static uint64_t ferry_ib_flush_median(ferry_ib_flush_choice_t *ch, int k)
{
    uint64_t v[FERRY_IB_FLUSH_TRIAL - 1];
    int n = FERRY_IB_FLUSH_TRIAL - 1;

    memcpy(v, &ch->ns[k][1], sizeof(v));
    qsort(v, (size_t)n, sizeof(v[0]), ferry_ib_flush_ns_cmp);
    return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

void ferry_ib_flush_timed(ferry_ib_recv_comm_t *rc, int method, uint64_t ns)
{
    ferry_ib_flush_choice_t *ch = &rc->flush.choice;
    int k = method == FERRY_IB_FLUSH_CUDA;

    if (ferry_ib_state.cfg.flush != FERRY_IB_FLUSH_AUTO || ch->decided ||
        ch->tried[k] >= FERRY_IB_FLUSH_TRIAL)
        return;
    ch->ns[k][ch->tried[k]++] = ns;
    if (ch->tried[0] < FERRY_IB_FLUSH_TRIAL || ch->tried[1] < FERRY_IB_FLUSH_TRIAL)
        return;
    ch->median_ns[0] = ferry_ib_flush_median(ch, 0);
    ch->median_ns[1] = ferry_ib_flush_median(ch, 1);
    k = ch->median_ns[1] < ch->median_ns[0];
    snprintf(ch->why, sizeof(ch->why), "median %.1f us from iflush to done, against %.1f us "
             "for %s, over %d flushes of each (NCCL_FERRY_IB_FLUSH=auto; =read or =cuda fixes "
             "the method)", (double)ch->median_ns[k] / 1e3, (double)ch->median_ns[!k] / 1e3,
             k ? "the RDMA READ" : "cuFlushGPUDirectRDMAWrites", FERRY_IB_FLUSH_TRIAL - 1);
    ferry_ib_flush_decide(rc, k ? FERRY_IB_FLUSH_CUDA : FERRY_IB_FLUSH_READ);
}
