/*
 * One process-wide pool of helper threads. A backend whose connections need
 * threads to move them (bytes moved by system calls, one unit at a time)
 * attaches each connection as a client with some units; the pool spreads the
 * units over its threads and calls the client's ops. The pool knows nothing
 * of what a unit is: a unit has an fd to wait on (or none), a timer, and a
 * progress call that does a bounded amount of work.
 *
 * Why one pool: threads per connection grow with the connections (NCCL
 * opens a send and a receive comm per channel and peer), and on a node of
 * several ranks with many peers that is thousands of sleeping threads, each
 * one more wake-up and context switch between the copies. The pool's size is
 * fixed when it starts (the first client that wants helpers chooses it);
 * later clients share it.
 *
 * A pool thread waits in epoll on its units' fds (each registered once,
 * changed only when what the unit waits for changes, the epoll data naming
 * the unit) plus an eventfd that kicks write. After a wake it serves only
 * units with a reason (an fd event, a kick of their client, work done on the
 * last turn, a timer due), round robin, one progress call per unit per turn:
 * a bulk stream on one client cannot starve a ping-pong on another served by
 * the same thread. A full sweep happens on the safety timeout only.
 */
#ifndef FERRY_PROXY_POOL_H
#define FERRY_PROXY_POOL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "core/api.h"

#define FERRY_PX_POOL_MAX_THREADS 64 /* A bound on NCCL_FERRY_POOL_THREADS. */
#define FERRY_PX_POOL_MAX_UNITS   64 /* Units of one client. */
#define FERRY_PX_POOL_MAX_SPREAD  16 /* Pool threads one client's units spread over. */

/*
 * What a unit waits for on its fd, and what the pool saw there: the pool's
 * own words, so that a client need not share its event API (the pool maps
 * them onto epoll).
 */
#define FERRY_PX_POOL_READABLE 0x1
#define FERRY_PX_POOL_WRITABLE 0x2
#define FERRY_PX_POOL_BROKEN   0x4 /* Seen only: an error or hang-up on the fd. */

/* What the pool needs from a client to move one unit. ctx: the client's. */
typedef struct ferry_px_pool_ops {
    /*
     * Move unit without blocking, a bounded amount (the fairness between
     * clients rests on it). revents: FERRY_PX_POOL_* bits the unit's fd
     * reported, 0 when called for another reason. Returns work
     * done (> 0: the unit is served again next turn), 0 for none.
     */
    long (*progress)(void *ctx, int unit, short revents);
    /* The fd the unit waits on now and for what (FERRY_PX_POOL_READABLE/WRITABLE), 0: only a
     * kick or timer. */
    short (*wants)(void *ctx, int unit, int *fd_p);
    /* Nanoseconds until the unit must be served anyway (0: now); UINT64_MAX: no timer. */
    uint64_t (*next_ns)(void *ctx, int unit, uint64_t now);
    /* Optional: called after progress each turn, also when progress had nothing to do. */
    long (*retire)(void *ctx, int unit);
    /*
     * Optional: how long an idle thread should keep sweeping this client's
     * units before it sleeps (latency-bound traffic just flowed); 0: sleep.
     */
    uint64_t (*spin_ns)(void *ctx, uint64_t now);
} ferry_px_pool_ops_t;

/*
 * What a pool thread did, for the dump: written by the thread alone,
 * relaxed. Wake-ups per unit of work is the figure to watch.
 */
typedef struct ferry_px_pool_stats {
    _Atomic uint64_t sweeps;      /* Turns over its ready units... */
    _Atomic uint64_t idle_sweeps; /* ...that found nothing to do. */
    _Atomic uint64_t full_sweeps; /* Turns over every unit (the safety timeout). */
    _Atomic uint64_t rescues;     /* Safety-timeout turns that found work: a lost wake-up. */
    _Atomic uint64_t sleeps;      /* Times it slept in epoll, woken by: */
    _Atomic uint64_t woken_post;  /*   a kick (a post, a failure, a detach); */
    _Atomic uint64_t woken_io;    /*   one of its units' fds; */
    _Atomic uint64_t woken_timer; /*   the timeout (a unit's timer, the safety net). */
    _Atomic uint64_t placed;      /* Times its CPUs were cut again around the posting CPU. */
} ferry_px_pool_stats_t;

