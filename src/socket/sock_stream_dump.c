/*
 * The stream scheduler's part of a dump and of a stall warning: each lane's
 * state and figures, the pool threads that serve it and their wake-ups.
 */
#include <inttypes.h>
#include <stdio.h>

#include "socket/sock_stream.h"

/*
 * The pool threads that serve the comm (shared with other comms, so their
 * figures are the threads', not this comm's): how often they turned, slept
 * and what woke them, and the wake-ups per chunk this comm moved.
 */
static void ferry_sock_stream_dump_threads(FILE *out, const ferry_sock_stream_t *comm)
{
    uint64_t chunks = 0, sleeps = 0;
    ferry_px_pool_stats_t st;
    int i, index, placed_for;

    if (comm->nthreads == 0) {
        fprintf(out, "NET/ferry :     no helper threads: NCCL's thread moves every lane\n");
        return;
    }
    for (i = 0; i < comm->nlanes; i++)
        chunks += atomic_load_explicit(&comm->lanes[i].chunks, memory_order_relaxed);
    for (i = 0; i < comm->pool.nthreads; i++) {
        uint64_t slept;
        char placed[96] = "";

        if (!ferry_px_pool_thread_stats(&comm->pool, i, &st, &index, &placed_for))
            continue;
        slept = atomic_load_explicit(&st.sleeps, memory_order_relaxed);
        sleeps += slept;
        if (comm->place_away)
            snprintf(placed, sizeof(placed), "; kept off the posting CPU, moved %" PRIu64
                     " times, last off CPU %d",
                     (uint64_t)atomic_load_explicit(&st.placed, memory_order_relaxed), placed_for);
        fprintf(out, "NET/ferry :     thread %d (ferry-pool-%d, of the process' %d): %" PRIu64
                " sweeps (%" PRIu64 " found nothing, %" PRIu64 " over every lane), slept %" PRIu64
                " times: woken %" PRIu64 " by posts, %" PRIu64 " by its streams, %" PRIu64
                " by the timer%s\n",
                i, index, ferry_px_pool_size(),
                (uint64_t)atomic_load_explicit(&st.sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st.idle_sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st.full_sweeps, memory_order_relaxed), slept,
                (uint64_t)atomic_load_explicit(&st.woken_post, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st.woken_io, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st.woken_timer, memory_order_relaxed), placed);
    }
    fprintf(out, "NET/ferry :     helper wake-ups: %" PRIu64 " (of threads shared with other "
            "comms) for %" PRIu64 " chunks (%.2f per chunk), %" PRIu64 " of them kicks by this "
            "comm's posts\n", sleeps, chunks, chunks > 0 ? (double)sleeps / (double)chunks : 0.0,
            (uint64_t)atomic_load_explicit(&comm->pool.wakes_sent, memory_order_relaxed));
}

void ferry_sock_stream_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now)
{
    const ferry_sock_stream_t *comm = (const ferry_sock_stream_t *)ring;
    int i;

    (void)now;
    fprintf(out, "NET/ferry :     lanes %d, threads %d\n", comm->nlanes, comm->nthreads);
    for (i = 0; i < comm->nlanes; i++) {
        const ferry_sock_lane_stats_t *l = &comm->lanes[i];
        uint64_t chunks = atomic_load(&l->chunks);
        char full[48] = "";

        if (ring->kind == FERRY_PX_SEND)
            snprintf(full, sizeof(full), ", send buffer full %" PRIu64 " times",
                     (uint64_t)atomic_load(&l->blocked));
        fprintf(out, "NET/ferry :     lane %d: %s seq %u, %" PRIu64 " chunks, %" PRIu64 " bytes, "
                "%.1f us per chunk from %s to moved%s\n",
                i, ferry_sock_lane_state_str(atomic_load(&l->state)), atomic_load(&l->seq), chunks,
                (uint64_t)atomic_load(&l->bytes),
                chunks > 0 ? (double)atomic_load(&l->busy_ns) / (double)chunks / 1e3 : 0.0,
                ring->kind == FERRY_PX_SEND ? "taken" : "its header", full);
    }
    ferry_sock_stream_dump_threads(out, comm);
}

void ferry_sock_stream_state(const ferry_px_ring_t *ring, char *buf, size_t len)
{
    const ferry_sock_stream_t *comm = (const ferry_sock_stream_t *)ring;
    int count[FERRY_SOCK_LANE_STATE_COUNT] = {0}, lane, st, n;

    for (lane = 0; lane < comm->nlanes; lane++) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (st >= 0 && st < FERRY_SOCK_LANE_STATE_COUNT)
            count[st]++;
    }
    n = snprintf(buf, len, "streams: ");
    for (st = 0; st < FERRY_SOCK_LANE_STATE_COUNT; st++)
        if (count[st] > 0 && n >= 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, "%s%d %s", n > 9 ? ", " : "", count[st],
                          ferry_sock_lane_state_str(st));
}
