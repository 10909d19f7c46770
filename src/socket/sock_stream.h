/*
 * The stream scheduler, for backends whose connections are byte streams
 * (socket): a message is cut into self-describing chunks at post, the send
 * claim cursor hands each chunk to whichever lane is free (so a slow stream
 * never sets the pace), receive lanes match chunks to posted requests by
 * sequence number, and helper threads move the lanes. It sits on the
 * request ring (proxy/ring.h), which holds the requests, test() and the
 * failure; a backend embeds one ferry_px_stream_t and implements
 * ferry_px_lane_ops_t for its lanes.
 */
#ifndef FERRY_PROXY_STREAM_H
#define FERRY_PROXY_STREAM_H

#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/api.h"
#include "proxy/ring.h"

#define FERRY_PX_MAX_LANES   64
#define FERRY_PX_MAX_WORKERS 16

struct ferry_px_stream;

/* What the engine needs from a backend to move one lane. */
typedef struct ferry_px_lane_ops {
    /*
     * Advance lane `lane` without blocking. revents: what poll() reported for
     * the lane's fd (0 when called without a poll). Returns bytes or events
     * handled (0: nothing to do now), or a negative ferry_status_t after the
     * backend has failed the comm with ferry_px_stream_fail().
     */
    long (*progress)(struct ferry_px_stream *comm, int lane, short revents);
    /* The fd to poll for the lane and the events it waits for now (0: only a kick). */
    short (*wants)(struct ferry_px_stream *comm, int lane, int *fd_p);
    /*
     * Optional: report chunks whose bytes left earlier but whose completion
     * the backend held back (MSG_ZEROCOPY: until the kernel lets go of the
     * buffer). Called on every sweep, also after the comm failed. Returns
     * how many were reported.
     */
    long (*retire)(struct ferry_px_stream *comm, int lane);
} ferry_px_lane_ops_t;

/* Lane states shown in the dump. */
typedef enum ferry_px_lane_state {
    FERRY_PX_LANE_IDLE,    /* Nothing to move. */
    FERRY_PX_LANE_HEADER,  /* Moving a chunk header. */
    FERRY_PX_LANE_PAYLOAD, /* Moving a chunk payload. */
    FERRY_PX_LANE_PARKED,  /* Receive: chunk arrived before its irecv was posted. */
    FERRY_PX_LANE_BLOCKED, /* Send: kernel buffer full, waiting for POLLOUT. */
    FERRY_PX_LANE_CLOSED,  /* Peer closed this stream. */
    FERRY_PX_LANE_FAILED,  /* Error on this stream. */
    FERRY_PX_LANE_STATE_COUNT
} ferry_px_lane_state_t;

/* Completions held back by NCCL_FERRY_INJECT_DELAY_US, per lane, oldest first. */
#define FERRY_PX_DEFER_MAX 64
typedef struct ferry_px_defer {
    /*
     * Whoever holds the lane (lane_busy) fills and drains the ring. The
     * lane's worker also peeks at the oldest due time without holding it,
     * to know how long it may sleep: hence atomics, though a stale peek
     * only costs a later wake-up.
     */
    _Atomic unsigned head, tail;
    struct {
        ferry_px_req_t  *req;
        _Atomic uint64_t due_ns;
    } slot[FERRY_PX_DEFER_MAX];
} ferry_px_defer_t;

/* Per-lane statistics: written by whoever holds the lane, read by the dump. */
typedef struct ferry_px_lane_stats {
    _Atomic int      state;    /* ferry_px_lane_state_t. */
    _Atomic uint32_t seq;      /* Message of the chunk in hand. */
    _Atomic uint64_t bytes;    /* Payload bytes moved. */
    _Atomic uint64_t chunks;   /* Chunks moved. */
    _Atomic uint64_t busy_ns;  /* Summed over them: taken (send) or matched (recv) -> moved. */
    _Atomic uint64_t blocked;  /* Send: times the socket buffer was full (wait for POLLOUT). */
} ferry_px_lane_stats_t;

/*
 * What a helper thread did, for the dump: written by the thread alone,
 * relaxed. Wake-ups per chunk moved is the figure to watch: each costs a
 * context switch, and bulk traffic that wakes a helper for every chunk is
 * bound by the scheduler rather than by the copies.
 */
typedef struct ferry_px_worker_stats {
    _Atomic uint64_t sweeps;      /* Passes over its lanes... */
    _Atomic uint64_t idle_sweeps; /* ...that found nothing to do. */
    _Atomic uint64_t sleeps;      /* Times it slept in poll(), woken by: */
    _Atomic uint64_t woken_post;  /*   a kick (a post, a failure, close); */
    _Atomic uint64_t woken_io;    /*   one of its sockets; */
    _Atomic uint64_t woken_timer; /*   the timeout (held-back completions, safety net). */
    _Atomic uint64_t placed;      /* Times its CPUs were cut again around the posting CPU. */
} ferry_px_worker_stats_t;

