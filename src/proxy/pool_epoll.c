/*
 * A helper thread waiting in epoll (why: worker_wait.h). Level-triggered, so
 * a lane that still has bytes to read is reported again, exactly as ppoll
 * would. A lane's registration changes only when what it waits for changes
 * (a send stream that fills its socket buffer adds POLLOUT, and drops it
 * once drained).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/worker_wait.h"

#define FERRY_PX_EP_WAKE UINT32_MAX /* epoll data of the wake fd. */

void ferry_px_worker_epoll_open(ferry_px_worker_t *w)
{
    struct epoll_event ev;
    ferry_px_stream_t *comm = w->comm;

    memset(w->ep_events, 0, sizeof(w->ep_events));
    w->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (w->ep_fd < 0)
        goto fail;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u32 = FERRY_PX_EP_WAKE;
    if (epoll_ctl(w->ep_fd, EPOLL_CTL_ADD, w->wake_fd, &ev) == 0)
        return;
    close(w->ep_fd);
    w->ep_fd = -1;
fail:
    FERRY_INFO(FERRY_LOG_NET, "%s comm #%u helper thread %d: epoll unavailable (%s); it waits "
               "in poll", comm->ring.backend, comm->ring.serial, w->index, strerror(errno));
}

void ferry_px_worker_epoll_close(ferry_px_worker_t *w)
{
    if (w->ep_fd >= 0)
        close(w->ep_fd);
    w->ep_fd = -1;
}

static uint32_t ferry_px_ep_events(short poll_events)
{
    return ((poll_events & POLLIN) ? EPOLLIN : 0) | ((poll_events & POLLOUT) ? EPOLLOUT : 0);
}

static short ferry_px_ep_revents(uint32_t events)
{
    return (short)(((events & EPOLLIN) ? POLLIN : 0) | ((events & EPOLLOUT) ? POLLOUT : 0) |
                   ((events & EPOLLERR) ? POLLERR : 0) | ((events & EPOLLHUP) ? POLLHUP : 0));
}

/* Register what lane wants now; returns -1 (errno) if epoll refused. */
static int ferry_px_ep_update(ferry_px_worker_t *w, int lane, short want, int fd)
{
    struct epoll_event ev;
    int had = w->ep_events[lane] != 0;

    if (want == w->ep_events[lane] && (want == 0 || fd == w->ep_lane_fd[lane]))
        return 0;
    if (had && (want == 0 || fd != w->ep_lane_fd[lane])) {
        /* ENOENT/EBADF: the fd was closed already, and that removed it. */
        if (epoll_ctl(w->ep_fd, EPOLL_CTL_DEL, w->ep_lane_fd[lane], NULL) != 0 &&
            errno != ENOENT && errno != EBADF)
            return -1;
        had = 0;
    }
    w->ep_events[lane] = 0;
    if (want != 0) {
        memset(&ev, 0, sizeof(ev));
        ev.events = ferry_px_ep_events(want);
        ev.data.u32 = (uint32_t)lane;
        if (epoll_ctl(w->ep_fd, had ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
            return -1;
        w->ep_events[lane] = want;
        w->ep_lane_fd[lane] = fd;
    }
    return 0;
}

int ferry_px_worker_epoll_wait(ferry_px_worker_t *w, ferry_px_pollset_t *ps, int skip_all,
                               int skip_lane0, const struct timespec *ts)
{
    struct epoll_event evs[FERRY_PX_MAX_LANES + 1];
    ferry_px_stream_t *comm = w->comm;
    int lane, fd, rc, i;

    for (lane = w->index; lane < comm->nlanes; lane += comm->nworkers) {
        short want = 0;

        fd = -1;
        if (!skip_all && !(lane == 0 && skip_lane0))
            want = comm->ops->wants(comm, lane, &fd);
        if (fd < 0)
            want = 0;
        if (ferry_px_ep_update(w, lane, want, fd) != 0)
            return -1;
    }
    rc = epoll_pwait2(w->ep_fd, evs, FERRY_PX_MAX_LANES + 1, ts, NULL);
    ps->fds[0].fd = w->wake_fd;
    ps->fds[0].events = POLLIN;
    ps->fds[0].revents = 0;
    ps->lane_of[0] = -1;
    ps->n = 1;
    for (i = 0; i < rc; i++) {
        if (evs[i].data.u32 == FERRY_PX_EP_WAKE) {
            ps->fds[0].revents = POLLIN;
            continue;
        }
        lane = (int)evs[i].data.u32;
        ps->fds[ps->n].fd = w->ep_lane_fd[lane];
        ps->fds[ps->n].events = w->ep_events[lane];
        ps->fds[ps->n].revents = ferry_px_ep_revents(evs[i].events);
        ps->lane_of[ps->n] = lane;
        ps->n++;
    }
    return rc;
}
