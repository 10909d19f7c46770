/*
 * The stream scheduler's part of a dump and of a stall warning: each lane's
 * state and figures, the helper threads and their wake-ups.
 */
#include <inttypes.h>
#include <stdio.h>

#include "proxy/stream.h"

/*
 * The helper threads: how often they swept, slept and what woke them, and
 * the wake-ups per chunk moved (the scheduler's share of the data path).
 */
static void ferry_px_dump_workers(FILE *out, const ferry_px_stream_t *comm)
{
    uint64_t chunks = 0, sleeps = 0;
    int i;

    if (comm->nworkers == 0) {
        fprintf(out, "NET/ferry :     no helper threads: NCCL's thread moves every lane\n");
        return;
    }
    for (i = 0; i < comm->nlanes; i++)
        chunks += atomic_load_explicit(&comm->lanes[i].chunks, memory_order_relaxed);
    for (i = 0; i < comm->nworkers; i++) {
        const ferry_px_worker_stats_t *st = &comm->workers[i].stats;
        uint64_t slept = atomic_load_explicit(&st->sleeps, memory_order_relaxed);
        char placed[96] = "";

        sleeps += slept;
        if (comm->place_away)
            snprintf(placed, sizeof(placed), "; kept off the posting CPU, moved %" PRIu64
                     " times, last off CPU %d",
                     (uint64_t)atomic_load_explicit(&st->placed, memory_order_relaxed),
                     atomic_load_explicit(&comm->workers[i].placed_for, memory_order_relaxed));
        fprintf(out, "NET/ferry :     thread %d (ferry-%c%u-%d): %" PRIu64 " sweeps (%" PRIu64
                " found nothing), slept %" PRIu64 " times: woken %" PRIu64 " by posts, %" PRIu64
                " by its streams, %" PRIu64 " by the timer%s\n",
                i, comm->ring.kind == FERRY_PX_SEND ? 's' : 'r', comm->ring.serial % 100000, i,
                (uint64_t)atomic_load_explicit(&st->sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->idle_sweeps, memory_order_relaxed), slept,
                (uint64_t)atomic_load_explicit(&st->woken_post, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_io, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_timer, memory_order_relaxed), placed);
    }
    fprintf(out, "NET/ferry :     helper wake-ups: %" PRIu64 " for %" PRIu64 " chunks (%.2f per "
            "chunk), %" PRIu64 " of them kicks by posts\n", sleeps, chunks,
            chunks > 0 ? (double)sleeps / (double)chunks : 0.0,
            (uint64_t)atomic_load_explicit(&comm->wakes_sent, memory_order_relaxed));
}

void ferry_px_stream_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now)
{
    const ferry_px_stream_t *comm = (const ferry_px_stream_t *)ring;
    int i;

    (void)now;
    fprintf(out, "NET/ferry :     lanes %d, threads %d\n", comm->nlanes, comm->nworkers);
    for (i = 0; i < comm->nlanes; i++) {
        const ferry_px_lane_stats_t *l = &comm->lanes[i];
        uint64_t chunks = atomic_load(&l->chunks);
        char full[48] = "";

        if (ring->kind == FERRY_PX_SEND)
            snprintf(full, sizeof(full), ", send buffer full %" PRIu64 " times",
                     (uint64_t)atomic_load(&l->blocked));
        fprintf(out, "NET/ferry :     lane %d: %s seq %u, %" PRIu64 " chunks, %" PRIu64 " bytes, "
                "%.1f us per chunk from %s to moved%s\n",
                i, ferry_px_lane_state_str(atomic_load(&l->state)), atomic_load(&l->seq), chunks,
                (uint64_t)atomic_load(&l->bytes),
                chunks > 0 ? (double)atomic_load(&l->busy_ns) / (double)chunks / 1e3 : 0.0,
                ring->kind == FERRY_PX_SEND ? "taken" : "its header", full);
    }
    ferry_px_dump_workers(out, comm);
}

void ferry_px_stream_state(const ferry_px_ring_t *ring, char *buf, size_t len)
{
    const ferry_px_stream_t *comm = (const ferry_px_stream_t *)ring;
    int count[FERRY_PX_LANE_STATE_COUNT] = {0}, lane, st, n;

    for (lane = 0; lane < comm->nlanes; lane++) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (st >= 0 && st < FERRY_PX_LANE_STATE_COUNT)
            count[st]++;
    }
    n = snprintf(buf, len, "streams: ");
    for (st = 0; st < FERRY_PX_LANE_STATE_COUNT; st++)
        if (count[st] > 0 && n >= 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, "%s%d %s", n > 9 ? ", " : "", count[st],
                          ferry_px_lane_state_str(st));
}
