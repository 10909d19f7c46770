#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/comm.h"
#include "proxy/registry.h"

/*
 * Messages up to this size are pushed by the thread that posts them: one
 * chunk, one sendmsg, no hand-off to a helper thread (the backend's config
 * overrides it: NCCL_FERRY_INLINE_MAX).
 */
#define FERRY_PX_ASSIST_MAX (32 << 10)
/*
 * Messages up to this size are latency-bound: they switch on the spin window.
 * NCCL's bulk traffic comes as 512 KiB..1 MiB slices; below that a wake-up
 * per chunk is a visible share of the message time (measured: bench/results).
 */
#define FERRY_PX_SMALL (256 << 10)
/*
 * How long after NCCL's last call lane 0 stays with NCCL's thread. NCCL's
 * proxy calls test() in a tight loop while it has work, so a gap this long
 * means it is busy elsewhere and the worker should take the lane back.
 */
#define FERRY_PX_LANE0_HOLD_NS 200000ULL

/*
 * A lone comm. NCCL's thread serves every channel, so it must not become the
 * copy engine for all of them (the reason for the 32 KiB limit above). But
 * when one comm of a kind is all that posts (a ping-pong, a one-channel p2p
 * exchange), there is nobody else to serve, and each message above 32 KiB
 * otherwise pays a helper wake-up on each side (64 KiB ping-pong: 1.6-1.7x
 * raw TCP on 16 cores, 4.4x on 2). The limit (solo_max, NCCL_FERRY_SOLO_MAX)
 * defaults to one chunk, 64 KiB: larger messages are cut over the streams,
 * and on 16 cores their helpers copying in parallel beat one thread (256 KiB
 * 1.43x raw with NCCL's thread sending it all, 1.16x without; on 2 cores the
 * other way round, 0.74x vs 1.34x). A comm is alone when no other comm of its
 * kind posted within this window before it.
 */
#define FERRY_PX_SOLO_WINDOW_NS 2000000ULL

typedef struct ferry_px_solo {
    _Atomic uintptr_t last;     /* The comm that posted last... */
    _Atomic uint64_t  last_ns;  /* ...and when. */
    _Atomic uint64_t  multi_ns; /* Last time two comms posted within the window. */
} ferry_px_solo_t;

static ferry_px_solo_t ferry_px_solo_state[2]; /* [0] receive, [1] send. */

static int ferry_px_comm_alone(ferry_px_comm_t *comm)
{
    ferry_px_solo_t *st = &ferry_px_solo_state[comm->kind == FERRY_PX_SEND];
    uint64_t now = ferry_px_now_ns(), prev_ns, multi;
    uintptr_t prev;

    prev = atomic_exchange_explicit(&st->last, (uintptr_t)comm, memory_order_relaxed);
    prev_ns = atomic_exchange_explicit(&st->last_ns, now, memory_order_relaxed);
    if (prev != 0 && prev != (uintptr_t)comm && now - prev_ns < FERRY_PX_SOLO_WINDOW_NS)
        atomic_store_explicit(&st->multi_ns, now, memory_order_relaxed);
    multi = atomic_load_explicit(&st->multi_ns, memory_order_relaxed);
    return multi == 0 || now - multi > FERRY_PX_SOLO_WINDOW_NS;
}

static const char *const ferry_px_lane_state_names[FERRY_PX_LANE_STATE_COUNT] = {
    [FERRY_PX_LANE_IDLE]    = "idle",
    [FERRY_PX_LANE_HEADER]  = "header",
    [FERRY_PX_LANE_PAYLOAD] = "payload",
    [FERRY_PX_LANE_PARKED]  = "parked",
    [FERRY_PX_LANE_BLOCKED] = "blocked",
    [FERRY_PX_LANE_CLOSED]  = "closed",
    [FERRY_PX_LANE_FAILED]  = "failed",
};

const char *ferry_px_lane_state_str(int state)
{
    if (state < 0 || state >= FERRY_PX_LANE_STATE_COUNT)
        return "invalid";
    return ferry_px_lane_state_names[state];
}

