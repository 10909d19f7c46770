/*
 * Helper threads. Each comm's lanes are split over its workers (lane i goes
 * to worker i % nworkers). A worker sweeps its lanes while any made progress,
 * then sleeps on the fds its lanes wait on plus an eventfd that posts kick
 * (ppoll, or epoll with NCCL_FERRY_EPOLL: worker_wait.h). Nothing here knows
 * what a lane is: the backend's lane ops move the bytes.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/stream.h"
#include "proxy/worker_place.h"
#include "proxy/worker_wait.h"

/* A safety net only: every state change that matters kicks the worker. */
#define FERRY_PX_POLL_TIMEOUT_MS 1000
/* Spin only if a small message was posted within this window. */
#define FERRY_PX_SPIN_RECENT_NS 2000000ULL

/* One sweep over the worker's lanes; revents from the last poll, if any. */
static long ferry_px_worker_sweep(ferry_px_worker_t *w, const ferry_px_pollset_t *ps)
{
    ferry_px_stream_t *comm = w->comm;
    short revents[FERRY_PX_MAX_LANES] = {0};
    long work = 0;
    int i, lane;

    for (i = 0; ps != NULL && i < ps->n; i++)
        if (ps->lane_of[i] >= 0)
            revents[ps->lane_of[i]] = ps->fds[i].revents;
    for (lane = w->index; lane < comm->nlanes; lane += comm->nworkers) {
        long r;

        if (lane == 0 && ferry_px_stream_lane0_held_ns(comm, ferry_px_now_ns()) > 0)
            continue;
        r = ferry_px_stream_progress_lane(comm, lane, revents[lane]);
        if (r > 0)
            work += r;
    }
    return work;
}

static void ferry_px_worker_sleep(ferry_px_worker_t *w, ferry_px_pollset_t *ps)
{
    ferry_px_stream_t *comm = w->comm;
    uint64_t drained, held_ns, wait_ns;
    struct timespec ts;
    int lane, fd, rc, failed;

    ps->n = 0;
    ps->fds[0].fd = w->wake_fd;
    ps->fds[0].events = POLLIN;
    ps->lane_of[0] = -1;
    ps->n = 1;
    held_ns = ferry_px_stream_lane0_held_ns(comm, ferry_px_now_ns());
    failed = atomic_load_explicit(&comm->ring.failed, memory_order_relaxed) != 0;
    if (!failed && w->ep_fd < 0) {
        for (lane = w->index; lane < comm->nlanes; lane += comm->nworkers) {
            short ev = lane == 0 && held_ns > 0 ? 0 : comm->ops->wants(comm, lane, &fd);

            if (ev == 0 || fd < 0)
                continue;
            ps->fds[ps->n].fd = fd;
            ps->fds[ps->n].events = ev;
            ps->lane_of[ps->n] = lane;
            ps->n++;
        }
    }
    /* Held-back completions (inject delay) wake the worker when due... */
    wait_ns = ferry_px_stream_defer_next_ns(comm, w->index);
    /* ...and it takes lane 0 back when NCCL's thread stops calling in. */
    if (held_ns > 0 && held_ns < wait_ns)
        wait_ns = held_ns;
    if (wait_ns > (uint64_t)FERRY_PX_POLL_TIMEOUT_MS * 1000000ULL)
        wait_ns = (uint64_t)FERRY_PX_POLL_TIMEOUT_MS * 1000000ULL;
    ts.tv_sec = (time_t)(wait_ns / 1000000000ULL);
    ts.tv_nsec = (long)(wait_ns % 1000000000ULL);
    if (w->ep_fd >= 0)
        rc = ferry_px_worker_epoll_wait(w, ps, failed, held_ns > 0, &ts);
    else
        rc = ppoll(ps->fds, (nfds_t)ps->n, &ts, NULL);
    ferry_px_stat_add(&w->stats.sleeps, 1);
    if (rc < 0 && errno != EINTR)
        FERRY_WARN("%s comm #%u peer %s worker %d: poll failed: %s; retrying", comm->ring.backend,
                   comm->ring.serial, comm->ring.peer, w->index, strerror(errno));
    if (rc > 0 && (ps->fds[0].revents & POLLIN)) {
        ssize_t n = read(w->wake_fd, &drained, sizeof(drained));
        (void)n;
        ferry_px_stat_add(&w->stats.woken_post, 1);
    } else if (rc > 0) {
        ferry_px_stat_add(&w->stats.woken_io, 1);
    } else if (rc == 0) {
        ferry_px_stat_add(&w->stats.woken_timer, 1);
    }
    if (rc <= 0)
        ps->n = 0;
}

/*
 * Spinning pays only while the spinners leave cores to everyone else: NCCL
 * opens a send and a receive comm per channel and peer, and with one worker
 * per stream a 2-rank job on 16 cores had 32 workers spinning, starving
 * NCCL's own proxy threads. So at most a quarter of the process' CPUs spin
 * at once.
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

static void ferry_px_spin_release(void)
{
    atomic_fetch_sub(&ferry_px_spinners, 1);
}

/*
 * The busy-poll window (NCCL_FERRY_SPIN_US): a reply often comes within
 * microseconds. Only while small messages flow: bulk traffic is bound by
 * copies, and spinning threads would take the cores those copies need.
 * Returns 1 while the idle worker should sweep again instead of sleeping;
 * idle_since is the start of its idle stretch (0 before the first call).
 */
