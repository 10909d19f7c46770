/*
 * The pool's life and its clients (pool.h): the process' shared pool starts
 * with its first client and stops with its last; a client's units are
 * spread over its threads; kicks wake a thread only where it sleeps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/pool_impl.h"

static void ferry_px_pool_stop_threads(ferry_px_pool_t *pool)
{
    uint64_t one = 1;
    int i;

    for (i = 0; i < pool->n; i++) {
        ferry_px_pool_thread_t *t = &pool->threads[i];

        atomic_store_explicit(&t->stop, 1, memory_order_release);
        if (t->wake_fd >= 0 && write(t->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            FERRY_WARN("helper thread ferry-pool-%d: waking it to stop failed: %s", i,
                       strerror(errno));
    }
    for (i = 0; i < pool->n; i++) {
        ferry_px_pool_thread_t *t = &pool->threads[i];

        if (t->started)
            pthread_join(t->thread, NULL);
        t->started = 0;
    }
}

void ferry_px_pool_destroy(ferry_px_pool_t *pool)
{
    int i;

    if (pool == NULL)
        return;
    ferry_px_pool_stop_threads(pool);
    for (i = 0; i < pool->n; i++) {
        ferry_px_pool_thread_t *t = &pool->threads[i];

        if (t->ep_fd >= 0)
            close(t->ep_fd);
        if (t->wake_fd >= 0)
            close(t->wake_fd);
        free(t->ready.v);
        free(t->turn.v);
        free(t->timed.v);
        pthread_mutex_destroy(&t->lock);
    }
    pthread_mutex_destroy(&pool->cpus_lock);
    free(pool);
}

ferry_px_pool_t *ferry_px_pool_create(int n, const ferry_px_pool_want_t *want)
{
    ferry_px_pool_t *pool;
    char name[16];
    int i, rc;

    if (n < 1)
        n = 1;
    if (n > FERRY_PX_POOL_MAX_THREADS)
        n = FERRY_PX_POOL_MAX_THREADS;
    pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return NULL;
    pthread_mutex_init(&pool->cpus_lock, NULL);
    pool->place_away = want != NULL && want->place_away;
    if (want != NULL)
        ferry_px_pool_place_add(pool, want);
    for (i = 0; i < n; i++) {
        ferry_px_pool_thread_t *t = &pool->threads[i];

        t->pool = pool;
        t->index = i;
        t->ep_fd = -1;
        pthread_mutex_init(&t->lock, NULL);
        pool->n = i + 1;
        t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (t->wake_fd < 0 || ferry_px_pool_epoll_open(t) != 0) {
            FERRY_WARN("helper thread ferry-pool-%d: eventfd/epoll failed: %s; raise the "
                       "open-file limit (ulimit -n)", i, strerror(errno));
            goto err;
        }
        rc = pthread_create(&t->thread, NULL, ferry_px_pool_thread_main, t);
        if (rc != 0) {
            FERRY_WARN("cannot start helper thread ferry-pool-%d: %s; check the process' thread "
                       "limit (ulimit -u) or lower NCCL_FERRY_POOL_THREADS", i, strerror(rc));
            goto err;
        }
        t->started = 1;
        /* Named from here too: it is listed by name before it first runs. */
        snprintf(name, sizeof(name), "ferry-pool-%d", i);
        (void)pthread_setname_np(t->thread, name);
    }
    return pool;
err:
    ferry_px_pool_destroy(pool);
    return NULL;
}

ferry_status_t ferry_px_pool_attach_to(ferry_px_pool_t *pool, ferry_px_pool_client_t *client,
                                       const ferry_px_pool_ops_t *ops, void *ctx, int nunits,
                                       const ferry_px_pool_want_t *want)
{
    int nthreads = want->threads, j, i;
    unsigned first;

    if (nunits < 1 || nunits > FERRY_PX_POOL_MAX_UNITS || nthreads < 1)
        return FERRY_ERR_INVALID;
    if (nthreads > nunits)
        nthreads = nunits;
    if (nthreads > FERRY_PX_POOL_MAX_SPREAD)
        nthreads = FERRY_PX_POOL_MAX_SPREAD;
    if (nthreads > pool->n)
        nthreads = pool->n;
    client->ops = ops;
    client->ctx = ctx;
    client->nunits = nunits;
    client->nthreads = nthreads;
    for (j = 0; j < nthreads; j++) {
        ferry_px_pool_member_t *m = calloc(1, sizeof(*m));

        if (m == NULL) {
            for (i = 0; i < j; i++)
                free(client->member[i]);
            return FERRY_ERR_NO_MEMORY;
        }
        client->member[j] = m;
    }
    ferry_px_pool_place_add(pool, want);
    /* The next client starts where this one ended: clients spread evenly. */
    first = atomic_fetch_add(&pool->next_first, (unsigned)nthreads);
    client->pool = pool;
    for (j = 0; j < nthreads; j++) {
        ferry_px_pool_member_t *m = client->member[j];
        ferry_px_pool_thread_t *t = &pool->threads[(first + (unsigned)j) % (unsigned)pool->n];
        int u;

        client->thread_of[j] = t->index;
        m->client = client;
        m->t = t;
        for (u = j; u < nunits; u += nthreads) {
            ferry_px_pool_unit_t *pu = &m->units[m->nunits++];

            pu->m = m;
            pu->unit = u;
            pu->reg_fd = -1;
            pu->due = UINT64_MAX;
        }
        pthread_mutex_lock(&t->lock);
        m->next = t->members;
        if (t->members != NULL)
            t->members->prev = m;
        t->members = m;
        t->nunits += m->nunits;
        pthread_mutex_unlock(&t->lock);
        /* Its first turn registers the units' fds and timers. */
        ferry_px_pool_kick(client, j);
    }
    return FERRY_OK;
}

