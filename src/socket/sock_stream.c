#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock_stream.h"

/*
 * Messages up to this size are pushed by the thread that posts them: one
 * chunk, one sendmsg, no hand-off to a helper thread (the backend's config
 * overrides it: NCCL_FERRY_INLINE_MAX).
 */
#define FERRY_SOCK_ASSIST_MAX (32 << 10)
/*
 * Messages up to this size are latency-bound: they switch on the spin window.
 * NCCL's bulk traffic comes as 512 KiB..1 MiB slices; below that a wake-up
 * per chunk is a visible share of the message time.
 */
#define FERRY_SOCK_SMALL (256 << 10)
/*
 * How long after NCCL's last call lane 0 stays with NCCL's thread. NCCL's
 * proxy calls test() in a tight loop while it has work, so a gap this long
 * means it is busy elsewhere and the pool should take the lane back.
 */
#define FERRY_SOCK_LANE0_HOLD_NS 200000ULL
/*
 * A latency-bound send (up to FERRY_SOCK_SMALL) that no lane has taken this
 * long after its post was handed to a helper the scheduler has not run:
 * woken onto a core where another thread spins (an application waiting on
 * its GPU stream without yielding), it may wait out that thread's whole
 * time slice, milliseconds. A helper on a free core takes its kick in
 * microseconds, so past this NCCL's thread moves the message itself
 * (ferry_sock_stream_rescue), at most once per this interval per comm. The
 * backend's config overrides it (NCCL_FERRY_RESCUE_US).
 */
#define FERRY_SOCK_RESCUE_NS 100000ULL

/*
 * A lone comm. NCCL's thread serves every channel, so it must not become the
 * copy engine for all of them (the reason for the 32 KiB limit above). But
 * when one comm of a kind is all that posts (a ping-pong, a one-channel p2p
 * exchange), there is nobody else to serve, and each message above 32 KiB
 * otherwise pays a helper wake-up on each side, most of a small message's
 * time. The limit (solo_max, NCCL_FERRY_SOLO_MAX) defaults to one chunk,
 * 64 KiB: larger messages are cut over the streams, and with cores to spare
 * their helpers copying in parallel beat one thread sending it all. A comm
 * is alone when no other comm of its kind posted within this window before
 * it.
 */
#define FERRY_SOCK_SOLO_WINDOW_NS 2000000ULL

typedef struct ferry_sock_solo {
    _Atomic uintptr_t last;     /* The comm that posted last... */
    _Atomic uint64_t  last_ns;  /* ...and when. */
    _Atomic uint64_t  multi_ns; /* Last time two comms posted within the window. */
} ferry_sock_solo_t;

static ferry_sock_solo_t ferry_sock_solo_state[2]; /* [0] receive, [1] send. */

static int ferry_sock_stream_alone(ferry_sock_stream_t *comm)
{
    ferry_sock_solo_t *st = &ferry_sock_solo_state[comm->ring.kind == FERRY_PX_SEND];
    uint64_t now = ferry_px_now_ns(), prev_ns, multi;
    uintptr_t prev;

    prev = atomic_exchange_explicit(&st->last, (uintptr_t)comm, memory_order_relaxed);
    prev_ns = atomic_exchange_explicit(&st->last_ns, now, memory_order_relaxed);
    if (prev != 0 && prev != (uintptr_t)comm && now - prev_ns < FERRY_SOCK_SOLO_WINDOW_NS)
        atomic_store_explicit(&st->multi_ns, now, memory_order_relaxed);
    multi = atomic_load_explicit(&st->multi_ns, memory_order_relaxed);
    return multi == 0 || now - multi > FERRY_SOCK_SOLO_WINDOW_NS;
}

