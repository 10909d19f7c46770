/*
 * The backend-agnostic half of a send or receive comm: the ring of requests,
 * the send claim cursor that hands chunks to whichever lane is free (so a
 * slow stream never sets the pace), receive matching by sequence number, the
 * helper threads, and a sticky failure. A backend embeds one ferry_px_comm_t
 * and implements ferry_px_lane_ops_t for its lanes (streams, QPs, ...).
 */
#ifndef FERRY_PROXY_COMM_H
#define FERRY_PROXY_COMM_H

#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/api.h"
#include "proxy/req.h"

#define FERRY_PX_MAX_LANES   64
#define FERRY_PX_MAX_WORKERS 16

struct ferry_px_comm;

/* What the engine needs from a backend to move one lane. */
typedef struct ferry_px_lane_ops {
    /*
     * Advance lane `lane` without blocking. revents: what poll() reported for
     * the lane's fd (0 when called without a poll). Returns bytes or events
     * handled (0: nothing to do now), or a negative ferry_status_t after the
     * backend has failed the comm with ferry_px_comm_fail().
     */
    long (*progress)(struct ferry_px_comm *comm, int lane, short revents);
    /* The fd to poll for the lane and the events it waits for now (0: only a kick). */
    short (*wants)(struct ferry_px_comm *comm, int lane, int *fd_p);
    /*
     * Optional: report chunks whose bytes left earlier but whose completion
     * the backend held back (MSG_ZEROCOPY: until the kernel lets go of the
     * buffer). Called on every sweep, also after the comm failed. Returns
     * how many were reported.
     */
    long (*retire)(struct ferry_px_comm *comm, int lane);
    /*
     * Optional: a request is DONE (every byte moved); may test() report it
     * now? Set *ready to 0 to hold it back while the backend still works on
     * it (socket: copying a receive from its host shadow to the GPU), 1 to
     * report it. Called by the thread that calls test(), on every test of a
     * DONE request until it says 1. A status other than FERRY_OK is test()'s
     * answer.
     */
    ferry_status_t (*finish)(struct ferry_px_comm *comm, ferry_px_req_t *req, int *ready);
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

/*
 * A statistic with one writer (a lane's holder, see lane_busy; a worker's
 * own counters): a relaxed load and store, no locked add on the data path.
 * Readers (the dump) see a recent value.
 */
static inline void ferry_px_stat_add(_Atomic uint64_t *v, uint64_t n)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

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
} ferry_px_worker_stats_t;

/*
 * Where the messages test() reported done spent their time, summed over all
 * of them (ns): post -> a lane took the first chunk (send: the hand-off to a
 * helper; recv: waiting for the peer's data), first chunk -> last chunk
 * retired (moving it), retired -> test() reported it (NCCL's next look).
 * Updated by the thread that calls test(), its one writer (ferry_px_stat_add); read by
 * the dump.
 */
typedef struct ferry_px_timing {
    _Atomic uint64_t msgs;
    _Atomic uint64_t wait_ns;
    _Atomic uint64_t move_ns;
    _Atomic uint64_t move_max_ns;
    _Atomic uint64_t report_ns;
} ferry_px_timing_t;

typedef struct ferry_px_worker {
    pthread_t            thread;
    struct ferry_px_comm *comm;
    int                  index;     /* Lanes index, index + nworkers, ... belong to it. */
    int                  wake_fd;   /* eventfd a kick writes to. */
    _Atomic int          sleeping;  /* 1 while in poll(); the kick that clears it writes wake_fd. */
    int                  started;
    ferry_px_worker_stats_t stats;
    /* With use_epoll (worker_epoll.c): the epoll fd and what each lane has registered in it. */
    int                  ep_fd;     /* -1: the worker waits in ppoll. */
    short                ep_events[FERRY_PX_MAX_LANES]; /* POLLIN/POLLOUT registered, 0: none. */
    int                  ep_lane_fd[FERRY_PX_MAX_LANES];
} ferry_px_worker_t;