void ferry_px_pool_kick(ferry_px_pool_client_t *client, int slot)
{
    ferry_px_pool_member_t *m = client->member[slot];
    ferry_px_pool_thread_t *t = m->t;
    uint64_t one = 1;

    if (atomic_exchange(&m->kicked, 1) == 0) {
        ferry_px_pool_member_t *head = atomic_load(&t->kicks);

        do
            atomic_store_explicit(&m->kick_next, head, memory_order_relaxed);
        while (!atomic_compare_exchange_weak(&t->kicks, &head, m));
    }
    /*
     * seq_cst on gen here and on sleeping in the thread: a thread not asleep
     * yet sees the new generation and turns again; one asleep is woken by
     * the first kicker only (one eventfd write per sleep).
     */
    atomic_fetch_add(&t->gen, 1);
    if (atomic_load(&t->sleeping) && atomic_exchange(&t->sleeping, 0) &&
        write(t->wake_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
        atomic_fetch_add_explicit(&client->wakes_sent, 1, memory_order_relaxed);
}

void ferry_px_pool_kick_all(ferry_px_pool_client_t *client)
{
    int j;

    for (j = 0; j < client->nthreads; j++)
        ferry_px_pool_kick(client, j);
}

int ferry_px_pool_sleeping(const ferry_px_pool_client_t *client, int slot)
{
    return atomic_load(&client->member[slot]->t->sleeping);
}

/* Take m off t's lists; under t's lock, so t is between turns or waiting. */
static void ferry_px_pool_unlink(ferry_px_pool_thread_t *t, ferry_px_pool_member_t *m)
{
    ferry_px_pool_member_t *k = atomic_exchange(&t->kicks, NULL), *next;
    int i;

    /* Kicked members other than m wait in the backlog for the next turn. */
    for (; k != NULL; k = next) {
        next = atomic_load_explicit(&k->kick_next, memory_order_relaxed);
        if (k == m)
            continue;
        atomic_store_explicit(&k->kick_next, t->backlog, memory_order_relaxed);
        t->backlog = k;
    }
    for (k = t->backlog, next = NULL; k != NULL; next = k, k = atomic_load(&k->kick_next))
        if (k == m) {
            if (next == NULL)
                t->backlog = atomic_load(&k->kick_next);
            else
                atomic_store(&next->kick_next, atomic_load(&k->kick_next));
            break;
        }
    if (m->prev != NULL)
        m->prev->next = m->next;
    else
        t->members = m->next;
    if (m->next != NULL)
        m->next->prev = m->prev;
    ferry_px_pool_list_drop_member(&t->ready, m);
    ferry_px_pool_list_drop_member(&t->timed, m);
    for (i = 0; i < t->nspin; i++)
        if (t->spin[i] == m)
            t->spin[i--] = t->spin[--t->nspin];
    for (i = 0; i < m->nunits; i++)
        ferry_px_pool_epoll_forget(t, &m->units[i]);
    t->nunits -= m->nunits;
    t->epoch++;
}

static void ferry_px_pool_detach_from(ferry_px_pool_client_t *client)
{
    int j;

    for (j = 0; j < client->nthreads; j++) {
        ferry_px_pool_member_t *m = client->member[j];
        ferry_px_pool_thread_t *t = m->t;

        /* A late kick finds it kicked already and pushes nothing. */
        atomic_store(&m->kicked, 1);
        pthread_mutex_lock(&t->lock);
        ferry_px_pool_unlink(t, m);
        pthread_mutex_unlock(&t->lock);
    }
    /* Every thread let go of the lock after the unlink: none holds a unit of ours now. */
    for (j = 0; j < client->nthreads; j++) {
        free(client->member[j]);
        client->member[j] = NULL;
    }
    client->pool = NULL;
    client->nthreads = 0;
}

/* The process' shared pool and how many clients it has. */
static pthread_mutex_t ferry_px_pool_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_px_pool_t *ferry_px_pool_shared;
static int ferry_px_pool_nclients;

/*
 * A forked child has none of the pool's threads: a comm it opens starts a
 * pool of its own rather than kicking eventfds the parent's threads read.
 * The parent's pool memory stays allocated in the child (its threads'
 * stacks are gone; freeing it would run no join). The lock is taken around
 * fork so the child never inherits it held.
 */
static void ferry_px_pool_fork_prepare(void)
{
    pthread_mutex_lock(&ferry_px_pool_shared_lock);
}

static void ferry_px_pool_fork_parent(void)
{
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
}

static void ferry_px_pool_fork_child(void)
{
    ferry_px_pool_shared = NULL;
    ferry_px_pool_nclients = 0;
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
}

static pthread_once_t ferry_px_pool_fork_once = PTHREAD_ONCE_INIT;

static void ferry_px_pool_fork_init(void)
{
    (void)pthread_atfork(ferry_px_pool_fork_prepare, ferry_px_pool_fork_parent,
                         ferry_px_pool_fork_child);
}

ferry_status_t ferry_px_pool_attach(ferry_px_pool_client_t *client, const ferry_px_pool_ops_t *ops,
                                    void *ctx, int nunits, const ferry_px_pool_want_t *want)
{
    ferry_status_t status;

    pthread_once(&ferry_px_pool_fork_once, ferry_px_pool_fork_init);
    pthread_mutex_lock(&ferry_px_pool_shared_lock);
    if (ferry_px_pool_shared == NULL) {
        ferry_px_pool_place_init();
        ferry_px_pool_shared = ferry_px_pool_create(want->pool_size, want);
        if (ferry_px_pool_shared == NULL) {
            pthread_mutex_unlock(&ferry_px_pool_shared_lock);
            return FERRY_ERR_IO;
        }
        FERRY_INFO(FERRY_LOG_NET, "helper thread pool started: %d threads (ferry-pool-*) for "
                   "every connection of this process", ferry_px_pool_shared->n);
    }
    status = ferry_px_pool_attach_to(ferry_px_pool_shared, client, ops, ctx, nunits, want);
    if (status == FERRY_OK)
        ferry_px_pool_nclients++;
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
    return status;
}

void ferry_px_pool_detach(ferry_px_pool_client_t *client)
{
    ferry_px_pool_t *pool = client->pool;
    ferry_px_pool_t *gone = NULL;

    if (pool == NULL)
        return;
    ferry_px_pool_detach_from(client);
    pthread_mutex_lock(&ferry_px_pool_shared_lock);
    if (pool == ferry_px_pool_shared && --ferry_px_pool_nclients == 0) {
        gone = ferry_px_pool_shared;
        ferry_px_pool_shared = NULL;
    }
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
    ferry_px_pool_destroy(gone);
}

int ferry_px_pool_size(void)
{
    int n;

    pthread_mutex_lock(&ferry_px_pool_shared_lock);
    n = ferry_px_pool_shared != NULL ? ferry_px_pool_shared->n : 0;
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
    return n;
}

void ferry_px_pool_dump(FILE *out)
{
    pthread_mutex_lock(&ferry_px_pool_shared_lock);
    if (ferry_px_pool_shared != NULL)
        ferry_px_pool_dump_threads(out, ferry_px_pool_shared);
    pthread_mutex_unlock(&ferry_px_pool_shared_lock);
}

int ferry_px_pool_thread_stats(const ferry_px_pool_client_t *client, int slot,
                               ferry_px_pool_stats_t *out, int *index_p, int *placed_for_p)
{
    const ferry_px_pool_thread_t *t;

    if (client->pool == NULL || slot < 0 || slot >= client->nthreads)
        return 0;
    t = client->member[slot]->t;
#define FERRY_PX_POOL_STAT_COPY(f) \
    atomic_store_explicit(&out->f, atomic_load_explicit(&t->stats.f, memory_order_relaxed), \
                          memory_order_relaxed)
    FERRY_PX_POOL_STAT_COPY(sweeps);
    FERRY_PX_POOL_STAT_COPY(idle_sweeps);
    FERRY_PX_POOL_STAT_COPY(full_sweeps);
    FERRY_PX_POOL_STAT_COPY(rescues);
    FERRY_PX_POOL_STAT_COPY(sleeps);
    FERRY_PX_POOL_STAT_COPY(woken_post);
    FERRY_PX_POOL_STAT_COPY(woken_io);
    FERRY_PX_POOL_STAT_COPY(woken_timer);
    FERRY_PX_POOL_STAT_COPY(placed);
#undef FERRY_PX_POOL_STAT_COPY
    *index_p = t->index;
    *placed_for_p = atomic_load_explicit(&t->placed_for, memory_order_relaxed);
    return 1;
}

int ferry_px_pool_thread_of(const ferry_px_pool_client_t *client, int slot, pthread_t *thread_p)
{
    if (client->pool == NULL || slot < 0 || slot >= client->nthreads)
        return 0;
    *thread_p = client->member[slot]->t->thread;
    return 1;
}
