/*
 * The stream scheduler, for backends whose connections are byte streams
 * (socket): a message is cut into self-describing chunks at post, the send
 * claim cursor hands each chunk to whichever lane is free (so a slow stream
 * never sets the pace), receive lanes match chunks to posted requests by
 * sequence number, and helper threads move the lanes. It sits on the
 * request ring (proxy/ring.h), which holds the requests, test() and the
 * failure; a backend embeds one ferry_sock_stream_t and implements
 * ferry_sock_stream_lane_ops_t for its lanes.
 */
#ifndef FERRY_SOCK_STREAM_H
#define FERRY_SOCK_STREAM_H

#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/api.h"
#include "proxy/pool.h"
#include "proxy/ring.h"

#define FERRY_SOCK_STREAM_MAX_LANES 64

struct ferry_sock_stream;

/*
 * Chunks one call may finish on a lane before it returns (the burst argument
 * of the lane ops' progress). A pool thread takes a few, and then turns to
 * other lanes: the pool's fairness between comms rests on this bound.
 * NCCL's thread on a receive lane takes one by default
 * (NCCL_FERRY_CALLER_RECV_CHUNKS sets up to how many), and its call ends at
 * the chunk that completes a message: its proxy hands a received step to the
 * GPU only after test() returns, so a test() that went on to the steps
 * posted behind would hold that step back by their copies
 * (ferry_sock_stream_assist). Chunks of a message still incomplete hold
 * nothing back: the message needs them anyway.
 */
#define FERRY_SOCK_POOL_BURST   4
#define FERRY_SOCK_CALLER_BURST 1

/* How far one call of a lane's progress may go. */
typedef struct ferry_sock_burst {
    int chunks;      /* Finish at most this many chunks. */
    int message_end; /* Receive: stop after a chunk that completes its message. */
} ferry_sock_burst_t;

/* What the engine needs from a backend to move one lane. */
typedef struct ferry_sock_stream_lane_ops {
    /*
     * Advance lane `lane` without blocking, as far as `burst` allows
     * (FERRY_SOCK_POOL_BURST / FERRY_SOCK_CALLER_BURST chunks). revents:
     * what poll() reported for the lane's fd (0 when called without a poll).
     * Returns bytes or events handled (0: nothing to do now), or a negative
     * ferry_status_t after the backend has failed the comm with
     * ferry_sock_stream_fail().
     */
    long (*progress)(struct ferry_sock_stream *comm, int lane, short revents,
                     ferry_sock_burst_t burst);
    /* The fd to poll for the lane and the events it waits for now (0: only a kick). */
    short (*wants)(struct ferry_sock_stream *comm, int lane, int *fd_p);
    /*
     * Optional: report chunks whose bytes left earlier but whose completion
     * the backend held back (MSG_ZEROCOPY: until the kernel lets go of the
     * buffer). Called on every sweep, also after the comm failed. Returns
     * how many were reported.
     */
    long (*retire)(struct ferry_sock_stream *comm, int lane);
} ferry_sock_stream_lane_ops_t;

/* Lane states shown in the dump. */
typedef enum ferry_sock_lane_state {
    FERRY_SOCK_LANE_IDLE,    /* Nothing to move. */
    FERRY_SOCK_LANE_HEADER,  /* Moving a chunk header. */
    FERRY_SOCK_LANE_PAYLOAD, /* Moving a chunk payload. */
    FERRY_SOCK_LANE_PARKED,  /* Receive: chunk arrived before its irecv was posted. */
    FERRY_SOCK_LANE_BLOCKED, /* Send: kernel buffer full, waiting for POLLOUT. */
    FERRY_SOCK_LANE_CLOSED,  /* Peer closed this stream. */
    FERRY_SOCK_LANE_FAILED,  /* Error on this stream. */
    FERRY_SOCK_LANE_STATE_COUNT
} ferry_sock_lane_state_t;

/* Completions held back by NCCL_FERRY_INJECT_DELAY_US, per lane, oldest first. */
#define FERRY_SOCK_DEFER_MAX 64
typedef struct ferry_sock_defer {
    /*
     * Whoever holds the lane (lane_busy) fills and drains the ring. The
     * lane's pool thread also peeks at the oldest due time without holding it,
     * to know how long it may sleep: hence atomics, though a stale peek
     * only costs a later wake-up.
     */
    _Atomic unsigned head, tail;
    struct {
        ferry_px_req_t  *req;
        _Atomic uint64_t due_ns;
    } slot[FERRY_SOCK_DEFER_MAX];
} ferry_sock_defer_t;

