/*
 * The pool's threads (pool.h): each serves its ready units round robin, one
 * progress call per unit per turn, and sleeps in epoll when a turn found
 * nothing to do. Attach and detach are in pool_attach.c.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/clock.h"
#include "proxy/pool_impl.h"
#include "proxy/ring.h"

/* A safety net only: every state change that matters kicks the thread or fires its fd. */
#define FERRY_PX_POOL_TIMEOUT_NS 1000000000ULL

int ferry_px_pool_list_push(ferry_px_pool_list_t *l, ferry_px_pool_unit_t *u)
{
    if (l->n == l->cap) {
        int cap = l->cap > 0 ? l->cap * 2 : 64;
        ferry_px_pool_unit_t **v = realloc(l->v, (size_t)cap * sizeof(*v));

        if (v == NULL)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = u;
    return 0;
}

void ferry_px_pool_list_drop_member(ferry_px_pool_list_t *l, const ferry_px_pool_member_t *m)
{
    int i, k = 0;

    for (i = 0; i < l->n; i++)
        if (l->v[i]->m != m)
            l->v[k++] = l->v[i];
    l->n = k;
}

/*
 * Queue u for the next turn. Out of memory for the list (it only grows to
 * the thread's unit count) the unit waits for the full sweep of the safety
 * timeout: slower, never lost.
 */
void ferry_px_pool_queue(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u)
{
    if (u->queued)
        return;
    if (ferry_px_pool_list_push(&t->ready, u) == 0)
        u->queued = 1;
}

static void ferry_px_pool_queue_member(ferry_px_pool_thread_t *t, ferry_px_pool_member_t *m)
{
    int i;

    for (i = 0; i < m->nunits; i++)
        ferry_px_pool_queue(t, &m->units[i]);
}

/* Kicked members: every unit of theirs on this thread is served this turn. */
static int ferry_px_pool_take_kicks(ferry_px_pool_thread_t *t)
{
    ferry_px_pool_member_t *m = atomic_exchange(&t->kicks, NULL), *next;
    int n = t->backlog != NULL;

    for (; m != NULL; m = next, n++) {
        next = atomic_load_explicit(&m->kick_next, memory_order_relaxed);
        /* Clear before serving: a kick from now on pushes it again. */
        atomic_store(&m->kicked, 0);
        ferry_px_pool_queue_member(t, m);
    }
    for (m = t->backlog; m != NULL; m = next) {
        next = atomic_load_explicit(&m->kick_next, memory_order_relaxed);
        atomic_store(&m->kicked, 0);
        ferry_px_pool_queue_member(t, m);
    }
    t->backlog = NULL;
    return n;
}

/* Units whose timer is due join the turn; the rest tell how long the thread may sleep. */
static uint64_t ferry_px_pool_take_timers(ferry_px_pool_thread_t *t, uint64_t now)
{
    uint64_t wait = UINT64_MAX;
    int i, k = 0;

    for (i = 0; i < t->timed.n; i++) {
        ferry_px_pool_unit_t *u = t->timed.v[i];

        if (u->due == UINT64_MAX) {
            u->timed = 0;
            continue;
        }
        t->timed.v[k++] = u;
        if (u->due <= now)
            ferry_px_pool_queue(t, u);
        else if (u->due - now < wait)
            wait = u->due - now;
    }
    t->timed.n = k;
    return wait;
}

static void ferry_px_pool_note_spin(ferry_px_pool_thread_t *t, ferry_px_pool_member_t *m)
{
    int i;

    for (i = 0; i < t->nspin; i++)
        if (t->spin[i] == m)
            return;
    if (t->nspin < FERRY_PX_POOL_MAX_SPREAD)
        t->spin[t->nspin++] = m;
}

/* Serve u once: progress, retire, then its wait and timer as they are now. */
static long ferry_px_pool_serve(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u)
{
    const ferry_px_pool_client_t *c = u->m->client;
    short revents = u->revents;
    long work, r;
    uint64_t next;

    u->revents = 0;
    work = c->ops->progress(c->ctx, u->unit, revents);
    if (c->ops->retire != NULL && (r = c->ops->retire(c->ctx, u->unit)) > 0)
        work += r > 0 ? r : 0;
    if (work > 0) {
        ferry_px_pool_queue(t, u);
        ferry_px_pool_note_spin(t, u->m);
    }
    if (ferry_px_pool_epoll_update(t, u) != 0)
        FERRY_WARN_LIMITED("helper thread ferry-pool-%d: epoll_ctl for unit %d failed: %s; that "
                           "unit is served by the thread's safety timeout only (raise "
                           "fs.epoll.max_user_watches if it says ENOSPC)", t->index, u->unit,
                           strerror(errno));
    next = c->ops->next_ns != NULL ? c->ops->next_ns(c->ctx, u->unit, ferry_px_now_ns())
                                   : UINT64_MAX;
    u->due = next == UINT64_MAX ? UINT64_MAX : ferry_px_now_ns() + next;
    if (u->due != UINT64_MAX && !u->timed && ferry_px_pool_list_push(&t->timed, u) == 0)
        u->timed = 1;
    return work;
}

/* One turn over the units queued for it, starting at a rotating place. */
static long ferry_px_pool_turn(ferry_px_pool_thread_t *t)
{
    ferry_px_pool_list_t l = t->ready;
    long work = 0, r;
    int i, n;

    t->ready = t->turn; /* Empty: the units that work now queue for the next turn. */
    t->ready.n = 0;
    t->turn = l;
    n = l.n;
    for (i = 0; i < n; i++)
        l.v[i]->queued = 0;
    for (i = 0; i < n; i++) {
        r = ferry_px_pool_serve(t, l.v[(i + t->rotor) % (unsigned)n]);
        if (r > 0)
            work += r;
    }
    t->turn.n = 0;
    t->rotor++;
    return work;
}

static void ferry_px_pool_queue_all(ferry_px_pool_thread_t *t)
{
    ferry_px_pool_member_t *m;

    for (m = t->members; m != NULL; m = m->next)
        ferry_px_pool_queue_member(t, m);
    ferry_px_stat_add(&t->stats.full_sweeps, 1);
}

/*
 * Spinning pays only while the spinners leave cores to everyone else: at
 * most a quarter of the process' CPUs spin at once.
 */
static _Atomic int ferry_px_spinners;
static int ferry_px_spin_max;
static pthread_once_t ferry_px_spin_once = PTHREAD_ONCE_INIT;

static void ferry_px_spin_init(void)
{
    cpu_set_t set;
    int n = 1;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set) / 4;
    ferry_px_spin_max = n > 0 ? n : 1;
}