static const char *const ferry_sock_lane_state_names[FERRY_SOCK_LANE_STATE_COUNT] = {
    [FERRY_SOCK_LANE_IDLE]    = "idle",
    [FERRY_SOCK_LANE_HEADER]  = "header",
    [FERRY_SOCK_LANE_PAYLOAD] = "payload",
    [FERRY_SOCK_LANE_PARKED]  = "parked",
    [FERRY_SOCK_LANE_BLOCKED] = "blocked",
    [FERRY_SOCK_LANE_CLOSED]  = "closed",
    [FERRY_SOCK_LANE_FAILED]  = "failed",
};

const char *ferry_sock_lane_state_str(int state)
{
    if (state < 0 || state >= FERRY_SOCK_LANE_STATE_COUNT)
        return "invalid";
    return ferry_sock_lane_state_names[state];
}

ferry_status_t ferry_sock_stream_init(ferry_sock_stream_t *comm, ferry_px_req_kind_t kind,
                                    const char *backend, const char *peer, int nlanes,
                                    int nthreads, size_t chunk_min, size_t chunk_max,
                                    const ferry_sock_stream_lane_ops_t *ops,
                                    const ferry_px_ring_ops_t *ring_ops)
{
    ferry_status_t status;

    if (nlanes < 1 || nlanes > FERRY_SOCK_STREAM_MAX_LANES || nthreads < 0)
        return FERRY_ERR_INVALID;
    memset(comm, 0, sizeof(*comm));
    status = ferry_px_ring_init(&comm->ring, kind, backend, peer, ring_ops);
    if (status != FERRY_OK)
        return status;
    comm->nlanes = nlanes;
    comm->nthreads = nthreads < nlanes ? nthreads : nlanes;
    if (comm->nthreads > FERRY_PX_POOL_MAX_SPREAD)
        comm->nthreads = FERRY_PX_POOL_MAX_SPREAD;
    comm->pool_size = comm->nthreads;
    comm->chunk_min = chunk_min;
    comm->chunk_max = chunk_max;
    comm->ops = ops;
    comm->assist_max = FERRY_SOCK_ASSIST_MAX;
    comm->assist_test_max = FERRY_SOCK_ASSIST_MAX;
    comm->rescue_after_ns = FERRY_SOCK_RESCUE_NS;
    return FERRY_OK;
}

static void ferry_sock_stream_note_small(ferry_sock_stream_t *comm);

/*
 * With place_away the pool keeps off the CPU the posts come from
 * (proxy/pool_place.c): one proxy thread posts for every comm of the
 * process, so the process' last posting CPU is what counts. sched_getcpu()
 * is a vDSO read, no syscall; the pool stores it only when it changed.
 */
static void ferry_sock_stream_note_caller(ferry_sock_stream_t *comm)
{
    if (comm->place_away)
        ferry_px_pool_note_caller(sched_getcpu());
}

static void ferry_sock_stream_release(ferry_sock_stream_t *comm, size_t size, uint32_t nchunks,
                                    int alone);

ferry_px_req_t *ferry_sock_stream_post(ferry_sock_stream_t *comm, void *buf, size_t size, void *mem,
                                     int gated)
{
    ferry_px_chunk_plan_t plan = {0, 0};
    ferry_px_sub_t sub = {.buf = buf, .capacity = size, .mem = mem};
    ferry_px_req_kind_t kind = comm->ring.kind;
    ferry_px_req_t *req;
    int alone;

    ferry_sock_stream_note_caller(comm);
    pthread_mutex_lock(&comm->ring.lock);
    req = ferry_px_ring_slot_locked(&comm->ring);
    if (req == NULL) {
        pthread_mutex_unlock(&comm->ring.lock);
        return NULL;
    }
    /* A send is cut at post; a receive learns its chunks from the first header. */
    if (kind == FERRY_PX_SEND)
        plan = ferry_px_chunk_plan(size, comm->nlanes, comm->chunk_min, comm->chunk_max);
    ferry_px_ring_post_locked(&comm->ring, req, 1, &sub, gated, plan.nchunks, plan.chunk_size);
    if (kind == FERRY_PX_SEND)
        atomic_store(&comm->unclaimed, 1);
    pthread_mutex_unlock(&comm->ring.lock);
    if (kind == FERRY_PX_SEND && size <= FERRY_SOCK_SMALL)
        ferry_sock_stream_note_small(comm);
    alone = comm->solo_max > 0 && ferry_sock_stream_alone(comm);
    atomic_store_explicit(&comm->solo, alone, memory_order_relaxed);
    if (kind == FERRY_PX_SEND && gated)
        return req; /* Nothing to move until ferry_sock_stream_open. */
    ferry_sock_stream_release(comm, size, plan.nchunks, alone);
    return req;
}

