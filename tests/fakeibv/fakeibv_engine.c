/*
 * fakeibv engine: the few threads that drive every QP of the process.
 *
 * A NIC serves thousands of QPs with a fixed set of engines; a thread per
 * QP stream would make a test of 1,024 connections start 3,000 threads on a
 * two-core machine. Instead:
 *
 *  - one poll thread (fakeibv-poll) waits in epoll on every stream: each
 *    QP's outbound stream (its responses) and each inbound stream (requests
 *    to it), registered one-shot, and runs the retry timers of QPs whose
 *    peer is unreachable;
 *  - a pool of workers (fakeibv-work) runs the jobs it hands out: serve the
 *    requests waiting on an inbound stream, take the responses waiting on
 *    an outbound one, or transmit a QP's send queue. A one-shot stream is
 *    re-armed by the job that served it, so one worker at a time reads a
 *    stream and requests stay in order; a QP's transmit job is queued at
 *    most once (qp->tx_sched), so one thread at a time sends.
 *
 * With FAKEIBV_SPIN_US the engine polls as a NIC's engines do, with no
 * sleep between a stream becoming readable and the request being served:
 * the poll thread keeps asking epoll without waiting, and a worker out of
 * jobs keeps looking for one, for that long after their last work, before
 * they sleep. A job queued meanwhile is claimed by a spinning worker
 * (spin_claims) rather than by a wake-up. It costs CPU while traffic
 * flows and nothing when idle; it takes the emulator's own thread wake-ups
 * out of each request's latency, so what remains is the plugins' work.
 *
 * The pool starts with FAKEIBV_ENGINE_MIN workers and grows, one at a time
 * up to FAKEIBV_ENGINE_MAX, when a job waits and no worker is idle: a job
 * may block (a responder waiting out RNR, a large payload streaming into a
 * full socket), and the others must still be served meanwhile. Workers stay
 * until the engine stops, which it does, as the accept thread, when the
 * last QP past INIT is reset or destroyed.
 *
 * Locks: qp->lock may be held when taking fakeibv_eng.lock, never the
 * reverse. The job bookkeeping of a QP (queued, jobs, dead) is under
 * fakeibv_eng.lock.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fakeibv_internal.h"

#define FAKEIBV_ENGINE_MIN 2
#define FAKEIBV_ENGINE_MAX 16

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work;          /* A job was queued, or the engine stops. */
    pthread_cond_t changed;       /* A QP's jobs drained, or the poll loop went round. */
    int epfd, wakefd;             /* Made once, kept for the process's life. */
    int holders;                  /* QPs past INIT: the engine runs while > 0. */
    int running;
    struct fakeibv_job *head, *tail;
    struct fakeibv_qp *timers;    /* QPs with a retry deadline (qp->timer_next). */
    int nworkers, nidle;          /* Workers, and those asleep waiting for a job. */
    int nwake;                    /* Of those asleep, woken for a job and not yet up. */
    int nspin;                    /* Workers spinning for a job (FAKEIBV_SPIN_US)... */
    int spin_claims;              /* ...and jobs claimed for them: atomic reads while spinning. */
    pthread_t poll_thread, workers[FAKEIBV_ENGINE_MAX];
    uint64_t epoch;               /* Poll loop rounds (fakeibv_engine_unwatch's barrier). */
} fakeibv_eng = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .changed = PTHREAD_COND_INITIALIZER,
    .epfd = -1,
    .wakefd = -1,
};

/* ---- fakeibv_test_stall_workers (fakeibv.h) -------------------------------- */

static uint64_t fakeibv_test_stall_until; /* CLOCK_MONOTONIC ns; 0: off. */

static uint64_t fakeibv_mono_ns(void);

FAKEIBV_EXPORT void fakeibv_test_stall_workers(int on)
{
    __atomic_store_n(&fakeibv_test_stall_until, on ? fakeibv_mono_ns() + 10000000000ULL : 0,
                     __ATOMIC_RELEASE);
}

/* No worker takes a job now: the test's stall is on and younger than 10 s. */
static int fakeibv_test_stalled(void)
{
    uint64_t until = __atomic_load_n(&fakeibv_test_stall_until, __ATOMIC_ACQUIRE);

    return until != 0 && fakeibv_mono_ns() < until;
}

/* ---- the job queue (fakeibv_eng.lock held) ------------------------------- */

static void *fakeibv_worker_main(void *arg);

