/*
 * The pool's insides (pool.h for what it is), shared by pool.c (threads and
 * their turns), pool_attach.c (clients in and out), pool_epoll.c (the wait)
 * and pool_place.c (CPUs).
 */
#ifndef FERRY_PROXY_POOL_IMPL_H
#define FERRY_PROXY_POOL_IMPL_H

#include "proxy/pool.h"

/* One unit of a client, as one pool thread holds it. */
typedef struct ferry_px_pool_unit {
    struct ferry_px_pool_member *m;
    int      unit;        /* The client's unit number. */
    int      reg_fd;      /* The fd registered in the thread's epoll, -1: none. */
    short    reg_events;  /* What it is registered for, 0: nothing. */
    short    revents;     /* What the last wait reported for it. */
    int      queued;      /* In the thread's ready list for the next turn. */
    int      timed;       /* In the thread's timer list. */
    uint64_t due;         /* When it must be served anyway (absolute ns), UINT64_MAX: never. */
} ferry_px_pool_unit_t;

/* A client's share of one thread: the units of slot j. */
typedef struct ferry_px_pool_member {
    ferry_px_pool_client_t      *client;
    struct ferry_px_pool_thread *t;
    /* 1 from a kick until the thread took it; only the 0 -> 1 kick pushes it on kicks. */
    _Atomic int                  kicked;
    struct ferry_px_pool_member *_Atomic kick_next;
    struct ferry_px_pool_member *next, *prev; /* The thread's members; under its lock. */
    int                          nunits;
    ferry_px_pool_unit_t         units[FERRY_PX_POOL_MAX_UNITS];
} ferry_px_pool_member_t;

/* A growable list of units: the ready lists and the timer list. */
typedef struct ferry_px_pool_list {
    ferry_px_pool_unit_t **v;
    int                    n, cap;
} ferry_px_pool_list_t;

typedef struct ferry_px_pool_thread {
    struct ferry_px_pool *pool;
    int                   index;
    pthread_t             thread;
    int                   started;
    int                   wake_fd;   /* eventfd a kick writes to. */
    int                   ep_fd;
    _Atomic int           sleeping;  /* 1 while in epoll; the kick that clears it writes wake_fd. */
    _Atomic uint32_t      gen;       /* Bumped by every kick; rechecked before sleeping. */
    _Atomic int           stop;
    /*
     * Held by the thread for each turn (not while it waits), by attach and
     * detach: a detach that holds it knows the thread is not inside the
     * client's ops, and stays out until the lock is let go.
     */
    pthread_mutex_t       lock;
    ferry_px_pool_member_t *members;
    ferry_px_pool_member_t *_Atomic kicks;  /* Members kicked since the last turn (a stack). */
    ferry_px_pool_member_t *backlog;        /* Kicked members a detach took off kicks; under lock. */
    uint64_t              epoch;     /* Bumped by detach: a wait across it drops its events. */
    ferry_px_pool_list_t  ready;     /* Units to serve on the next turn. */
    ferry_px_pool_list_t  turn;      /* Units of the turn in progress. */
    ferry_px_pool_list_t  timed;     /* Units with a timer. */
    int                   nunits;
    int                   safety_turn; /* The next turn follows the safety timeout alone. */
    unsigned              rotor;     /* Where the next turn starts in its list. */
    ferry_px_pool_member_t *spin[FERRY_PX_POOL_MAX_SPREAD]; /* Members that worked lately. */
    int                   nspin;
    ferry_px_pool_stats_t stats;
    unsigned              cpus_gen;  /* pool->cpus_gen its affinity was set for. */
    cpu_set_t             base_cpus; /* Its CPUs before place_away cuts the posting CPU out. */
    _Atomic int           placed_for;
} ferry_px_pool_thread_t;

typedef struct ferry_px_pool {
    int                    n;
    ferry_px_pool_thread_t threads[FERRY_PX_POOL_MAX_THREADS];
    _Atomic unsigned       next_first; /* Rotating first thread of the next client. */
    /* The union of the clients' near-NIC CPUs (pool_place.c), under cpus_lock. */
    pthread_mutex_t        cpus_lock;
    int                    has_cpus;
    cpu_set_t              cpus;
    _Atomic unsigned       cpus_gen;
    int                    place_away;
} ferry_px_pool_t;

/* pool_epoll.c */
int ferry_px_pool_epoll_open(ferry_px_pool_thread_t *t);
/* Bring u's registration in line with what it wants now; -1 (errno) if epoll refused. */
int ferry_px_pool_epoll_update(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u);
/* Drop u's registration (detach). */
void ferry_px_pool_epoll_forget(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u);
/*
 * Wait up to wait_ns without the thread's lock; take the lock and queue the
 * units whose fds fired unless a detach bumped the epoch (read under the
 * lock before it was let go) meanwhile. Returns with the lock held, telling
 * what woke it: 1 a kick, 2 an fd, 0 the timeout, -1 an error (errno).
 */
int ferry_px_pool_epoll_wait(ferry_px_pool_thread_t *t, uint64_t wait_ns, uint64_t epoch);

/* pool.c */
void ferry_px_pool_queue(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u);
int  ferry_px_pool_list_push(ferry_px_pool_list_t *l, ferry_px_pool_unit_t *u);
void ferry_px_pool_list_drop_member(ferry_px_pool_list_t *l, const ferry_px_pool_member_t *m);
void *ferry_px_pool_thread_main(void *arg);

/* pool_place.c */
void ferry_px_pool_place_init(void);
/* Before each turn: the pool's CPU set changed, or the posting CPU moved. */
void ferry_px_pool_place_follow(ferry_px_pool_thread_t *t);
/* A client's CPUs join the pool's. */
void ferry_px_pool_place_add(ferry_px_pool_t *pool, const ferry_px_pool_want_t *want);

#endif