struct ferry_px_pool;
struct ferry_px_pool_thread;
struct ferry_px_pool_member;

/* What a client asks of the pool at attach. */
typedef struct ferry_px_pool_want {
    int       threads;    /* Pool threads its units spread over (1..FERRY_PX_POOL_MAX_SPREAD). */
    int       pool_size;  /* Threads of the pool if this attach starts it. */
    int       has_cpus;   /* The client's preferred CPUs (near its NIC). */
    cpu_set_t cpus;
    int       place_away; /* The pool keeps off the process' last posting CPU. */
} ferry_px_pool_want_t;

/*
 * One client (a connection): embedded in the backend's comm. Zero it, then
 * ferry_px_pool_attach; every field is the pool's.
 */
typedef struct ferry_px_pool_client {
    const ferry_px_pool_ops_t *ops;
    void                *ctx;
    int                  nunits;
    int                  nthreads;   /* Pool threads its units are spread over. */
    struct ferry_px_pool *pool;      /* NULL: not attached. */
    /* Slot j serves units j, j + nthreads, ...; its thread and its membership there. */
    struct ferry_px_pool_member *member[FERRY_PX_POOL_MAX_SPREAD];
    int                  thread_of[FERRY_PX_POOL_MAX_SPREAD]; /* Pool thread index of slot j. */
    _Atomic uint64_t     wakes_sent; /* Kicks that woke a sleeping thread (eventfd writes). */
} ferry_px_pool_client_t;

/*
 * Attach client with nunits units to the process' shared pool, starting it
 * (want->pool_size threads, named ferry-pool-<i>) if it does not run. The
 * units are spread over min(nunits, want->threads, pool size) threads from a
 * rotating first thread. Returns FERRY_ERR_IO (with a WARN) if threads or
 * fds could not be made.
 */
ferry_status_t ferry_px_pool_attach(ferry_px_pool_client_t *client, const ferry_px_pool_ops_t *ops,
                                    void *ctx, int nunits, const ferry_px_pool_want_t *want);
/*
 * Detach: after it returns no pool thread touches the client or its ctx.
 * The last client to detach stops the pool (its threads joined, fds
 * closed): a process that closed every comm holds no helper thread.
 */
void ferry_px_pool_detach(ferry_px_pool_client_t *client);
/* Wake the thread of slot j if it sleeps, and have it serve the client's units there. */
void ferry_px_pool_kick(ferry_px_pool_client_t *client, int slot);
/* Wake every thread of the client (a failure). */
void ferry_px_pool_kick_all(ferry_px_pool_client_t *client);
/* 1 while the thread of slot j sleeps (the kick discipline's question: worth waking?). */
int ferry_px_pool_sleeping(const ferry_px_pool_client_t *client, int slot);
/* The process' posting CPU moved (place_away): cheap when it did not. */
void ferry_px_pool_note_caller(int cpu);

/* The shared pool's threads and their figures, once per dump (nothing if none runs). */
void ferry_px_pool_dump(FILE *out);
/* The same for a given pool (tests' private pools). */
void ferry_px_pool_dump_threads(FILE *out, struct ferry_px_pool *pool);

/* Threads the running pool has (0: none runs). */
int ferry_px_pool_size(void);
/* Thread i's statistics and where it keeps off (-1: nowhere), for the dump; 0 if no such thread. */
int ferry_px_pool_thread_stats(const ferry_px_pool_client_t *client, int slot,
                               ferry_px_pool_stats_t *out, int *index_p, int *placed_for_p);

/* Tests: the pthread of the thread that serves slot j (0: none). */
int ferry_px_pool_thread_of(const ferry_px_pool_client_t *client, int slot, pthread_t *thread_p);

/*
 * Tests: a private pool of n threads, not the process' shared one. Attach
 * to it with ferry_px_pool_attach_to; destroy only after every detach.
 */
struct ferry_px_pool *ferry_px_pool_create(int n, const ferry_px_pool_want_t *want);
void ferry_px_pool_destroy(struct ferry_px_pool *pool);
ferry_status_t ferry_px_pool_attach_to(struct ferry_px_pool *pool, ferry_px_pool_client_t *client,
                                       const ferry_px_pool_ops_t *ops, void *ctx, int nunits,
                                       const ferry_px_pool_want_t *want);

#endif