/* Per-lane statistics: written by whoever holds the lane, read by the dump. */
typedef struct ferry_sock_lane_stats {
    _Atomic int      state;    /* ferry_sock_lane_state_t. */
    _Atomic uint32_t seq;      /* Message of the chunk in hand. */
    _Atomic uint64_t bytes;    /* Payload bytes moved. */
    _Atomic uint64_t chunks;   /* Chunks moved. */
    _Atomic uint64_t busy_ns;  /* Summed over them: taken (send) or matched (recv) -> moved. */
    _Atomic uint64_t blocked;  /* Send: times the socket buffer was full (wait for POLLOUT). */
} ferry_sock_lane_stats_t;

typedef struct ferry_sock_stream {
    ferry_px_ring_t       ring;          /* First: requests lead back to the stream. */
    uint32_t              claim_seq;     /* Send: message whose chunks are handed out next; under ring.lock. */
    uint32_t              claim_chunk;   /* Send: next chunk index of claim_seq; under ring.lock. */
    _Atomic int           unclaimed;     /* Send: claim_seq != next_seq; written under ring.lock, read by kicks. */
    int                   nlanes;
    /* Pool threads its lanes spread over (lane i: slot i % nthreads); 0: NCCL's thread moves all. */
    int                   nthreads;
    int                   pool_size;     /* Threads of the process' pool, if this comm starts it. */
    size_t                chunk_min, chunk_max;
    const ferry_sock_stream_lane_ops_t *ops;
    _Atomic int           stop;          /* Set at close: the pool leaves the lanes alone. */
    ferry_sock_lane_stats_t lanes[FERRY_SOCK_STREAM_MAX_LANES];
    /*
     * 1 while some thread moves the lane: its pool thread, or NCCL's thread
     * lending a hand (ferry_sock_stream_assist). Acquire/release on it hands the
     * backend's lane state from one thread to the next.
     */
    _Atomic int           lane_busy[FERRY_SOCK_STREAM_MAX_LANES];
    /*
     * 1 when a pool thread found the lane busy: it stops waiting on the
     * lane's fd (level-triggered, it would fire again at once and spin while
     * NCCL's thread copies a chunk) and the holder kicks it on release.
     */
    _Atomic int           lane_missed[FERRY_SOCK_STREAM_MAX_LANES];
    size_t                assist_max;    /* Messages up to this size are sent by the posting thread. */
    size_t                assist_test_max; /* test() moves lane 0 for messages up to this size. */
    size_t                solo_max;      /* ...and up to this size while the comm is alone (stream.c). */
    _Atomic int           solo;          /* The last post found no other comm of its kind busy. */
    uint64_t              spin_ns;       /* Pool threads keep sweeping this long after their last work... */
    _Atomic uint64_t      small_post_ns; /* ...if a small message was posted this recently. */
    _Atomic uint64_t      assist_ns;     /* Last time NCCL's thread moved lane 0 (ferry_sock_stream_assist). */
    uint64_t              rescue_after_ns; /* A small send no helper took this long: test()'s (0: never). */
    /* test()'s thread only (the dump reads them relaxed): ferry_sock_stream_rescue. */
    _Atomic uint64_t      rescue_ns;     /* Last time test() moved lanes for a send no helper took. */
    _Atomic uint64_t      rescues;       /* Looks that moved something (the dump). */
    unsigned              inject_delay_us; /* Test knob: added to every chunk completion. */
    int                   caller_recv_burst; /* Chunks NCCL's thread reads per receive-lane call. */
    ferry_sock_defer_t     *defer;         /* nlanes rings when inject_delay_us > 0, else NULL. */
    int                   has_cpus;      /* The pool runs near `cpus` (the NIC's) when set. */
    cpu_set_t             cpus;
    int                   place_away;    /* The pool keeps off the posting CPU (proxy/pool_place.c). */
    ferry_px_pool_client_t pool;         /* This comm in the process' helper pool. */
} ferry_sock_stream_t;

/* A chunk handed to a send lane. */
typedef struct ferry_sock_claim {
    ferry_px_req_t *req;
    uint32_t        seq;
    uint32_t        chunk;
    uint32_t        nchunks;
    uint64_t        msg_size;
    uint64_t        offset;
    size_t          len;
} ferry_sock_claim_t;

/*
 * Set up the ring (with the backend's ring ops) and the scheduler (no
 * threads yet). A backend built on streams fills its ring ops with the
 * ferry_sock_stream_* ring functions below, adding its own words.
 */
ferry_status_t ferry_sock_stream_init(ferry_sock_stream_t *comm, ferry_px_req_kind_t kind,
                                    const char *backend, const char *peer, int nlanes,
                                    int nthreads, size_t chunk_min, size_t chunk_max,
                                    const ferry_sock_stream_lane_ops_t *ops,
                                    const ferry_px_ring_ops_t *ring_ops);
/*
 * Register for dumps and, with nthreads > 0, attach the lanes to the
 * process' helper pool (proxy/pool.h; its threads are named ferry-pool-<i>).
 */
