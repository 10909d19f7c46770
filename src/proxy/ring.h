/*
 * The request ring: the part of a send or receive comm that every backend
 * shares. It holds the 32 request slots (message seq s lives in
 * reqs[s % 32]), posts and reaps them, keeps a sticky failure, warns about
 * requests that stall and shows them in the dump. It knows no transport:
 * the backend fills a ferry_px_ring_ops_t, which gives test() its progress
 * and supplies every word about the transport in warnings and the dump.
 *
 * A backend's comm embeds a ferry_px_ring_t, directly or through the stream
 * scheduler (socket/sock_stream.h), which adds lanes and helper threads.
 */
#ifndef FERRY_PROXY_RING_H
#define FERRY_PROXY_RING_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/api.h"
#include "proxy/req.h"

struct ferry_px_ring;

/* What the ring needs from a backend. Only `unit` and `poll` are required. */
typedef struct ferry_px_ring_ops {
    /* What the part counters count, plural, for the dump and warnings. */
    const char *unit;
    /*
     * test() on a request not finished yet: make progress without blocking
     * (move the transport along from NCCL's thread).
     * now: the coarse clock as test() read it (NCCL calls test() in a tight
     * loop; one read per call serves the ring and the backend).
     * Returns work done (0: nothing), or a negative ferry_status_t after the
     * backend has failed the ring with ferry_px_ring_fail().
     */
    long (*poll)(struct ferry_px_ring *ring, ferry_px_req_t *req, uint64_t now);
    /*
     * Optional: a request is DONE (every byte moved); may test() report it
     * now? *ready = 0 holds it back (the backend still works on it, e.g. a copy),
     * 1 reports it. Called by the thread that calls test(), on every test of
     * a DONE request until it says 1. A status other than FERRY_OK is
     * test()'s answer.
     */
    ferry_status_t (*finish)(struct ferry_px_ring *ring, ferry_px_req_t *req, int *ready);
    /*
     * Optional: why a request may have made no progress, and what to check,
     * in the backend's words (which side it waits for; which tool shows the
     * wire). Written into buf as one or more sentences without a final dot.
     */
    void (*stall_why)(const struct ferry_px_ring *ring, const ferry_px_req_t *req, char *buf,
                      size_t len);
    /* Optional: a short summary of the transport's state, in the backend's words. */
    void (*state)(const struct ferry_px_ring *ring, char *buf, size_t len);
    /* Optional: the transport's own dump lines. */
    void (*dump)(const struct ferry_px_ring *ring, FILE *out, uint64_t now);
    /* Optional: a failure was recorded; wake whatever of the backend waits. */
    void (*failed)(struct ferry_px_ring *ring);
    /*
     * Optional: what a post that waits (ferry_px_ring_check_wait) waits for
     * and what to check, in the backend's words ("for the receiver's
     * clear-to-send: ..."), without a final dot.
     */
    void (*wait_why)(const struct ferry_px_ring *ring, char *buf, size_t len);
    /*
     * Sub-buffers a request of the ring may have: 0 or 1 for one, up to
     * FERRY_PX_MAX_SUBS for a backend that takes NCCL's grouped receives
     * (its maxRecvs). The ring holds that many per slot.
     */
    int max_subs;
} ferry_px_ring_ops_t;

/*
 * Where the messages test() reported done spent their time, summed over all
 * of them (ns): post -> first part started (send: the hand-off to a helper
 * or the backend's go-ahead from the peer; recv: waiting for the peer's data), first
 * part -> last part retired (moving it), retired -> test() reported it
 * (NCCL's next look). Updated by the thread that calls test(), its one
 * writer (ferry_px_stat_add); read by the dump.
 */
typedef struct ferry_px_timing {
    _Atomic uint64_t msgs;
    _Atomic uint64_t wait_ns;
    _Atomic uint64_t move_ns;
    _Atomic uint64_t move_max_ns;
    _Atomic uint64_t report_ns;
} ferry_px_timing_t;

/*
 * A statistic with one writer: a relaxed load and store, no locked add on
 * the data path. Readers (the dump) see a recent value.
 */
static inline void ferry_px_stat_add(_Atomic uint64_t *v, uint64_t n)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

