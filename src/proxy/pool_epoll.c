/*
 * A pool thread's wait (pool.h): one epoll set per thread holding its wake
 * eventfd and its units' fds, level-triggered, so a unit whose fd is still
 * readable is reported again. A unit's registration changes only when what
 * it waits for changes (a unit that must wait for room to write adds
 * FERRY_PX_POOL_WRITABLE, and drops it once it has room); the epoll data is
 * the unit.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/pool_impl.h"

#define FERRY_PX_POOL_EVENTS 256 /* Events taken per wait; the rest stay for the next. */

int ferry_px_pool_epoll_open(ferry_px_pool_thread_t *t)
{
    struct epoll_event ev;

    t->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (t->ep_fd < 0)
        return -1;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = NULL; /* NULL: the wake fd. */
    if (epoll_ctl(t->ep_fd, EPOLL_CTL_ADD, t->wake_fd, &ev) == 0)
        return 0;
    close(t->ep_fd);
    t->ep_fd = -1;
    return -1;
}

static uint32_t ferry_px_pool_ep_events(short wants)
{
    return ((wants & FERRY_PX_POOL_READABLE) ? EPOLLIN : 0) |
           ((wants & FERRY_PX_POOL_WRITABLE) ? EPOLLOUT : 0);
}

static short ferry_px_pool_ep_revents(uint32_t events)
{
    return (short)(((events & EPOLLIN) ? FERRY_PX_POOL_READABLE : 0) |
                   ((events & EPOLLOUT) ? FERRY_PX_POOL_WRITABLE : 0) |
                   ((events & (EPOLLERR | EPOLLHUP)) ? FERRY_PX_POOL_BROKEN : 0));
}

void ferry_px_pool_epoll_forget(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u)
{
    /* ENOENT/EBADF: the fd was closed already, and that removed it. */
    if (u->reg_events != 0)
        (void)epoll_ctl(t->ep_fd, EPOLL_CTL_DEL, u->reg_fd, NULL);
    u->reg_events = 0;
    u->reg_fd = -1;
}

int ferry_px_pool_epoll_update(ferry_px_pool_thread_t *t, ferry_px_pool_unit_t *u)
{
    const ferry_px_pool_client_t *c = u->m->client;
    struct epoll_event ev;
    int fd = -1, had = u->reg_events != 0;
    short want = c->ops->wants(c->ctx, u->unit, &fd);

    if (fd < 0)
        want = 0;
    if (want == u->reg_events && (want == 0 || fd == u->reg_fd))
        return 0;
    if (had && (want == 0 || fd != u->reg_fd)) {
        if (epoll_ctl(t->ep_fd, EPOLL_CTL_DEL, u->reg_fd, NULL) != 0 && errno != ENOENT &&
            errno != EBADF)
            return -1;
        had = 0;
    }
    u->reg_events = 0;
    if (want != 0) {
        memset(&ev, 0, sizeof(ev));
        ev.events = ferry_px_pool_ep_events(want);
        ev.data.ptr = u;
        if (epoll_ctl(t->ep_fd, had ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
            return -1;
        u->reg_events = want;
        u->reg_fd = fd;
    }
    return 0;
}

int ferry_px_pool_epoll_wait(ferry_px_pool_thread_t *t, uint64_t wait_ns, uint64_t epoch)
{
    struct epoll_event evs[FERRY_PX_POOL_EVENTS];
    struct timespec ts = {(time_t)(wait_ns / 1000000000ULL), (long)(wait_ns % 1000000000ULL)};
    uint64_t drained;
    int rc, i, why = 0;

    rc = epoll_pwait2(t->ep_fd, evs, FERRY_PX_POOL_EVENTS, &ts, NULL);
    if (rc < 0) {
        int err = errno;

        pthread_mutex_lock(&t->lock);
        errno = err;
        return -1;
    }
    pthread_mutex_lock(&t->lock);
    for (i = 0; i < rc; i++) {
        ferry_px_pool_unit_t *u = evs[i].data.ptr;

        if (u == NULL) {
            ssize_t n = read(t->wake_fd, &drained, sizeof(drained));

            (void)n;
            why = 1;
            continue;
        }
        if (why == 0)
            why = 2;
        /* A detach in between freed units these events may name: the caller sweeps all. */
        if (epoch != t->epoch)
            continue;
        u->revents |= ferry_px_pool_ep_revents(evs[i].events);
        ferry_px_pool_queue(t, u);
    }
    return why;
}