typedef struct ferry_px_comm {
    ferry_px_req_t        reqs[FERRY_MAX_REQUESTS]; /* Message seq s lives in reqs[s % 32]. */
    pthread_mutex_t       lock;          /* Protects next_seq publication and the claim cursor. */
    uint32_t              next_seq;      /* Next message number to post; under lock. */
    uint32_t              claim_seq;     /* Send: message whose chunks are handed out next; under lock. */
    uint32_t              claim_chunk;   /* Send: next chunk index of claim_seq; under lock. */
    _Atomic int           unclaimed;     /* Send: claim_seq != next_seq; written under lock, read by kicks. */
    _Atomic uint32_t      kick_gen;      /* Bumped by every post; workers recheck before sleeping. */
    _Atomic uint64_t      wakes_sent;    /* Kicks that woke a sleeping worker (eventfd writes). */
    ferry_px_timing_t     timing;        /* Where finished messages spent their time (dump). */
    _Atomic int           failed;        /* 0, or the ferry_status_t that broke the comm. */
    char                  fail_reason[256]; /* Written once, before failed is set. */
    ferry_px_req_kind_t   kind;          /* Send or receive comm. */
    int                   nlanes;
    int                   nworkers;      /* 0: no helper threads, NCCL's thread moves every lane. */
    size_t                chunk_min, chunk_max;
    const ferry_px_lane_ops_t *ops;
    char                  backend[8];    /* "socket", "ib": for logs. */
    char                  peer[64];      /* Peer address for logs and dump. */
    uint32_t              serial;        /* Process-wide comm number, in thread names. */
    uint64_t              create_ns;
    _Atomic int           stop;          /* Set at close; workers exit. */
    ferry_px_lane_stats_t lanes[FERRY_PX_MAX_LANES];
    /*
     * 1 while some thread moves the lane: its worker, or NCCL's thread
     * lending a hand (ferry_px_comm_assist). Acquire/release on it hands the
     * backend's lane state from one thread to the next.
     */
    _Atomic int           lane_busy[FERRY_PX_MAX_LANES];
    size_t                assist_max;    /* Messages up to this size are sent by the posting thread. */
    size_t                assist_test_max; /* test() moves lane 0 for messages up to this size. */
    size_t                solo_max;      /* ...and up to this size while the comm is alone (comm.c). */
    _Atomic int           solo;          /* The last post found no other comm of its kind busy. */
    _Atomic uint64_t      last_size;     /* Bytes of the last message test() reported done. */
    uint64_t              spin_ns;       /* Workers keep sweeping this long after their last work... */
    _Atomic uint64_t      small_post_ns; /* ...if a small message was posted this recently. */
    _Atomic uint64_t      assist_ns;     /* Last time NCCL's thread moved lane 0 (ferry_px_comm_assist). */
    unsigned              inject_delay_us; /* Test knob: added to every chunk completion. */
    /*
     * The backend's words for what a gated send or a held receive (lane ops
     * finish) waits on, and what to try; for the stall WARN. NULL: none.
     */
    const char           *hold_hint;
    uint64_t              stall_ns;      /* test() WARNs about a request idle this long; 0 off... */
    int                   stall_quiet;   /* ...once, until a request of the comm completes again. */
    ferry_px_defer_t     *defer;         /* nlanes rings when inject_delay_us > 0, else NULL. */
    int                   use_epoll;     /* Workers wait in epoll (worker_epoll.c), not ppoll. */
    int                   has_cpus;      /* Workers run on `cpus` (near the NIC) when set. */
    cpu_set_t             cpus;
    ferry_px_worker_t     workers[FERRY_PX_MAX_WORKERS];
    struct ferry_px_comm *reg_next, *reg_prev; /* Live-comm registry, under its lock. */
} ferry_px_comm_t;

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

/* Set up the request ring and bookkeeping (no threads yet). */
ferry_status_t ferry_px_comm_init(ferry_px_comm_t *comm, ferry_px_req_kind_t kind,
                                  const char *backend, const char *peer, int nlanes,
                                  int nworkers, size_t chunk_min, size_t chunk_max,
                                  const ferry_px_lane_ops_t *ops);
/* Start the helper threads (named ferry-s<serial>-<i> / ferry-r<serial>-<i>) and register for dumps. */
ferry_status_t ferry_px_comm_start(ferry_px_comm_t *comm);
/* Stop and join every helper thread, unregister; the comm memory stays the caller's. */
void ferry_px_comm_stop(ferry_px_comm_t *comm);