typedef struct ferry_px_ring {
    ferry_px_req_t        reqs[FERRY_MAX_REQUESTS]; /* Message seq s lives in reqs[s % 32]. */
    /*
     * What test() and a post that must wait read on every call, together
     * right after reqs[] (4096 bytes), so in one cache line where the comm
     * is allocated cache-line aligned (ferry_px_ring_alloc): NCCL's proxy
     * calls into many comms in turn, and each line a call touches is likely
     * a miss.
     */
    _Atomic int           failed;        /* 0, or the ferry_status_t that broke the comm. */
    ferry_px_req_kind_t   kind;          /* Send or receive comm. */
    const ferry_px_ring_ops_t *ops;
    uint64_t              stall_ns;      /* test() WARNs about a request idle this long; 0 off... */
    int                   stall_quiet;   /* ...once, until a request of the comm completes again. */
    /* ferry_px_ring_clock's reading and calls (test()'s thread; relaxed for tests that share a comm). */
    _Atomic uint32_t      clock_calls;
    _Atomic uint64_t      clock_ns;
    /*
     * When test() last reported a request done (test()'s thread writes
     * it): a request queued behind a stall counts as idle from then,
     * not from its post, or each one queued during the stall would warn again.
     */
    uint64_t              moved_ns;
    /*
     * A post the backend cannot take yet, so no request exists to time (ib:
     * an isend before the receiver's clear-to-send; NCCL retries it): the
     * message it is for + 1 (0: none waits) and since when; its size and the
     * last one warned about below (ferry_px_ring_check_wait). The posting
     * thread writes them; the dump reads them (relaxed).
     */
    _Atomic uint64_t      wait_msg;
    _Atomic uint64_t      wait_ns;
    uint32_t              handle_base;   /* reqs[i] is NCCL's handle slot handle_base + i (handle.h). */
    int                   max_subs;      /* 1..FERRY_PX_MAX_SUBS, from ops->max_subs. */
    ferry_px_sub_t        sub1[FERRY_MAX_REQUESTS]; /* reqs[i].sub where max_subs is 1. */
    ferry_px_sub_t       *subs_grouped; /* FERRY_MAX_REQUESTS x max_subs where more (heap). */
    pthread_mutex_t       lock;          /* Protects next_seq publication (and the backend's cursors). */
    uint32_t              next_seq;      /* Next message number to post; under lock (the dump
                                          * reads it without: relaxed atomic store and load). */
    ferry_px_timing_t     timing;        /* Where finished messages spent their time (dump). */
    char                  fail_reason[320]; /* Written once, before failed is set. */
    char                  backend[8];    /* The backend's name, for logs. */
    char                  peer[64];      /* Peer address for logs and dump. */
    char                  where[64];     /* Local side for logs ("fakeib0:1"), may be empty. */
    uint32_t              serial;        /* Process-wide comm number (registry), in thread names. */
    uint64_t              create_ns;
    _Atomic uint64_t      last_size;     /* Bytes of the last message test() reported done. */
    /*
     * The backend's words for what a gated send or a held receive (ops
     * finish) waits on, and what to try; for the stall WARN. NULL: none.
     */
    const char           *hold_hint;
    _Atomic uint64_t      wait_size;     /* The waiting post's (see wait_msg). */
    uint64_t              wait_warned;
    struct ferry_px_ring *reg_next, *reg_prev; /* Live-comm registry, under its lock. */
    /*
     * What holds the ring beyond its comm, set after init: an RMA group
     * (one ring per peer), so test() can tell a request of this group's
     * from one of another (ferry_px_handle_group_req). NULL otherwise.
     */
    const void           *owner;
} ferry_px_ring_t;

/* The layout the comment above relies on. */
_Static_assert(sizeof(ferry_px_req_t) == 128, "a request is two cache lines");
_Static_assert(offsetof(ferry_px_ring_t, failed) % 64 == 0 &&
               offsetof(ferry_px_ring_t, wait_ns) + 8 - offsetof(ferry_px_ring_t, failed) <= 64,
               "test()'s and a waiting post's fields share one cache line");

/*
 * A zeroed comm of size bytes that embeds a ring at offset 0, cache-line
 * aligned (see the ring's layout); free() releases it. NULL without memory.
 */
void *ferry_px_ring_alloc(size_t size);

/*
 * The coarse clock for NCCL's tight loop over a comm's calls that find
 * nothing to do, read on every FERRY_PX_RING_CLOCK_EVERY-th call of the
 * comm: what it feeds are deadlines counted in milliseconds and seconds
 * (the stall warning, the backend's peer checks), which a reading a few
 * calls old only delays by those calls. An old reading only makes a
 * deadline later, never earlier; a stamp that starts a wait reads the
 * clock itself, so a wait never looks longer than it is. NCCL makes many
 * such idle calls per proxy step, so even the coarse clock's read on each
 * was a visible share of a small message's time.
 */
#define FERRY_PX_RING_CLOCK_EVERY 8

static inline uint64_t ferry_px_ring_clock(ferry_px_ring_t *ring)
{
    uint32_t n = atomic_load_explicit(&ring->clock_calls, memory_order_relaxed);
    uint64_t now;

    atomic_store_explicit(&ring->clock_calls, n + 1, memory_order_relaxed);
    if (n % FERRY_PX_RING_CLOCK_EVERY != 0)
        return atomic_load_explicit(&ring->clock_ns, memory_order_relaxed);
    now = ferry_px_coarse_ns();
    atomic_store_explicit(&ring->clock_ns, now, memory_order_relaxed);
    return now;
}

/* Set up the slots and bookkeeping. Not yet in the registry (ferry_px_ring_register). */
ferry_status_t ferry_px_ring_init(ferry_px_ring_t *ring, ferry_px_req_kind_t kind,
                                  const char *backend, const char *peer,
                                  const ferry_px_ring_ops_t *ops);
/* Into / out of the registry of live comms (serial number, dump). */
void ferry_px_ring_register(ferry_px_ring_t *ring);
void ferry_px_ring_unregister(ferry_px_ring_t *ring);
void ferry_px_ring_fini(ferry_px_ring_t *ring);