typedef struct ferry_px_worker {
    pthread_t            thread;
    struct ferry_px_stream *comm;
    int                  index;     /* Lanes index, index + nworkers, ... belong to it. */
    int                  wake_fd;   /* eventfd a kick writes to. */
    _Atomic int          sleeping;  /* 1 while in poll(); the kick that clears it writes wake_fd. */
    int                  started;
    ferry_px_worker_stats_t stats;
    /* With use_epoll (worker_epoll.c): the epoll fd and what each lane has registered in it. */
    int                  ep_fd;     /* -1: the worker waits in ppoll. */
    short                ep_events[FERRY_PX_MAX_LANES]; /* POLLIN/POLLOUT registered, 0: none. */
    int                  ep_lane_fd[FERRY_PX_MAX_LANES];
    /* With place_away (worker_place.c): the CPUs it may use, and the posting CPU cut out. */
    cpu_set_t            base_cpus;
    _Atomic int          placed_for;    /* Written by the worker, read by the dump. */
} ferry_px_worker_t;

typedef struct ferry_px_stream {
    ferry_px_ring_t       ring;          /* First: requests lead back to the stream. */
    uint32_t              claim_seq;     /* Send: message whose chunks are handed out next; under ring.lock. */
    uint32_t              claim_chunk;   /* Send: next chunk index of claim_seq; under ring.lock. */
    _Atomic int           unclaimed;     /* Send: claim_seq != next_seq; written under ring.lock, read by kicks. */
    _Atomic uint32_t      kick_gen;      /* Bumped by every post; workers recheck before sleeping. */
    _Atomic uint64_t      wakes_sent;    /* Kicks that woke a sleeping worker (eventfd writes). */
    int                   nlanes;
    int                   nworkers;      /* 0: no helper threads, NCCL's thread moves every lane. */
    size_t                chunk_min, chunk_max;
    const ferry_px_lane_ops_t *ops;
    _Atomic int           stop;          /* Set at close; workers exit. */
    ferry_px_lane_stats_t lanes[FERRY_PX_MAX_LANES];
    /*
     * 1 while some thread moves the lane: its worker, or NCCL's thread
     * lending a hand (ferry_px_stream_assist). Acquire/release on it hands the
     * backend's lane state from one thread to the next.
     */
    _Atomic int           lane_busy[FERRY_PX_MAX_LANES];
    size_t                assist_max;    /* Messages up to this size are sent by the posting thread. */
    size_t                assist_test_max; /* test() moves lane 0 for messages up to this size. */
    size_t                solo_max;      /* ...and up to this size while the comm is alone (stream.c). */
    _Atomic int           solo;          /* The last post found no other comm of its kind busy. */
    uint64_t              spin_ns;       /* Workers keep sweeping this long after their last work... */
    _Atomic uint64_t      small_post_ns; /* ...if a small message was posted this recently. */
    _Atomic uint64_t      assist_ns;     /* Last time NCCL's thread moved lane 0 (ferry_px_stream_assist). */
    unsigned              inject_delay_us; /* Test knob: added to every chunk completion. */
    ferry_px_defer_t     *defer;         /* nlanes rings when inject_delay_us > 0, else NULL. */
    int                   use_epoll;     /* Workers wait in epoll (worker_epoll.c), not ppoll. */
    int                   has_cpus;      /* Workers run on `cpus` (near the NIC) when set. */
    cpu_set_t             cpus;
    int                   place_away;    /* Workers keep off caller_cpu (worker_place.h). */
    _Atomic int           caller_cpu;    /* CPU of the last post, -1 before the first. */
    ferry_px_worker_t     workers[FERRY_PX_MAX_WORKERS];
} ferry_px_stream_t;

/* A chunk handed to a send lane. */
typedef struct ferry_px_claim {
    ferry_px_req_t *req;
    uint32_t        seq;
    uint32_t        chunk;
    uint32_t        nchunks;
    uint64_t        msg_size;
    uint64_t        offset;
    size_t          len;
} ferry_px_claim_t;

/*
 * Set up the ring (with the backend's ring ops) and the scheduler (no
 * threads yet). A backend built on streams fills its ring ops with the
 * ferry_px_stream_* ring functions below, adding its own words.
 */