ferry_status_t ferry_px_comm_init(ferry_px_comm_t *comm, ferry_px_req_kind_t kind,
                                  const char *backend, const char *peer, int nlanes,
                                  int nworkers, size_t chunk_min, size_t chunk_max,
                                  const ferry_px_lane_ops_t *ops)
{
    int i;

    if (nlanes < 1 || nlanes > FERRY_PX_MAX_LANES || nworkers < 0)
        return FERRY_ERR_INVALID;
    memset(comm, 0, sizeof(*comm));
    if (pthread_mutex_init(&comm->lock, NULL) != 0)
        return FERRY_ERR_IO;
    comm->kind = kind;
    comm->nlanes = nlanes;
    comm->nworkers = nworkers < nlanes ? nworkers : nlanes;
    if (comm->nworkers > FERRY_PX_MAX_WORKERS)
        comm->nworkers = FERRY_PX_MAX_WORKERS;
    comm->chunk_min = chunk_min;
    comm->chunk_max = chunk_max;
    comm->ops = ops;
    snprintf(comm->backend, sizeof(comm->backend), "%s", backend);
    snprintf(comm->peer, sizeof(comm->peer), "%s", peer);
    comm->create_ns = ferry_px_now_ns();
    comm->assist_max = FERRY_PX_ASSIST_MAX;
    comm->assist_test_max = FERRY_PX_ASSIST_MAX;
    for (i = 0; i < FERRY_MAX_REQUESTS; i++)
        comm->reqs[i].comm = comm;
    for (i = 0; i < FERRY_PX_MAX_WORKERS; i++) {
        comm->workers[i].wake_fd = -1;
        comm->workers[i].ep_fd = -1;
    }
    return FERRY_OK;
}

void ferry_px_comm_describe(const ferry_px_comm_t *comm, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s comm %p #%u peer %s", comm->backend,
             comm->kind == FERRY_PX_SEND ? "send" : "recv", (const void *)comm, comm->serial,
             comm->peer);
}

static void ferry_px_comm_note_small(ferry_px_comm_t *comm);

ferry_px_req_t *ferry_px_comm_post(ferry_px_comm_t *comm, void *buf, size_t size)
{
    return ferry_px_comm_post_mem(comm, buf, size, NULL, 0);
}

static void ferry_px_comm_release(ferry_px_comm_t *comm, size_t size, uint32_t nchunks,
                                  int alone);

ferry_px_req_t *ferry_px_comm_post_mem(ferry_px_comm_t *comm, void *buf, size_t size, void *mem,
                                       int gated)
{
    ferry_px_chunk_plan_t plan = {0, 0};
    ferry_px_req_t *req;
    int alone;

    pthread_mutex_lock(&comm->lock);
    req = &comm->reqs[comm->next_seq % FERRY_MAX_REQUESTS];
    if (atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_FREE) {
        pthread_mutex_unlock(&comm->lock);
        return NULL;
    }
    if (comm->kind == FERRY_PX_SEND)
        plan = ferry_px_chunk_plan(size, comm->nlanes, comm->chunk_min, comm->chunk_max);
    ferry_px_req_post(req, comm->kind, comm->next_seq, buf, mem,
                      comm->kind == FERRY_PX_SEND && gated, size, plan);
    comm->next_seq++;
    if (comm->kind == FERRY_PX_SEND)
        atomic_store(&comm->unclaimed, 1);
    pthread_mutex_unlock(&comm->lock);
    if (comm->kind == FERRY_PX_SEND && size <= FERRY_PX_SMALL)
        ferry_px_comm_note_small(comm);
    alone = comm->solo_max > 0 && ferry_px_comm_alone(comm);
    atomic_store_explicit(&comm->solo, alone, memory_order_relaxed);
    if (comm->kind == FERRY_PX_SEND && gated)
        return req; /* Nothing to move until ferry_px_comm_open. */
    ferry_px_comm_release(comm, size, plan.nchunks, alone);
    return req;
}