/*
 * reqs[] index of a request of the ring, 0..FERRY_MAX_REQUESTS-1: where a
 * backend keeps its own per-request state beside the ring, in arrays of
 * FERRY_MAX_REQUESTS. A request keeps its slot from post until test()
 * reports it, so the backend's entry lives as long.
 */
static inline uint32_t ferry_px_ring_slot_index(const ferry_px_ring_t *ring,
                                                const ferry_px_req_t *req)
{
    return (uint32_t)(req - ring->reqs);
}

/* With ring->lock held: the slot for next_seq if it is FREE, else NULL (32 in flight). */
ferry_px_req_t *ferry_px_ring_slot_locked(ferry_px_ring_t *ring);
/* With ring->lock held: post that slot (FREE -> POSTED) as message next_seq, and advance. */
void ferry_px_ring_post_locked(ferry_px_ring_t *ring, ferry_px_req_t *req, int n,
                               const ferry_px_sub_t *subs, int gated, uint32_t nparts,
                               size_t part_size);
/*
 * Both, taking the lock: NULL when all 32 slots are busy (NCCL retries), or
 * when n is more sub-buffers than the ring's max_subs (a caller's bug: the
 * backend checks NCCL's count against its maxRecvs first). On
 * a failed comm the request is still posted: test() then reports the
 * failure with the request's state.
 */
ferry_px_req_t *ferry_px_ring_post(ferry_px_ring_t *ring, int n, const ferry_px_sub_t *subs,
                                   int gated, uint32_t nparts, size_t part_size);
/* The posted request for message seq, or NULL (not posted yet, or finished). */
ferry_px_req_t *ferry_px_ring_match(ferry_px_ring_t *ring, uint32_t seq);

/*
 * test(): done and sizes (one per sub-buffer) for a request, or its error.
 * Reports each outcome once and returns the slot to FREE.
 */
ferry_status_t ferry_px_ring_test(ferry_px_ring_t *ring, ferry_px_req_t *req, int *done_p,
                                  int *sizes);
/* Mark the comm broken (the first reason wins) and tell the backend (ops failed). */
void ferry_px_ring_fail(ferry_px_ring_t *ring, ferry_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ferry_px_ring_vfail(ferry_px_ring_t *ring, ferry_status_t status, const char *fmt,
                         va_list ap) __attribute__((format(printf, 3, 0)));
/* "<backend> recv comm 0x.. #3 peer 1.2.3.4:5" for log lines. */
void ferry_px_ring_describe(const ferry_px_ring_t *ring, char *buf, size_t len);
/* A request's counters in words ("state ACTIVE, WRs posted 2, done 1 of 2, ..."). */
void ferry_px_ring_req_counters(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                char *buf, size_t len);
/* The same after "send request seq 5", for log lines. */
void ferry_px_ring_req_words(const ferry_px_ring_t *ring, const ferry_px_req_t *req, char *buf,
                             size_t len);
/* The stall check test() runs (ring_stall.c); exposed for tests. */
void ferry_px_ring_check_stall(ferry_px_ring_t *ring, ferry_px_req_t *req);
/* The same at a coarse time the caller already read. */
void ferry_px_ring_check_stall_at(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now);

/*
 * How long req has been idle at now, if that is long enough to warn about
 * (stall_ns, and no WARN yet in this stall of the comm); else 0. Inline:
 * test() asks on every call, and check_stall_at starts from it.
 */
static inline uint64_t ferry_px_ring_stall_idle(const ferry_px_ring_t *ring,
                                                const ferry_px_req_t *req, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&req->last_ns, memory_order_relaxed);

    if (ring->stall_ns == 0 || ring->stall_quiet)
        return 0;
    if (ring->moved_ns > last)
        last = ring->moved_ns; /* Queued behind requests that moved since. */
    return now > last && now - last >= ring->stall_ns ? now - last : 0;
}
/*
 * A post of message msg (the backend's number) and size bytes that the
 * backend could not take yet and returns without a request: times the wait
 * from its first call, and WARNs once, as the stall check does for a request
 * (same delay, once per stall of the comm), in the backend's words (ops
 * wait_why). The wait ends at the next post (ferry_px_ring_post_locked).
 */
void ferry_px_ring_check_wait_slow(ferry_px_ring_t *ring, uint64_t msg, size_t size,
                                   uint64_t now);
static inline void ferry_px_ring_check_wait(ferry_px_ring_t *ring, uint64_t msg, size_t size,
                                            uint64_t now)
{
    /* NCCL retries in a tight loop: the same wait, not yet due, reads the ring's hot line only. */
    if (ring->stall_ns == 0 ||
        (atomic_load_explicit(&ring->wait_msg, memory_order_relaxed) == msg + 1 &&
         (ring->stall_quiet ||
          now < atomic_load_explicit(&ring->wait_ns, memory_order_relaxed) + ring->stall_ns)))
        return;
    ferry_px_ring_check_wait_slow(ring, msg, size, now);
}
/* Write the ring, its requests and the backend's lines (ops dump) for the signal dump. */
void ferry_px_ring_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now);

#endif
