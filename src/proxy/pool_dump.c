/*
 * The pool's part of a dump, printed once per dump rather than under every
 * comm: the threads are shared by all comms of the process, so their figures
 * belong to the process. Each comm's own section names the threads that
 * serve it and counts its own kicks.
 */
#include <inttypes.h>
#include <stdio.h>

#include "proxy/pool_impl.h"

void ferry_px_pool_dump_threads(FILE *out, ferry_px_pool_t *pool)
{
    int i;

    fprintf(out, "NET/ferry : helper pool: %d thread(s), shared by every comm of the process\n",
            pool->n);
    for (i = 0; i < pool->n; i++) {
        ferry_px_pool_thread_t *t = &pool->threads[i];
        const ferry_px_pool_stats_t *st = &t->stats;
        char placed[80] = "";
        int nunits;

        /* The lock is let go between turns, and a turn is bounded. */
        pthread_mutex_lock(&t->lock);
        nunits = t->nunits;
        pthread_mutex_unlock(&t->lock);

        if (pool->place_away)
            snprintf(placed, sizeof(placed), "; kept off the posting CPU, moved %" PRIu64
                     " times, last off CPU %d",
                     (uint64_t)atomic_load_explicit(&st->placed, memory_order_relaxed),
                     atomic_load_explicit(&t->placed_for, memory_order_relaxed));
        fprintf(out, "NET/ferry :   ferry-pool-%d: %d unit(s), %" PRIu64 " sweeps (%" PRIu64
                " found nothing, %" PRIu64 " over every unit, %" PRIu64 " of those found work no "
                "wake-up had announced), slept %" PRIu64 " times: woken %"
                PRIu64 " by kicks, %" PRIu64 " by its fds, %" PRIu64 " by the timer%s\n",
                t->index, nunits,
                (uint64_t)atomic_load_explicit(&st->sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->idle_sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->full_sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->rescues, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->sleeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_post, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_io, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_timer, memory_order_relaxed), placed);
    }
}