/* Hand a posted message's chunks to the lanes: NCCL's thread or the pool. */
static void ferry_sock_stream_release(ferry_sock_stream_t *comm, size_t size, uint32_t nchunks, int alone)
{
    if (comm->ring.kind == FERRY_PX_SEND && (size <= comm->assist_max || comm->nthreads == 0 ||
                                        (alone && size <= comm->solo_max)))
        ferry_sock_stream_assist(comm);
    /* After the assist: a chunk it left half-sent needs its pool thread to watch POLLOUT. */
    ferry_sock_stream_kick_posted(comm, nchunks);
}

void ferry_sock_stream_open(ferry_sock_stream_t *comm, ferry_px_req_t *req)
{
    /* From now its lanes may take it: the rescue's and the stall warning's clock starts again. */
    atomic_store_explicit(&req->last_ns, ferry_px_now_ns(), memory_order_relaxed);
    /* Release: the bytes the backend put in buf before this are what the lanes send. */
    atomic_store_explicit(&req->gated, 0, memory_order_release);
    ferry_sock_stream_release(comm, req->sub[0].capacity,
                          atomic_load_explicit(&req->nparts, memory_order_relaxed),
                          atomic_load_explicit(&comm->solo, memory_order_relaxed));
}

/* Latency-bound traffic flows: pool threads may spin for what comes next (sock_stream_pool.c). */
static void ferry_sock_stream_note_small(ferry_sock_stream_t *comm)
{
    if (comm->spin_ns > 0)
        atomic_store_explicit(&comm->small_post_ns, ferry_px_now_ns(), memory_order_relaxed);
}

/* The lane is ours (lane_busy): move it, then let go and hand it to a pool thread that missed it. */
static long ferry_sock_stream_progress_held(ferry_sock_stream_t *comm, int lane, short revents,
                                            ferry_sock_burst_t burst)
{
    long work;

    /* A failed comm moves no more bytes, but held-back completions still come due. */
    work = atomic_load_explicit(&comm->ring.failed, memory_order_relaxed) == 0
               ? comm->ops->progress(comm, lane, revents, burst)
               : 0;
    /* Completions the backend holds back (MSG_ZEROCOPY) come due even on a failed comm. */
    if (comm->ops->retire != NULL)
        work += comm->ops->retire(comm, lane);
    if (comm->defer != NULL)
        work += ferry_sock_stream_defer_retire(comm, lane);
    /*
     * seq_cst with the pool's missed-then-retry (progress_lane_pool): either
     * its retry finds the lane free, or this exchange finds its mark.
     */
    atomic_store_explicit(&comm->lane_busy[lane], 0, memory_order_seq_cst);
    if (atomic_load_explicit(&comm->lane_missed[lane], memory_order_seq_cst) &&
        atomic_exchange_explicit(&comm->lane_missed[lane], 0, memory_order_seq_cst) &&
        comm->pool.pool != NULL && comm->pool.nthreads > 0)
        ferry_px_pool_kick(&comm->pool, lane % comm->pool.nthreads);
    return work;
}

static int ferry_sock_stream_take_lane(ferry_sock_stream_t *comm, int lane)
{
    int expected = 0;

    return atomic_compare_exchange_strong_explicit(&comm->lane_busy[lane], &expected, 1,
                                                   memory_order_seq_cst, memory_order_seq_cst);
}

