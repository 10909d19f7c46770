/*
 * Waking the stream scheduler's helper threads: after a post only those
 * that now have work, after a failure or at stop all of them, each with one
 * eventfd write per sleep.
 */
#include <unistd.h>

#include "proxy/stream.h"

static void ferry_px_worker_wake(ferry_px_worker_t *w);

void ferry_px_stream_kick(ferry_px_stream_t *comm)
{
    int i;

    /*
     * seq_cst on both sides (kick_gen here, sleeping in the worker) closes
     * the window where a worker decided to sleep just before the post.
     */
    atomic_fetch_add(&comm->kick_gen, 1);
    for (i = 0; i < comm->nworkers; i++) {
        ferry_px_worker_t *w = &comm->workers[i];

        if (w->wake_fd >= 0 && atomic_load(&w->sleeping))
            ferry_px_worker_wake(w);
    }
}

/*
 * The first waker takes the worker's sleeping flag: one eventfd write per
 * sleep. Without that, every post until the woken worker got a CPU wrote
 * again (on a loaded 2-CPU VM, 2.5 writes per sleep), each a system call on
 * NCCL's thread, which serves every channel.
 */
static void ferry_px_worker_wake(ferry_px_worker_t *w)
{
    uint64_t one = 1;
    ssize_t n;

    if (!atomic_exchange(&w->sleeping, 0))
        return; /* Awake, or another thread woke it first. */
    n = write(w->wake_fd, &one, sizeof(one));

    /* EAGAIN means the counter is already non-zero: awake anyway. */
    if (n == (ssize_t)sizeof(one))
        atomic_fetch_add_explicit(&w->comm->wakes_sent, 1, memory_order_relaxed);
}

/*
 * 1 if a lane of worker w holds a chunk (send) or is parked on a message
 * whose irecv is posted now (recv; a lane parked on a later message would
 * only park again).
 */
static int ferry_px_worker_needed(ferry_px_stream_t *comm, int w)
{
    int lane, st;

    for (lane = w; lane < comm->nlanes; lane += comm->nworkers) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (comm->ring.kind == FERRY_PX_SEND ? (st == FERRY_PX_LANE_HEADER ||
                                           st == FERRY_PX_LANE_PAYLOAD ||
                                           st == FERRY_PX_LANE_BLOCKED)
                                        : st == FERRY_PX_LANE_PARKED &&
                                              ferry_px_ring_match(&comm->ring, atomic_load_explicit(
                                                  &comm->lanes[lane].seq,
                                                  memory_order_relaxed)) != NULL)
            return 1;
    }
    return 0;
}

void ferry_px_stream_kick_posted(ferry_px_stream_t *comm, uint32_t nchunks)
{
    int i;
    /* One sleeping worker per unclaimed chunk is enough; more only burn wake-ups. */
    uint32_t want = comm->ring.kind == FERRY_PX_SEND && atomic_load(&comm->unclaimed) ? nchunks : 0;

    /*
     * seq_cst on kick_gen and on each worker's sleeping flag: a worker that
     * is not asleep yet sees the new generation and sweeps again; one that
     * is asleep published its lane states before it said so.
     */
    atomic_fetch_add(&comm->kick_gen, 1);
    for (i = 0; i < comm->nworkers; i++) {
        ferry_px_worker_t *w = &comm->workers[i];

        if (w->wake_fd < 0 || !atomic_load(&w->sleeping))
            continue;
        if (want > 0) {
            want--;
            ferry_px_worker_wake(w);
        } else if (ferry_px_worker_needed(comm, i)) {
            ferry_px_worker_wake(w);
        }
    }
}

