/*
 * The stream scheduler on the process' helper pool (proxy/pool.h): a comm's
 * lanes are the pool's units. What the pool asks of a lane is answered here
 * from the stream's words: lane 0 while NCCL's thread holds it, held-back
 * completions as timers, the spin window after small messages.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "socket/sock_stream.h"

/* Spin only if a small message was posted within this window. */
#define FERRY_SOCK_SPIN_RECENT_NS 2000000ULL

/*
 * One progress call moves at most a few chunks per lane (the backend's
 * burst, sock_lane.c): that bound is what keeps a bulk stream from
 * starving another comm's lanes on the same pool thread.
 */
static long ferry_sock_stream_unit_progress(void *ctx, int lane, short revents)
{
    ferry_sock_stream_t *comm = ctx;

    if (atomic_load_explicit(&comm->stop, memory_order_acquire))
        return 0;
    if (lane == 0 && ferry_sock_stream_lane0_held_ns(comm, ferry_px_now_ns()) > 0)
        return 0;
    return ferry_sock_stream_progress_lane_pool(comm, lane, revents);
}

static short ferry_sock_stream_unit_wants(void *ctx, int lane, int *fd_p)
{
    ferry_sock_stream_t *comm = ctx;

    *fd_p = -1;
    /* A failed comm waits for nothing but its timers (held-back completions). */
    if (atomic_load_explicit(&comm->stop, memory_order_relaxed) ||
        atomic_load_explicit(&comm->ring.failed, memory_order_relaxed))
        return 0;
    if (lane == 0 && ferry_sock_stream_lane0_held_ns(comm, ferry_px_now_ns()) > 0)
        return 0;
    /* Held by another thread: its release kicks this one (sock_stream.c). */
    if (ferry_sock_stream_lane_missed(comm, lane))
        return 0;
    return comm->ops->wants(comm, lane, fd_p);
}

/* Held-back completions come due; lane 0 comes back when NCCL's thread stops calling in. */
static uint64_t ferry_sock_stream_unit_next_ns(void *ctx, int lane, uint64_t now)
{
    ferry_sock_stream_t *comm = ctx;
    uint64_t next = ferry_sock_stream_defer_next_ns(comm, lane), held;

    if (lane == 0 && (held = ferry_sock_stream_lane0_held_ns(comm, now)) > 0 && held < next)
        next = held;
    return next;
}

/* The busy-poll window (NCCL_FERRY_SPIN_US), only while small messages flow. */
static uint64_t ferry_sock_stream_unit_spin_ns(void *ctx, uint64_t now)
{
    const ferry_sock_stream_t *comm = ctx;

    if (comm->spin_ns == 0 ||
        now - atomic_load_explicit(&comm->small_post_ns, memory_order_relaxed) >
            FERRY_SOCK_SPIN_RECENT_NS)
        return 0;
    return comm->spin_ns;
}

static const ferry_px_pool_ops_t ferry_sock_stream_pool_ops = {
    .progress = ferry_sock_stream_unit_progress,
    .wants    = ferry_sock_stream_unit_wants,
    .next_ns  = ferry_sock_stream_unit_next_ns,
    .spin_ns  = ferry_sock_stream_unit_spin_ns,
};

ferry_status_t ferry_sock_stream_start(ferry_sock_stream_t *comm)
{
    ferry_px_pool_want_t want;
    ferry_status_t status;
    char desc[160];

    if (comm->inject_delay_us > 0 && comm->defer == NULL) {
        comm->defer = calloc((size_t)comm->nlanes, sizeof(*comm->defer));
        if (comm->defer == NULL)
            return FERRY_ERR_NO_MEMORY;
    }
    ferry_px_ring_register(&comm->ring);
    if (comm->nthreads == 0)
        return FERRY_OK;
    memset(&want, 0, sizeof(want));
    want.threads = comm->nthreads;
    want.pool_size = comm->pool_size > 0 ? comm->pool_size : comm->nthreads;
    want.has_cpus = comm->has_cpus;
    want.cpus = comm->cpus;
    want.place_away = comm->place_away;
    status = ferry_px_pool_attach(&comm->pool, &ferry_sock_stream_pool_ops, comm, comm->nlanes,
                                  &want);
    if (status != FERRY_OK) {
        ferry_px_ring_describe(&comm->ring, desc, sizeof(desc));
        FERRY_WARN("%s: cannot attach its %d lanes to the helper thread pool (%s); the comm is "
                   "not opened: check the process' thread and open-file limits (ulimit -u, "
                   "ulimit -n) or set NCCL_FERRY_THREADS=0", desc, comm->nlanes,
                   ferry_status_str(status));
        ferry_sock_stream_stop(comm);
        return status == FERRY_ERR_NO_MEMORY ? status : FERRY_ERR_IO;
    }
    /* The pool may have fewer threads than asked for: the lanes spread over those. */
    comm->nthreads = comm->pool.nthreads;
    return FERRY_OK;
}

void ferry_sock_stream_stop(ferry_sock_stream_t *comm)
{
    atomic_store_explicit(&comm->stop, 1, memory_order_release);
    /* After this no pool thread is inside the comm's lanes, nor will be. */
    ferry_px_pool_detach(&comm->pool);
    ferry_px_ring_unregister(&comm->ring);
    free(comm->defer);
    comm->defer = NULL;
}