static long ferry_sock_stream_progress_burst(ferry_sock_stream_t *comm, int lane, short revents,
                                             ferry_sock_burst_t burst)
{
    if (!ferry_sock_stream_take_lane(comm, lane))
        return 0;
    return ferry_sock_stream_progress_held(comm, lane, revents, burst);
}

long ferry_sock_stream_progress_lane(ferry_sock_stream_t *comm, int lane, short revents, int burst)
{
    return ferry_sock_stream_progress_burst(comm, lane, revents, (ferry_sock_burst_t){burst, 0});
}

long ferry_sock_stream_progress_lane_pool(ferry_sock_stream_t *comm, int lane, short revents)
{
    if (!ferry_sock_stream_take_lane(comm, lane)) {
        atomic_store_explicit(&comm->lane_missed[lane], 1, memory_order_seq_cst);
        if (!ferry_sock_stream_take_lane(comm, lane))
            return 0; /* The holder's release will see the mark and kick. */
    }
    atomic_store_explicit(&comm->lane_missed[lane], 0, memory_order_relaxed);
    return ferry_sock_stream_progress_held(comm, lane, revents,
                                           (ferry_sock_burst_t){FERRY_SOCK_POOL_BURST, 0});
}

int ferry_sock_stream_lane_missed(const ferry_sock_stream_t *comm, int lane)
{
    return atomic_load_explicit(&comm->lane_missed[lane], memory_order_relaxed);
}

/*
 * NCCL's thread on a receive lane: caller_recv_burst chunks at most
 * (FERRY_SOCK_CALLER_BURST; NCCL_FERRY_CALLER_RECV_CHUNKS sets it), ending
 * at a message's last: its proxy hands the tested step to the GPU once
 * test() returns. On a send lane it keeps the pool's burst: without helpers
 * a message's later chunks leave only while NCCL's thread moves them, and a
 * caller may test a receive alone while its send waits.
 */
static ferry_sock_burst_t ferry_sock_stream_caller_burst(const ferry_sock_stream_t *comm)
{
    if (comm->ring.kind != FERRY_PX_RECV)
        return (ferry_sock_burst_t){FERRY_SOCK_POOL_BURST, 0};
    return (ferry_sock_burst_t){
        comm->caller_recv_burst > 0 ? comm->caller_recv_burst : FERRY_SOCK_CALLER_BURST, 1};
}

void ferry_sock_stream_assist(ferry_sock_stream_t *comm)
{
    int lane;

    if (atomic_load_explicit(&comm->stop, memory_order_relaxed))
        return;
    /* Without helper threads, NCCL's thread is the only one moving lanes. */
    if (comm->nthreads == 0) {
        for (lane = 0; lane < comm->nlanes; lane++)
            ferry_sock_stream_progress_burst(comm, lane, 0, ferry_sock_stream_caller_burst(comm));
        return;
    }
    if (atomic_load_explicit(&comm->ring.failed, memory_order_relaxed) == 0) {
        atomic_store_explicit(&comm->assist_ns, ferry_px_now_ns(), memory_order_relaxed);
        ferry_sock_stream_progress_burst(comm, 0, 0, ferry_sock_stream_caller_burst(comm));
    }
}

uint64_t ferry_sock_stream_lane0_held_ns(const ferry_sock_stream_t *comm, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&comm->assist_ns, memory_order_relaxed);

    /* last > now: NCCL's thread called in after the caller read the clock. */
    if (last > now)
        return FERRY_SOCK_LANE0_HOLD_NS;
    return now - last < FERRY_SOCK_LANE0_HOLD_NS ? FERRY_SOCK_LANE0_HOLD_NS - (now - last) : 0;
}

