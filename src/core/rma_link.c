/*
 * An RMA group's TCP links (rma_link.h): the listener, the dial with its
 * retries, and taking a dialer after its hello's checks.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/api.h"
#include "core/log.h"
#include "core/netif.h"
#include "core/rma_link.h"

_Static_assert(sizeof(ferry_rma_link_handle_t) <= FERRY_HANDLE_SIZE, "RMA handle fits NCCL's");

/* The engine's clock (proxy/clock.h) is a layer up: connect's coarse deadlines use the kernel's. */
static uint64_t ferry_rma_link_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int ferry_rma_link_listen(struct sockaddr_storage *addr, socklen_t *addr_len,
                          const char **step_p)
{
    int one = 1;
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    *step_p = "socket()";
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ferry_sockaddr_any_port(addr);
    *step_p = "bind/listen";
    if (bind(fd, (struct sockaddr *)addr, *addr_len) != 0 || listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, addr_len) != 0) {
        int err = errno;

        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

void ferry_rma_link_publish(void *handle, uint32_t magic, uint64_t token,
                            const struct sockaddr_storage *addr)
{
    ferry_rma_link_handle_t *h = handle;

    memset(handle, 0, FERRY_HANDLE_SIZE);
    h->magic = magic;
    h->token = token;
    ferry_sockaddr_to_wire(addr, &h->family, &h->port, h->addr, &h->scope_id);
}

static int ferry_rma_link_queue_filling(int listen_fd);
static ferry_status_t ferry_rma_link_drain(const ferry_rma_link_t *link, uint64_t deadline,
                                           int *accepted_p);

/*
 * One connect of fd to sa within ms: 0, or the errno. While it waits (a
 * peer's full queue costs a SYN retry of a second or more), links from lower
 * ranks are taken from our own queue once it fills, so that our dialers do
 * not wait on us in turn.
 */
static int ferry_rma_link_connect_once(const ferry_rma_link_t *link, int fd,
                                       const struct sockaddr_storage *sa, socklen_t sa_len,
                                       int ms, uint64_t deadline, int *accepted_p)
{
    uint64_t end = ferry_rma_link_now_ns() + (uint64_t)ms * 1000000ULL;
    socklen_t len;
    int err;

    if (connect(fd, (const struct sockaddr *)sa, sa_len) == 0)
        return 0;
    err = errno;
    if (err != EINPROGRESS)
        return err;
    for (;;) {
        struct pollfd pfd[2] = { { .fd = fd, .events = POLLOUT },
                                 { .fd = link->listen_fd, .events = POLLIN } };
        uint64_t now = ferry_rma_link_now_ns();
        /* Only a filling queue is watched: a few links waiting would wake every poll at once. */
        int watch = *accepted_p < link->rank && ferry_rma_link_queue_filling(link->listen_fd);
        int slice, n;

        if (now >= end)
            return ETIMEDOUT;
        slice = (int)((end - now) / 1000000ULL) + 1;
        n = poll(pfd, watch ? 2 : 1, slice > 50 ? 50 : slice);
        if (n > 0 && (pfd[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            len = sizeof(err);
            return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno;
        }
        if (n > 0 && watch && (pfd[1].revents & POLLIN) &&
            ferry_rma_link_drain(link, deadline, accepted_p) != FERRY_OK)
            return ETIMEDOUT;
    }
}

/* A connected non-blocking socket to sa, or -1 with *err_p the last errno and *attempts_p. */
static int ferry_rma_link_dial_fd(const ferry_rma_link_t *link, const struct sockaddr_storage *sa,
                                  socklen_t sa_len, const char *peer, uint64_t deadline,
                                  int *accepted_p, int *attempts_p, int *err_p)
{
    const ferry_rma_link_ops_t *ops = link->ops;
    int attempt = 0, err = 0, fd = -1;

    for (;;) {
        fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || (ops->tune != NULL && ops->tune(fd, peer) != 0)) {
            err = errno;
            break;
        }
        err = ferry_rma_link_connect_once(link, fd, sa, sa_len, ops->hello_ms, deadline,
                                          accepted_p);
        if (err == 0)
            break;
        close(fd);
        fd = -1;
        if (!ferry_connect_retryable(err) || attempt >= link->retry_cnt ||
            ferry_rma_link_now_ns() >= deadline)
            break;
        attempt++;
        usleep((useconds_t)attempt * (useconds_t)link->retry_sleep_ms * 1000u);
    }
    *attempts_p = attempt + 1;
    *err_p = err;
    if (err != 0 && fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Connect to rank `to`, retrying while its listener may not be up yet, and say hello. */
static ferry_status_t ferry_rma_link_dial(const ferry_rma_link_t *link, int to,
                                          const ferry_rma_link_handle_t *h, uint64_t deadline,
                                          int *accepted_p)
{
    const ferry_rma_link_ops_t *ops = link->ops;
    ferry_rma_link_peer_t p = ops->peer(link->group, to);
    ferry_rma_link_hello_t hello = {
        .rank = (uint32_t)link->rank, .nranks = (uint64_t)link->nranks, .token = h->token,
    };
    struct sockaddr_storage sa;
    socklen_t sa_len;
    int attempts, err;

    if (h->magic != ops->magic ||
        ferry_sockaddr_from_wire(&sa, &sa_len, h->family, h->port, h->addr, h->scope_id) != 0) {
        FERRY_WARN("RMA connect: rank %d of %d: the handle of rank %d is not an RMA listen "
                   "handle of ferry's %s backend; every rank must pass the handles its peers' "
                   "listen() filled, all-gathered in rank order", link->rank, link->nranks, to,
                   ops->backend);
        return FERRY_ERR_INVALID;
    }
    ops->addr_str((struct sockaddr *)&sa, p.addr, FERRY_RMA_LINK_ADDR);
    *p.fd = ferry_rma_link_dial_fd(link, &sa, sa_len, p.addr, deadline, accepted_p, &attempts,
                                   &err);
    if (*p.fd < 0) {
        FERRY_WARN("RMA connect: rank %d of %d could not connect to rank %d at %s after %d "
                   "attempt(s): %s; check that rank %d is alive and that NCCL_SOCKET_IFNAME "
                   "picks an interface that reaches it", link->rank, link->nranks, to, p.addr,
                   attempts, strerror(err), to);
        return FERRY_ERR_REMOTE;
    }
    if (ops->send_hello(*p.fd, &hello, ops->hello_ms) != FERRY_OK) {
        FERRY_WARN("RMA connect: rank %d of %d: sending the hello to rank %d at %s failed or "
                   "timed out after %d ms; check that rank %d is alive", link->rank,
                   link->nranks, to, p.addr, ops->hello_ms, to);
        return FERRY_ERR_REMOTE;
    }
    return FERRY_OK;
}

/* NULL when a sound hello h may join us, else why not. */
static const char *ferry_rma_link_hello_bad(const ferry_rma_link_t *link,
                                            const ferry_rma_link_hello_t *h)
{
    if (h->token != link->token)
        return "wrong token (a peer of another group or job)";
    if (h->nranks != (uint64_t)link->nranks)
        return "its group size differs from ours";
    if (h->rank >= (uint32_t)link->rank)
        return "its rank is not one that connects to us";
    if (*link->ops->peer(link->group, (int)h->rank).fd >= 0)
        return "its rank is connected already";
    return NULL;
}

/* Take one inbound connection, waiting up to wait_ms; a stranger is closed and logged (*got_p 0). */
static ferry_status_t ferry_rma_link_take(const ferry_rma_link_t *link, uint64_t deadline,
                                          int wait_ms, int *got_p)
{
    const ferry_rma_link_ops_t *ops = link->ops;
    struct pollfd pfd = { .fd = link->listen_fd, .events = POLLIN };
    struct sockaddr_storage sa;
    socklen_t sa_len = sizeof(sa);
    ferry_rma_link_hello_t hello;
    ferry_rma_link_peer_t p;
    char from[FERRY_RMA_LINK_ADDR];
    const char *why;
    int fd;

    *got_p = 0;
    if (ferry_rma_link_now_ns() >= deadline)
        return FERRY_ERR_REMOTE;
    if (poll(&pfd, 1, wait_ms) <= 0)
        return FERRY_OK;
    fd = accept4(link->listen_fd, (struct sockaddr *)&sa, &sa_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? FERRY_OK
                                                                            : FERRY_ERR_IO;
    ops->addr_str((struct sockaddr *)&sa, from, sizeof(from));
    why = ops->read_hello(fd, ops->hello_ms, &hello);
    if (why == NULL)
        why = ferry_rma_link_hello_bad(link, &hello);
    if (why != NULL) {
        FERRY_WARN_LIMITED("RMA connect: rank %d of %d, listening on %s: closed a connection "
                           "from %s: %s; still waiting for the group's ranks", link->rank,
                           link->nranks, link->listen_addr, from, why);
        close(fd);
        return FERRY_OK;
    }
    p = ops->peer(link->group, (int)hello.rank);
    *p.fd = fd;
    memcpy(p.addr, from, sizeof(from));
    *got_p = 1;
    return ops->adopt(fd, from);
}

/*
 * Whether the listener's accept queue is over a quarter full: Linux reports
 * a listening socket's queue length and its limit (the backlog, capped by
 * somaxconn) in TCP_INFO's tcpi_unacked and tcpi_sacked. 0 when it cannot tell.
 */
static int ferry_rma_link_queue_filling(int listen_fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return 0;
    return ti.tcpi_sacked > 0 && 4 * ti.tcpi_unacked > ti.tcpi_sacked;
}

/* Take the links waiting in our queue while it is over a quarter full (links taken: *accepted_p). */
static ferry_status_t ferry_rma_link_drain(const ferry_rma_link_t *link, uint64_t deadline,
                                           int *accepted_p)
{
    ferry_status_t st = FERRY_OK;

    while (st == FERRY_OK && *accepted_p < link->rank &&
           ferry_rma_link_queue_filling(link->listen_fd)) {
        int got;

        st = ferry_rma_link_take(link, deadline, 0, &got);
        if (!got)
            break;
        (*accepted_p)++;
    }
    return st;
}

ferry_status_t ferry_rma_link_connect(const ferry_rma_link_t *link, void *const *handles)
{
    uint64_t deadline = ferry_rma_link_now_ns() + (uint64_t)link->ops->connect_ms * 1000000ULL;
    ferry_status_t st = FERRY_OK;
    int accepted = 0;

    for (int r = link->rank + 1; r < link->nranks && st == FERRY_OK; r++) {
        st = ferry_rma_link_dial(link, r, handles[r], deadline, &accepted);
        /*
         * Take what lower ranks dialed meanwhile once the listener's queue
         * fills (here and while a dial waits): in a group of thousands, or of
         * hundreds where somaxconn is 128, it would overflow while we dial,
         * and every further dialer would wait out SYN retries of a second and
         * more. Only then: a link taken early may have to wait for its
         * dialer's hello.
         */
        if (st == FERRY_OK)
            st = ferry_rma_link_drain(link, deadline, &accepted);
    }
    while (st == FERRY_OK && accepted < link->rank) {
        int got;

        st = ferry_rma_link_take(link, deadline, 100, &got);
        accepted += got;
    }
    if (st != FERRY_OK && accepted < link->rank)
        FERRY_WARN("RMA connect: rank %d of %d, listening on %s: %d of the %d lower ranks "
                   "connected within %d ms (%s); check that every rank calls connect with the "
                   "same handles", link->rank, link->nranks, link->listen_addr, accepted,
                   link->rank, link->ops->connect_ms, ferry_status_str(st));
    return st;
}

ferry_status_t ferry_rma_link_position(void *const *handles, int nranks, int rank, int max_ranks)
{
    if (handles != NULL && nranks >= 1 && nranks <= max_ranks && rank >= 0 && rank < nranks)
        return FERRY_OK;
    FERRY_WARN("RMA connect: rank %d of %d (handles %p) is no valid group position; nranks must "
               "be 1..%d and rank below it%s", rank, nranks, (void *)handles, max_ranks,
               nranks > max_ranks ? " (a larger group: NCCL_FERRY_RMA=0 leaves the one-sided "
                                    "operations to NCCL's own RMA)" : "");
    return FERRY_ERR_INVALID;
}