static int ferry_px_spin_acquire(void)
{
    pthread_once(&ferry_px_spin_once, ferry_px_spin_init);
    if (atomic_fetch_add(&ferry_px_spinners, 1) < ferry_px_spin_max)
        return 1;
    atomic_fetch_sub(&ferry_px_spinners, 1);
    return 0;
}

/*
 * The busy-poll window: after a turn with nothing to do, keep serving the
 * members that worked lately for as long as their clients ask
 * (latency-bound traffic: a reply often comes within microseconds).
 * Returns 1 to keep going (their units are queued again).
 */
static int ferry_px_pool_keep_spinning(ferry_px_pool_thread_t *t, uint64_t *idle_since,
                                       int *spinning)
{
    uint64_t now = ferry_px_now_ns(), want = 0, s;
    int i;

    for (i = 0; i < t->nspin; i++) {
        const ferry_px_pool_client_t *c = t->spin[i]->client;

        if (c->ops->spin_ns != NULL && (s = c->ops->spin_ns(c->ctx, now)) > want)
            want = s;
    }
    if (want == 0)
        return 0;
    if (!*spinning && !(*spinning = ferry_px_spin_acquire()))
        return 0;
    if (*idle_since == 0)
        *idle_since = now;
    if (now - *idle_since >= want)
        return 0;
    for (i = 0; i < t->nspin; i++)
        ferry_px_pool_queue_member(t, t->spin[i]);
    return 1;
}