/* Hand a posted message's chunks to the lanes: NCCL's thread or the workers. */
static void ferry_px_comm_release(ferry_px_comm_t *comm, size_t size, uint32_t nchunks, int alone)
{
    if (comm->kind == FERRY_PX_SEND && (size <= comm->assist_max || comm->nworkers == 0 ||
                                        (alone && size <= comm->solo_max)))
        ferry_px_comm_assist(comm);
    /* After the assist: a chunk it left half-sent needs its worker to watch POLLOUT. */
    ferry_px_comm_kick_posted(comm, nchunks);
}

void ferry_px_comm_open(ferry_px_comm_t *comm, ferry_px_req_t *req)
{
    /* Release: the bytes the backend put in buf before this are what the lanes send. */
    atomic_store_explicit(&req->gated, 0, memory_order_release);
    ferry_px_comm_release(comm, req->capacity,
                          atomic_load_explicit(&req->nchunks, memory_order_relaxed),
                          atomic_load_explicit(&comm->solo, memory_order_relaxed));
}

static long ferry_px_comm_defer_retire(ferry_px_comm_t *comm, int lane);

/* Latency-bound traffic flows: workers may spin for what comes next (worker.c). */
static void ferry_px_comm_note_small(ferry_px_comm_t *comm)
{
    if (comm->spin_ns > 0)
        atomic_store_explicit(&comm->small_post_ns, ferry_px_now_ns(), memory_order_relaxed);
}

long ferry_px_comm_progress_lane(ferry_px_comm_t *comm, int lane, short revents)
{
    int expected = 0;
    long work;

    if (!atomic_compare_exchange_strong_explicit(&comm->lane_busy[lane], &expected, 1,
                                                 memory_order_acquire, memory_order_relaxed))
        return 0;
    /* A failed comm moves no more bytes, but held-back completions still come due. */
    work = atomic_load_explicit(&comm->failed, memory_order_relaxed) == 0
               ? comm->ops->progress(comm, lane, revents)
               : 0;
    /* Completions the backend holds back (MSG_ZEROCOPY) come due even on a failed comm. */
    if (comm->ops->retire != NULL)
        work += comm->ops->retire(comm, lane);
    if (comm->defer != NULL)
        work += ferry_px_comm_defer_retire(comm, lane);
    atomic_store_explicit(&comm->lane_busy[lane], 0, memory_order_release);
    return work;
}

void ferry_px_comm_assist(ferry_px_comm_t *comm)
{
    int lane;

    if (atomic_load_explicit(&comm->stop, memory_order_relaxed))
        return;
    /* Without helper threads, NCCL's thread is the only one moving lanes. */
    if (comm->nworkers == 0) {
        for (lane = 0; lane < comm->nlanes; lane++)
            ferry_px_comm_progress_lane(comm, lane, 0);
        return;
    }
    if (atomic_load_explicit(&comm->failed, memory_order_relaxed) == 0) {
        atomic_store_explicit(&comm->assist_ns, ferry_px_now_ns(), memory_order_relaxed);
        ferry_px_comm_progress_lane(comm, 0, 0);
    }
}

uint64_t ferry_px_comm_lane0_held_ns(const ferry_px_comm_t *comm, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&comm->assist_ns, memory_order_relaxed);

    /* last > now: NCCL's thread called in after the caller read the clock. */
    if (last > now)
        return FERRY_PX_LANE0_HOLD_NS;
    return now - last < FERRY_PX_LANE0_HOLD_NS ? FERRY_PX_LANE0_HOLD_NS - (now - last) : 0;
}