int ferry_sock_stream_claim(ferry_sock_stream_t *comm, ferry_sock_claim_t *claim_p)
{
    ferry_px_req_t *req;
    uint32_t nchunks;

    /* Spinning pool threads look often: answer "nothing" without the lock. */
    if (!atomic_load_explicit(&comm->unclaimed, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&comm->ring.lock);
    if (comm->claim_seq == comm->ring.next_seq) {
        pthread_mutex_unlock(&comm->ring.lock);
        return 0;
    }
    req = &comm->ring.reqs[comm->claim_seq % FERRY_MAX_REQUESTS];
    if (atomic_load_explicit(&req->gated, memory_order_acquire)) {
        /* Messages go out in order: the ones after it wait too. */
        pthread_mutex_unlock(&comm->ring.lock);
        return 0;
    }
    nchunks = atomic_load_explicit(&req->nparts, memory_order_relaxed);
    claim_p->req = req;
    claim_p->seq = comm->claim_seq;
    claim_p->chunk = comm->claim_chunk;
    claim_p->nchunks = nchunks;
    claim_p->msg_size = req->sub[0].capacity;
    claim_p->offset = (uint64_t)comm->claim_chunk * req->part_size;
    claim_p->len = req->sub[0].capacity - claim_p->offset < req->part_size
                       ? req->sub[0].capacity - claim_p->offset
                       : req->part_size;
    if (++comm->claim_chunk == nchunks) {
        comm->claim_seq++;
        comm->claim_chunk = 0;
        if (comm->claim_seq == comm->ring.next_seq)
            atomic_store(&comm->unclaimed, 0);
    }
    ferry_px_req_part_start(req);
    pthread_mutex_unlock(&comm->ring.lock);
    return 1;
}


/*
 * NCCL's thread lends a hand only where a wake-up would be a visible share of
 * the message time: small messages (a receive goes by the size of the last
 * one, its posted size is only an upper bound), a comm alone (ping-pong), or
 * every message when there are no helpers. On bulk traffic the thread that
 * serves every channel would otherwise move a quarter of all bytes itself
 * and hold lane 0 away from its pool thread.
 */
static int ferry_sock_stream_test_assists(ferry_sock_stream_t *comm, const ferry_px_req_t *req)
{
    uint64_t size = req->kind == FERRY_PX_SEND
                        ? atomic_load_explicit(&req->sub[0].size, memory_order_relaxed)
                        : atomic_load_explicit(&comm->ring.last_size, memory_order_relaxed);

    return comm->nthreads == 0 || size <= comm->assist_test_max ||
           (size <= comm->solo_max && atomic_load_explicit(&comm->solo, memory_order_relaxed));
}

/* The first rescue of the process says why at INFO; the dump counts every comm's. */
static void ferry_sock_stream_rescue_note(const ferry_sock_stream_t *comm, const ferry_px_req_t *req,
                                          uint64_t size, uint64_t idle_ns)
{
    static _Atomic int told;
    char who[160];

    if (atomic_exchange_explicit(&told, 1, memory_order_relaxed))
        return;
    ferry_px_ring_describe(&comm->ring, who, sizeof(who));
    FERRY_INFO(FERRY_LOG_NET,
               "%s: send message seq %u (%" PRIu64 " bytes) waited %" PRIu64 " us for a helper "
               "thread; NCCL's thread moves such messages itself after %llu us (counted in the "
               "dump; NCCL_FERRY_RESCUE_US). Helpers that do not run soon share a CPU with a "
               "busy thread: NCCL_FERRY_HELPER_PLACE=mask, or NCCL_FERRY_SEND_THREADS=0 to do "
               "without them (docs/troubleshooting.md)",
               who, req->seq, size,
               idle_ns / 1000, (unsigned long long)(comm->rescue_after_ns / 1000));
}

/* No lane holds a chunk (the states are the dump's; a stale look only delays a rescue). */
static int ferry_sock_stream_lanes_free(const ferry_sock_stream_t *comm)
{
    int lane;

    for (lane = 0; lane < comm->nlanes; lane++) {
        int st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);

        if (st == FERRY_SOCK_LANE_HEADER || st == FERRY_SOCK_LANE_PAYLOAD ||
            st == FERRY_SOCK_LANE_BLOCKED)
            return 0;
    }
    return 1;
}