static void fakeibv_push_locked(struct fakeibv_job *j)
{
    j->queued = 1;
    j->next = NULL;
    j->qp->jobs++;
    if (fakeibv_eng.tail != NULL)
        fakeibv_eng.tail->next = j;
    else
        fakeibv_eng.head = j;
    fakeibv_eng.tail = j;
    /* Each queued job claims a sleeping worker, or gets a new one: a worker
     * woken for the previous job must not count for this one too, or a job
     * that blocks until the one queued behind it runs would wait for ever. */
    if (fakeibv_eng.nspin > fakeibv_eng.spin_claims) {
        __atomic_store_n(&fakeibv_eng.spin_claims, fakeibv_eng.spin_claims + 1, __ATOMIC_RELEASE);
    } else if (fakeibv_eng.nidle > fakeibv_eng.nwake) {
        fakeibv_eng.nwake++;
        pthread_cond_signal(&fakeibv_eng.work);
    } else if (fakeibv_eng.running && fakeibv_eng.nworkers < FAKEIBV_ENGINE_MAX &&
               fakeibv_thread_start(&fakeibv_eng.workers[fakeibv_eng.nworkers],
                                    FAKEIBV_THREAD_PREFIX "work", fakeibv_worker_main,
                                    NULL) == 0) {
        fakeibv_eng.nworkers++;
    }
}

static struct fakeibv_job *fakeibv_pop_locked(void)
{
    struct fakeibv_job *j = fakeibv_eng.head;

    if (j != NULL) {
        fakeibv_eng.head = j->next;
        if (fakeibv_eng.head == NULL)
            fakeibv_eng.tail = NULL;
        j->queued = 0;
    }
    return j;
}

/* Takes the queued jobs of qp out of the queue. */
static void fakeibv_unqueue_qp_locked(struct fakeibv_qp *qp)
{
    struct fakeibv_job **pp = &fakeibv_eng.head, *last = NULL;

    while (*pp != NULL) {
        struct fakeibv_job *j = *pp;

        if (j->qp == qp) {
            *pp = j->next;
            j->queued = 0;
            qp->jobs--;
            continue;
        }
        last = j;
        pp = &j->next;
    }
    fakeibv_eng.tail = last;
}

static void fakeibv_timer_remove_locked(struct fakeibv_qp *qp)
{
    struct fakeibv_qp **pp = &fakeibv_eng.timers;

    if (!qp->timer_on)
        return;
    while (*pp != NULL && *pp != qp)
        pp = &(*pp)->timer_next;
    if (*pp == qp)
        *pp = qp->timer_next;
    qp->timer_on = 0;
}