int ferry_px_comm_claim(ferry_px_comm_t *comm, ferry_px_claim_t *claim_p)
{
    ferry_px_req_t *req;
    uint32_t nchunks;

    /* Spinning workers look often: answer "nothing" without the lock. */
    if (!atomic_load_explicit(&comm->unclaimed, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&comm->lock);
    if (comm->claim_seq == comm->next_seq) {
        pthread_mutex_unlock(&comm->lock);
        return 0;
    }
    req = &comm->reqs[comm->claim_seq % FERRY_MAX_REQUESTS];
    if (atomic_load_explicit(&req->gated, memory_order_acquire)) {
        /* Messages go out in order: the ones after it wait too. */
        pthread_mutex_unlock(&comm->lock);
        return 0;
    }
    nchunks = atomic_load_explicit(&req->nchunks, memory_order_relaxed);
    claim_p->req = req;
    claim_p->seq = comm->claim_seq;
    claim_p->chunk = comm->claim_chunk;
    claim_p->nchunks = nchunks;
    claim_p->msg_size = req->capacity;
    claim_p->offset = (uint64_t)comm->claim_chunk * req->chunk_size;
    claim_p->len = req->capacity - claim_p->offset < req->chunk_size
                       ? req->capacity - claim_p->offset
                       : req->chunk_size;
    if (++comm->claim_chunk == nchunks) {
        comm->claim_seq++;
        comm->claim_chunk = 0;
        if (comm->claim_seq == comm->next_seq)
            atomic_store(&comm->unclaimed, 0);
    }
    ferry_px_req_chunk_start(req);
    pthread_mutex_unlock(&comm->lock);
    return 1;
}

/* Report held-back completions whose time has come; returns how many. */
static long ferry_px_comm_defer_retire(ferry_px_comm_t *comm, int lane)
{
    ferry_px_defer_t *d = &comm->defer[lane];
    uint64_t now = ferry_px_now_ns();
    unsigned head = atomic_load_explicit(&d->head, memory_order_relaxed);
    unsigned tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    long n = 0;

    while (head != tail && atomic_load_explicit(&d->slot[head % FERRY_PX_DEFER_MAX].due_ns,
                                                memory_order_relaxed) <= now) {
        ferry_px_req_chunk_done(d->slot[head % FERRY_PX_DEFER_MAX].req);
        head++;
        n++;
    }
    atomic_store_explicit(&d->head, head, memory_order_relaxed);
    return n;
}

void ferry_px_comm_chunk_finish(ferry_px_comm_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_px_req_chunk_moved(req);
    ferry_px_comm_chunk_retire(comm, lane, req);
}

void ferry_px_comm_chunk_retire(ferry_px_comm_t *comm, int lane, ferry_px_req_t *req)
{
    ferry_px_defer_t *d;
    unsigned tail;

    if (comm->defer == NULL) {
        ferry_px_req_chunk_done(req);
        return;
    }
    d = &comm->defer[lane];
    tail = atomic_load_explicit(&d->tail, memory_order_relaxed);
    /* Ring full: wait for the oldest, as a completion queue that is full would. */
    while (tail - atomic_load_explicit(&d->head, memory_order_relaxed) == FERRY_PX_DEFER_MAX)
        ferry_px_comm_defer_retire(comm, lane);
    d->slot[tail % FERRY_PX_DEFER_MAX].req = req;
    atomic_store_explicit(&d->slot[tail % FERRY_PX_DEFER_MAX].due_ns,
                          ferry_px_now_ns() + (uint64_t)comm->inject_delay_us * 1000,
                          memory_order_relaxed);
    atomic_store_explicit(&d->tail, tail + 1, memory_order_release);
}

uint64_t ferry_px_comm_defer_next_ns(ferry_px_comm_t *comm, int w)
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

ferry_px_req_t *ferry_px_comm_match(ferry_px_comm_t *comm, uint32_t seq)
{
    ferry_px_req_t *req = &comm->reqs[seq % FERRY_MAX_REQUESTS];
    int state = atomic_load_explicit(&req->state, memory_order_acquire);

    if ((state == FERRY_PX_REQ_POSTED || state == FERRY_PX_REQ_ACTIVE) && req->seq == seq)
        return req;
    return NULL;
}

void ferry_px_comm_fail(ferry_px_comm_t *comm, ferry_status_t status, const char *fmt, ...)
{
    int expected = 0;
    va_list ap;

    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == 0) {
        va_start(ap, fmt);
        vsnprintf(comm->fail_reason, sizeof(comm->fail_reason), fmt, ap);
        va_end(ap);
        atomic_compare_exchange_strong(&comm->failed, &expected, (int)status);
    }
    pthread_mutex_unlock(&comm->lock);
    ferry_px_comm_kick(comm);
}