/*
 * test() on a send of at most FERRY_SOCK_SMALL that no lane has started
 * rescue_after_ns after its post (or its gate's opening): NCCL's thread
 * moves every lane it finds free. Without ferry_sock_stream_assist's claim
 * on lane 0, so that the pool takes the lanes back at its next wake-up.
 * Only a send that no lane has taken, while no lane holds a chunk of an
 * earlier message: then its bytes are all local and the lanes free, so the
 * wait can only be the helper's wake-up. Behind a lane's chunk in hand the
 * message waits its turn in the stream (a helper moving it, or the
 * receiver draining it: POLLOUT), and taking it from NCCL's thread would
 * only put the copy on the thread that serves every channel. A started
 * send may be waiting for the receiver too, and a receive for the sender;
 * telling those from a late helper would cost a syscall per look, so they
 * stay with their helpers.
 */
static long ferry_sock_stream_rescue(ferry_sock_stream_t *comm, const ferry_px_req_t *req)
{
    uint64_t now, last, size;
    long work = 0;
    int lane;

    if (comm->rescue_after_ns == 0 || req->kind != FERRY_PX_SEND ||
        atomic_load_explicit(&req->state, memory_order_relaxed) != FERRY_PX_REQ_POSTED ||
        atomic_load_explicit(&req->gated, memory_order_relaxed) ||
        atomic_load_explicit(&comm->stop, memory_order_relaxed) ||
        atomic_load_explicit(&comm->ring.failed, memory_order_relaxed) != 0)
        return 0;
    size = atomic_load_explicit(&req->sub[0].size, memory_order_relaxed);
    if (size > FERRY_SOCK_SMALL || !ferry_sock_stream_lanes_free(comm))
        return 0;
    now = ferry_px_now_ns();
    /* While POSTED: the post, or its gate's opening (ferry_sock_stream_open). */
    last = atomic_load_explicit(&req->last_ns, memory_order_relaxed);
    if (now < last + comm->rescue_after_ns ||
        now < atomic_load_explicit(&comm->rescue_ns, memory_order_relaxed) + comm->rescue_after_ns)
        return 0;
    atomic_store_explicit(&comm->rescue_ns, now, memory_order_relaxed);
    for (lane = 0; lane < comm->nlanes; lane++) {
        /* A pool's burst, not one chunk: the message may have several. */
        long r = ferry_sock_stream_progress_lane(comm, lane, 0, FERRY_SOCK_POOL_BURST);

        if (r < 0)
            return r;
        work += r;
    }
    if (work > 0) {
        ferry_px_stat_add(&comm->rescues, 1);
        ferry_sock_stream_rescue_note(comm, req, size, now - last);
        /*
         * A lane left holding a chunk (its socket full) or chunks left
         * unclaimed go back to the pool now: its sleeping threads registered
         * no fd for lanes that were idle when they last served them, so
         * without a kick nothing but the safety sweep would move them.
         */
        if (atomic_load_explicit(&comm->unclaimed, memory_order_relaxed) ||
            !ferry_sock_stream_lanes_free(comm))
            ferry_sock_stream_kick_posted(comm, 1);
    }
    return work;
}

long ferry_sock_stream_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now)
{
    ferry_sock_stream_t *comm = (ferry_sock_stream_t *)ring; /* The ring is its first member. */

    (void)now; /* The stream scheduler keeps its own precise times (stream_defer.c). */
    /* Small receives flowing: helpers may spin for the next one (sock_stream_pool.c). */
    if (ring->kind == FERRY_PX_RECV &&
        atomic_load_explicit(&ring->last_size, memory_order_relaxed) <= FERRY_SOCK_SMALL)
        ferry_sock_stream_note_small(comm);
    if (!ferry_sock_stream_test_assists(comm, req))
        return ferry_sock_stream_rescue(comm, req);
    ferry_sock_stream_assist(comm);
    return 1;
}

void ferry_sock_stream_failed(ferry_px_ring_t *ring)
{
    ferry_sock_stream_kick((ferry_sock_stream_t *)ring);
}