static void fakeibv_wake_poll(void)
{
    uint64_t one = 1;

    if (write(fakeibv_eng.wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        FAKEIBV_WARN("engine: cannot wake the poll thread: %s", strerror(errno));
}

/* ---- the threads ------------------------------------------------------------ */

static void fakeibv_run_job(struct fakeibv_job *j)
{
    switch (j->kind) {
    case FAKEIBV_JOB_TX:
        fakeibv_tx_run(j->qp);
        break;
    case FAKEIBV_JOB_RX:
        fakeibv_rx_run(j->qp);
        break;
    default:
        fakeibv_resp_run(j->qp, j->slot);
        break;
    }
}

static uint64_t fakeibv_mono_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void fakeibv_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * Out of jobs with FAKEIBV_SPIN_US set: look for a claimed one until the
 * window closes (fakeibv_eng.lock held on entry and return, dropped
 * meanwhile). Returns 1 when a job was claimed for this worker.
 */
static int fakeibv_worker_spin_locked(uint64_t spin_ns)
{
    uint64_t end = fakeibv_mono_ns() + spin_ns;
    int got = 0;

    fakeibv_eng.nspin++;
    pthread_mutex_unlock(&fakeibv_eng.lock);
    for (;;) {
        if (__atomic_load_n(&fakeibv_eng.spin_claims, __ATOMIC_ACQUIRE) > 0)
            break;
        if (fakeibv_mono_ns() >= end)
            break;
        fakeibv_cpu_relax();
    }
    pthread_mutex_lock(&fakeibv_eng.lock);
    fakeibv_eng.nspin--;
    /* A claim is for any spinning worker; one that leaves with claims open takes one. */
    if (fakeibv_eng.spin_claims > 0) {
        __atomic_store_n(&fakeibv_eng.spin_claims, fakeibv_eng.spin_claims - 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&fakeibv_stats.spin_takes, 1, __ATOMIC_RELAXED);
        got = 1;
    }
    return got;
}

static void *fakeibv_worker_main(void *arg)
{
    uint64_t spin_ns = (uint64_t)fakeibv_config()->spin_us * 1000ULL;
    int spun = 0; /* Since the last job: the next wait sleeps. */

    (void)arg;
    pthread_mutex_lock(&fakeibv_eng.lock);
    while (fakeibv_eng.running) {
        struct fakeibv_job *j;
        struct fakeibv_qp *qp;

        if (fakeibv_test_stalled()) {
            /* fakeibv_test_stall_workers: left behind, the queued jobs wait. */
            struct timespec d = { 0, 1000000L };

            pthread_mutex_unlock(&fakeibv_eng.lock);
            nanosleep(&d, NULL);
            pthread_mutex_lock(&fakeibv_eng.lock);
            continue;
        }
        j = fakeibv_pop_locked();

        /* Round the loop after the spin: a stop while it spun must be seen before sleeping. */
        if (j == NULL && spin_ns > 0 && !spun) {
            spun = !fakeibv_worker_spin_locked(spin_ns);
            continue;
        }
        if (j == NULL) {
            fakeibv_eng.nidle++;
            pthread_cond_wait(&fakeibv_eng.work, &fakeibv_eng.lock);
            fakeibv_eng.nidle--;
            if (fakeibv_eng.nwake > 0)
                fakeibv_eng.nwake--;
            continue;
        }
        qp = j->qp;
        spun = 0;
        pthread_mutex_unlock(&fakeibv_eng.lock);
        fakeibv_run_job(j);
        pthread_mutex_lock(&fakeibv_eng.lock);
        if (--qp->jobs == 0)
            pthread_cond_broadcast(&fakeibv_eng.changed);
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
    return NULL;
}

static int fakeibv_ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Queues the transmit jobs of QPs whose deadline passed; returns the wait
 * until the next one in ms (-1: none). */
static int fakeibv_timers_locked(void)
{
    struct timespec now;
    struct fakeibv_qp **pp = &fakeibv_eng.timers;
    long wait = -1;

    clock_gettime(CLOCK_MONOTONIC, &now);
    while (*pp != NULL) {
        struct fakeibv_qp *qp = *pp;

        if (!fakeibv_ts_before(&now, &qp->timer_at)) {
            *pp = qp->timer_next;
            qp->timer_on = 0;
            /*
             * Not while the job is queued or running (tx_sched): a running
             * job looks at the deadline itself and sets the timer again as
             * it ends. A second copy pushed meanwhile would still be queued
             * once the first ends and clears tx_sched, and the next kick
             * would link that queued job in again, cutting off the jobs
             * behind it: their streams would never be served again.
             */
            if (!qp->dead && !qp->tx_sched) {
                qp->tx_sched = 1;
                fakeibv_push_locked(&qp->tx_job);
            }
            continue;
        }
        {
            long ms = (qp->timer_at.tv_sec - now.tv_sec) * 1000L +
                      (qp->timer_at.tv_nsec - now.tv_nsec) / 1000000L + 1;

            if (wait < 0 || ms < wait)
                wait = ms;
        }
        pp = &qp->timer_next;
    }
    return wait > 60000 ? 60000 : (int)wait;
}

static void *fakeibv_poll_main(void *arg)
{
    uint64_t spin_ns = (uint64_t)fakeibv_config()->spin_us * 1000ULL, busy_until = 0;
    struct epoll_event ev[64];

    (void)arg;
    pthread_mutex_lock(&fakeibv_eng.lock);
    while (fakeibv_eng.running) {
        int n, i, wait;

        fakeibv_eng.epoch++;
        pthread_cond_broadcast(&fakeibv_eng.changed);
        wait = fakeibv_timers_locked();
        /* FAKEIBV_SPIN_US: no sleep in epoll while traffic flowed lately. */
        if (spin_ns > 0 && fakeibv_mono_ns() < busy_until)
            wait = 0;
        pthread_mutex_unlock(&fakeibv_eng.lock);
        n = epoll_wait(fakeibv_eng.epfd, ev, 64, wait);
        if (n > 0 && spin_ns > 0)
            busy_until = fakeibv_mono_ns() + spin_ns;
        pthread_mutex_lock(&fakeibv_eng.lock);
        if (n < 0 && errno != EINTR) {
            FAKEIBV_WARN("engine: epoll_wait failed: %s; streams stop", strerror(errno));
            break;
        }
        for (i = 0; i < n; i++) {
            struct fakeibv_job *j = ev[i].data.ptr;
            uint64_t v;

            if (j == NULL) {
                if (read(fakeibv_eng.wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    FAKEIBV_WARN("engine: wake fd: %s", strerror(errno));
                continue;
            }
            /* unwatch waits for this round before the QP can go away. */
            if (!j->qp->dead && !j->queued)
                fakeibv_push_locked(j);
        }
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
    return NULL;
}

/* ---- life ------------------------------------------------------------------ */

static int fakeibv_engine_fds_locked(void)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

    if (fakeibv_eng.epfd >= 0)
        return 0;
    fakeibv_eng.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (fakeibv_eng.epfd < 0)
        return errno;
    fakeibv_eng.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fakeibv_eng.wakefd < 0 ||
        epoll_ctl(fakeibv_eng.epfd, EPOLL_CTL_ADD, fakeibv_eng.wakefd, &ev) != 0) {
        int rc = errno;

        if (fakeibv_eng.wakefd >= 0)
            close(fakeibv_eng.wakefd);
        close(fakeibv_eng.epfd);
        fakeibv_eng.epfd = fakeibv_eng.wakefd = -1;
        return rc;
    }
    return 0;
}

int fakeibv_engine_hold(void)
{
    int rc = 0;

    pthread_mutex_lock(&fakeibv_eng.lock);
    if (fakeibv_eng.holders++ == 0) {
        rc = fakeibv_engine_fds_locked();
        if (rc == 0) {
            fakeibv_eng.running = 1;
            rc = fakeibv_thread_start(&fakeibv_eng.poll_thread, FAKEIBV_THREAD_PREFIX "poll",
                                      fakeibv_poll_main, NULL);
        }
        while (rc == 0 && fakeibv_eng.nworkers < FAKEIBV_ENGINE_MIN) {
            rc = fakeibv_thread_start(&fakeibv_eng.workers[fakeibv_eng.nworkers],
                                      FAKEIBV_THREAD_PREFIX "work", fakeibv_worker_main, NULL);
            if (rc == 0)
                fakeibv_eng.nworkers++;
        }
        if (rc != 0) {
            FAKEIBV_WARN("engine: cannot start: %s", strerror(rc));
            fakeibv_eng.holders--;
            pthread_mutex_unlock(&fakeibv_eng.lock);
            if (fakeibv_eng.running) {
                fakeibv_eng.holders++;
                fakeibv_engine_release();
            }
            return rc;
        }
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
    return 0;
}

void fakeibv_engine_release(void)
{
    int i, n;

    pthread_mutex_lock(&fakeibv_eng.lock);
    if (--fakeibv_eng.holders > 0) {
        pthread_mutex_unlock(&fakeibv_eng.lock);
        return;
    }
    fakeibv_eng.running = 0;
    n = fakeibv_eng.nworkers;
    pthread_cond_broadcast(&fakeibv_eng.work);
    fakeibv_wake_poll();
    pthread_mutex_unlock(&fakeibv_eng.lock);
    pthread_join(fakeibv_eng.poll_thread, NULL);
    for (i = 0; i < n; i++)
        pthread_join(fakeibv_eng.workers[i], NULL);
    pthread_mutex_lock(&fakeibv_eng.lock);
    fakeibv_eng.nworkers = 0;
    fakeibv_eng.nidle = 0;
    fakeibv_eng.nwake = 0;
    fakeibv_eng.nspin = 0;
    __atomic_store_n(&fakeibv_eng.spin_claims, 0, __ATOMIC_RELEASE);
    /* Jobs of QPs still in INIT wait in the queue for the next start. */
    pthread_cond_broadcast(&fakeibv_eng.changed);
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/* ---- streams and jobs of a QP ------------------------------------------------ */

int fakeibv_engine_watch(struct fakeibv_job *j, int fd)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = j };
    int rc = 0;

    pthread_mutex_lock(&fakeibv_eng.lock);
    rc = fakeibv_engine_fds_locked();
    if (rc == 0 && epoll_ctl(fakeibv_eng.epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        rc = errno;
    pthread_mutex_unlock(&fakeibv_eng.lock);
    return rc;
}

void fakeibv_engine_rearm(struct fakeibv_job *j, int fd)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = j };

    if (epoll_ctl(fakeibv_eng.epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno != ENOENT)
        FAKEIBV_WARN("qpn 0x%x: cannot re-arm stream fd %d: %s", j->qp->qpx.qp_base.qp_num, fd,
                     strerror(errno));
}

/*
 * Stops watching fds[0..n): after the return no event for them is handed
 * out, even one the poll thread already holds (it finishes the round it is
 * in first: one wait for all of them).
 */
void fakeibv_engine_unwatch(const int *fds, int n)
{
    uint64_t e;
    int i;

    pthread_mutex_lock(&fakeibv_eng.lock);
    for (i = 0; i < n && fakeibv_eng.epfd >= 0; i++)
        epoll_ctl(fakeibv_eng.epfd, EPOLL_CTL_DEL, fds[i], NULL);
    if (n > 0 && fakeibv_eng.running && !pthread_equal(pthread_self(), fakeibv_eng.poll_thread)) {
        e = fakeibv_eng.epoch;
        fakeibv_wake_poll();
        while (fakeibv_eng.running && fakeibv_eng.epoch == e)
            pthread_cond_wait(&fakeibv_eng.changed, &fakeibv_eng.lock);
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/* The QP has transmit work or a timer to look at (qp->lock held). */
void fakeibv_engine_kick_tx_locked(struct fakeibv_qp *qp)
{
    pthread_mutex_lock(&fakeibv_eng.lock);
    if (!qp->tx_sched && !qp->dead) {
        qp->tx_sched = 1;
        fakeibv_push_locked(&qp->tx_job);
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/* The transmit job ends; with qp->lock held, so a kick after this queues a new one. */
void fakeibv_engine_tx_done_locked(struct fakeibv_qp *qp, const struct timespec *deadline)
{
    pthread_mutex_lock(&fakeibv_eng.lock);
    qp->tx_sched = 0;
    fakeibv_timer_remove_locked(qp);
    if (deadline != NULL && !qp->dead) {
        qp->timer_at = *deadline;
        qp->timer_on = 1;
        qp->timer_next = fakeibv_eng.timers;
        fakeibv_eng.timers = qp;
        fakeibv_wake_poll();
    }
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/*
 * The QP stops (destroy, reset): its queued jobs are dropped, its timer
 * cancelled, and the call returns once no job of it runs. Its streams must
 * already be unwatched and shut down (so a job blocked reading returns), and
 * qp->stopping set (so one waiting on qp->cond returns). Without qp->lock.
 */
void fakeibv_engine_quiesce(struct fakeibv_qp *qp)
{
    pthread_mutex_lock(&fakeibv_eng.lock);
    qp->dead = 1;
    fakeibv_unqueue_qp_locked(qp);
    fakeibv_timer_remove_locked(qp);
    while (qp->jobs > 0)
        pthread_cond_wait(&fakeibv_eng.changed, &fakeibv_eng.lock);
    qp->dead = 0;
    qp->tx_sched = 0;
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/* Threads of the engine now (fakeibv_engine_threads, fakeibv.h). */
FAKEIBV_EXPORT int fakeibv_engine_threads(void)
{
    int n;

    pthread_mutex_lock(&fakeibv_eng.lock);
    n = fakeibv_eng.running ? fakeibv_eng.nworkers + 1 : 0;
    pthread_mutex_unlock(&fakeibv_eng.lock);
    return n;
}

/* One QP's engine bookkeeping for fakeibv_dump (fakeibv_internal.h). */
void fakeibv_engine_describe_qp(const struct fakeibv_qp *qp, char *buf, size_t len)
{
    /* Tried, not waited on: the dump may run beside a stuck engine, and it
     * holds the QP registry's lock meanwhile. */
    if (!fakeibv_trylock_ms(&fakeibv_eng.lock, 100)) {
        snprintf(buf, len, "jobs ? (engine lock held for 100 ms)");
        return;
    }
    snprintf(buf, len, "jobs %d (tx queued %d, timer %d)", qp->jobs, qp->tx_sched, qp->timer_on);
    pthread_mutex_unlock(&fakeibv_eng.lock);
}

/* One line of the engine's state for fakeibv_dump: whether a job waits for a worker. */
void fakeibv_engine_describe(char *buf, size_t len)
{
    const struct fakeibv_job *j;
    int queued = 0, timers = 0;
    const struct fakeibv_qp *t;

    pthread_mutex_lock(&fakeibv_eng.lock);
    for (j = fakeibv_eng.head; j != NULL; j = j->next)
        queued++;
    for (t = fakeibv_eng.timers; t != NULL; t = t->timer_next)
        timers++;
    snprintf(buf, len, "engine %s: workers %d (idle %d, woken %d, spinning %d), jobs queued %d, "
             "retry timers %d, poll rounds %llu", fakeibv_eng.running ? "running" : "stopped",
             fakeibv_eng.nworkers, fakeibv_eng.nidle, fakeibv_eng.nwake, fakeibv_eng.nspin,
             queued, timers, (unsigned long long)fakeibv_eng.epoch);
    pthread_mutex_unlock(&fakeibv_eng.lock);
}