static void ferry_px_worker_wake(ferry_px_worker_t *w);

void ferry_px_comm_kick(ferry_px_comm_t *comm)
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
static int ferry_px_worker_needed(ferry_px_comm_t *comm, int w)
{
    int lane, st;

    for (lane = w; lane < comm->nlanes; lane += comm->nworkers) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (comm->kind == FERRY_PX_SEND ? (st == FERRY_PX_LANE_HEADER ||
                                           st == FERRY_PX_LANE_PAYLOAD ||
                                           st == FERRY_PX_LANE_BLOCKED)
                                        : st == FERRY_PX_LANE_PARKED &&
                                              ferry_px_comm_match(comm, atomic_load_explicit(
                                                  &comm->lanes[lane].seq,
                                                  memory_order_relaxed)) != NULL)
            return 1;
    }
    return 0;
}

void ferry_px_comm_kick_posted(ferry_px_comm_t *comm, uint32_t nchunks)
{
    int i;
    /* One sleeping worker per unclaimed chunk is enough; more only burn wake-ups. */
    uint32_t want = comm->kind == FERRY_PX_SEND && atomic_load(&comm->unclaimed) ? nchunks : 0;

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

/* A request caught by a comm failure: say which one, in what state, and why. */
static ferry_status_t ferry_px_comm_test_failed(ferry_px_comm_t *comm, ferry_px_req_t *req,
                                                ferry_status_t status)
{
    char desc[160];

    ferry_px_comm_describe(comm, desc, sizeof(desc));
    FERRY_WARN("%s: %s request seq %u failed in state %s (chunks posted %u, done %u of %u; "
               "%llu of %llu bytes; age %llu ms): %s",
               desc, req->kind == FERRY_PX_SEND ? "send" : "recv", req->seq,
               ferry_px_req_state_str(atomic_load(&req->state)), atomic_load(&req->posted),
               atomic_load(&req->done), atomic_load(&req->nchunks),
               (unsigned long long)atomic_load(&req->bytes),
               (unsigned long long)atomic_load(&req->size),
               (unsigned long long)((ferry_px_now_ns() - req->post_ns) / 1000000),
               comm->fail_reason);
    atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
    return status;
}

/*
 * Add a finished request's timeline to the comm's sums (ferry_px_timing_t).
 * The thread that calls test() is their one writer: no locked adds.
 */
static void ferry_px_comm_time(ferry_px_comm_t *comm, const ferry_px_req_t *req)
{
    ferry_px_timing_t *t = &comm->timing;
    uint64_t start = atomic_load_explicit(&req->start_ns, memory_order_relaxed);
    uint64_t done = atomic_load_explicit(&req->done_ns, memory_order_relaxed);
    uint64_t now = ferry_px_now_ns(), move;

    if (start < req->post_ns || done < start || now < done)
        return; /* Not every step was stamped (cannot happen for a DONE request). */
    move = done - start;
    ferry_px_stat_add(&t->msgs, 1);
    ferry_px_stat_add(&t->wait_ns, start - req->post_ns);
    ferry_px_stat_add(&t->move_ns, move);
    ferry_px_stat_add(&t->report_ns, now - done);
    if (move > atomic_load_explicit(&t->move_max_ns, memory_order_relaxed))
        atomic_store_explicit(&t->move_max_ns, move, memory_order_relaxed);
}

/* A finished request: hand its result to the caller and free its slot. */
static ferry_status_t ferry_px_comm_reap(ferry_px_comm_t *comm, ferry_px_req_t *req, int state,
                                         int *done_p, int *sizes)
{
    if (state == FERRY_PX_REQ_DONE) {
        assert(ferry_px_req_check(req));
        uint64_t size = atomic_load_explicit(&req->size, memory_order_relaxed);

        ferry_px_comm_time(comm, req);
        comm->stall_quiet = 0; /* The comm moves again: a new stall gets its own WARN. */

        if (sizes != NULL)
            sizes[0] = (int)size;
        if (req->kind == FERRY_PX_RECV && size <= FERRY_PX_SMALL)
            ferry_px_comm_note_small(comm);
        atomic_store_explicit(&comm->last_size, size, memory_order_relaxed);
        *done_p = 1;
        atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
        return FERRY_OK;
    }
    /* FERRY_PX_REQ_ERROR: the lane that detected it already logged the cause. */
    ferry_status_t status = req->status;

    atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
    return status;
}

/*
 * NCCL's thread lends a hand only where a wake-up would be a visible share of
 * the message time: small messages (a receive goes by the size of the last
 * one, its posted size is only an upper bound), a comm alone (ping-pong), or
 * every message when there are no helpers. On bulk traffic the thread that
 * serves every channel would otherwise move a quarter of all bytes itself
 * and hold lane 0 away from its worker (ferry-bench 64 KiB x 4 connections:
 * bench/results/2026-11-29-gpu-tuner).
 */
static int ferry_px_comm_test_assists(ferry_px_comm_t *comm, const ferry_px_req_t *req)
{
    uint64_t size = req->kind == FERRY_PX_SEND
                        ? atomic_load_explicit(&req->size, memory_order_relaxed)
                        : atomic_load_explicit(&comm->last_size, memory_order_relaxed);

    return comm->nworkers == 0 || size <= comm->assist_test_max ||
           (size <= comm->solo_max && atomic_load_explicit(&comm->solo, memory_order_relaxed));
}

/*
 * A request without progress for stall_ns: say so, once per stall of the
 * comm (NCCL posts several requests per comm, and a slow peer stalls them
 * all), with what ferry knows and what to look at. NCCL itself waits
 * forever, and a rank that stopped or a network that silently drops packets
 * otherwise looks like a hang with nothing in the log. Not an error: a
 * straggler rank still computing also keeps a receive waiting.
 */
static void ferry_px_comm_check_stall(ferry_px_comm_t *comm, ferry_px_req_t *req)
{
    int count[FERRY_PX_LANE_STATE_COUNT] = {0}, lane, st, n = 0, state;
    char desc[160], lanes[128], held[512];
    uint64_t last, now, idle;
    const char *why;

    if (comm->stall_ns == 0 || comm->stall_quiet)
        return;
    last = atomic_load_explicit(&req->last_ns, memory_order_relaxed);
    /* NCCL calls test() in a tight loop: the cheap clock (seconds are what count here). */
    now = ferry_px_coarse_ns();
    idle = now > last ? now - last : 0;
    if (idle < comm->stall_ns)
        return;
    state = atomic_load(&req->state);
    if ((req->kind == FERRY_PX_SEND && atomic_load(&req->gated) && state == FERRY_PX_REQ_POSTED) ||
        state == FERRY_PX_REQ_DONE) {
        snprintf(held, sizeof(held), "%s (%s)",
                 state == FERRY_PX_REQ_DONE
                     ? "All of it arrived, but the backend still holds it back"
                     : "It is still gated: the backend has not finished filling its buffer",
                 comm->hold_hint != NULL ? comm->hold_hint : "see the backend's log");
        why = held;
    } else if (req->kind == FERRY_PX_SEND)
        why = "The peer is not reading: it may still be busy (a slower rank), stopped, or the "
              "network drops packets; check that rank's log and whether it is still running, "
              "and `ss -tni` on both hosts for retransmissions";
    else
        why = "Nothing arrives from the peer: it may not have reached this operation yet (a "
              "slower rank), be stopped, or the network drops packets; check that rank's log "
              "and whether it is still running, and `ss -tni` on both hosts for retransmissions";
    comm->stall_quiet = 1;
    for (lane = 0; lane < comm->nlanes; lane++) {
        st = atomic_load_explicit(&comm->lanes[lane].state, memory_order_relaxed);
        if (st >= 0 && st < FERRY_PX_LANE_STATE_COUNT)
            count[st]++;
    }
    lanes[0] = '\0';
    for (st = 0; st < FERRY_PX_LANE_STATE_COUNT; st++)
        if (count[st] > 0 && n < (int)sizeof(lanes))
            n += snprintf(lanes + n, sizeof(lanes) - (size_t)n, "%s%d %s", n > 0 ? ", " : "",
                          count[st], ferry_px_lane_state_str(st));
    ferry_px_comm_describe(comm, desc, sizeof(desc));
    FERRY_WARN("%s: %s request seq %u has made no progress for %llu s (state %s, chunks posted %u, "
               "done %u of %u, %llu of %llu bytes, buffer %zu; streams: %s). %s. "
               "NCCL_FERRY_DUMP_SIGNAL dumps every comm; "
               "NCCL_FERRY_STALL_WARN_S sets this warning's delay (0: off)",
               desc, req->kind == FERRY_PX_SEND ? "send" : "recv", req->seq,
               (unsigned long long)(idle / 1000000000ULL),
               ferry_px_req_state_str(state), atomic_load(&req->posted),
               atomic_load(&req->done), atomic_load(&req->nchunks),
               (unsigned long long)atomic_load(&req->bytes),
               (unsigned long long)atomic_load(&req->size), req->capacity, lanes, why);
}

/* A DONE or ERROR request: report it, unless the backend still holds a DONE one back. */
static ferry_status_t ferry_px_comm_report(ferry_px_comm_t *comm, ferry_px_req_t *req, int state,
                                           int *done_p, int *sizes)
{
    int ready = 1;

    if (state == FERRY_PX_REQ_DONE && comm->ops->finish != NULL) {
        ferry_status_t status = comm->ops->finish(comm, req, &ready);

        if (status == FERRY_OK && !ready)
            ferry_px_comm_check_stall(comm, req);
        if (status != FERRY_OK || !ready)
            return status;
    }
    return ferry_px_comm_reap(comm, req, state, done_p, sizes);
}

ferry_status_t ferry_px_comm_test(ferry_px_comm_t *comm, ferry_px_req_t *req, int *done_p,
                                  int *sizes)
{
    /*
     * Read the failure before the state: a comm fails only when no more data
     * can arrive, so a request not DONE after that point never will be.
     */
    int failed = atomic_load_explicit(&comm->failed, memory_order_acquire);
    int state = atomic_load_explicit(&req->state, memory_order_acquire);

    *done_p = 0;
    if (state == FERRY_PX_REQ_DONE || state == FERRY_PX_REQ_ERROR)
        return ferry_px_comm_report(comm, req, state, done_p, sizes);
    if (state == FERRY_PX_REQ_FREE)
        return FERRY_ERR_INVALID;
    /* All bytes are in; only the (delayed) completion is outstanding: not a failure. */
    if (failed != 0 && !ferry_px_req_all_moved(req))
        return ferry_px_comm_test_failed(comm, req, (ferry_status_t)failed);
    ferry_px_comm_check_stall(comm, req);
    if (!ferry_px_comm_test_assists(comm, req))
        return FERRY_OK;
    ferry_px_comm_assist(comm);
    /*
     * What the assist finished is reported now, not on NCCL's next call: its
     * proxy thread yields the CPU after a round without progress, and on a
     * one-core rank the next call then waits for the rank's spinning main
     * thread to give the core back.
     */
    state = atomic_load_explicit(&req->state, memory_order_acquire);
    if (state == FERRY_PX_REQ_DONE || state == FERRY_PX_REQ_ERROR)
        return ferry_px_comm_report(comm, req, state, done_p, sizes);
    return FERRY_OK;
}