/* Sleep in epoll until a kick, an fd, a timer or the safety timeout; then queue what woke. */
static void ferry_px_pool_sleep(ferry_px_pool_thread_t *t, uint64_t timer_ns)
{
    uint64_t wait = timer_ns < FERRY_PX_POOL_TIMEOUT_NS ? timer_ns : FERRY_PX_POOL_TIMEOUT_NS;
    uint64_t epoch = t->epoch;
    int why;

    pthread_mutex_unlock(&t->lock);
    why = ferry_px_pool_epoll_wait(t, wait, epoch);
    atomic_store(&t->sleeping, 0);
    ferry_px_stat_add(&t->stats.sleeps, 1);
    if (why < 0 && errno != EINTR)
        FERRY_WARN_LIMITED("helper thread ferry-pool-%d: epoll_wait failed: %s; retrying",
                           t->index, strerror(errno));
    if (why == 1)
        ferry_px_stat_add(&t->stats.woken_post, 1);
    else if (why == 2)
        ferry_px_stat_add(&t->stats.woken_io, 1);
    else if (why == 0)
        ferry_px_stat_add(&t->stats.woken_timer, 1);
    /*
     * A detach while the thread waited may have freed units whose events it
     * holds (pool_epoll.c queues them only when the epoch held); the safety
     * timeout and a failed wait serve everything.
     */
    if (epoch != t->epoch || why < 0 || (why == 0 && wait == FERRY_PX_POOL_TIMEOUT_NS))
        ferry_px_pool_queue_all(t);
    t->safety_turn = epoch == t->epoch && why == 0 && wait == FERRY_PX_POOL_TIMEOUT_NS;
}

void *ferry_px_pool_thread_main(void *arg)
{
    ferry_px_pool_thread_t *t = arg;
    uint64_t idle_since = 0;
    int spinning = 0;
    char name[16];

    snprintf(name, sizeof(name), "ferry-pool-%d", t->index);
    pthread_setname_np(pthread_self(), name);
    atomic_store_explicit(&t->placed_for, -1, memory_order_relaxed);
    pthread_mutex_lock(&t->lock);
    while (!atomic_load_explicit(&t->stop, memory_order_acquire)) {
        uint32_t gen = atomic_load(&t->gen);
        long work;
        int kicked;

        ferry_px_pool_place_follow(t);
        kicked = ferry_px_pool_take_kicks(t);
        (void)ferry_px_pool_take_timers(t, ferry_px_now_ns());
        work = t->ready.n > 0 ? ferry_px_pool_turn(t) : 0;
        ferry_px_stat_add(&t->stats.sweeps, 1);
        /*
         * Work that only the safety timeout found was announced by no kick and
         * no fd: a lost wake-up (a kick racing the timeout is not counted).
         */
        if (t->safety_turn && work > 0 && !kicked)
            ferry_px_stat_add(&t->stats.rescues, 1);
        t->safety_turn = 0;
        if (work > 0) {
            idle_since = 0;
            /* Let attach and detach in between turns. */
            pthread_mutex_unlock(&t->lock);
            pthread_mutex_lock(&t->lock);
            continue;
        }
        ferry_px_stat_add(&t->stats.idle_sweeps, 1);
        if (t->ready.n > 0)
            continue; /* A timer came due, or progress queued it without counting work. */
        if (ferry_px_pool_keep_spinning(t, &idle_since, &spinning)) {
            pthread_mutex_unlock(&t->lock);
            pthread_mutex_lock(&t->lock);
            continue;
        }
        if (spinning)
            atomic_fetch_sub(&ferry_px_spinners, 1);
        spinning = 0;
        idle_since = 0;
        t->nspin = 0;
        /* Announce the sleep, then look again: a kick in between bumped gen. */
        atomic_store(&t->sleeping, 1);
        if (atomic_load(&t->gen) != gen || atomic_load(&t->stop)) {
            atomic_store(&t->sleeping, 0);
            continue;
        }
        ferry_px_pool_sleep(t, ferry_px_pool_take_timers(t, ferry_px_now_ns()));
    }
    pthread_mutex_unlock(&t->lock);
    if (spinning)
        atomic_fetch_sub(&ferry_px_spinners, 1);
    return NULL;
}
