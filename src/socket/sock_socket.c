/* Socket options and helpers both ends of a connection share. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"

/* Keepalive probes for a timeout of timeout_s: half of it idle, then three probes. */
static void ferry_sock_keepalive_plan(int timeout_s, int *idle_p, int *intvl_p, int *cnt_p)
{
    int idle = timeout_s / 2 > 0 ? timeout_s / 2 : 1;
    int intvl = (timeout_s - idle) / 3 > 0 ? (timeout_s - idle) / 3 : 1;

    *idle_p = idle;
    *intvl_p = intvl;
    *cnt_p = 3;
}

/*
 * A peer whose host died, or whose link went away, sends no FIN or RST: a
 * stream with nothing in flight then waits forever, one with bytes in flight
 * for some 15 minutes of retransmits. Keepalive finds the idle dead peer,
 * TCP_USER_TIMEOUT bounds how long sent bytes stay unacknowledged (it also
 * caps the keepalive probing); both end the stream with ETIMEDOUT, which
 * fails the comm with a WARN naming the peer. A live receiver that is only
 * slow still acknowledges window probes, so it does not trip it.
 */
static void ferry_sock_fd_timeout(int fd, const char *peer, int timeout_s)
{
    unsigned int user_ms = (unsigned int)timeout_s * 1000U;
    int one = 1, idle, intvl, cnt;

    if (timeout_s <= 0)
        return;
    ferry_sock_keepalive_plan(timeout_s, &idle, &intvl, &cnt);
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) != 0)
        FERRY_WARN("socket to %s: keepalive / TCP_USER_TIMEOUT for %d s "
                   "(NCCL_FERRY_SOCKET_TIMEOUT_S) refused: %s; a peer that vanishes without "
                   "closing may then hang this stream", peer, timeout_s, strerror(errno));
}

ferry_status_t ferry_sock_fd_tune(int fd, const char *peer)
{
    const ferry_sock_config_t *cfg = &ferry_sock_state.cfg;
    int one = 1;

    /* Small messages (LL protocol, size headers) must not wait for Nagle. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        FERRY_WARN("socket to %s: setsockopt(TCP_NODELAY) failed: %s", peer, strerror(errno));
        return FERRY_ERR_IO;
    }
    /*
     * Keep unsent bytes low so a stream that drains slowly stops taking
     * chunks the others could carry (the engine balances on EAGAIN).
     */
    if (cfg->notsent_lowat > 0 &&
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &cfg->notsent_lowat,
                   sizeof(cfg->notsent_lowat)) != 0)
        FERRY_WARN("socket to %s: TCP_NOTSENT_LOWAT=%d (NCCL_FERRY_NOTSENT_LOWAT) refused: %s; "
                   "using the kernel default", peer, cfg->notsent_lowat, strerror(errno));
    if (cfg->sndbuf > 0 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cfg->sndbuf, sizeof(cfg->sndbuf)) != 0)
        FERRY_WARN("socket to %s: SO_SNDBUF=%d (NCCL_SOCKET_SNDBUF) refused: %s; using the "
                   "kernel default", peer, cfg->sndbuf, strerror(errno));
    if (cfg->rcvbuf > 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cfg->rcvbuf, sizeof(cfg->rcvbuf)) != 0)
        FERRY_WARN("socket to %s: SO_RCVBUF=%d (NCCL_SOCKET_RCVBUF) refused: %s; using the "
                   "kernel default", peer, cfg->rcvbuf, strerror(errno));
    ferry_sock_fd_timeout(fd, peer, cfg->socket_timeout_s);
    return FERRY_OK;
}

uint64_t ferry_sock_random64(void)
{
    uint64_t v = 0;
    struct timespec ts;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v != 0)
        return v;
    /* No entropy yet (early boot): still unique per process and call. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    return v != 0 ? v : 1;
}