/*
 * Take the next request slot and post it (isend/irecv). Returns NULL when
 * all 32 slots are busy (NCCL retries). On a failed comm the request is
 * still posted: test() then reports the failure with the request's state.
 */
ferry_px_req_t *ferry_px_comm_post(ferry_px_comm_t *comm, void *buf, size_t size);
/*
 * The same, with the backend's memory handle for buf, which its lanes find
 * in req->mem. gated (send): the lanes take none of its chunks, nor those of
 * later messages, until ferry_px_comm_open (the backend is still filling buf).
 */
ferry_px_req_t *ferry_px_comm_post_mem(ferry_px_comm_t *comm, void *buf, size_t size, void *mem,
                                       int gated);
/* Open a gated send: its chunks go to the lanes now. */
void ferry_px_comm_open(ferry_px_comm_t *comm, ferry_px_req_t *req);
/* Send lanes: the next chunk to transmit, in message order. 0 when none. */
int ferry_px_comm_claim(ferry_px_comm_t *comm, ferry_px_claim_t *claim_p);
/* Receive lanes: the posted request for message seq, or NULL (not posted yet). */
ferry_px_req_t *ferry_px_comm_match(ferry_px_comm_t *comm, uint32_t seq);
/*
 * A lane finished a chunk. With NCCL_FERRY_INJECT_DELAY_US the completion is
 * reported that much later while the lane moves on, which shows how much
 * per-chunk latency the pipeline hides. Call with the lane held.
 */
void ferry_px_comm_chunk_finish(ferry_px_comm_t *comm, int lane, ferry_px_req_t *req);
/* The second half of chunk_finish, for a chunk already counted moved. */
void ferry_px_comm_chunk_retire(ferry_px_comm_t *comm, int lane, ferry_px_req_t *req);
/* Nanoseconds until the earliest held-back completion of worker w's lanes; UINT64_MAX if none. */
uint64_t ferry_px_comm_defer_next_ns(ferry_px_comm_t *comm, int w);
/* Mark the comm broken (first reason wins) and wake every worker. */
void ferry_px_comm_fail(ferry_px_comm_t *comm, ferry_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Move lane `lane` if no other thread is moving it; returns the backend's
 * work count, or 0 when the lane was busy.
 */
long ferry_px_comm_progress_lane(ferry_px_comm_t *comm, int lane, short revents);
/*
 * NCCL's thread lends a hand on lane 0: a small isend leaves at once and a
 * test() reads what already arrived, without waiting for a helper thread to
 * wake up. This is what keeps small-message latency at one syscall.
 */
void ferry_px_comm_assist(ferry_px_comm_t *comm);
/*
 * While NCCL's thread keeps calling in, lane 0 is its own: the worker leaves
 * it alone, so a wake-up never races the caller for a message the caller is
 * already polling for. Returns the ns left of that hold (0: the worker's).
 */
uint64_t ferry_px_comm_lane0_held_ns(const ferry_px_comm_t *comm, uint64_t now);
/* Wake every sleeping helper thread (failure, stop). */
void ferry_px_comm_kick(ferry_px_comm_t *comm);
/*
 * After a post: wake only the sleeping workers that now have something to
 * do (one per unclaimed chunk of the new message, nchunks at most; a chunk
 * left half-sent; a parked lane whose irecv may have arrived). Waking idle
 * workers for nothing costs more CPU than the message itself on small
 * machines.
 */
void ferry_px_comm_kick_posted(ferry_px_comm_t *comm, uint32_t nchunks);
/*
 * test(): done/sizes for a request, or its error. Reports each outcome once
 * and returns the slot to FREE.
 */
ferry_status_t ferry_px_comm_test(ferry_px_comm_t *comm, ferry_px_req_t *req, int *done_p,
                                  int *sizes);
/* "socket recv comm 0x.. #3 peer 1.2.3.4:5" for log lines. */
void ferry_px_comm_describe(const ferry_px_comm_t *comm, char *buf, size_t len);

const char *ferry_px_lane_state_str(int state);
static inline void ferry_px_lane_set(ferry_px_comm_t *comm, int lane, ferry_px_lane_state_t st)
{
    atomic_store_explicit(&comm->lanes[lane].state, st, memory_order_relaxed);
}

#endif
