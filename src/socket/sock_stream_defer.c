/*
 * NCCL_FERRY_INJECT_DELAY_US: every chunk completion is reported that much
 * later while the lane moves on, which shows how much per-chunk latency the
 * pipeline hides. Per lane, a ring of completions held back, oldest first.
 */
#include "proxy/stream.h"

/* Report held-back completions whose time has come; returns how many. */
long ferry_px_stream_defer_retire(ferry_px_stream_t *comm, int lane)
{
    ferry_px_defer_t *d = &comm->defer[lane];
    uint64_t now = ferry_px_now_ns();
    unsigned head = atomic_load_explicit(&d->head, memory_order_relaxed);
    unsigned tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    long n = 0;

    while (head != tail && atomic_load_explicit(&d->slot[head % FERRY_PX_DEFER_MAX].due_ns,
                                                memory_order_relaxed) <= now) {
        ferry_px_req_part_done(d->slot[head % FERRY_PX_DEFER_MAX].req);
        head++;
        n++;
    }
    atomic_store_explicit(&d->head, head, memory_order_relaxed);
    return n;
}

void ferry_px_stream_chunk_finish(ferry_px_stream_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_px_req_part_moved(req);
    ferry_px_stream_chunk_retire(comm, lane, req);
}

void ferry_px_stream_chunk_retire(ferry_px_stream_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_px_defer_t *d;
    unsigned tail;

    if (comm->defer == NULL) {
        ferry_px_req_part_done(req);
        return;
    }
    d = &comm->defer[lane];
    tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    /* Ring full: wait for the oldest, as a completion queue that is full would. */
    while (tail - atomic_load_explicit(&d->head, memory_order_relaxed) == FERRY_PX_DEFER_MAX)
        ferry_px_stream_defer_retire(comm, lane);
    d->slot[tail % FERRY_PX_DEFER_MAX].req = req;
    atomic_store_explicit(&d->slot[tail % FERRY_PX_DEFER_MAX].due_ns,
                          ferry_px_now_ns() + (uint64_t)comm->inject_delay_us * 1000,
                          memory_order_relaxed);
    atomic_store_explicit(&d->tail, tail + 1, memory_order_release);
}

uint64_t ferry_px_stream_defer_next_ns(ferry_px_stream_t *comm, int w)
{
    uint64_t best = UINT64_MAX, now = ferry_px_now_ns();
    int lane;

    if (comm->defer == NULL)
        return best;
    for (lane = w; lane < comm->nlanes; lane += comm->nworkers) {
        ferry_px_defer_t *d = &comm->defer[lane];
        unsigned head = atomic_load_explicit(&d->head, memory_order_relaxed);
        uint64_t due;

        /* Acquire: a slot the tail covers has its due time written. */
        if (head == atomic_load_explicit(&d->tail, memory_order_acquire))
            continue;
        due = atomic_load_explicit(&d->slot[head % FERRY_PX_DEFER_MAX].due_ns,
                                   memory_order_relaxed);
        if (due <= now)
            return 0;
        if (due - now < best)
            best = due - now;
    }
    return best;
}

