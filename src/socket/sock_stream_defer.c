/*
 * NCCL_FERRY_INJECT_DELAY_US: every chunk completion is reported that much
 * later while the lane moves on, which shows how much per-chunk latency the
 * pipeline hides. Per lane, a ring of completions held back, oldest first.
 */
#include "socket/sock_stream.h"

/* Report held-back completions whose time has come; returns how many. */
long ferry_sock_stream_defer_retire(ferry_sock_stream_t *comm, int lane)
{
    ferry_sock_defer_t *d = &comm->defer[lane];
    uint64_t now = ferry_px_now_ns();
    unsigned head = atomic_load_explicit(&d->head, memory_order_relaxed);
    unsigned tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    long n = 0;

    while (head != tail && atomic_load_explicit(&d->slot[head % FERRY_SOCK_DEFER_MAX].due_ns,
                                                memory_order_relaxed) <= now) {
        ferry_px_req_part_done(d->slot[head % FERRY_SOCK_DEFER_MAX].req);
        head++;
        n++;
    }
    atomic_store_explicit(&d->head, head, memory_order_relaxed);
    return n;
}

void ferry_sock_stream_chunk_finish(ferry_sock_stream_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_px_req_part_moved(req);
    ferry_sock_stream_chunk_retire(comm, lane, req);
}

void ferry_sock_stream_chunk_retire(ferry_sock_stream_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_sock_defer_t *d;
    unsigned tail;

    if (comm->defer == NULL) {
        ferry_px_req_part_done(req);
        return;
    }
    d = &comm->defer[lane];
    tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    /* Ring full: wait for the oldest, as a completion queue that is full would. */
    while (tail - atomic_load_explicit(&d->head, memory_order_relaxed) == FERRY_SOCK_DEFER_MAX)
        ferry_sock_stream_defer_retire(comm, lane);
    d->slot[tail % FERRY_SOCK_DEFER_MAX].req = req;
    atomic_store_explicit(&d->slot[tail % FERRY_SOCK_DEFER_MAX].due_ns,
                          ferry_px_now_ns() + (uint64_t)comm->inject_delay_us * 1000,
                          memory_order_relaxed);
    atomic_store_explicit(&d->tail, tail + 1, memory_order_release);
}

uint64_t ferry_sock_stream_defer_next_ns(ferry_sock_stream_t *comm, int lane)
{
    uint64_t now = ferry_px_now_ns(), due;
    ferry_sock_defer_t *d;
    unsigned head;

    if (comm->defer == NULL)
        return UINT64_MAX;
    d = &comm->defer[lane];
    head = atomic_load_explicit(&d->head, memory_order_relaxed);
    /* Acquire: a slot the tail covers has its due time written. */
    if (head == atomic_load_explicit(&d->tail, memory_order_acquire))
        return UINT64_MAX;
    due = atomic_load_explicit(&d->slot[head % FERRY_SOCK_DEFER_MAX].due_ns, memory_order_relaxed);
    return due <= now ? 0 : due - now;
}

