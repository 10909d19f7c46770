/*
 * Kicking the comm's pool threads (proxy/pool.h): after a post only those
 * that now have work, after a failure or at stop all of them. The pool
 * writes a sleeping thread's eventfd once per sleep; a thread that is awake
 * only notes the kick and serves the comm's lanes on its next turn.
 */
#include "socket/sock_stream.h"

void ferry_sock_stream_kick(ferry_sock_stream_t *comm)
{
    if (comm->pool.pool != NULL)
        ferry_px_pool_kick_all(&comm->pool);
}

/*
 * 1 if a lane of slot j holds a chunk (send) or is parked on a message
 * whose irecv is posted now (recv; a lane parked on a later message would
 * only park again).
 */
static int ferry_sock_stream_slot_needed(ferry_sock_stream_t *comm, int j)
{
    int lane, st;

    for (lane = j; lane < comm->nlanes; lane += comm->nthreads) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (comm->ring.kind == FERRY_PX_SEND ? (st == FERRY_SOCK_LANE_HEADER ||
                                           st == FERRY_SOCK_LANE_PAYLOAD ||
                                           st == FERRY_SOCK_LANE_BLOCKED)
                                        : st == FERRY_SOCK_LANE_PARKED &&
                                              ferry_px_ring_match(&comm->ring, atomic_load_explicit(
                                                  &comm->lanes[lane].seq,
                                                  memory_order_relaxed)) != NULL)
            return 1;
    }
    return 0;
}

void ferry_sock_stream_kick_posted(ferry_sock_stream_t *comm, uint32_t nchunks)
{
    int j;
    /* One thread per unclaimed chunk is enough; more only burn wake-ups. */
    uint32_t want = comm->ring.kind == FERRY_PX_SEND && atomic_load(&comm->unclaimed) ? nchunks : 0;

    if (comm->pool.pool == NULL)
        return;
    for (j = 0; j < comm->pool.nthreads; j++) {
        /*
         * A thread that is not asleep may be in the middle of a turn over
         * these lanes (a lane parking on a message whose irecv is this very
         * post), so its lane states say nothing yet: it is kicked, which
         * costs no system call while it is awake (proxy/pool.h). One that
         * sleeps published its lane states before it said so (seq_cst on
         * its sleeping flag): it is woken only if a lane of it has work.
         */
        if (!ferry_px_pool_sleeping(&comm->pool, j)) {
            ferry_px_pool_kick(&comm->pool, j);
        } else if (want > 0) {
            want--;
            ferry_px_pool_kick(&comm->pool, j);
        } else if (ferry_sock_stream_slot_needed(comm, j)) {
            ferry_px_pool_kick(&comm->pool, j);
        }
    }
}
