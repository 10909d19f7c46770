/*
 * How a helper thread waits (worker.c): ppoll on a set rebuilt before every
 * sleep, or epoll with each lane's fd registered once and changed only when
 * what the lane waits for changes (NCCL_FERRY_EPOLL, worker_epoll.c). Either
 * way the result is a ferry_px_pollset_t, which the sweep reads.
 */
#ifndef FERRY_PROXY_WORKER_WAIT_H
#define FERRY_PROXY_WORKER_WAIT_H

#include <poll.h>
#include <time.h>

#include "proxy/stream.h"

typedef struct ferry_px_pollset {
    struct pollfd fds[FERRY_PX_MAX_LANES + 1];
    int           lane_of[FERRY_PX_MAX_LANES + 1]; /* -1 for the wake fd (always fds[0]). */
    int           n;
} ferry_px_pollset_t;

/* Make w's epoll set with its wake fd in it; on failure w keeps ppoll (ep_fd -1). */
void ferry_px_worker_epoll_open(ferry_px_worker_t *w);
void ferry_px_worker_epoll_close(ferry_px_worker_t *w);
/*
 * Wait like ppoll: bring the registrations up to date with the lanes'
 * wants (none when skip_all, lane 0 not when skip_lane0), wait up to ts,
 * and fill ps. Returns what ppoll would: ready fds, 0 on timeout, -1 (errno).
 */
int ferry_px_worker_epoll_wait(ferry_px_worker_t *w, ferry_px_pollset_t *ps, int skip_all,
                               int skip_lane0, const struct timespec *ts);

#endif