ferry_status_t ferry_sock_stream_start(ferry_sock_stream_t *comm);
/* Detach from the pool (no pool thread touches the comm after), unregister; the memory stays the caller's. */
void ferry_sock_stream_stop(ferry_sock_stream_t *comm);

/*
 * Take the next request slot and post it (isend/irecv), with the backend's
 * memory handle for buf, which its lanes find in req->sub[0].mem. Returns
 * NULL when all 32 slots are busy (NCCL retries). gated (send): the lanes
 * take none of its chunks, nor those of later messages, until
 * ferry_sock_stream_open (the backend is still filling buf).
 */
ferry_px_req_t *ferry_sock_stream_post(ferry_sock_stream_t *comm, void *buf, size_t size, void *mem,
                                     int gated);
/* Open a gated send: its chunks go to the lanes now. */
void ferry_sock_stream_open(ferry_sock_stream_t *comm, ferry_px_req_t *req);
/* Send lanes: the next chunk to transmit, in message order. 0 when none. */
int ferry_sock_stream_claim(ferry_sock_stream_t *comm, ferry_sock_claim_t *claim_p);
/*
 * A lane finished a chunk. With NCCL_FERRY_INJECT_DELAY_US the completion is
 * reported that much later while the lane moves on, which shows how much
 * per-chunk latency the pipeline hides. Call with the lane held.
 */
void ferry_sock_stream_chunk_finish(ferry_sock_stream_t *comm, int lane, ferry_px_req_t *req);
/* The second half of chunk_finish, for a chunk already counted moved. */
void ferry_sock_stream_chunk_retire(ferry_sock_stream_t *comm, int lane, ferry_px_req_t *req);
/* Report lane's held-back completions whose time has come (stream_defer.c); returns how many. */
long ferry_sock_stream_defer_retire(ferry_sock_stream_t *comm, int lane);
/* Nanoseconds until lane's earliest held-back completion; UINT64_MAX if none. */
uint64_t ferry_sock_stream_defer_next_ns(ferry_sock_stream_t *comm, int lane);
/*
 * Move lane `lane`, finishing at most `burst` chunks, if no other thread is
 * moving it; returns the backend's work count, or 0 when the lane was busy.
 */
long ferry_sock_stream_progress_lane(ferry_sock_stream_t *comm, int lane, short revents, int burst);
/*
 * NCCL's thread lends a hand on lane 0: a small isend leaves at once and a
 * test() reads what already arrived, without waiting for a helper thread to
 * wake up. This is what keeps small-message latency at one syscall.
 */
void ferry_sock_stream_assist(ferry_sock_stream_t *comm);
/*
 * While NCCL's thread keeps calling in, lane 0 is its own: the pool leaves
 * it alone, so a wake-up never races the caller for a message the caller is
 * already polling for. Returns the ns left of that hold (0: the pool's).
 */
uint64_t ferry_sock_stream_lane0_held_ns(const ferry_sock_stream_t *comm, uint64_t now);
/*
 * The pool's way into a lane: as ferry_sock_stream_progress_lane, but a lane
 * held by another thread is marked missed, and its holder hands it back with
 * a kick when it lets go (ferry_sock_stream_lane_missed says whether to wait).
 */
long ferry_sock_stream_progress_lane_pool(ferry_sock_stream_t *comm, int lane, short revents);
/* 1 while a pool thread waits for the lane's holder to hand it back. */
int ferry_sock_stream_lane_missed(const ferry_sock_stream_t *comm, int lane);
/* Have every pool thread of the comm look at its lanes (failure, stop). */
void ferry_sock_stream_kick(ferry_sock_stream_t *comm);
/*
 * After a post: kick only the pool threads of the comm that now have
 * something to do (one per unclaimed chunk of the new message, nchunks at most; a chunk
 * left half-sent; a parked lane whose irecv may have arrived). Waking idle
 * threads for nothing costs more CPU than the message itself on small
 * machines.
 */
void ferry_sock_stream_kick_posted(ferry_sock_stream_t *comm, uint32_t nchunks);
/*
 * Ring ops for a stream backend. poll: test() lends NCCL's thread to lane 0
 * where a wake-up would be a visible share of the message time (small
 * messages, a comm alone, no helpers). state: lane states counted ("streams:
 * 3 idle, 1 blocked"). dump: lanes and helper threads. failed: wakes every
 * helper so it sees the failure.
 */
long ferry_sock_stream_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now);
void ferry_sock_stream_state(const ferry_px_ring_t *ring, char *buf, size_t len);
void ferry_sock_stream_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now);
void ferry_sock_stream_failed(ferry_px_ring_t *ring);

const char *ferry_sock_lane_state_str(int state);
static inline void ferry_sock_lane_set(ferry_sock_stream_t *comm, int lane, ferry_sock_lane_state_t st)
{
    atomic_store_explicit(&comm->lanes[lane].state, st, memory_order_relaxed);
}

#endif