ferry_status_t ferry_px_stream_init(ferry_px_stream_t *comm, ferry_px_req_kind_t kind,
                                    const char *backend, const char *peer, int nlanes,
                                    int nworkers, size_t chunk_min, size_t chunk_max,
                                    const ferry_px_lane_ops_t *ops,
                                    const ferry_px_ring_ops_t *ring_ops);
/* Start the helper threads (named ferry-s<serial>-<i> / ferry-r<serial>-<i>) and register for dumps. */
ferry_status_t ferry_px_stream_start(ferry_px_stream_t *comm);
/* Stop and join every helper thread, unregister; the comm memory stays the caller's. */
void ferry_px_stream_stop(ferry_px_stream_t *comm);

/*
 * Take the next request slot and post it (isend/irecv), with the backend's
 * memory handle for buf, which its lanes find in req->sub[0].mem. Returns
 * NULL when all 32 slots are busy (NCCL retries). gated (send): the lanes
 * take none of its chunks, nor those of later messages, until
 * ferry_px_stream_open (the backend is still filling buf).
 */
ferry_px_req_t *ferry_px_stream_post(ferry_px_stream_t *comm, void *buf, size_t size, void *mem,
                                     int gated);
/* Open a gated send: its chunks go to the lanes now. */
void ferry_px_stream_open(ferry_px_stream_t *comm, ferry_px_req_t *req);
/* Send lanes: the next chunk to transmit, in message order. 0 when none. */
int ferry_px_stream_claim(ferry_px_stream_t *comm, ferry_px_claim_t *claim_p);
/*
 * A lane finished a chunk. With NCCL_FERRY_INJECT_DELAY_US the completion is
 * reported that much later while the lane moves on, which shows how much
 * per-chunk latency the pipeline hides. Call with the lane held.
 */
void ferry_px_stream_chunk_finish(ferry_px_stream_t *comm, int lane, ferry_px_req_t *req);
/* The second half of chunk_finish, for a chunk already counted moved. */
void ferry_px_stream_chunk_retire(ferry_px_stream_t *comm, int lane, ferry_px_req_t *req);
/* Report lane's held-back completions whose time has come (stream_defer.c); returns how many. */
long ferry_px_stream_defer_retire(ferry_px_stream_t *comm, int lane);
/* Nanoseconds until the earliest held-back completion of worker w's lanes; UINT64_MAX if none. */
uint64_t ferry_px_stream_defer_next_ns(ferry_px_stream_t *comm, int w);
/*
 * Move lane `lane` if no other thread is moving it; returns the backend's
 * work count, or 0 when the lane was busy.
 */
long ferry_px_stream_progress_lane(ferry_px_stream_t *comm, int lane, short revents);
/*
 * NCCL's thread lends a hand on lane 0: a small isend leaves at once and a
 * test() reads what already arrived, without waiting for a helper thread to
 * wake up. This is what keeps small-message latency at one syscall.
 */
void ferry_px_stream_assist(ferry_px_stream_t *comm);
/*
 * While NCCL's thread keeps calling in, lane 0 is its own: the worker leaves
 * it alone, so a wake-up never races the caller for a message the caller is
 * already polling for. Returns the ns left of that hold (0: the worker's).
 */
uint64_t ferry_px_stream_lane0_held_ns(const ferry_px_stream_t *comm, uint64_t now);
/* Wake every sleeping helper thread (failure, stop). */
void ferry_px_stream_kick(ferry_px_stream_t *comm);
/*
 * After a post: wake only the sleeping workers that now have something to
 * do (one per unclaimed chunk of the new message, nchunks at most; a chunk
 * left half-sent; a parked lane whose irecv may have arrived). Waking idle
 * workers for nothing costs more CPU than the message itself on small
 * machines.
 */
void ferry_px_stream_kick_posted(ferry_px_stream_t *comm, uint32_t nchunks);
/*
 * Ring ops for a stream backend. poll: test() lends NCCL's thread to lane 0
 * where a wake-up would be a visible share of the message time (small
 * messages, a comm alone, no helpers). state: lane states counted ("streams:
 * 3 idle, 1 blocked"). dump: lanes and helper threads. failed: wakes every
 * helper so it sees the failure.
 */
long ferry_px_stream_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now);
void ferry_px_stream_state(const ferry_px_ring_t *ring, char *buf, size_t len);
void ferry_px_stream_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now);
void ferry_px_stream_failed(ferry_px_ring_t *ring);

const char *ferry_px_lane_state_str(int state);
static inline void ferry_px_lane_set(ferry_px_stream_t *comm, int lane, ferry_px_lane_state_t st)
{
    atomic_store_explicit(&comm->lanes[lane].state, st, memory_order_relaxed);
}

#endif
