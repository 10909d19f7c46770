/*
 * The stream scheduler's part of a dump and of a stall warning: each lane's
 * state and figures, the pool threads that serve it and its kicks.
 */
#include <inttypes.h>
#include <stdio.h>

#include "socket/sock_stream.h"

/*
 * The pool threads that serve the comm: named here, their figures in the
 * pool's section of the dump (they are shared with other comms). What is
 * this comm's own: its chunks and the kicks its posts sent.
 */
static void ferry_sock_stream_dump_threads(FILE *out, const ferry_sock_stream_t *comm)
{
    uint64_t chunks = 0;
    char names[256];
    int i, n = 0, index, placed_for;
    ferry_px_pool_stats_t st;

    if (comm->nthreads == 0) {
        fprintf(out, "NET/ferry :     no helper threads: NCCL's thread moves every lane\n");
        return;
    }
    for (i = 0; i < comm->nlanes; i++)
        chunks += atomic_load_explicit(&comm->lanes[i].chunks, memory_order_relaxed);
    names[0] = '\0';
    for (i = 0; i < comm->pool.nthreads && n >= 0 && (size_t)n < sizeof(names); i++)
        if (ferry_px_pool_thread_stats(&comm->pool, i, &st, &index, &placed_for))
            n += snprintf(names + n, sizeof(names) - (size_t)n, "%sferry-pool-%d",
                          n > 0 ? ", " : "", index);
    fprintf(out, "NET/ferry :     served by %s (of the process' %d; their figures under "
            "\"helper pool\"): %" PRIu64 " chunks, %" PRIu64 " helper wake-ups by this comm's "
            "posts, %" PRIu64 " times NCCL's thread moved a message no helper had taken\n",
            names[0] != '\0' ? names : "no pool thread", ferry_px_pool_size(), chunks,
            (uint64_t)atomic_load_explicit(&comm->pool.wakes_sent, memory_order_relaxed),
            (uint64_t)atomic_load_explicit(&comm->rescues, memory_order_relaxed));
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