static int ferry_px_worker_keep_spinning(const ferry_px_stream_t *comm, uint64_t *idle_since,
                                         int *spinning)
{
    uint64_t now;

    if (comm->spin_ns == 0)
        return 0;
    now = ferry_px_now_ns();
    if (now - atomic_load_explicit(&comm->small_post_ns, memory_order_relaxed) >
        FERRY_PX_SPIN_RECENT_NS)
        return 0;
    if (!*spinning && !(*spinning = ferry_px_spin_acquire()))
        return 0; /* Every spin slot is taken: sleep. */
    if (*idle_since == 0)
        *idle_since = now;
    return now - *idle_since < comm->spin_ns;
}

static void *ferry_px_worker_main(void *arg)
{
    ferry_px_worker_t *w = arg;
    ferry_px_stream_t *comm = w->comm;
    ferry_px_pollset_t ps;
    int have_poll = 0;
    uint64_t idle_since = 0; /* Start of the current idle stretch, 0 when busy. */
    int spinning = 0;          /* Holds one of the process' spin slots. */
    char name[16];

    snprintf(name, sizeof(name), "ferry-%c%u-%d", comm->ring.kind == FERRY_PX_SEND ? 's' : 'r',
             comm->ring.serial % 100000, w->index);
    pthread_setname_np(pthread_self(), name);
    if (comm->has_cpus && pthread_setaffinity_np(pthread_self(), sizeof(comm->cpus),
                                                  &comm->cpus) != 0)
        FERRY_INFO(FERRY_LOG_NET, "%s: could not place helper thread near the NIC; it runs "
                   "anywhere in the process' CPU mask", name);
    if (comm->place_away)
        ferry_px_place_start(w);
    ps.n = 0;
    while (!atomic_load_explicit(&comm->stop, memory_order_acquire)) {
        uint32_t gen = atomic_load(&comm->kick_gen);
        long work;

        if (comm->place_away)
            ferry_px_place_follow(w);
        work = ferry_px_worker_sweep(w, have_poll ? &ps : NULL);
        have_poll = 0;
        ferry_px_stat_add(&w->stats.sweeps, 1);
        if (work <= 0)
            ferry_px_stat_add(&w->stats.idle_sweeps, 1);
        if (work > 0) {
            idle_since = 0;
            continue;
        }
        if (ferry_px_worker_keep_spinning(comm, &idle_since, &spinning))
            continue;
        if (spinning)
            ferry_px_spin_release();
        spinning = 0;
        idle_since = 0;
        /* Announce the sleep, then look again: a post in between bumped kick_gen. */
        atomic_store(&w->sleeping, 1);
        if (atomic_load(&comm->kick_gen) != gen || atomic_load(&comm->stop)) {
            atomic_store(&w->sleeping, 0);
            continue;
        }
        ferry_px_worker_sleep(w, &ps);
        atomic_store(&w->sleeping, 0);
        have_poll = ps.n > 0;
    }
    if (spinning)
        ferry_px_spin_release();
    return NULL;
}

ferry_status_t ferry_px_stream_start(ferry_px_stream_t *comm)
{
    char desc[160];
    int i, rc;

    if (comm->inject_delay_us > 0 && comm->defer == NULL) {
        comm->defer = calloc((size_t)comm->nlanes, sizeof(*comm->defer));
        if (comm->defer == NULL)
            return FERRY_ERR_NO_MEMORY;
    }
    ferry_px_ring_register(&comm->ring);
    for (i = 0; i < comm->nworkers; i++) {
        ferry_px_worker_t *w = &comm->workers[i];

        w->comm = comm;
        w->index = i;
        w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w->wake_fd < 0) {
            ferry_px_ring_describe(&comm->ring, desc, sizeof(desc));
            FERRY_WARN("%s: eventfd for helper thread %d failed: %s; raise the open-file limit "
                       "(ulimit -n)", desc, i, strerror(errno));
            goto err_stop;
        }
        w->ep_fd = -1;
        if (comm->use_epoll)
            ferry_px_worker_epoll_open(w);
        rc = pthread_create(&w->thread, NULL, ferry_px_worker_main, w);
        if (rc != 0) {
            ferry_px_ring_describe(&comm->ring, desc, sizeof(desc));
            FERRY_WARN("%s: cannot start helper thread %d: %s; check the process' thread limit "
                       "(ulimit -u) or lower NCCL_FERRY_THREADS", desc, i, strerror(rc));
            goto err_stop;
        }
        w->started = 1;
    }
    return FERRY_OK;

err_stop:
    ferry_px_stream_stop(comm);
    return FERRY_ERR_IO;
}

void ferry_px_stream_stop(ferry_px_stream_t *comm)
{
    uint64_t one = 1;
    int i;

    /*
     * Stop, wake and join every worker before closing any wake fd: a worker
     * still running may kick its siblings (ferry_px_ring_fail), and a closed
     * fd number can already belong to someone else's socket.
     */
    atomic_store_explicit(&comm->stop, 1, memory_order_release);
    for (i = 0; i < comm->nworkers; i++) {
        ferry_px_worker_t *w = &comm->workers[i];

        if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            FERRY_WARN("%s comm #%u: waking helper thread %d failed: %s", comm->ring.backend,
                       comm->ring.serial, i, strerror(errno));
    }
    for (i = 0; i < comm->nworkers; i++) {
        if (comm->workers[i].started)
            pthread_join(comm->workers[i].thread, NULL);
        comm->workers[i].started = 0;
    }
    for (i = 0; i < comm->nworkers; i++) {
        if (comm->workers[i].wake_fd >= 0)
            close(comm->workers[i].wake_fd);
        comm->workers[i].wake_fd = -1;
        ferry_px_worker_epoll_close(&comm->workers[i]);
    }
    ferry_px_ring_unregister(&comm->ring);
    free(comm->defer);
    comm->defer = NULL;
}
